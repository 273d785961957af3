"""Map a data directory onto trl's preference format with the ``datasets`` json loader."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from sdk.data._loading import PAIRS_FILE, load_pairs

__all__ = ["TRL_COLUMNS", "to_hf_dataset"]

TRL_COLUMNS: tuple[str, ...] = ("prompt", "chosen", "rejected", "images")


def to_hf_dataset(directory: Path | str, *, cache_dir: Path | str | None = None) -> Any:
    """Load ``directory/pairs.jsonl`` as a ``datasets.Dataset`` in trl's preference format.

    Columns: ``prompt``, ``chosen``, ``rejected`` (strings) and ``images`` (a list holding one
    PIL image, decoded lazily). Every record is validated first with :func:`load_pairs`, so a bad
    directory raises the same :class:`PreferenceDataError`. Nothing touches the hub: the json
    builder ships with ``datasets`` and its cache lives in ``cache_dir`` (default: a
    ``fedmor-datasets`` folder in the system temp directory).
    """
    import datasets  # heavy: imported only when used

    root = Path(directory).resolve()
    load_pairs(root)
    cache = (
        Path(cache_dir)
        if cache_dir is not None
        else Path(tempfile.gettempdir()) / "fedmor-datasets"
    )
    raw = datasets.load_dataset(
        "json", data_files=str(root / PAIRS_FILE), split="train", cache_dir=str(cache)
    )

    def _images(record: dict[str, Any]) -> dict[str, Any]:
        return {"images": [str(root / record["image"])]}

    mapped = raw.map(_images, remove_columns=[c for c in raw.column_names if c not in TRL_COLUMNS])
    return mapped.cast_column("images", datasets.List(datasets.Image()))

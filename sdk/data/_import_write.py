"""Write an import into a temporary folder, validate it as ``load_pairs`` does, then rename it
into place: nothing appears at the output unless the whole import is valid.

Layout: ``OUT/train`` and ``OUT/eval`` (each ``pairs.jsonl`` + ``images/``, and for ``mc`` a
``queries.jsonl``), and ``OUT/import.json`` (the summary). Only hashes, counts and the source's
own text fields are written; no image metadata (see ``encode_png``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sdk.data._import_config import ImportConfig, ImportSummary
from sdk.data._import_images import encode_png
from sdk.data._import_items import Item
from sdk.data._loading import PAIRS_FILE, QUERIES_FILE, iter_pairs, iter_queries

__all__ = ["SPLITS", "SUMMARY_FILE", "ImportWriter"]

SUMMARY_FILE = "import.json"
SPLITS = ("train", "eval")


class _Split:
    """One split folder being written: its open JSONL files and the images already in it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "images").mkdir(parents=True)
        self.files: dict[str, IO[str]] = {}
        self.images: set[bytes] = set()  # the salted name's bytes
        self.hashes: set[bytes] = set()  # 16 bytes of each image's SHA-256

    def line(self, filename: str, record: dict[str, Any]) -> None:
        if filename not in self.files:
            self.files[filename] = (self.root / filename).open("w", encoding="utf-8")
        self.files[filename].write(json.dumps(record, ensure_ascii=False) + "\n")

    def close(self) -> None:
        for handle in self.files.values():
            handle.close()


class ImportWriter:
    """Collects items into ``out_dir`` (see the module docstring); use as a context manager and
    call :meth:`finish` once every item is added."""

    def __init__(self, out_dir: Path, config: ImportConfig, summary: ImportSummary) -> None:
        self.out = out_dir
        self.config = config
        self.summary = summary
        if out_dir.exists() and not config.replace:
            raise ValueError(f"{out_dir} exists; pick a new folder or pass --replace")
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.import-", dir=out_dir.parent))
        try:
            self.splits = {name: _Split(self.tmp / name) for name in SPLITS}
        except BaseException:  # a signal before __enter__: the with statement will not clean up
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        # What the writer keeps per pair (bounded memory): 16-byte digests and the ids.
        self._content: set[bytes] = set()
        self._ids: set[str] = set()

    def __enter__(self) -> ImportWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for split in self.splits.values():
            split.close()
        if self.tmp.exists():
            shutil.rmtree(self.tmp)

    def split_of(self, item_id: str) -> str:
        """``eval`` for a share ``eval_fraction`` of ids, by a salted hash: stable per id."""
        digest = hashlib.sha256(f"{self.config.salt}\0split\0{item_id}".encode()).digest()
        return "eval" if int.from_bytes(digest[:8], "big") / 2**64 < self.config.eval_fraction \
            else "train"

    def _image(self, split: _Split, data: bytes, name: str) -> None:
        key = bytes.fromhex(name.removesuffix(".png"))
        if key not in split.images:
            (split.root / "images" / name).write_bytes(data)
            split.images.add(key)
            split.hashes.add(hashlib.sha256(data).digest()[:16])

    def _new(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` is new; a repeat (same content, or same id) is counted and dropped."""
        key = hashlib.sha256(json.dumps(
            [record[k] for k in ("image", "prompt", "chosen", "rejected")]).encode()).digest()[:16]
        if key in self._content:
            self.summary.drop("duplicate pair (same image, prompt, chosen and rejected)")
            return False
        if record["id"] in self._ids:
            self.summary.drop("id repeated with other content")
            return False
        self._content.add(key)
        self._ids.add(record["id"])
        return True

    def add(self, item: Item) -> None:
        """Write ``item``'s pairs (and query) into the split its id hashes to."""
        name = self.split_of(item.id)
        split = self.splits[name]
        for index, frame in enumerate(item.frames):
            frame_id = item.id if len(item.frames) == 1 else f"{item.id}-f{index}"
            data, image_name = encode_png(frame, self.config.salt)
            image = f"images/{image_name}"
            if not self._pairs(split, name, item, frame_id, image):
                continue  # every pair a repeat: neither its image nor its query is written
            self._image(split, data, image_name)
            if item.answer is not None:
                split.line(QUERIES_FILE, {"id": frame_id, "image": image, "prompt": item.prompt,
                                          "category": item.category, "answer": item.answer,
                                          "options": list(item.options)})
                self.summary.queries[name] = self.summary.queries.get(name, 0) + 1

    def _pairs(self, split: _Split, name: str, item: Item, frame_id: str, image: str) -> int:
        """Write the new pairs of one frame; how many were written."""
        counts = self.summary.pairs.setdefault(name, {})
        written = 0
        for number, (chosen, rejected) in enumerate(item.pairs):
            if chosen == rejected:
                self.summary.drop("chosen equals rejected")
                continue
            pair_id = frame_id if len(item.pairs) == 1 else f"{frame_id}-{number}"
            record = {"id": pair_id, "image": image, "prompt": item.prompt, "chosen": chosen,
                      "rejected": rejected, "category": item.category}
            if self._new(record):
                split.line(PAIRS_FILE, record)
                counts[item.category] = counts.get(item.category, 0) + 1
                written += 1
        return written

    def finish(self) -> None:
        """Validate every written file as the loaders do, then move the folder into place."""
        for name, split in self.splits.items():
            split.close()
            self.summary.images[name] = len(split.images)
            if PAIRS_FILE not in split.files:
                # Written empty (every import has both splits), so a train-only and an
                # eval-only import of one data directory read alike.
                (split.root / PAIRS_FILE).touch()
                self.summary.pairs[name] = {}
                continue
            for _pair in iter_pairs(split.root, max_image_side=self.config.max_image_side):
                pass
            if QUERIES_FILE in split.files:
                for _query in iter_queries(split.root, max_image_side=self.config.max_image_side):
                    pass
        if not any(PAIRS_FILE in s.files for s in self.splits.values()):
            raise ValueError(f"the import yields no pairs; dropped: {self.summary.dropped}")
        self.summary.shared_images = len(self.splits["train"].hashes & self.splits["eval"].hashes)
        (self.tmp / SUMMARY_FILE).write_text(self.summary.model_dump_json(indent=2) + "\n",
                                             encoding="utf-8")
        if self.out.exists():
            old = self.tmp.with_name(self.tmp.name + "-old")
            self.out.rename(old)
            self.tmp.rename(self.out)
            shutil.rmtree(old)
        else:
            self.tmp.rename(self.out)

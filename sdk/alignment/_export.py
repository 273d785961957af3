"""The GRPO policy under LoRA: the adapter is the artefact; merging it is an explicit export.

A merged multi-billion policy is gigabytes, its adapter a few megabytes, so ``align`` writes ``adapter/`` (peft
adapter, the processor, and ``base.json``: the base checkpoint's path and config hash) and
:func:`export_policy` (``fedmor policy export``) merges it into a full checkpoint when wanted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peft import PeftModel

from sdk.alignment._errors import AlignmentError
from sdk.models import Runtime, config_digest, load_vlm

__all__ = ["BASE_FILE", "export_policy", "write_base_reference"]

BASE_FILE = "base.json"


def write_base_reference(adapter_dir: Path, base_dir: Path) -> None:
    """Record the base checkpoint an adapter was trained on (path and config hash)."""
    reference = {"source": str(base_dir.resolve()), "config_sha256": config_digest(base_dir)}
    (adapter_dir / BASE_FILE).write_text(json.dumps(reference, indent=2))


def _checked_base(adapter_dir: Path, base: str | Path | None) -> Path:
    reference_file = adapter_dir / BASE_FILE
    if not reference_file.is_file():
        raise AlignmentError(f"{adapter_dir} is not a policy adapter: {BASE_FILE} is missing")
    reference = json.loads(reference_file.read_text())
    base_dir = Path(base) if base is not None else Path(reference["source"])
    if not (base_dir / "config.json").is_file():
        raise AlignmentError(f"the adapter's base checkpoint {base_dir} is missing (trained on "
                             f"{reference['source']}): pass the base directory")
    if config_digest(base_dir) != reference["config_sha256"]:
        raise AlignmentError(f"base checkpoint {base_dir} does not match adapter {adapter_dir}: "
                             f"it was trained on {reference['source']} (another config.json)")
    return base_dir


def export_policy(adapter_dir: str | Path, out_dir: str | Path, *,
                  base: str | Path | None = None, runtime: Runtime | None = None) -> Path:
    """Merge a GRPO LoRA adapter into its base (checked by config hash) and save the full
    policy (model + processor) to ``out_dir``, in ``runtime``'s dtype."""
    adapter = Path(adapter_dir)
    bundle = load_vlm(_checked_base(adapter, base), runtime=runtime)
    model: Any = PeftModel.from_pretrained(bundle.model, str(adapter))
    merged = model.merge_and_unload()
    out = Path(out_dir)
    merged.save_pretrained(out)
    bundle.processor.save_pretrained(out)
    return out

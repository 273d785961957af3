"""``fedmor policy prepare``: the starting policy ``fedmor align --policy`` reads, from a local
checkpoint directory, optionally after the supervised warm-up the demo gives its base (a
policy that already answers in the expected format, so GRPO's rewards separate)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sdk.alignment._warmup import WarmupConfig, warmup_policy
from sdk.models import Runtime

__all__ = ["prepare_policy"]

PREPARED = "prepared.json"


def prepare_policy(base: Path, out: Path, *, warmup: Path | None = None,
                   config: WarmupConfig | None = None, runtime: Runtime | None = None,
                   progress: Callable[[str], None] | None = None,
                   source: str | None = None) -> Path:
    """Write the starting policy to ``out`` (which must not exist): ``base`` loaded and saved
    again (so an unreadable checkpoint fails here, not in the aligner's first step), or with
    ``warmup`` (a query folder with answers, e.g. ``policy/warmup`` of ``fedmor data synth``)
    fine-tuned on it first. ``out/prepared.json`` says which, naming the base by ``source``
    when given (a base built in a temporary folder has no path worth recording)."""
    from sdk.data import load_queries
    from sdk.models import load_vlm

    if out.exists():
        raise ValueError(f"{out} exists; give a new --out folder")
    if not (base / "config.json").is_file():
        raise FileNotFoundError(f"{base} is not a checkpoint directory (no config.json)")
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, object] = {"base": source or str(base.resolve()), "warmup": None}
    if warmup is None:
        bundle = load_vlm(base, runtime=runtime)
        bundle.model.save_pretrained(out)
        bundle.processor.save_pretrained(out)
    else:
        cfg = config or WarmupConfig()
        queries = load_queries(warmup)
        with tempfile.TemporaryDirectory(dir=out.parent) as cache:
            warmed = warmup_policy(base, queries, cache, cfg, runtime=runtime,
                                   progress=progress)
            shutil.move(str(warmed), out)
        done = json.loads((out / "warmup.json").read_text())
        record["warmup"] = {"queries": str(warmup.resolve()), "config": cfg.model_dump(),
                            "steps_done": done["steps_done"],
                            "final_loss": done["losses"][-1] if done["losses"] else None}
    (out / PREPARED).write_text(json.dumps(record, indent=2) + "\n")
    return out

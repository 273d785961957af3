"""What an audited member knows about itself (:class:`MemberTruth`), and the hashes its pairs'
images can carry in a captured reward-query log (:func:`logged_as`)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attacks._errors import AttackInputError
from sdk.data import open_bounded_image
from sdk.router import image_digest, image_ref

__all__ = ["MemberTruth", "logged_as"]


@dataclass(frozen=True)
class MemberTruth:
    """What the audited member knows about itself: ``rounds[r]`` (N_r, D), the embeddings of
    the samples behind its update of round r in its order (``embeddings``: of every round not
    named), ``pool`` (M, D) other samples of its data (the baselines), its train
    (``members``) and eval (``non_members``) pairs, and ``image_files``: the sha256 of each
    image file's bytes of its data folder, by the pixels' ``image_digest`` (empty when the
    pairs were given as images only)."""

    embeddings: torch.Tensor | None = None
    pool: torch.Tensor | None = None
    members: Sequence[Any] = ()
    non_members: Sequence[Any] = ()
    rounds: Mapping[int, torch.Tensor] = field(default_factory=dict)
    image_files: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def for_round(self, round_id: int) -> torch.Tensor | None:
        """The embeddings of the samples behind this member's update of ``round_id``."""
        return self.rounds.get(round_id, self.embeddings)

    @classmethod
    def load(cls, embeddings: Path | None = None, pairs: Path | None = None) -> MemberTruth:
        """From a safetensors file (``round-<r>`` and/or ``embeddings``, and ``pool``) and a
        data directory with ``train/`` and ``eval/`` pairs (sdk.data layout); either may be
        None."""
        emb = pool = None
        per_round: dict[int, torch.Tensor] = {}
        if embeddings is not None:
            from safetensors.torch import load_file

            if not embeddings.is_file():
                raise AttackInputError(f"no ground-truth embeddings file at {embeddings}")
            tensors = load_file(str(embeddings))
            per_round = {
                int(k.split("-", 1)[1]): v
                for k, v in tensors.items()
                if k.startswith("round-") and k.split("-", 1)[1].isdigit()
            }
            emb, pool = tensors.get("embeddings"), tensors.get("pool")
            if emb is None and not per_round:
                raise AttackInputError(f"{embeddings} has no 'embeddings' or 'round-<r>' tensor")
        train: list[Any] = []
        held: list[Any] = []
        files: dict[str, frozenset[str]] = {}
        if pairs is not None:
            from sdk.data import load_pairs

            train, held = load_pairs(pairs / "train"), load_pairs(pairs / "eval")
            files = _file_hashes(pairs)
        return cls(emb, pool, train, held, per_round, files)


def _file_hashes(folder: Path) -> dict[str, frozenset[str]]:
    """The sha256 of each image file's bytes under ``folder``, by its pixels' ``image_digest``:
    an aligner may send a pair's file as it is, and the capture names it by those bytes."""
    found: dict[str, set[str]] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        try:
            pixels = open_bounded_image(io.BytesIO(data))
        except ValueError:
            continue  # not an image (pairs.jsonl): no pair names it
        found.setdefault(image_digest(pixels), set()).add(hashlib.sha256(data).hexdigest())
    return {k: frozenset(v) for k, v in found.items()}


def logged_as(image: Any, files: Mapping[str, frozenset[str]]) -> list[str]:
    """The hashes a pair's image can be logged under (the capture names an image by the sha256
    of the bytes the aligner sent): its file's bytes, when the pair came from a data folder,
    and the RGB PNG that ``sdk.router.image_ref`` makes of its pixels, what an aligner holding
    decoded images sends (one encoder on the same pixels writes the same bytes)."""
    return [*sorted(files.get(image_digest(image), ())), image_ref(image).sha256]

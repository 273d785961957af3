"""The capture directory: what a consortium server received and published, round by round,
for an auditor to attack (``fedmor audit --capture DIR``). Documented in docs/attacks.md.

Layout (format ``fedmor-capture-dir-v1``)::

    manifest.json                    CaptureManifest: rounds, their artefacts, sha256 of each
    round-000001/plain-<member>.safetensors      a plain update of an unmasked round kind, in
                                     the ``fedmor-captured-update-v1`` format (attacks._captured)
    round-000001/masked-<member>.safetensors     the masked input as received: ``masked``
                                     (P+1,) uint32 (the SecAgg ring element, weight last)
    round-000001/unmasking-<member>.json         the member's unmasking response (shares,
                                     base64), as received
    round-000001/aggregate.safetensors           the published router (``after.*``) and the
                                     round's start (``before.*``), ``fedmor-captured-update-v1``
    reward-queries.jsonl             one RewardQuery per line: image hash, prompt, response,
                                     score (and the member that answered, which the server knows)

No file holds ground truth: the auditor brings it (the audited member's own embeddings and
pairs). :func:`write_capture` appends rounds and queries to a directory (creating it), so a
server can call it after every round.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from safetensors import SafetensorError
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy

from attacks._captured import CapturedRouterUpdate, CaptureMeta
from attacks._errors import AttackInputError

__all__ = [
    "CAPTURE_DIR_FORMAT",
    "CaptureDir",
    "CaptureManifest",
    "CapturedArtefact",
    "CapturedRound",
    "RewardQuery",
    "RoundCapture",
    "write_capture",
]

CAPTURE_DIR_FORMAT = "fedmor-capture-dir-v1"
"""The version tag of the capture directory format (``manifest.json``'s ``format``)."""
MASKED_FORMAT = "fedmor-masked-input-v1"
MANIFEST = "manifest.json"
QUERIES = "reward-queries.jsonl"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

ArtefactKind = Literal["plain_update", "masked_input", "unmasking_shares", "aggregate"]


class CapturedArtefact(BaseModel):
    """One file of a round: what it holds, whose it is (None: the server's own output)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ArtefactKind
    member: str | None = None
    file: str = Field(description="relative to the capture directory")
    sha256: str


class CapturedRound(BaseModel):
    """One round as the server saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round_id: int = Field(ge=0)
    round_kind: str = "router"
    secure_aggregation: bool
    router_version: int | None = Field(default=None, description="published after the round")
    threshold: int | None = Field(default=None, description="SecAgg shares to rebuild a secret")
    secagg_ids: dict[str, int] = Field(default_factory=dict, description="member -> SecAgg id")
    meta: CaptureMeta = Field(description="the round: router, participants, samples, recipe")
    artefacts: list[CapturedArtefact]


class CaptureManifest(BaseModel):
    """``manifest.json``."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["fedmor-capture-dir-v1"] = "fedmor-capture-dir-v1"
    description: str = ""
    rounds: list[CapturedRound] = Field(default_factory=list)
    reward_queries: str | None = Field(default=None, description=f"{QUERIES} when any")
    n_reward_queries: int = Field(default=0, ge=0)


class RewardQuery(BaseModel):
    """One reward query the server brokered, as it saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_sha256: str = Field(description="sdk.router.image_digest of the image")
    prompt: str
    response: str
    score: float
    member: str | None = Field(default=None, description="who answered (the router's pick)")
    round_id: int | None = None


@dataclass
class RoundCapture:
    """What the server holds of one router round, in memory, for :func:`write_capture`.
    ``meta`` names every participant (``client_indices``, ``samples_per_client``);
    ``before``/``aggregate`` are router parameters keyed like ``Router.named_parameters()``;
    ``plain_updates`` a member's trained parameters phi_k (unmasked round kinds);
    ``masked_inputs`` the MaskedInput bytes; ``unmasking`` a member's UnmaskingResponse JSON."""

    round_id: int
    meta: CaptureMeta
    before: dict[str, torch.Tensor]
    aggregate: dict[str, torch.Tensor] | None = None
    plain_updates: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    masked_inputs: dict[str, bytes] = field(default_factory=dict)
    unmasking: dict[str, dict[str, Any]] = field(default_factory=dict)
    router_version: int | None = None
    threshold: int | None = None
    secagg_ids: dict[str, int] = field(default_factory=dict)
    round_kind: str = "router"

    def record(self, message: Any) -> None:
        """Keep a SecAgg client message as received (``sdk.secagg`` MaskedInput and
        UnmaskingResponse; the other stages carry keys and signatures only), its sender
        named through ``secagg_ids``."""
        kind = getattr(message, "kind", None)
        if kind not in ("masked_input", "unmasking_response"):
            return
        names = {v: k for k, v in self.secagg_ids.items()}
        if message.sender not in names:
            raise AttackInputError(f"SecAgg sender {message.sender} is not in secagg_ids")
        member = names[message.sender]
        if kind == "masked_input":
            self.masked_inputs[member] = bytes(message.masked)
        else:
            self.unmasking[member] = message.model_dump(mode="json")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _member_meta(meta: CaptureMeta, member: str) -> CaptureMeta:
    """The plaintext metadata of one participant's own update."""
    if member not in meta.client_ids:
        raise AttackInputError(f"{member!r} is not one of the round's members {meta.client_ids}")
    k = meta.client_ids.index(member)
    if k not in meta.client_indices:
        raise AttackInputError(f"{member!r} did not take part in the round")
    n = meta.samples_per_client[meta.client_indices.index(k)]
    return meta.model_copy(
        update={"setting": "plaintext", "client_indices": [k], "samples_per_client": [n]}
    )


def _write_round(root: Path, rc: RoundCapture) -> CapturedRound:
    folder = f"round-{rc.round_id:06d}"
    (root / folder).mkdir(parents=True, exist_ok=True)
    arts: list[CapturedArtefact] = []

    def add(kind: ArtefactKind, member: str | None, path: Path) -> None:
        arts.append(
            CapturedArtefact(
                kind=kind, member=member, file=str(path.relative_to(root)), sha256=_sha(path)
            )
        )

    names = [*rc.plain_updates, *rc.masked_inputs, *rc.unmasking]
    bad = [m for m in names if not _NAME.match(m)]
    if bad:
        raise AttackInputError(f"member names unfit for file names: {bad}")
    for member, after in rc.plain_updates.items():
        upd = CapturedRouterUpdate(_member_meta(rc.meta, member), rc.before, after)
        add("plain_update", member, upd.save(root / folder / f"plain-{member}.safetensors"))
    for member, masked in rc.masked_inputs.items():
        path = root / folder / f"masked-{member}.safetensors"
        save_numpy(
            {"masked": np.frombuffer(masked, dtype="<u4").copy()},
            str(path),
            metadata={"format": MASKED_FORMAT, "member": member},
        )
        add("masked_input", member, path)
    for member, response in rc.unmasking.items():
        path = root / folder / f"unmasking-{member}.json"
        path.write_text(json.dumps(response, sort_keys=True), encoding="utf-8")
        add("unmasking_shares", member, path)
    if rc.aggregate is not None:
        agg_meta = rc.meta.model_copy(update={"setting": "aggregate"})
        upd = CapturedRouterUpdate(agg_meta, rc.before, rc.aggregate)
        add("aggregate", None, upd.save(root / folder / "aggregate.safetensors"))
    return CapturedRound(
        round_id=rc.round_id,
        round_kind=rc.round_kind,
        secure_aggregation=bool(rc.masked_inputs),
        router_version=rc.router_version,
        threshold=rc.threshold,
        secagg_ids=rc.secagg_ids,
        meta=rc.meta,
        artefacts=arts,
    )


def write_capture(
    root: str | Path,
    *,
    rounds: Sequence[RoundCapture] = (),
    reward_queries: Iterable[RewardQuery] = (),
    description: str = "",
) -> Path:
    """Append ``rounds`` and ``reward_queries`` to the capture directory ``root`` (created if
    needed) and rewrite its manifest; returns the manifest's path. A round id already in the
    manifest is refused: a capture is append-only."""
    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    manifest = (
        CaptureDir.open(out).manifest
        if (out / MANIFEST).is_file()
        else CaptureManifest(description=description)
    )
    known = {r.round_id for r in manifest.rounds}
    for rc in rounds:
        if rc.round_id in known:
            raise AttackInputError(f"round {rc.round_id} is already in the capture at {out}")
        manifest.rounds.append(_write_round(out, rc))
        known.add(rc.round_id)
    queries = [q.model_dump_json() for q in reward_queries]
    if queries:
        with (out / QUERIES).open("a", encoding="utf-8") as f:
            f.write("\n".join(queries) + "\n")
        manifest.reward_queries = QUERIES
        manifest.n_reward_queries += len(queries)
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(out / MANIFEST)  # readers never see half a manifest
    return out / MANIFEST


@dataclass(frozen=True)
class CaptureDir:
    """A capture directory opened for reading; every file was checked against the manifest."""

    root: Path
    manifest: CaptureManifest

    @classmethod
    def open(cls, root: str | Path) -> CaptureDir:
        """Read and check ``root/manifest.json``; a clear error for anything else."""
        src = Path(root)
        path = src / MANIFEST
        if not path.is_file():
            raise AttackInputError(f"{src} is not a capture directory: no {MANIFEST}")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise AttackInputError(f"{path} is not JSON: {exc}") from exc
        if not isinstance(raw, dict) or raw.get("format") != CAPTURE_DIR_FORMAT:
            found = raw.get("format") if isinstance(raw, dict) else None
            raise AttackInputError(f"{path} has format {found!r}, not {CAPTURE_DIR_FORMAT}")
        try:
            manifest = CaptureManifest.model_validate(raw)
        except ValidationError as exc:
            raise AttackInputError(f"{path}: invalid manifest: {exc}") from exc
        for rnd in manifest.rounds:
            for art in rnd.artefacts:
                f = (src / art.file).resolve()
                if src.resolve() not in f.parents or not f.is_file():
                    raise AttackInputError(f"round {rnd.round_id}: {art.file} is missing")
                if _sha(f) != art.sha256:
                    raise AttackInputError(
                        f"round {rnd.round_id}: {art.file} does not match "
                        "its sha256 in the manifest"
                    )
        return cls(src, manifest)

    def update(self, art: CapturedArtefact) -> CapturedRouterUpdate:
        """A plain update or an aggregate, as a ``fedmor-captured-update-v1`` file."""
        return CapturedRouterUpdate.load(self.root / art.file)

    def masked(self, art: CapturedArtefact) -> np.ndarray:
        """A masked input, (P+1,) uint32."""
        try:
            return load_numpy(str(self.root / art.file))["masked"]
        except (SafetensorError, KeyError, OSError) as exc:
            raise AttackInputError(f"{art.file} is not a masked-input file: {exc}") from exc

    def unmasking(self, art: CapturedArtefact) -> dict[str, Any]:
        """An unmasking response as JSON (share dictionaries keyed by SecAgg id)."""
        data: dict[str, Any] = json.loads((self.root / art.file).read_text(encoding="utf-8"))
        return data

    def reward_queries(self) -> list[RewardQuery]:
        """Every captured reward query, in the order the server saw them."""
        if self.manifest.reward_queries is None:
            return []
        lines = (self.root / self.manifest.reward_queries).read_text(encoding="utf-8")
        try:
            return [RewardQuery.model_validate_json(x) for x in lines.splitlines() if x.strip()]
        except ValidationError as exc:
            raise AttackInputError(f"{self.manifest.reward_queries}: bad line: {exc}") from exc

"""The capture directory (format ``fedmor-capture-dir-v2``), documented in docs/attacks.md::

    manifest.json                    CaptureManifest: rounds, their artefacts, sha256 of each
    round-000001/plain-<member>.safetensors      a plain update of an unmasked round kind
                                     (``fedmor-captured-update-v1``, sdk.capture._update)
    round-000001/masked-<member>.safetensors     the masked input as received: ``masked``
                                     (P+1,) uint32 (the SecAgg ring element, weight last)
    round-000001/unmasking-<member>.json         the member's unmasking response, as received
    round-000001/aggregate.safetensors           the published router (``after.*``) and the
                                     round's start (``before.*``); none in a failed round
    reward-queries.jsonl             one RewardQuery per line: image hash, prompt, response,
                                     score (and the member that answered, which the server knows)

A round is ``finished`` or ``failed`` (with its ``failure``: what the server received before it
failed, and nothing published). v2 added that status; a v1 directory (finished rounds only)
reads as is, and appending to it rewrites its manifest as v2. No file holds ground truth: the
auditor brings it. :func:`write_capture` appends rounds and
queries (creating the directory), so a server can call it after every round;
:func:`prune_capture` drops the oldest rounds past a retention bound.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from sdk.capture._update import CaptureError, CaptureMeta, read_update_file, write_update_file
from sdk.storage import replace_file

__all__ = [
    "CAPTURE_DIR_FORMAT",
    "CaptureFiles",
    "CaptureManifest",
    "CapturedArtefact",
    "CapturedRound",
    "RewardQuery",
    "RoundCapture",
    "prune_capture",
    "write_capture",
]

CAPTURE_DIR_FORMAT: Final = "fedmor-capture-dir-v2"
"""The version tag of the capture directory format (``manifest.json``'s ``format``)."""
# v2 bumped from v1 so that a v1-only reader refuses a manifest with failed rounds by its tag
# (a clear error) instead of on a field its strict models do not know.
_READABLE = ("fedmor-capture-dir-v1", CAPTURE_DIR_FORMAT)
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
    status: Literal["finished", "failed"] = "finished"
    failure: str | None = Field(default=None, description="why a failed round failed")

    @model_validator(mode="after")
    def _failed_publishes_nothing(self) -> CapturedRound:
        if self.status == "failed":
            if self.router_version is not None or any(
                    a.kind == "aggregate" for a in self.artefacts):
                raise ValueError(f"round {self.round_id} failed: it has no published router")
        elif self.failure is not None:
            raise ValueError(f"round {self.round_id} finished: it has no failure")
        return self


class CaptureManifest(BaseModel):
    """``manifest.json``."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["fedmor-capture-dir-v1", "fedmor-capture-dir-v2"] = "fedmor-capture-dir-v2"
    description: str = ""
    rounds: list[CapturedRound] = Field(default_factory=list)
    reward_queries: str | None = Field(default=None, description=f"{QUERIES} when any")
    n_reward_queries: int = Field(default=0, ge=0)


class RewardQuery(BaseModel):
    """One reward query the server brokered, as it saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image_sha256: str = Field(description="sha256 of the image file's bytes as the aligner sent "
                              "them (sdk.wire.ImageRef)")
    prompt: str
    response: str
    score: float
    member: str | None = Field(default=None, description="who answered (the router's pick)")
    round_id: int | None = None


@dataclass
class RoundCapture:
    """What the server holds of one router round, in memory, for :func:`write_capture`.
    ``meta`` names every participant (``client_indices``, ``samples_per_client``);
    ``before``/``aggregate`` are router parameters keyed like ``Router.named_parameters()``
    (numpy arrays or torch tensors); ``plain_updates`` a member's parameters phi_k (unmasked
    round kinds); ``masked_inputs`` the MaskedInput bytes; ``unmasking`` a member's
    UnmaskingResponse JSON. A ``failed`` round (``failure`` says why) has no ``aggregate``
    and no ``router_version``."""

    round_id: int
    meta: CaptureMeta
    before: dict[str, Any]
    aggregate: dict[str, Any] | None = None
    plain_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    masked_inputs: dict[str, bytes] = field(default_factory=dict)
    unmasking: dict[str, dict[str, Any]] = field(default_factory=dict)
    router_version: int | None = None
    threshold: int | None = None
    secagg_ids: dict[str, int] = field(default_factory=dict)
    round_kind: str = "router"
    status: Literal["finished", "failed"] = "finished"
    failure: str | None = None

    def __post_init__(self) -> None:
        # Refused here, before write_capture puts any file down; CapturedRound checks the same
        # rule again on a manifest it reads.
        if self.status == "failed" and (self.aggregate is not None
                                        or self.router_version is not None):
            raise CaptureError(f"round {self.round_id} failed: it has no published router")

    def record(self, message: Any) -> None:
        """Keep a SecAgg client message as received (``sdk.secagg`` MaskedInput and
        UnmaskingResponse; the other stages carry keys and signatures only), its sender
        named through ``secagg_ids``."""
        kind = getattr(message, "kind", None)
        if kind not in ("masked_input", "unmasking_response"):
            return
        names = {v: k for k, v in self.secagg_ids.items()}
        if message.sender not in names:
            raise CaptureError(f"SecAgg sender {message.sender} is not in secagg_ids")
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
        raise CaptureError(f"{member!r} is not one of the round's members {meta.client_ids}")
    k = meta.client_ids.index(member)
    if k not in meta.client_indices:
        raise CaptureError(f"{member!r} did not take part in the round")
    n = meta.samples_per_client[meta.client_indices.index(k)]
    return meta.model_copy(
        update={"setting": "plaintext", "client_indices": [k], "samples_per_client": [n]}
    )


def _pair(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    if not before or set(before) != set(after):
        raise CaptureError("before and after must hold the same, non-empty parameters")
    return {f"before.{n}": t for n, t in before.items()} | {
        f"after.{n}": t for n, t in after.items()}


def _write_round(root: Path, rc: RoundCapture) -> CapturedRound:
    folder = f"round-{rc.round_id:06d}"
    (root / folder).mkdir(parents=True, exist_ok=True)
    arts: list[CapturedArtefact] = []

    def add(kind: ArtefactKind, member: str | None, path: Path) -> None:
        arts.append(CapturedArtefact(kind=kind, member=member,
                                     file=path.relative_to(root).as_posix(), sha256=_sha(path)))

    names = [*rc.plain_updates, *rc.masked_inputs, *rc.unmasking]
    bad = [m for m in names if not _NAME.match(m)]
    if bad:
        raise CaptureError(f"member names unfit for file names: {bad}")
    for member, after in rc.plain_updates.items():
        path = root / folder / f"plain-{member}.safetensors"
        add("plain_update", member,
            write_update_file(path, _member_meta(rc.meta, member), _pair(rc.before, after)))
    for member, masked in rc.masked_inputs.items():
        path = root / folder / f"masked-{member}.safetensors"
        save_file({"masked": np.frombuffer(masked, dtype="<u4").copy()}, str(path),
                  metadata={"format": MASKED_FORMAT, "member": member})
        add("masked_input", member, path)
    for member, response in rc.unmasking.items():
        path = root / folder / f"unmasking-{member}.json"
        path.write_text(json.dumps(response, sort_keys=True), encoding="utf-8")
        add("unmasking_shares", member, path)
    if rc.aggregate is not None:
        path = root / folder / "aggregate.safetensors"
        meta = rc.meta.model_copy(update={"setting": "aggregate"})
        add("aggregate", None, write_update_file(path, meta, _pair(rc.before, rc.aggregate)))
    return CapturedRound(
        round_id=rc.round_id, round_kind=rc.round_kind,
        secure_aggregation=bool(rc.masked_inputs), router_version=rc.router_version,
        threshold=rc.threshold, secagg_ids=rc.secagg_ids, meta=rc.meta, artefacts=arts,
        status=rc.status, failure=rc.failure)


def _read_manifest(root: Path) -> CaptureManifest:
    path = root / MANIFEST
    if not path.is_file():
        raise CaptureError(f"{root} is not a capture directory: no {MANIFEST}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CaptureError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") not in _READABLE:
        found = raw.get("format") if isinstance(raw, dict) else None
        raise CaptureError(f"{path} has format {found!r}, not {' or '.join(_READABLE[::-1])}")
    try:
        return CaptureManifest.model_validate(raw)
    except ValidationError as exc:
        raise CaptureError(f"{path}: invalid manifest: {exc}") from exc


def _save_manifest(root: Path, manifest: CaptureManifest) -> Path:
    # Replaced whole (readers never see half a manifest), with the mode the capture's other
    # files get: a new file's, under the umask.
    return replace_file(root / MANIFEST, manifest.model_dump_json(indent=2), mode=0o666)


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline: an append a crash interrupted. Its query was never
    answered (the log is written before the reward goes out), and a half line would make the
    whole log unreadable once more lines follow it."""
    if not path.is_file():
        return
    with path.open("rb+") as f:
        size = f.seek(0, 2)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(max(0, size - (1 << 20)))  # one query line is far shorter than 1 MiB
        tail = f.read()
        f.truncate(size - len(tail) + tail.rfind(b"\n") + 1)


def write_capture(root: str | Path, *, rounds: Sequence[RoundCapture] = (),
                  reward_queries: Iterable[RewardQuery] = (), description: str = "") -> Path:
    """Append ``rounds`` and ``reward_queries`` to the capture directory ``root`` (created if
    needed) and rewrite its manifest; returns the manifest's path. A round id already in the
    manifest is refused: a capture is append-only."""
    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    manifest = (_read_manifest(out) if (out / MANIFEST).is_file()
                else CaptureManifest(description=description))
    manifest.format = CAPTURE_DIR_FORMAT  # a v1 manifest is a v2 one with finished rounds only
    known = {r.round_id for r in manifest.rounds}
    for rc in rounds:
        if rc.round_id in known:
            raise CaptureError(f"round {rc.round_id} is already in the capture at {out}")
        manifest.rounds.append(_write_round(out, rc))
        known.add(rc.round_id)
    queries = [q.model_dump_json() for q in reward_queries]
    if queries:
        _drop_torn_tail(out / QUERIES)
        with (out / QUERIES).open("a", encoding="utf-8") as f:
            f.write("\n".join(queries) + "\n")
        manifest.reward_queries = QUERIES
        manifest.n_reward_queries += len(queries)
    return _save_manifest(out, manifest)


def prune_capture(root: str | Path, keep_rounds: int) -> list[int]:
    """Delete all but the newest ``keep_rounds`` rounds of a capture (their folders and manifest
    entries); returns the round ids removed. The reward-query log is kept whole."""
    out = Path(root)
    if not (out / MANIFEST).is_file():
        return []
    manifest = _read_manifest(out)
    rounds = sorted(manifest.rounds, key=lambda r: r.round_id)
    drop = rounds[: max(0, len(rounds) - keep_rounds)]
    if not drop:
        return []
    manifest.rounds = rounds[len(drop):]
    _save_manifest(out, manifest)  # first: a crash leaves files no manifest names, never the
    for rnd in drop:               # other way round
        shutil.rmtree(out / f"round-{rnd.round_id:06d}", ignore_errors=True)
    return [r.round_id for r in drop]


@dataclass(frozen=True)
class CaptureFiles:
    """A capture directory opened for reading; every file was checked against the manifest."""

    root: Path
    manifest: CaptureManifest

    @classmethod
    def open(cls, root: str | Path, *, verify: bool = True) -> CaptureFiles:
        """Read and check ``root/manifest.json``; a clear :class:`CaptureError` otherwise.
        ``verify`` (default) also checks every file against its sha256 (reads them all)."""
        src = Path(root)
        manifest = _read_manifest(src)
        for rnd in manifest.rounds if verify else ():
            for art in rnd.artefacts:
                f = (src / art.file).resolve()
                if src.resolve() not in f.parents or not f.is_file():
                    raise CaptureError(f"round {rnd.round_id}: {art.file} is missing")
                if _sha(f) != art.sha256:
                    raise CaptureError(f"round {rnd.round_id}: {art.file} does not match "
                                       "its sha256 in the manifest")
        return cls(src, manifest)

    def update_arrays(self, art: CapturedArtefact) -> tuple[CaptureMeta, dict[str, np.ndarray]]:
        """A plain update or an aggregate: its metadata and its ``before.*``/``after.*``."""
        return read_update_file(self.root / art.file)

    def masked(self, art: CapturedArtefact) -> np.ndarray:
        """A masked input, (P+1,) uint32."""
        try:
            return load_file(str(self.root / art.file))["masked"]
        except (SafetensorError, KeyError, OSError) as exc:
            raise CaptureError(f"{art.file} is not a masked-input file: {exc}") from exc

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
            raise CaptureError(f"{self.manifest.reward_queries}: bad line: {exc}") from exc

"""``fedmor align``: GRPO against a running consortium server, with rewards over REST.

The job needs the server's URL, its own ``aligner`` identity key (and once, its enrollment
token), the policy and the public queries; it never sees the server's key, database or the
members' reward models. Under ``torchrun`` / ``accelerate launch`` every rank runs the same
command: each rank asks the server about its own completions, rank 0 alone posts the feedback.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sdk.alignment._errors import DEFAULT_MAX_FAILED_FRACTION
from sdk.alignment._grpo_settings import GRPOSettings
from sdk.models import Runtime
from sdk.progress import say
from sdk.runtime_options import add_runtime_arguments, runtime_from_args
from sdk.storage import replace_file

__all__ = ["AlignJob", "register", "run_align_job"]


class AlignJob(BaseModel):
    """What ``fedmor align`` runs (``--config`` JSON/TOML; the flags override it)."""

    model_config = ConfigDict(extra="forbid")

    server: str = Field(description="the consortium server's URL")
    identity: Path = Field(description="the aligner's Ed25519 identity key (PEM)")
    policy: Path = Field(description="the starting policy checkpoint directory")
    queries: Path = Field(description="the public queries directory (sdk.data format)")
    out: Path = Field(description="output directory: policy, metrics.json, checkpoints")
    name: str = Field(default="aligner", description="the aligner's roster name")
    token: str | None = Field(default=None, description="its one-time enrollment token (the "
                              "first run enrolls; later runs may give it again or client_id)")
    client_id: str | None = Field(default=None, description="the id enrollment gave")
    server_ca: Path | None = Field(default=None, description="CA bundle of the server's TLS "
                                   "certificate")
    insecure_http: bool = Field(default=False, description="allow a plain http:// server "
                                "(local tests only); without it such a server is refused")
    method: str = Field(default="mor", description="the reward-selection method the server "
                        "applies (a registered selection of sdk.alignment)")
    max_queries: int | None = Field(default=None, ge=1, description="use the first N queries")
    timeout_s: float = Field(default=300.0, gt=0)
    max_failed_fraction: float = Field(
        default=DEFAULT_MAX_FAILED_FRACTION, ge=0.0, le=1.0, description="stop with an error when more than this "
        "fraction of a step's completions got the server's failure value (a member timed "
        "out, refused or answered out of bound); 1 never stops")
    progress_every: int = Field(default=1, ge=1, description="a progress line every N steps")
    resume: bool = Field(default=False, description="continue from the newest checkpoint in "
                         "out/trainer (grpo.save_steps writes them)")
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    runtime: Runtime = Field(default_factory=Runtime, description="device, dtype (bf16 / fp16 "
                             "follow it) and gradient checkpointing of the policy")


def _verify(job: AlignJob) -> ssl.SSLContext | bool:
    from sdk.wire import tls_verify

    return tls_verify(job.server_ca)


def _sender(job: AlignJob) -> str:
    from sdk.alignment._rest_rewards import enroll_identity
    from sdk.wire import load_private_key

    if job.token is not None:
        enrolled = enroll_identity(job.server, load_private_key(job.identity), name=job.name,
                                   token=job.token, verify=_verify(job))
        if enrolled.role != "aligner":
            raise ValueError(f"{job.name!r} is enrolled with role {enrolled.role!r}; the "
                             "alignment endpoints need an aligner identity (roster role "
                             "aligner)")
        return enrolled.client_id
    if job.client_id is None:
        raise ValueError("give the aligner's enrollment token (--token) or its client id "
                         "(--client-id)")
    return job.client_id


def run_align_job(job: AlignJob, *, callbacks: list[Any] | None = None) -> Path:
    """Enroll (or reuse the id), run GRPO with rewards from the server, return ``job.out``.

    Writes ``job.out/policy``, ``job.out/metrics.json`` (trl's log, rewards, the server's
    feedback acks, rank 0's request counts), ``job.out/rest_rank{r}.json`` per rank (requests,
    bytes, items the server scored with its failure value) and checkpoints under
    ``job.out/trainer`` every ``grpo.save_steps`` steps.
    """
    from sdk.alignment._grpo import align
    from sdk.alignment._rest_rewards import RestRewardFunction
    from sdk.data import load_queries
    from sdk.ops import Connection

    # The operator commands' check: an https:// server, or http:// given --insecure-http.
    Connection(server=job.server, insecure_http=job.insecure_http)
    queries = load_queries(job.queries)[: job.max_queries]
    reward_fn = RestRewardFunction(job.server, job.identity, _sender(job), method=job.method,
                                   verify=_verify(job), timeout_s=job.timeout_s,
                                   max_failed_fraction=job.max_failed_fraction)
    out = align(job.policy, reward_fn, queries, job.grpo, out_dir=job.out,
                callbacks=callbacks or [], progress=say,
                progress_every=job.progress_every, runtime=job.runtime, resume=job.resume)
    # Every rank asked the server for its own completions: one record per rank.
    rank = int(os.environ.get("RANK", "0"))
    rest = {"rank": rank, "requests": reward_fn.requests, "bytes_sent": reward_fn.bytes_sent,
            "failed_items": reward_fn.failed, "reward_calls": len(reward_fn.history),
            "server": job.server}
    replace_file(out / f"rest_rank{rank}.json", json.dumps(rest, indent=1), mode=0o666)
    metrics_path = out / "metrics.json"
    if rank == 0 and metrics_path.exists():
        metrics = json.loads(metrics_path.read_text())
        metrics["rest"] = rest
        replace_file(metrics_path, json.dumps(metrics, indent=1, default=str), mode=0o666)
    return out


def _profile(name: str | None, data: dict[str, Any], *, server_given: bool) -> dict[str, Any]:
    """``data`` over the aligner profile ``name`` (``fedmor enroll``): its server, CA,
    identity and client id. Without ``name``, the default profile when neither the flags nor
    the config name a server; no profile at all: ``data`` as it is."""
    from sdk.ops import ProfileBook

    book = ProfileBook.load()
    if name is None and (server_given or "server" in data or not book.profiles):
        return data
    label, profile = book.pick(name)
    if profile.role != "aligner":
        raise ValueError(f"profile {label!r} is a {profile.role}: fedmor align signs as the "
                         f"aligner (give --profile with an aligner's profile)")
    found: dict[str, Any] = {"server": profile.server, "identity": profile.identity,
                             "client_id": profile.client_id, "name": profile.name,
                             "insecure_http": profile.insecure_http}
    if profile.ca is not None:
        found["server_ca"] = profile.ca
    return found | data


def _with_flags(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """The job's values: the config file's ``data`` over the profile's, the flags over both."""
    data = _profile(args.profile, data, server_given=args.server is not None)
    for flag in ("server", "identity", "policy", "queries", "out", "name", "token",
                 "client_id", "server_ca", "method"):
        value = getattr(args, flag)
        if value is not None:
            data[flag] = value
    if args.resume:
        data["resume"] = True
    if args.insecure_http:
        data["insecure_http"] = True
    if args.steps is not None:
        data["grpo"] = {**data.get("grpo", {}), "steps": args.steps}
    flags = runtime_from_args(args)
    if flags != Runtime():  # the flags were given: they override the config's runtime
        data["runtime"] = flags.model_dump()
    return data


def _handle(args: argparse.Namespace) -> int:
    from sdk.serving import load_settings

    # A wrong value is named with its file, line and fix, as in the apps' settings files.
    job = load_settings(AlignJob, args.config, merge=lambda data: _with_flags(args, data),
                        source="fedmor align's options")
    out = run_align_job(job)
    print(f"aligned policy: {out / 'policy'}", flush=True)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedmor align``."""
    p = sub.add_parser("align", help="stage C: GRPO against a consortium server (rewards over "
                       "REST, aligner role)")
    p.add_argument("--profile", help="the aligner's profile (`fedmor enroll`): server, CA, "
                   "identity and client id; the flags below override it")
    p.add_argument("--server", help="the server's URL")
    p.add_argument("--identity", type=Path, help="the aligner's identity key (PEM)")
    p.add_argument("--policy", type=Path, help="starting policy directory")
    p.add_argument("--queries", type=Path, help="public queries directory")
    p.add_argument("--out", type=Path, help="output directory")
    p.add_argument("--config", type=Path, help="AlignJob settings (JSON or TOML)")
    p.add_argument("--name", help="the aligner's roster name (default: aligner)")
    p.add_argument("--token", help="one-time enrollment token")
    p.add_argument("--client-id", dest="client_id", help="the id enrollment gave")
    p.add_argument("--ca", "--server-ca", dest="server_ca", type=Path,
                   help="CA bundle that verifies the server (HTTPS), as every command's --ca")
    p.add_argument("--insecure-http", action="store_true",
                   help="allow a plain http:// server URL (local tests only)")
    p.add_argument("--method", help="reward-selection method (default: mor)")
    p.add_argument("--steps", type=int, help="GRPO steps (overrides the config's)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in OUT/trainer")
    add_runtime_arguments(p)
    p.set_defaults(handler=_handle)

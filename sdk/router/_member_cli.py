"""A member's router commands: ``fedmor router pull`` (a published version, checked, as a
router folder) and ``fedmor router eval --member`` (that router on the member's own pairs,
with its own reward model only)."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdk.ops import add_connection_options, connection_from_args

if TYPE_CHECKING:
    from sdk.router._encoder import Encoder
    from sdk.wire import ConsortiumRouterConfig, RouterVersionInfo

__all__ = ["CONSORTIUM_CONFIG_FILE", "VERSION_FILE", "add_member_eval_options",
           "add_pull_command", "member_eval"]

CONSORTIUM_CONFIG_FILE = "consortium_router.json"
"""The consortium's router configuration in a pulled router folder (its encoder, heads)."""
VERSION_FILE = "version.json"
"""The published version's metadata (version, round, sha256, lineage) in a pulled folder."""


def add_pull_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pull`` to the ``router`` group's ``commands``."""
    pull = commands.add_parser(
        "pull", help="download a published router version (sha256-checked) with the "
        "consortium's router configuration, as a router folder `router eval` reads")
    pull.add_argument("version", type=int, nargs="?", default=None,
                      help="the version (default: the newest)")
    pull.add_argument("--out", type=Path, required=True, help="router folder to write")
    add_connection_options(pull)
    pull.set_defaults(handler=_pull)


def add_member_eval_options(evaluate: argparse.ArgumentParser) -> None:
    """``--member`` and ``--model``: ``router eval`` with one member's files only."""
    g = evaluate.add_argument_group("one member's view (instead of --models)")
    g.add_argument("--member", metavar="NAME",
                   help="your roster name (your router output); with --model and --pairs DIR")
    g.add_argument("--model", type=Path, metavar="CKPT", help="your reward-model checkpoint")
    g.add_argument("--base", type=Path, metavar="DIR",
                   help="the base VLM of a LoRA --model (default: the one it was trained on)")


def _version(conn: Any, version: int | None) -> RouterVersionInfo:
    from sdk.wire import RouterVersionInfo

    if version is None:
        return RouterVersionInfo.model_validate(
            conn.request("GET", "/v1/router/latest", what="router pull"))
    for v in conn.request("GET", "/v1/router/versions", what="router pull"):
        if v["version"] == version:
            return RouterVersionInfo.model_validate(v)
    raise ValueError(f"router version {version} does not exist (`fedmor router history` "
                     f"lists them)")


def _blob(conn: Any, info: RouterVersionInfo) -> bytes:
    """The version's parameters, refused unless they hash to the sha256 the server lists."""
    import httpx

    try:
        with conn.client(timeout_s=120.0) as client:
            resp = client.download(f"/v1/router/{info.version}")
    except httpx.HTTPError as exc:
        raise ValueError(f"cannot reach the server at {conn.server}: {exc}") from None
    digest = hashlib.sha256(resp.content).hexdigest()
    if digest != info.sha256 or digest != resp.headers.get("x-fedmor-sha256"):
        raise ValueError(f"router version {info.version} hashes to {digest[:16]}, the server "
                         f"lists {info.sha256[:16]}: the download is corrupt or was changed "
                         f"on the way; nothing written")
    return bytes(resp.content)


def _config(conn: Any, info: RouterVersionInfo) -> ConsortiumRouterConfig:
    """The configuration of the version's lineage, its hash recomputed as a member does."""
    from sdk.wire import RouterConfigInfo

    ref = info.router_config
    if ref is None:
        raise ValueError(f"router version {info.version} names no router configuration (the "
                         f"server declares no [router]): nothing to rebuild it from")
    served = RouterConfigInfo.model_validate(conn.request(
        "GET", f"/v1/router/config?lineage={ref.lineage}", what="router pull"))
    if served.config.sha256 != ref.sha256:
        raise ValueError(f"the server's router configuration of lineage {ref.lineage} hashes "
                         f"to {served.config.sha256[:12]}, version {info.version} names "
                         f"{ref.sha256[:12]}")
    return served.config


def _pull(args: argparse.Namespace) -> int:
    import numpy as np

    from sdk.router._hashing_encoder import HashingEncoder
    from sdk.router._model import Router

    conn = connection_from_args(args)
    info = _version(conn, args.version)
    config = _config(conn, info)
    params = np.frombuffer(_blob(conn, info), dtype="<f4")
    if len(params) != config.num_params:
        raise ValueError(f"router version {info.version} has {len(params)} parameters, its "
                         f"{config.describe()}")
    router = Router(config.router, config.heads, HashingEncoder(config.encoder).encoder_id)
    router.set_flat_params(params)
    router.save(args.out)
    (args.out / CONSORTIUM_CONFIG_FILE).write_text(config.model_dump_json(indent=2))
    (args.out / VERSION_FILE).write_text(info.model_dump_json(indent=2))
    print(json.dumps({"router": str(args.out), "version": info.version,
                      "sha256": info.sha256, "heads": config.heads,
                      "params": config.num_params}))
    return 0


def _encoder(args: argparse.Namespace, fallback: Encoder) -> Encoder:
    """The pulled router's own encoder (the consortium's configuration), else ``fallback``."""
    from sdk.router._hashing_encoder import HashingEncoder
    from sdk.wire import ConsortiumRouterConfig

    path = args.router / CONSORTIUM_CONFIG_FILE
    if not path.is_file():
        return fallback
    config = ConsortiumRouterConfig.model_validate_json(path.read_text())
    return HashingEncoder(config.encoder)


def member_eval(args: argparse.Namespace, fallback: Encoder) -> int:
    """How often the router sends the member's own eval pairs to the member, and its reward
    model's pairwise accuracy on them (all, and those the router sends it)."""
    import numpy as np

    from sdk.data import load_pairs
    from sdk.reward import RewardModel, pairwise_accuracy
    from sdk.router._evaluation import route_pairs
    from sdk.router._model import Router
    from sdk.runtime_options import runtime_from_args

    if args.member is None or args.model is None or len(args.pairs) != 1:
        raise ValueError("one member's evaluation takes --member NAME, --model CKPT and one "
                         "--pairs DIR (your eval pairs)")
    encoder = _encoder(args, fallback)
    router = Router.load(args.router, encoder_id=encoder.encoder_id)
    if args.member not in router.client_ids:
        raise ValueError(f"the router has no output {args.member!r} (outputs: "
                         f"{', '.join(router.client_ids)}): give your roster name")
    own = router.client_ids.index(args.member)
    folder = Path(args.pairs[0].partition("=")[2] or args.pairs[0])
    pairs = load_pairs(folder)
    routes = route_pairs(pairs, router, encoder)  # (n, 2): chosen, rejected
    both = np.flatnonzero((routes == own).all(axis=1))
    model = RewardModel.from_pretrained(args.model, base=args.base,
                                        runtime=runtime_from_args(args)).eval()
    result = {
        "member": args.member, "pairs": len(pairs),
        "routed_to_self": float((routes == own).mean()),
        "pairs_routed_to_self": len(both),
        "accuracy": pairwise_accuracy(model, pairs),
        "accuracy_routed_to_self": pairwise_accuracy(model, [pairs[i] for i in both])
        if len(both) else None,
    }
    print(f"{args.member}: the router sends {result['routed_to_self']:.1%} of your "
          f"{len(pairs)} eval pairs' responses to you ({len(both)} pairs both ways); your "
          f"reward model's pairwise accuracy on them: {result['accuracy']:.3f}")
    print(json.dumps(result))
    return 0

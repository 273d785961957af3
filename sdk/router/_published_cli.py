"""The ``fedmor router`` commands that read or change the server's published routers (their
parsers are in ``_cli``): ``show``, ``history``, ``lineages`` and ``rollback`` (operator),
``lineage`` (operator: a new lineage), ``pull`` (a member: a version as a router folder). Each is
one call of :class:`sdk.ops.OperatorClient` and a table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sdk.ops._operator_client import OperatorClient, client_from_args
from sdk.ops._tables import emit, when
from sdk.wire import ConsortiumRouterConfig, RequestRefused, RouterRollback, RouterVersionInfo

__all__ = ["history", "lineage", "lineages", "pull", "rollback", "show"]

_COLUMNS = ["VERSION", "LINEAGE", "FROM", "LENGTH", "SHA256", "BYTES", "PUBLISHED"]
_SHOWN = {"version", "round_id", "length", "sha256", "size_bytes", "created_at",
          "router_config", "restored", "carried_from"}


def _row(v: RouterVersionInfo) -> list[object]:
    return [v.version, "-" if v.router_config is None else v.router_config.lineage, v.origin(),
            v.length, v.sha256[:16], v.size_bytes, when(v.created_at)]


def _serving(ops: OperatorClient) -> str | None:
    """What the reward service selects from now (``k of K heads``, masked heads named), or
    None when this caller may not read the reward service's status."""
    from sdk.ops._alignment_cli import heads_phrase

    try:
        stats = ops.alignment_stats()
    except RequestRefused:
        return None
    return None if stats.serving_version is None else heads_phrase(stats)


def show(args: argparse.Namespace) -> int:
    """A published version (default: the newest) and what the reward service serves."""
    ops = client_from_args(args)
    serving = None
    if args.version is None:
        try:
            info = ops.router_latest()
        except RequestRefused as exc:
            # None in the current lineage yet: the error says where the newest is, and the
            # reward service's own view says what it serves meanwhile.
            serving = _serving(ops) if exc.status == 404 else None
            if serving is not None and not args.json:
                print(f"selection serves {serving}")
            raise
        serving = _serving(ops)
    else:
        info = ops.router_version(args.version)
    data = info.model_dump(mode="json")
    rows = list(zip(_COLUMNS, _row(info), strict=True)) + [
        (k, v) for k, v in data.items() if k not in _SHOWN]
    if serving is not None:
        rows.append(("SELECTION", serving))
    return emit(data if serving is None else {**data, "serving": serving}, args.json,
                ["FIELD", "VALUE"], rows)


def history(args: argparse.Namespace) -> int:
    """Every published version."""
    versions = client_from_args(args).router_versions()
    return emit([v.model_dump(mode="json") for v in versions], args.json, _COLUMNS,
                [_row(v) for v in versions])


def lineages(args: argparse.Namespace) -> int:
    """Every lineage."""
    found = client_from_args(args).router_lineages()
    rows = [[f"{x.lineage}{' (current)' if x.current else ''}", x.sha256[:12],
             ", ".join(x.config.heads), x.num_params, x.first_version or "none yet",
             x.latest_version or "none yet", x.started_by or "-", when(x.created_at)]
            for x in found]
    return emit([x.model_dump(mode="json") for x in found], args.json,
                ["LINEAGE", "CONFIG SHA256", "MEMBERS (HEADS)", "PARAMETERS", "FIRST",
                 "LATEST", "STARTED BY", "STARTED"], rows)


def rollback(args: argparse.Namespace) -> int:
    """A version published before, made the newest again."""
    info = client_from_args(args).rollback(RouterRollback(version=args.version))
    print(f"router version {args.version} restored as version {info.version} "
          f"(sha256 {info.sha256})")
    return 0


def _read_router_config(path: Path) -> ConsortiumRouterConfig:
    """The router configuration in ``path`` (TOML or JSON): the file itself, or its
    ``router`` section when it is the server's settings file."""
    import tomllib

    text = path.read_text()
    data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    if "heads" not in data and isinstance(data.get("router"), dict) \
            and "heads" in data["router"]:
        data = data["router"]
    return ConsortiumRouterConfig.model_validate(data)


def lineage(args: argparse.Namespace) -> int:
    """A new lineage on the configuration in ``--config``."""
    info = client_from_args(args).start_lineage(_read_router_config(args.config))
    print(f"router lineage {info.lineage} started: {info.config.describe()}. Rounds follow it "
          f"now; declare the same configuration in the server's [router] before its next "
          f"restart.")
    return 0


def _config(ops: OperatorClient, info: RouterVersionInfo) -> ConsortiumRouterConfig:
    """The configuration of the version's lineage, its hash recomputed as a member does."""
    ref = info.router_config
    if ref is None:
        raise ValueError(f"router version {info.version} names no router configuration (the "
                         f"server declares no [router]): nothing to rebuild it from")
    served = ops.router_config(ref.lineage)
    if served.config.sha256 != ref.sha256:
        raise ValueError(f"the server's router configuration of lineage {ref.lineage} hashes "
                         f"to {served.config.sha256[:12]}, version {info.version} names "
                         f"{ref.sha256[:12]}")
    return served.config


def pull(args: argparse.Namespace) -> int:
    """A published version (sha256-checked) with its lineage's configuration, written as a
    router folder that ``router eval`` reads."""
    import numpy as np

    from sdk.router._hashing_encoder import HashingEncoder
    from sdk.router._member_cli import CONSORTIUM_CONFIG_FILE, VERSION_FILE
    from sdk.router._model import Router

    ops = client_from_args(args)
    info = ops.router_version(args.version)
    config = _config(ops, info)
    params = np.frombuffer(ops.router_parameters(info), dtype="<f4")
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

"""``fedmor router ...``, defined here in full: simulate federated router training and evaluate
a router (Table 4) on a benchmark folder or a member's own pairs folders (here, and one
member's view in ``_member_cli``); pull a published version, read the server's versions and
lineages, roll back and start a new lineage (``_published_cli``, over the operator client)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from sdk.ops import add_connection_options
from sdk.progress import say
from sdk.router import _published_cli as published

if TYPE_CHECKING:
    from sdk.router._encoder import Encoder

__all__ = ["register"]

_ROUNDS_FILE = "rounds.json"

def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``router`` group to the ``fedmor`` parser: local (``train``, ``eval``) and at
    the server (``pull``, ``show``, ``history``, ``lineages``, ``rollback``, ``lineage``)."""
    group = sub.add_parser("router", help="stage B: the router (local training and evaluation; "
                           "the server's published versions; a new lineage of the consortium's "
                           "router)")
    commands = group.add_subparsers(dest="router_command", metavar="COMMAND", required=True)
    _add_local(commands)
    _add_published(commands)


def _add_local(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``train`` and ``eval``: on this machine, from benchmark or pairs folders."""
    train = commands.add_parser(
        "train", help="train a router federatedly over clients' pairs, all clients in-process"
    )
    train.add_argument("--data", type=Path, required=True,
                       help="benchmark directory with clients/<id>/train/pairs.jsonl")
    train.add_argument("--clients", nargs="+", required=True, help="client ids, in head order")
    train.add_argument("--out", type=Path, required=True, help="router checkpoint directory")
    train.add_argument("--aggregation", choices=("secure", "plain"), default="secure")
    train.add_argument("--rounds", type=int, help="default: default_federated_config's")
    train.add_argument("--layers", type=int, default=2, help="Transformer layers of the router")
    train.add_argument("--pairs-per-client", type=int, default=300)
    _encoder_option(train)
    train.add_argument("--seed", type=int, default=0)
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser(
        "eval", help="Table 4: Router+RM against single RMs, AvgRM and Random"
    )
    evaluate.add_argument("router", type=Path, help="router checkpoint directory")
    evaluate.add_argument("--data", type=Path, default=None,
                          help="benchmark directory (clients/<id>/eval, heldout/<category>)")
    evaluate.add_argument("--pairs", action="append", default=[], metavar="NAME=DIR",
                          help="eval pairs folder of the router's output NAME (a member's own "
                          "folder; repeat per member; replaces --data's clients/<id>/eval)")
    evaluate.add_argument("--heldout", action="append", default=[], metavar="CATEGORY=DIR",
                          help="pairs folder of a category no member holds (repeatable)")
    evaluate.add_argument("--models", type=Path,
                          help="directory with one reward-model checkpoint per client id")
    _encoder_option(evaluate)
    g = evaluate.add_argument_group("one member's view (instead of --models)")
    g.add_argument("--member", metavar="NAME",
                   help="your roster name (your router output); with --model and --pairs DIR")
    g.add_argument("--model", type=Path, metavar="CKPT", help="your reward-model checkpoint")
    g.add_argument("--base", type=Path, metavar="DIR",
                   help="the base VLM of a LoRA --model (default: the one it was trained on)")
    evaluate.set_defaults(handler=_eval)


def _add_published(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The server's published routers: ``pull`` (a member), ``show``, ``history``,
    ``lineages``, ``rollback`` and ``lineage`` (the operator)."""
    pull = commands.add_parser(
        "pull", help="download a published router version (sha256-checked) with the "
        "consortium's router configuration, as a router folder `router eval` reads")
    pull.add_argument("version", type=int, nargs="?", default=None,
                      help="the version (default: the newest)")
    pull.add_argument("--out", type=Path, required=True, help="router folder to write")
    pull.set_defaults(handler=published.pull)
    show = commands.add_parser("show", help="a published router version (default: "
                               "the newest)")
    show.add_argument("version", type=int, nargs="?", default=None)
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=published.show)
    history = commands.add_parser("history", help="every published router version, with its "
                                  "lineage and where it came from")
    history.add_argument("--json", action="store_true", help="print JSON")
    history.set_defaults(handler=published.history)
    lineages = commands.add_parser("lineages", help="every router lineage: configuration "
                                   "hash, members (heads), first and latest version")
    lineages.add_argument("--json", action="store_true", help="print JSON")
    lineages.set_defaults(handler=published.lineages)
    rollback = commands.add_parser("rollback", help="publish an earlier version "
                                   "again as the newest")
    rollback.add_argument("version", type=int, help="the version to restore")
    rollback.set_defaults(handler=published.rollback)
    lineage = commands.add_parser(
        "lineage", help="start a new router lineage on a router configuration (operator, "
        "signed; audited): rounds follow it from then on, older versions stay readable")
    lineage.add_argument("--config", type=Path, required=True, help="TOML/JSON file: the "
                         "router configuration, or the server settings whose [router] holds it")
    lineage.set_defaults(handler=published.lineage)
    for parser in (pull, show, history, lineages, rollback, lineage):
        add_connection_options(parser)


def _encoder_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--encoder-vlm", type=Path, metavar="DIR",
                        help="frozen VLM checkpoint as the encoder (default: the hashing encoder)")
    from sdk.runtime_options import add_runtime_arguments

    # Where the VLM encoder (and, for eval, the reward models) run, and in which dtype.
    add_runtime_arguments(parser)


def _encoder(args: argparse.Namespace) -> Encoder:
    from sdk.router._hashing_encoder import HashingEncoder

    if args.encoder_vlm is None:
        return HashingEncoder()
    from sdk.models import load_vlm
    from sdk.router._vlm_encoder import VLMEncoder
    from sdk.runtime_options import runtime_from_args

    bundle = load_vlm(args.encoder_vlm, runtime=runtime_from_args(args))
    return VLMEncoder(bundle.model, bundle.processor)


def _train(args: argparse.Namespace) -> int:
    from sdk.router._recipe import (
        default_federated_config,
        load_router_clients,
        train_federated_router,
    )

    encoder = _encoder(args)
    say(f"[router] encoding up to {args.pairs_per_client} pairs per client with "
        f"{encoder.encoder_id}")
    clients = load_router_clients(args.data, args.clients, encoder,
                                  pairs_per_client=args.pairs_per_client)
    router, stats = train_federated_router(
        clients, encoder, aggregation=args.aggregation, num_layers=args.layers, seed=args.seed,
        config=default_federated_config(seed=args.seed) if args.rounds is None
        else default_federated_config(args.rounds, args.seed),
        log=say,
    )
    router.save(args.out)
    (args.out / _ROUNDS_FILE).write_text(json.dumps([asdict(s) for s in stats], indent=2))
    print(json.dumps({"router": str(args.out), "clients": router.client_ids,
                      "params": router.num_params(), "rounds": len(stats),
                      "final_loss": round(stats[-1].mean_loss, 4),
                      "bytes_up": sum(s.bytes_up for s in stats)}))
    return 0


def _named_folders(values: list[str], option: str) -> dict[str, Path]:
    """``NAME=DIR`` options as a mapping; ``ValueError`` naming a malformed one."""
    out = {}
    for value in values:
        name, sep, folder = value.partition("=")
        if not sep or not name or not folder:
            raise ValueError(f"{option} takes NAME=DIR, got {value!r}")
        out[name] = Path(folder)
    return out


def _eval_folders(args: argparse.Namespace,
                  ids: list[str]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(eval folder per router output, folder per held-out category): the ``--pairs`` and
    ``--heldout`` options, else the benchmark layout under ``--data``."""
    from sdk.data import HELDOUT_CATEGORIES

    own, heldout = _named_folders(args.pairs, "--pairs"), _named_folders(args.heldout,
                                                                         "--heldout")
    if own:
        missing = [c for c in ids if c not in own]
        if missing:
            raise ValueError(f"--pairs names no folder for the router's output(s) "
                             f"{', '.join(missing)} (outputs: {', '.join(ids)})")
        return {c: own[c] for c in ids}, heldout
    if args.data is None:
        raise ValueError("give --pairs NAME=DIR per router output, or --data (a benchmark "
                         "directory)")
    data = args.data
    return ({c: data / "clients" / c / "eval" for c in ids},
            heldout or {h: data / "heldout" / h for h in HELDOUT_CATEGORIES
                        if (data / "heldout" / h).is_dir()})


def _eval(args: argparse.Namespace) -> int:
    from sdk.data import load_pairs
    from sdk.reward import RewardModel, ScoreNormalizer
    from sdk.router._evaluation import reward_scores, table4
    from sdk.router._model import Router
    from sdk.runtime_options import runtime_from_args

    if args.model is not None or args.member is not None:
        from sdk.router._member_cli import member_eval

        return member_eval(args, _encoder(args))
    if args.models is None:
        raise ValueError("give --models DIR (every member's reward model), or --member NAME "
                         "--model CKPT --pairs DIR (yours only)")
    encoder = _encoder(args)
    router = Router.load(args.router, encoder_id=encoder.encoder_id)
    ids = router.client_ids
    own, held = _eval_folders(args, ids)
    runtime = runtime_from_args(args)
    models = {c: RewardModel.from_pretrained(args.models / c, runtime=runtime).eval()
              for c in ids}
    normalizers = {c: ScoreNormalizer.load(args.models / c) for c in ids}
    id_splits = {c: load_pairs(folder) for c, folder in own.items()}
    heldout = {h: load_pairs(folder) for h, folder in held.items()}
    scores = {name: reward_scores(pairs, ids, models, normalizers)
              for name, pairs in [*id_splits.items(), *heldout.items()]}
    table = table4(router, encoder, id_splits, heldout, scores)
    print(table.format())
    print(json.dumps({"routing_accuracy": table.routing_accuracy, "accuracy": table.accuracy}))
    return 0

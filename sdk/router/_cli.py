"""``fedmor router ...``: simulate federated router training and evaluate a router (Table 4)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from sdk.progress import say

if TYPE_CHECKING:
    from sdk.router._encoder import Encoder

__all__ = ["register"]

_ROUNDS_FILE = "rounds.json"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``router`` group (``train``, ``eval``) to the ``fedmor`` parser."""
    group = sub.add_parser("router", help="stage B: the router (in-process federated simulation)")
    commands = group.add_subparsers(dest="router_command", metavar="COMMAND", required=True)

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
    evaluate.add_argument("--data", type=Path, required=True,
                          help="benchmark directory (clients/<id>/eval, heldout/<category>)")
    evaluate.add_argument("--models", type=Path, required=True,
                          help="directory with one reward-model checkpoint per client id")
    _encoder_option(evaluate)
    evaluate.set_defaults(handler=_eval)


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


def _eval(args: argparse.Namespace) -> int:
    from sdk.data import HELDOUT_CATEGORIES, load_pairs
    from sdk.reward import RewardModel, ScoreNormalizer
    from sdk.router._evaluation import reward_scores, table4
    from sdk.router._model import Router
    from sdk.runtime_options import runtime_from_args

    encoder = _encoder(args)
    router = Router.load(args.router, encoder_id=encoder.encoder_id)
    ids = router.client_ids
    runtime = runtime_from_args(args)
    models = {c: RewardModel.from_pretrained(args.models / c, runtime=runtime).eval()
              for c in ids}
    normalizers = {c: ScoreNormalizer.load(args.models / c) for c in ids}
    id_splits = {c: load_pairs(args.data / "clients" / c / "eval") for c in ids}
    heldout = {h: load_pairs(args.data / "heldout" / h) for h in HELDOUT_CATEGORIES
               if (args.data / "heldout" / h).is_dir()}
    scores = {name: reward_scores(pairs, ids, models, normalizers)
              for name, pairs in [*id_splits.items(), *heldout.items()]}
    table = table4(router, encoder, id_splits, heldout, scores)
    print(table.format())
    print(json.dumps({"routing_accuracy": table.routing_accuracy, "accuracy": table.accuracy}))
    return 0

"""``fedmor router eval --member`` (the router on one member's own pairs, with its own reward
model only), and the files ``fedmor router pull`` writes beside a pulled router."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sdk.router._encoder import Encoder

__all__ = ["CONSORTIUM_CONFIG_FILE", "VERSION_FILE", "member_eval"]

CONSORTIUM_CONFIG_FILE = "consortium_router.json"
"""The consortium's router configuration in a pulled router folder (its encoder, heads)."""
VERSION_FILE = "version.json"
"""The published version's metadata (version, round, sha256, lineage) in a pulled folder."""


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

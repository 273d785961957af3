"""The demo's stage B: the router trained over REST under secure aggregation, then scored."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from sdk._demo_config import DemoConfig, say

__all__ = ["router_spec", "stage_b"]


def router_spec(config: DemoConfig, run_dir: Path, sites: list[str]) -> Any:
    """What each client process needs for its local router updates (``RouterUpdateSpec``)."""
    from sdk.router import (
        HashingEncoderConfig,
        RouterConfig,
        RouterUpdateSpec,
        SiteData,
        default_federated_config,
    )

    encoder = HashingEncoderConfig()
    federated = default_federated_config(rounds=config.router_rounds, seed=config.seed)
    return RouterUpdateSpec(
        encoder=encoder,
        router=RouterConfig(input_dim=encoder.dim, d_model=config.router_d_model,
                            num_layers=config.router_layers, num_heads=4,
                            dim_feedforward=2 * config.router_d_model, seed=config.seed),
        client_ids=list(config.clients),
        federated=federated.model_copy(
            update={"local": federated.local.model_copy(update={"epochs": config.router_epochs})}),
        max_pairs=config.router_max_pairs,
        sites={s: SiteData(index=k, pairs_dir=run_dir / "data" / "clients" / c / "train")
               for k, (s, c) in enumerate(zip(sites, config.clients, strict=True))},
    )


def _round_bytes(db_path: str, round_ids: list[int], vector_length: int,
                 n_clients: int) -> dict[str, int]:
    """JSON bytes of the round messages the server stored (up: clients' stage messages; down:
    stage broadcasts) plus the float32 base-router downloads; HTTP headers excluded."""
    marks = ",".join("?" * len(round_ids))
    with sqlite3.connect(db_path) as db:
        up = db.execute(f"SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM stage_messages "
                        f"WHERE round_id IN ({marks})", round_ids).fetchone()[0]
        down = db.execute(f"SELECT COALESCE(SUM(LENGTH(broadcast)), 0) FROM stage_closures "
                          f"WHERE round_id IN ({marks})", round_ids).fetchone()[0]
    downloads = 4 * vector_length * n_clients * len(round_ids)  # every round has a base
    return {"uplink": int(up), "downlink": int(down) + downloads}


def _routing_accuracy(router: Any, encoder: Any, splits: dict[str, Any]) -> float:
    """Fraction of the clients' eval responses the router sends to their own client."""
    from sdk.router import route_pairs

    hits = total = 0
    for k, pairs in enumerate(splits.values()):
        routes = route_pairs(pairs, router, encoder)  # (n, 2)
        hits, total = hits + int((routes == k).sum()), total + routes.size
    return hits / total


def stage_b(config: DemoConfig, consortium: Any, spec: Any, trained: dict[str, Any],
             splits: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    import numpy as np

    from sdk.data import HELDOUT_CATEGORIES
    from sdk.reward import ScoreNormalizer
    from sdk.router import HashingEncoder, reward_scores, table4
    from sdk.wire import ROUTER_ROUND_PARAM as ROUND_PARAM

    router = spec.build_router()
    length = router.num_params()
    max_weight = max(1000, config.router_max_pairs)
    encoder = HashingEncoder(spec.encoder)
    rounds: list[dict[str, Any]] = []
    # The seeded initial router is the federation's version 1, so every round sums deltas from
    # a published base and the default clip range holds them (raw parameters, LayerNorm gains
    # ~1, would not fit it).
    consortium.publish_router(router.get_flat_params())
    for r in range(config.router_rounds):
        t = time.perf_counter()
        info = consortium.create_round(
            kind="router_secagg", vector_length=length, min_clients=len(config.clients),
            stage_deadline_s=config.stage_deadline_s,
            params={"max_weight": max_weight, ROUND_PARAM: r})
        done = consortium.wait_round(info["round_id"], timeout_s=6 * config.stage_deadline_s)
        if done["status"] != "finished":
            raise RuntimeError(f"router round {info['round_id']} failed: {done['error']}")
        wall = round(time.perf_counter() - t, 1)
        # The published router, downloaded as any member would, then scored on the eval pairs.
        blob = consortium.admin.get(f"/v1/router/{done['router_version']}")
        blob.raise_for_status()
        router.set_flat_params(np.frombuffer(blob.content, dtype="<f4").copy())
        accuracy = _routing_accuracy(router, encoder, {c: splits[c] for c in config.clients})
        rounds.append({"round_id": done["round_id"], "router_version": done["router_version"],
                       "dropouts": done["dropouts"], "wall_s": wall,
                       "routing_accuracy": accuracy})
        say(f"stage B: secure round {r + 1}/{config.router_rounds} finished in {wall} s "
            f"(router version {done['router_version']}, routing accuracy {accuracy:.3f})")

    normalizers = {c: ScoreNormalizer.load(t.checkpoint) for c, t in trained.items()}
    scores = {name: reward_scores(pairs, config.clients, {c: t.model for c, t in trained.items()},
                                  normalizers) for name, pairs in splits.items()}
    table = table4(router, encoder, {c: splits[c] for c in config.clients},
                   {h: splits[h] for h in HELDOUT_CATEGORIES}, scores)
    say("stage B: pairwise accuracy on the eval pairs by reward-selection method (Table 4)")
    print(table.format(), flush=True)
    metrics = {
        "encoder": "HashingEncoder", "encoder_id": encoder.encoder_id,
        "router_params": length, "rounds": rounds,
        "routing_accuracy": table.routing_accuracy, "table4": table.accuracy,
        "id_avg": {m: table.id_avg(m) for m in table.accuracy},
        "heldout_avg": {m: table.heldout_avg(m) for m in table.accuracy},
        "bytes": _round_bytes(consortium.server_cfg["db_path"],
                              [r["round_id"] for r in rounds], length, len(config.clients)),
    }
    return router, metrics

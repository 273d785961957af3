"""The demo's stage B: the router trained over REST under secure aggregation, then scored."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from fedmor_local._demo_config import DemoConfig, say

__all__ = ["dp_options", "member_router_training", "round_params", "router_config",
           "router_spec", "site_policy", "stage_b", "train_router"]

_DP_DELTA = 1e-5


def dp_options(args: Any) -> dict[str, Any]:
    """The ``DemoConfig`` fields of ``fedmor demo --dp [--dp-epsilon E]`` (parsed arguments)."""
    return {"dp": args.dp, "dp_epsilon": args.dp_epsilon}


def _dp_params(config: DemoConfig) -> dict[str, Any]:
    """``dp`` and ``clip_range`` of a DP round: the noise multiplier that reaches
    ``dp_epsilon`` after ``router_rounds`` rounds, resolved once here (opacus' search is slow,
    and the server and every member would otherwise repeat it at each check)."""
    from sdk.secagg import DPConfig, dp_clip_range

    target = DPConfig(clip_norm=config.dp_clip_norm, target_epsilon=config.dp_epsilon,
                      delta=_DP_DELTA, rounds=config.router_rounds)
    dp = target.model_copy(update={"noise_multiplier": target.resolved_noise_multiplier(),
                                   "target_epsilon": None})
    # Each member's noised coordinates must fit the quantization (the server refuses the round
    # otherwise); every member is a survivor the noise is calibrated for.
    need = dp_clip_range(dp, min_survivors=len(config.clients))
    return {"dp": dp.model_dump(exclude={"target_epsilon", "sample_rate"}),
            "clip_range": round(1.01 * need, 3)}


def round_params(config: DemoConfig, index: int, max_weight: int) -> dict[str, Any]:
    """``params`` of stage B's router round ``index``: update weights n_k up to
    ``max_weight``, or under DP uniform weights with clipping and noise."""
    from sdk.wire import ROUTER_ROUND_PARAM

    if config.dp:
        return {**_dp_params(config), ROUTER_ROUND_PARAM: index}
    return {"max_weight": max_weight, ROUTER_ROUND_PARAM: index}


def site_policy(config: DemoConfig) -> dict[str, Any]:
    """The demo members' site policy. Secure rounds of as few as two synthetic sites (each
    could learn the other's update from the sum) are allowed here explicitly, refused by a
    site's default policy; under ``--dp`` every member requires DP and holds the epsilon
    budget of the demo's rounds; under ``--capture`` they agree to be captured."""
    policy: dict[str, Any] = {"min_participants": 2, "min_threshold": 2,
                              "allow_captured_rounds": config.capture}
    if config.dp:
        # A hair above the target: the accountant's epsilon for the resolved noise lies just
        # under it, and the last round must not be refused by float rounding.
        policy |= {"require_dp": True, "max_epsilon": config.dp_epsilon * 1.001,
                   "epsilon_delta": _DP_DELTA}
    return policy


def router_config(config: DemoConfig, sites: list[str]) -> Any:
    """The consortium's router configuration the demo's server declares (``[router]``): the
    hashing encoder, the demo's router, one head per site in roster order, the schedule."""
    from sdk.router import HashingEncoderConfig, RouterConfig, default_federated_config
    from sdk.wire import ConsortiumRouterConfig

    encoder = HashingEncoderConfig()
    federated = default_federated_config(rounds=config.router_rounds, seed=config.seed)
    return ConsortiumRouterConfig(
        encoder=encoder,
        router=RouterConfig(input_dim=encoder.dim, d_model=config.router_d_model,
                            num_layers=config.router_layers, num_heads=4,
                            dim_feedforward=2 * config.router_d_model, seed=config.seed),
        heads=list(sites),
        federated=federated.model_copy(
            update={"local": federated.local.model_copy(update={"epochs": config.router_epochs})}),
        max_pairs=config.router_max_pairs,
    )


def _pairs_dir(run_dir: Path, client: str) -> Path:
    return run_dir / "data" / "clients" / client / "train"


def member_router_training(run_dir: Path, client: str) -> dict[str, Any]:
    """The ``[router_training]`` of the site holding ``client``'s data: its own training and
    eval pairs (all a member configures; the rest comes from the server's configuration)."""
    return {"pairs_dir": str(_pairs_dir(run_dir, client)),
            "eval_pairs_dir": str(run_dir / "data" / "clients" / client / "eval")}


def router_spec(config: DemoConfig, run_dir: Path, router: Any) -> Any:
    """The run's record of stage B for an audit's replay (``router/spec.json``, read by
    ``fedmor audit --run``): ``router`` (the declared configuration) with its heads named by
    the clients' categories, as the audit reports them, and each site's pairs."""
    from sdk.router import RouterUpdateSpec, SiteData

    return RouterUpdateSpec(
        encoder=router.encoder, router=router.router, client_ids=list(config.clients),
        federated=router.federated, max_pairs=router.max_pairs,
        sites={s: SiteData(index=k, pairs_dir=_pairs_dir(run_dir, c))
               for k, (s, c) in enumerate(zip(router.heads, config.clients, strict=True))})


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


def _dp_summary(config: DemoConfig, consortium: Any,
                rounds: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The epsilon spent, as the server recorded it and as one member's own ledger counted it
    (the demo runs the whole consortium, so it may read that member's store)."""
    if not config.dp:
        return None
    site = consortium.names[0]
    with sqlite3.connect(consortium.client_cfg[site]["db_path"]) as db:
        row = db.execute("SELECT epsilon FROM dp_ledger ORDER BY at DESC LIMIT 1").fetchone()
    member = None if row is None else float(row[0])
    summary = {"target_epsilon": config.dp_epsilon, "delta": _DP_DELTA,
               "clip_norm": config.dp_clip_norm,
               "noise_multiplier": _dp_params(config)["dp"]["noise_multiplier"],
               "epsilon_server": rounds[-1]["epsilon"],
               "epsilon_member": member, "member": site}
    say(f"stage B: DP spent epsilon {summary['epsilon_server']:.3f} at delta {_DP_DELTA:g} "
        f"(server's record; {site}'s own ledger: "
        f"{'no entry' if member is None else f'{member:.3f}'}) for a "
        f"target of {config.dp_epsilon:g}, noise multiplier "
        f"{summary['noise_multiplier']:.3f}, clip norm {config.dp_clip_norm:g}")
    return summary


def _routing_accuracy(router: Any, encoder: Any, splits: dict[str, Any]) -> float:
    """Fraction of the clients' eval responses the router sends to their own client."""
    from sdk.router import route_pairs

    hits = total = 0
    for k, pairs in enumerate(splits.values()):
        routes = route_pairs(pairs, router, encoder)  # (n, 2)
        hits, total = hits + int((routes == k).sum()), total + routes.size
    return hits / total


def train_router(config: DemoConfig, consortium: Any, declared: Any,
                 splits: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
    """Stage B's secure rounds over REST from the seeded router of the ``declared`` router
    configuration; returns the final router and one record per round (its routing accuracy
    on the clients' eval ``splits``)."""
    import numpy as np

    from sdk.router import HashingEncoder, Router

    encoder = HashingEncoder(declared.encoder)
    # Head k is site k, which holds client k's data: the demo names the heads by the clients'
    # categories, as its Table 4 and the saved router do (the parameters are the same).
    router = Router(declared.router, list(config.clients), encoder.encoder_id)
    max_weight = max(1000, config.router_max_pairs)
    rounds: list[dict[str, Any]] = []
    # The seeded initial router is the federation's version 1, so every round sums deltas from
    # a published base and the default clip range holds them (raw parameters, LayerNorm gains
    # ~1, would not fit it).
    consortium.publish_router(router.get_flat_params())
    for r in range(config.router_rounds):
        t = time.perf_counter()
        # No length: the server takes it from its [router] (the configuration's).
        info = consortium.create_round(
            kind="router_secagg", min_clients=len(config.clients),
            stage_deadline_s=config.stage_deadline_s,
            params=round_params(config, r, max_weight))
        done = consortium.wait_round(info["round_id"], timeout_s=6 * config.stage_deadline_s)
        if done["status"] != "finished":
            raise RuntimeError(f"router round {info['round_id']} failed: {done['error']}")
        wall = round(time.perf_counter() - t, 1)
        # The published router, downloaded as any member would, then scored on the eval pairs.
        blob = consortium.ops.download(f"/v1/router/{done['router_version']}")
        router.set_flat_params(np.frombuffer(blob.content, dtype="<f4").copy())
        accuracy = _routing_accuracy(router, encoder, {c: splits[c] for c in config.clients})
        epsilon = None if done.get("dp") is None else done["dp"]["epsilon_total"]
        rounds.append({"round_id": done["round_id"], "router_version": done["router_version"],
                       "dropouts": done["dropouts"], "wall_s": wall,
                       "routing_accuracy": accuracy, "epsilon": epsilon})
        say(f"stage B: secure round {r + 1}/{config.router_rounds} finished in {wall} s "
            f"(router version {done['router_version']}, routing accuracy {accuracy:.3f}"
            + ("" if epsilon is None else f", epsilon {epsilon:.3f}") + ")")
    return router, rounds


def stage_b(config: DemoConfig, consortium: Any, declared: Any, trained: dict[str, Any],
            splits: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """:func:`train_router`, then the Table-4 comparison with the clients' reward models."""
    from sdk.data import HELDOUT_CATEGORIES
    from sdk.reward import ScoreNormalizer
    from sdk.router import HashingEncoder, reward_scores, table4

    router, rounds = train_router(config, consortium, declared, splits)
    length = router.num_params()
    encoder = HashingEncoder(declared.encoder)
    normalizers = {c: ScoreNormalizer.load(t.checkpoint) for c, t in trained.items()}
    scores = {name: reward_scores(pairs, config.clients, {c: t.model for c, t in trained.items()},
                                  normalizers) for name, pairs in splits.items()}
    table = table4(router, encoder, {c: splits[c] for c in config.clients},
                   {h: splits[h] for h in HELDOUT_CATEGORIES}, scores)
    say("stage B: pairwise accuracy on the eval pairs by reward-selection method (Table 4)")
    print(table.format(), flush=True)
    metrics = {
        "encoder": "HashingEncoder", "encoder_id": encoder.encoder_id,
        "router_params": length, "router_config_sha256": declared.sha256, "rounds": rounds,
        "routing_accuracy": table.routing_accuracy, "table4": table.accuracy,
        "id_avg": {m: table.id_avg(m) for m in table.accuracy},
        "heldout_avg": {m: table.heldout_avg(m) for m in table.accuracy},
        "dp": _dp_summary(config, consortium, rounds),
        "bytes": _round_bytes(consortium.server_cfg["db_path"],
                              [r["round_id"] for r in rounds], length, len(config.clients)),
    }
    return router, metrics

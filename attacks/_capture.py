"""Producing captured router updates with the sdk's own code paths (for audits and tests).

:func:`capture_round` trains each client's router with ``sdk.router.train_router_locally`` (the
client app's code path) or takes one FedSGD gradient, and keeps what the server would see:
one client's phi_k without secure aggregation (an ``rm_fedavg`` round), or the weighted mean a
``router_secagg`` round reveals, both run by the consortium's own round kinds in memory
(``sdk.rounds.run_in_memory``: the same delta arithmetic, weight rule and DP rule). :func:`capture_run_dir` replays round 1 of a demo run from its
``router/spec.json`` and the clients' data, so an audit of a run directory needs no change to
how the demo runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from attacks._captured import CapturedRouterUpdate, CaptureMeta
from attacks._errors import AttackInputError

if TYPE_CHECKING:  # sdk.router imports transformers: only when a capture runs
    from sdk.router import EncodedBatch, LocalTrainingConfig, Router
    from sdk.secagg import ClientMessage, DPConfig

__all__ = ["capture_round", "capture_run_dir", "pooled_embeddings", "round_mean"]


def round_mean(
    deltas: Sequence[np.ndarray],
    sizes: Sequence[int],
    *,
    kind: Literal["rm_fedavg", "router_secagg"],
    rng: np.random.Generator,
    dp: DPConfig | None = None,
    client_ids: Sequence[str] | None = None,
    on_message: Callable[[Any], None] | None = None,
) -> np.ndarray:
    """The weighted mean (P,) float32 of the members' ``deltas`` (P,) that a round of ``kind``
    shows the server, run in memory by the consortium's round kind itself
    (``sdk.rounds.run_in_memory``): member k weighs ``sizes[k]``, or 1 under ``dp`` (the
    kind's DP rule, which also clips and noises each delta). ``client_ids`` name the members
    in protocol order (default ``client-0``...); ``on_message`` sees each message the server
    receives."""
    from sdk.rounds import ROUND_KINDS, UpdateRejected, memory_spec, run_in_memory
    from sdk.secagg import dp_clip_range
    from sdk.wire import generate_key

    ids = list(client_ids or [f"client-{k}" for k in range(len(deltas))])
    if len(ids) != len(deltas) or len(set(ids)) != len(ids) or len(sizes) != len(deltas):
        raise AttackInputError("give one distinct client id and one size per update")
    params: dict[str, object] = {}
    if kind == "router_secagg":
        params["graph_seed"] = rng.bytes(32).hex()
        if dp is not None:  # a clip range that holds every member's noised coordinates
            params |= {"dp": dp.model_dump(mode="json"),
                       "clip_range": max(1.0, dp_clip_range(dp, min_survivors=1))}
    elif dp is not None:
        raise AttackInputError("an rm_fedavg round has no DP: noise the delta before")
    keys = {c: generate_key() for c in ids}
    spec = memory_spec(kind, keys, int(deltas[0].shape[0]), params)
    try:
        res = run_in_memory(
            ROUND_KINDS[kind], spec, keys,
            {c: (d, n) for c, d, n in zip(ids, deltas, sizes, strict=True)}, None,
            rngs={c: np.random.default_rng(rng.integers(2**63)) for c in ids},
            on_message=None if on_message is None else lambda _cid, msg: on_message(msg),
        )
    except UpdateRejected as exc:
        raise AttackInputError(f"the {kind} round refused an update: {exc}") from exc
    if res.params is None:
        raise AttackInputError(f"the {kind} round failed: {res.failed}")
    return res.params


def pooled_embeddings(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A sample's embedding as the router's first layer sees it on average: the mean of its
    real tokens, (B, T, D) -> (B, D)."""
    w = mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1.0)


def _pad(batches: Sequence[EncodedBatch], length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for b in batches:
        hidden, mask = b.hidden, b.mask
        extra = length - hidden.shape[1]
        out.append(
            (
                torch.nn.functional.pad(hidden, (0, 0, 0, extra)),
                torch.nn.functional.pad(mask, (0, extra), value=False),
            )
        )
    return out


def capture_round(
    router: Router,
    client_batches: Sequence[EncodedBatch],
    client_indices: Sequence[int],
    *,
    setting: Literal["plaintext", "aggregate"],
    local: LocalTrainingConfig | Sequence[LocalTrainingConfig] | None = None,
    update: Literal["gradient", "parameters"] = "parameters",
    pool: EncodedBatch | None = None,
    description: str = "",
    dp: DPConfig | None = None,
    seed: int = 0,
    on_message: Callable[[ClientMessage], None] | None = None,
) -> CapturedRouterUpdate:
    """One round as the server sees it. ``client_batches`` are sdk.router ``EncodedBatch``es
    (one per client, rows = encoded responses); ``local`` a ``LocalTrainingConfig`` (or one
    per client) for ``update="parameters"``. ``plaintext`` needs exactly one client. With
    ``dp`` each client clips its delta and adds its share of the noise: in an aggregate as the
    ``router_secagg`` kind's DP rule does (uniform weights, noise for the threshold's
    survivors), in plaintext as its only survivor. ``on_message`` sees every SecAgg message the
    server receives (attacks._capture_dir records them); its members are the router's
    ``client_ids`` at ``client_indices``, protocol ids 1..N in that order."""
    from sdk.rounds import as_delta, from_delta
    from sdk.router import LocalTrainingConfig, train_router_locally
    from sdk.secagg import clip_and_noise

    if len(client_batches) != len(client_indices) or not client_batches:
        raise AttackInputError("give one batch per client index, at least one")
    if setting == "plaintext" and len(client_batches) != 1:
        raise AttackInputError("a plaintext capture is one client's update")
    configs = list(local) if isinstance(local, Sequence) else [local or LocalTrainingConfig()]
    if len(configs) == 1:
        configs *= len(client_batches)
    if len(configs) != len(client_batches):
        raise AttackInputError(f"{len(configs)} local configs for {len(client_batches)} clients")
    before = router.get_flat_params()
    tokens = max(int(b.hidden.shape[1]) for b in client_batches)
    padded = _pad(client_batches, tokens)
    phis: list[np.ndarray] = []
    for (hidden, mask), k, cfg in zip(padded, client_indices, configs, strict=True):
        if update == "parameters":
            phis.append(train_router_locally(router, (hidden, mask), k, cfg).params)
        else:
            phis.append(before - _gradient(router, hidden, mask, k))
    sizes = [int(h.shape[0]) for h, _ in padded]
    rng = np.random.default_rng(seed)
    deltas = [as_delta(p, before) for p in phis]
    if setting == "plaintext":
        if dp is not None:  # the member's own clip and noise, as the only survivor
            deltas = [clip_and_noise(deltas[0], dp, min_survivors=1, max_weight=1, rng=rng)]
        mean = round_mean(deltas, sizes, kind="rm_fedavg", rng=rng)
    else:
        names = [router.client_ids[k] for k in client_indices]
        mean = round_mean(deltas, sizes, kind="router_secagg", rng=rng, dp=dp,
                          client_ids=names, on_message=on_message)
    after = from_delta(mean, before)
    truth = torch.cat([pooled_embeddings(h, m) for h, m in padded])
    steps = 1 if update == "gradient" else cfg.epochs * -(-max(sizes) // cfg.batch_size)
    meta = CaptureMeta(
        setting=setting,
        description=description,
        router=router.config.model_dump(),
        client_ids=list(router.client_ids),
        encoder_id=router.encoder_id,
        client_indices=list(client_indices),
        samples_per_client=sizes,
        update=update,
        local_optimizer="none (one gradient, FedSGD)"
        if update == "gradient"
        else f"AdamW lr={cfg.lr} batch={cfg.batch_size} epochs={cfg.epochs}",
        local_steps=steps,
        tokens=tokens,
    )
    return CapturedRouterUpdate(
        meta,
        _unflat(router, before),
        _unflat(router, after),
        truth,
        None if pool is None else pooled_embeddings(pool.hidden, pool.mask),
    )


def _gradient(router: Router, hidden: torch.Tensor, mask: torch.Tensor, k: int) -> np.ndarray:
    """One client's full-batch BCE gradient against e_k, flat in ``parameters()`` order."""
    target = torch.zeros(router.num_clients)
    target[k] = 1.0
    logits = router(hidden, mask)  # (B, K)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target.expand_as(logits))
    grads = torch.autograd.grad(loss, list(router.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]).numpy().astype(np.float32)


def _unflat(router: torch.nn.Module, flat: np.ndarray) -> dict[str, torch.Tensor]:
    out, offset = {}, 0
    for name, p in router.named_parameters():
        out[name] = torch.from_numpy(flat[offset : offset + p.numel()].copy()).reshape(p.shape)
        offset += p.numel()
    return out


def capture_run_dir(
    run_dir: str | Path, out_dir: str | Path, *, round_id: int = 1, pool_pairs: int = 64
) -> list[Path]:
    """Replay round ``round_id`` of a demo run (``router/spec.json``, the clients' train pairs)
    and write two captures into ``out_dir``: ``plaintext-<client>.safetensors`` (what the
    first client would send with secure aggregation off) and ``secagg-round<r>.safetensors``
    (the aggregate the server publishes). Round 1 starts from the seeded initial router, so no
    server state is needed. The baseline pool comes from the clients' eval pairs."""
    from sdk.data import load_pairs
    from sdk.router import HashingEncoder, RouterUpdateSpec, concat_batches, encode_pairs

    root = Path(run_dir)
    spec_path = root / "router" / "spec.json"
    if not spec_path.is_file():
        raise AttackInputError(f"{root} has no router/spec.json: no router round to capture")
    spec = RouterUpdateSpec.model_validate(json.loads(spec_path.read_text()))
    encoder = HashingEncoder(spec.encoder)
    router = spec.build_router()
    sites = sorted(spec.sites.values(), key=lambda s: s.index)
    if not sites:
        raise AttackInputError(f"{spec_path} names no sites")
    batches = [
        encode_pairs(encoder, load_pairs(_local(root, s.pairs_dir))[: spec.max_pairs])
        for s in sites
    ]
    evals = [p for s in sites for p in load_pairs(_local(root, s.pairs_dir).parent / "eval")]
    rng = np.random.default_rng(round_id)
    picked = [evals[int(i)] for i in rng.choice(len(evals), min(pool_pairs, len(evals)), False)]
    pool = concat_batches([encode_pairs(encoder, picked)])
    # Round ``round_id`` of a fresh demo server is the federation's round ``round_id - 1``.
    local = [spec.local_config(round_id - 1, s.index) for s in sites]
    out = Path(out_dir)
    first = spec.client_ids[sites[0].index]
    plain = capture_round(
        router,
        batches[:1],
        [sites[0].index],
        setting="plaintext",
        local=local[:1],
        pool=pool,
        seed=round_id,
        description=f"round {round_id}: client {first}'s phi_k, "
        "as sent with secure aggregation off",
    )
    agg = capture_round(
        router,
        batches,
        [s.index for s in sites],
        setting="aggregate",
        local=local,
        pool=pool,
        seed=round_id,
        description=f"round {round_id}: the secure aggregate of {len(sites)} clients",
    )
    return [
        plain.save(out / f"plaintext-{first}.safetensors"),
        agg.save(out / f"secagg-round{round_id}.safetensors"),
    ]


def _local(root: Path, pairs_dir: Path) -> Path:
    """A spec's pairs path, or the same path under ``root`` when the run directory moved."""
    if pairs_dir.is_dir():
        return pairs_dir
    parts = pairs_dir.parts
    if "data" in parts:
        moved = root.joinpath(*parts[parts.index("data") :])
        if moved.is_dir():
            return moved
    raise AttackInputError(f"pairs directory {pairs_dir} not found (run dir {root})")

"""Secure aggregation benchmark: fedmor's SecAgg+ against Flower 1.42's SecAgg+, same inputs.

For each (N clients, P parameters, dropout fraction) both implementations run one round with
the complete neighbour graph (Bonawitz; Flower ``num_shares = N``), threshold N//2 + 1, clip
range 1, max weight 1000, client weights drawn from [1, 1000] and updates uniform in [-1, 1]
regenerated from the same seeds in both interpreters. Dropouts happen after key sharing (the
costly case: the server must rebuild the dropped clients' mask keys).

Timed steps, like for like:
- client masking: one client's stage-2 handler (decrypt received shares, quantize, add the
  self mask and all pairwise masks). Ours: ``SecAggClient.receive(MaskedInputRequest)``;
  Flower: ``secaggplus_mod._collect_masked_vectors``.
- server unmasking: summing the masked vectors plus removing the masks (Shamir reconstruction,
  PRG, dequantization). Ours: ``SecAggServer.close_stage()`` of the Unmasking stage; Flower:
  its ``collect_masked_vectors_stage`` summation plus the body of ``unmask_stage`` (the same
  flwr functions in the same order, without the message transport).

Flower cannot be installed beside fedmor's pinned packages, so its part runs in ``.venv-bench``
(flwr==1.42.0 + numpy) through this same file: ``--flower-worker '<json spec>'``.
``--scale`` instead runs N = 200 and 1000 at the default (sparse) degree and reports the CPU
of the consistency check and unmasking stages and the bytes of the unmasking requests.
Usage: ``.venv/bin/python examples/benchmarks/secagg.py [--quick | --scale]``; the last stdout
line is JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BENCH_PY = ROOT / ".venv-bench" / "bin" / "python"
CLIP, MAX_WEIGHT = 1.0, 1000


def _update(seed: int, k: int, p: int) -> np.ndarray:
    return np.random.default_rng([seed, k]).uniform(-1, 1, p).astype(np.float32)


def _weights(seed: int, n: int) -> list[int]:
    return [int(w) for w in np.random.default_rng([seed, 10**6]).integers(1, MAX_WEIGHT + 1, n)]


def _dropped(seed: int, n: int, frac: float) -> set[int]:
    k = round(frac * n)
    return {int(x) for x in np.random.default_rng([seed, 10**7]).permutation(n)[:k]}


def _reference(spec: dict[str, Any], survivors: list[int]) -> np.ndarray:
    w = _weights(spec["seed"], spec["n"])
    acc = np.zeros(spec["p"])
    for k in survivors:
        acc += w[k] * _update(spec["seed"], k, spec["p"]).astype(np.float64)
    return acc / sum(w[k] for k in survivors)


# ---- fedmor ---------------------------------------------------------------------------------
def run_ours(spec: dict[str, Any]) -> dict[str, Any]:
    from sdk.secagg import (
        MaskedInput,
        SecAggClient,
        SecAggConfig,
        SecAggServer,
        Stage,
        generate_identities,
    )

    n, p, seed = spec["n"], spec["p"], spec["seed"]
    weights, dropped = _weights(seed, n), _dropped(seed, n, spec["drop"])
    keys, roster = generate_identities(range(n))
    cfg = SecAggConfig(degree=n - 1, threshold=n // 2 + 1, clip_range=CLIP, max_weight=MAX_WEIGHT)
    server = SecAggServer(cfg.round_params(list(range(n)), p, round_id=f"bench-{seed}"), roster)
    updates = {k: _update(seed, k, p) for k in range(n)}
    clients = {k: SecAggClient(k, keys[k], roster, updates[k], weights[k], rng=np.random.default_rng([seed, k, 1])) for k in range(n)}
    outbox = server.start()
    mask_times: list[float] = []
    wire_bytes = 0
    unmask_s = 0.0
    while server.result is None:
        stage = server.stage
        for k, msg in outbox.items():
            if stage is Stage.MASKED_INPUT_COLLECTION and k in dropped:
                continue
            t0 = time.perf_counter()
            reply = clients[k].receive(msg)
            if stage is Stage.MASKED_INPUT_COLLECTION:
                mask_times.append(time.perf_counter() - t0)
                assert isinstance(reply, MaskedInput)
                wire_bytes = len(reply.to_bytes())
            server.receive(reply)
        t0 = time.perf_counter()
        outbox = server.close_stage()
        if stage is Stage.UNMASKING:
            unmask_s = time.perf_counter() - t0
    res = server.result
    err = float(np.max(np.abs(res.mean - _reference(spec, res.survivors))))
    # Plain float32 summation of the same survivors' updates: the no-privacy baseline.
    ups = [updates[k] for k in res.survivors]
    t0 = time.perf_counter()
    acc = np.zeros(p, dtype=np.float32)
    for u in ups:
        np.add(acc, u, out=acc)
    plain_s = time.perf_counter() - t0
    return {
        "client_mask_s": float(np.mean(mask_times)),
        "server_unmask_s": unmask_s,
        "bytes_per_element": wire_bytes / p,
        "max_abs_error": err,
        "plain_sum_s": plain_s,
        "survivors": len(res.survivors),
        "scale_bits": server.params.quantization.scale_bits,
    }


def run_scale(n: int, p: int, seed: int) -> dict[str, Any]:
    """One round at the default (sparse SecAgg+) degree and threshold: the CPU of the last two
    stages, the consistency check and the unmasking, which grow with N and the degree."""
    from sdk.secagg import SecAggClient, SecAggConfig, SecAggServer, Stage, generate_identities

    weights = _weights(seed, n)
    keys, roster = generate_identities(range(n))
    cfg = SecAggConfig(clip_range=CLIP, max_weight=MAX_WEIGHT)
    server = SecAggServer(cfg.round_params(list(range(n)), p, round_id=f"scale-{seed}"), roster)
    clients = {k: SecAggClient(k, keys[k], roster, _update(seed, k, p), weights[k], rng=np.random.default_rng([seed, k, 1])) for k in range(n)}
    outbox = server.start()
    cpu = {"server_s": 0.0, "clients_s": 0.0}
    late = (Stage.CONSISTENCY_CHECK, Stage.UNMASKING)
    request_bytes = 0
    t_wall = 0.0
    while server.result is None:
        stage = server.stage
        t0 = time.perf_counter()
        for k, msg in outbox.items():
            c0 = time.process_time()
            if stage is Stage.UNMASKING:  # the server encodes each request as the rounds' wire does
                request_bytes += len(json.dumps(msg.model_dump(mode="json")))
                cpu["server_s"] += time.process_time() - c0
            c0 = time.process_time()
            reply = clients[k].receive(msg)
            c1 = time.process_time()
            server.receive(reply)
            c2 = time.process_time()
            if stage in late:
                cpu["clients_s"] += c1 - c0
                cpu["server_s"] += c2 - c1
        c0 = time.process_time()
        outbox = server.close_stage()
        if stage in late:
            cpu["server_s"] += time.process_time() - c0
            t_wall += time.perf_counter() - t0
    res = server.result
    err = float(np.max(np.abs(res.mean - _reference({"n": n, "p": p, "seed": seed}, res.survivors))))
    return {"n": n, "p": p, "degree": server.params.degree, "threshold": server.params.threshold, **cpu,
            "unmasking_request_bytes": request_bytes, "late_stages_wall_s": t_wall, "max_abs_error": err}


def run_ckks(p: int, n: int, seed: int) -> dict[str, Any]:
    from sdk.secagg import CKKSAggregator, CKKSContext

    keyholder = CKKSContext.generate()
    server_ctx = CKKSContext.load(keyholder.public_bytes())
    weights = _weights(seed, n)
    agg = CKKSAggregator(server_ctx, round_id="ckks")
    enc_s, add_s, nbytes = [], 0.0, 0
    for k in range(n):
        t0 = time.perf_counter()
        upd = keyholder.encrypt(_update(seed, k, p), weights[k], round_id="ckks", sender=k)
        enc_s.append(time.perf_counter() - t0)
        nbytes = upd.nbytes()
        t0 = time.perf_counter()
        agg.add(upd)
        add_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    mean, _ = keyholder.decrypt_mean(agg.aggregate())
    dec_s = time.perf_counter() - t0
    err = float(np.max(np.abs(mean - _reference({"n": n, "p": p, "seed": seed}, list(range(n))))))
    return {"n": n, "p": p, "bytes_per_element": nbytes / p, "encrypt_s": float(np.mean(enc_s)), "server_add_s_per_client": add_s / n, "decrypt_s": dec_s, "max_abs_error": err}


# ---- Flower (runs inside .venv-bench) -------------------------------------------------------
def _flower_key_stages(mod: Any, key: Any, setup: dict[str, Any], nid: dict[int, int]
                       ) -> tuple[dict[int, Any], dict[int, tuple[bytes, bytes]],
                                  dict[int, tuple[list[int], list[bytes]]]]:
    """Flower's setup and share-keys stages over a complete graph: each member's state, its
    two public keys, and the ciphertexts forwarded to each node (with their senders)."""
    states = {k: mod.SecAggPlusState(nid=i) for k, i in nid.items()}
    pks = {}
    for k, st in states.items():
        out = mod._setup(st, setup)
        pks[nid[k]] = (out[key.PUBLIC_KEY_1], out[key.PUBLIC_KEY_2])
    fwd: dict[int, tuple[list[int], list[bytes]]] = {i: ([], []) for i in nid.values()}
    for k, st in states.items():
        out = mod._share_keys(st, {str(i): pk for i, pk in pks.items()})
        for dst, ct in zip(out[key.DESTINATION_LIST], out[key.CIPHERTEXT_LIST], strict=True):
            fwd[dst][0].append(nid[k])
            fwd[dst][1].append(ct)
    return states, pks, fwd


def run_flower(spec: dict[str, Any]) -> dict[str, Any]:
    import importlib

    # The package re-exports a function of the same name, hiding the module attribute.
    mod = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")
    from flwr.common import bytes_to_ndarray, ndarrays_to_parameters
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_extract,
        get_parameters_shape,
        parameters_addition,
        parameters_mod,
        parameters_subtraction,
    )
    from flwr.common.secure_aggregation.quantization import dequantize
    from flwr.common.secure_aggregation.secaggplus_constants import Key
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

    n, p, seed = spec["n"], spec["p"], spec["seed"]
    weights, dropped = _weights(seed, n), _dropped(seed, n, spec["drop"])
    nid = {k: k + 1 for k in range(n)}  # Flower node ids
    qrange, mod_range, t = 4194304, 2**32, n // 2 + 1
    setup = {Key.SAMPLE_NUMBER: n, Key.SHARE_NUMBER: n, Key.THRESHOLD: t, Key.CLIPPING_RANGE: CLIP, Key.TARGET_RANGE: qrange, Key.MOD_RANGE: mod_range, Key.MAX_WEIGHT: float(MAX_WEIGHT)}
    states, pks, fwd = _flower_key_stages(mod, Key, setup, nid)
    survivors = [k for k in range(n) if k not in dropped]
    mask_times, agg_s, wire_bytes = [], 0.0, 0
    masked_vector = None
    for k in survivors:
        np.random.seed(seed + k)  # Flower's stochastic rounding draws from the global RNG
        params = ndarrays_to_parameters([_update(seed, k, p)])
        cfg = {Key.SOURCE_LIST: fwd[nid[k]][0], Key.CIPHERTEXT_LIST: fwd[nid[k]][1]}
        t0 = time.perf_counter()
        out = mod._collect_masked_vectors(states[k], cfg, weights[k], params)
        mask_times.append(time.perf_counter() - t0)
        blobs = out[Key.MASKED_PARAMETERS]
        wire_bytes = sum(len(b) for b in blobs)
        t0 = time.perf_counter()  # the server's summation (collect_masked_vectors_stage)
        vec = [bytes_to_ndarray(b) for b in blobs]
        masked_vector = vec if masked_vector is None else parameters_addition(masked_vector, vec)
        agg_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    masked_vector = parameters_mod(masked_vector, mod_range)
    agg_s += time.perf_counter() - t0
    active, dead = {nid[k] for k in survivors}, {nid[k] for k in dropped}
    collected: dict[int, list[bytes]] = {i: [] for i in nid.values()}
    for k in survivors:
        out = mod._unmask(states[k], {Key.ACTIVE_NODE_ID_LIST: sorted(active), Key.DEAD_NODE_ID_LIST: sorted(dead)})
        for owner, share in zip(out[Key.NODE_ID_LIST], out[Key.SHARE_LIST], strict=True):
            collected[owner].append(share)
    t0 = time.perf_counter()  # the body of SecAggPlusWorkflow.unmask_stage
    for owner, share_list in collected.items():
        secret = combine_shares(share_list)
        if owner in active:
            mask = pseudo_rand_gen(secret, mod_range, get_parameters_shape(masked_vector))
            masked_vector = parameters_subtraction(masked_vector, mask)
        else:
            for nb in set(nid.values()) - {owner}:
                key = generate_shared_key(bytes_to_private_key(secret), bytes_to_public_key(pks[nb][0]))
                mask = pseudo_rand_gen(key, mod_range, get_parameters_shape(masked_vector))
                masked_vector = parameters_addition(masked_vector, mask) if owner > nb else parameters_subtraction(masked_vector, mask)
    recon = parameters_mod(masked_vector, mod_range)
    q_total_ratio, recon = factor_extract(recon)
    agg = dequantize(recon, CLIP, qrange)
    offset = -(len(active) - 1) * CLIP
    for vec in agg:
        vec += offset
        vec *= qrange / q_total_ratio
    unmask_s = time.perf_counter() - t0 + agg_s
    err = float(np.max(np.abs(agg[0] - _reference(spec, survivors))))
    return {"client_mask_s": float(np.mean(mask_times)), "server_unmask_s": unmask_s, "server_sum_s": agg_s, "bytes_per_element": wire_bytes / p, "max_abs_error": err, "survivors": len(survivors)}


def flower_subprocess(spec: dict[str, Any]) -> dict[str, Any] | None:
    if not BENCH_PY.exists():
        print(f"  Flower: {BENCH_PY} missing (pip install flwr==1.42.0 there); skipped", flush=True)
        return None
    proc = subprocess.run([str(BENCH_PY), __file__, "--flower-worker", json.dumps(spec)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"  Flower failed: {proc.stderr[-2000:]}", flush=True)
        return None
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale", action="store_true", help="only the consistency check and unmasking of N = 200 and 1000 at the default degree")
    ap.add_argument("--flower-worker", default=None)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.flower_worker is not None:
        print(json.dumps(run_flower(json.loads(args.flower_worker))))
        return
    sys.path.insert(0, str(ROOT))
    if args.scale:
        scale = []
        for n in (200, 1000):
            print(f"N={n}, default degree, P=1000: consistency check + unmasking ...", flush=True)
            r = run_scale(n, 1000, args.seed)
            print(f"  degree {r['degree']}, t {r['threshold']}: clients {r['clients_s']:.2f} CPU-s, server {r['server_s']:.2f} CPU-s, unmasking requests {r['unmasking_request_bytes'] / 1e6:.1f} MB", flush=True)
            scale.append(r)
        print(json.dumps({"scale": scale}))
        return
    if args.quick:
        grid = [(10, 100_000, 0.0), (50, 1_000_000, 0.1)]
    else:
        grid = [(n, p, d) for p in (100_000, 1_000_000) for n in (10, 50, 100) for d in (0.0, 0.1)]
    rows = []
    for n, p, drop in grid:
        spec = {"n": n, "p": p, "drop": drop, "seed": args.seed}
        print(f"N={n} P={p} dropouts={drop:.0%}: fedmor ...", flush=True)
        ours = run_ours(spec)
        print(f"  fedmor: mask {ours['client_mask_s'] * 1e3:.1f} ms/client, unmask {ours['server_unmask_s']:.3f} s, {ours['bytes_per_element']:.4f} B/elem, err {ours['max_abs_error']:.2e}", flush=True)
        print("  Flower ...", flush=True)
        fl = flower_subprocess(spec)
        row: dict[str, Any] = {**spec, "fedmor": ours, "flower": fl, "server_overhead_vs_plain_sum": ours["server_unmask_s"] / ours["plain_sum_s"]}
        if fl is not None:
            row["client_mask_speedup_vs_flower"] = fl["client_mask_s"] / ours["client_mask_s"]
            row["server_unmask_speedup_vs_flower"] = fl["server_unmask_s"] / ours["server_unmask_s"]
            print(f"  Flower: mask {fl['client_mask_s'] * 1e3:.1f} ms/client, unmask {fl['server_unmask_s']:.3f} s, {fl['bytes_per_element']:.4f} B/elem, err {fl['max_abs_error']:.2e}", flush=True)
            print(f"  speedup: mask x{row['client_mask_speedup_vs_flower']:.1f}, unmask x{row['server_unmask_speedup_vs_flower']:.1f}", flush=True)
        rows.append(row)
    ckks_p = 1_000_000
    print(f"CKKS: 3 clients x {ckks_p} values ...", flush=True)
    ckks = run_ckks(ckks_p, 3, args.seed)
    print(f"  CKKS: {ckks['bytes_per_element']:.1f} B/elem, encrypt {ckks['encrypt_s']:.2f} s/client, err {ckks['max_abs_error']:.1e}", flush=True)
    head = next(r for r in rows if (r["n"], r["p"], r["drop"]) == (50, 1_000_000, 0.1))
    fl = head["flower"] or {}
    headline = {
        "client_mask_speedup_vs_flower": head.get("client_mask_speedup_vs_flower"),
        "server_unmask_speedup_vs_flower": head.get("server_unmask_speedup_vs_flower"),
        "bytes_per_element": head["fedmor"]["bytes_per_element"],
        "flower_bytes_per_element": fl.get("bytes_per_element"),
        "max_abs_error": head["fedmor"]["max_abs_error"],
        "ckks_bytes_per_element": ckks["bytes_per_element"],
    }
    print(json.dumps({"headline": headline, "rows": rows, "ckks": ckks}))


if __name__ == "__main__":
    main()

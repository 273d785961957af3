"""Two CPU processes (gloo): the router state stays identical on both ranks after updates."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fedmor_local import free_port
from sdk.alignment import InProcessRewardSource, SelectionRewardFunction
from sdk.alignment._feedback import sync_router_update
from sdk.alignment._selection import MoRSelection
from tests.alignment.conftest import grey, make_chooser


def _batch(rank: int, step: int, n: int = 4) -> dict:
    # Each rank routes different completions, as under accelerate's data sharding.
    return {
        "prompts": [f"rank {rank} step {step} question {i}" for i in range(n)],
        "completions": [f"answer {rank * 7 + step * 3 + i}" for i in range(n)],
        "image": [grey(20 * rank + 5 * i + step) for i in range(n)],
    }


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(100 + rank)  # ranks would diverge without the sync
        chooser = make_chooser(num_clients=3)
        sel = MoRSelection(chooser)
        fn = SelectionRewardFunction(
            sel, InProcessRewardSource([lambda i, p, r: [0.0] * len(r)] * 3)
        )
        for step in range(3):
            asyncio.run(fn(**_batch(rank, step)))
            contexts, arms = sel.take_pending()
            # A rank-dependent feedback: only rank 0's value may count.
            used = sync_router_update(chooser, contexts, arms, float((step + rank) % 2))
            assert used == 4 * world
        torch.save(chooser.state_dict(), Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_router_state_identical_on_two_gloo_ranks(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    s0 = torch.load(tmp_path / "rank0.pt", weights_only=False)
    s1 = torch.load(tmp_path / "rank1.pt", weights_only=False)
    fresh = make_chooser(num_clients=3).state_dict()
    assert not torch.equal(s0["head.weight"], fresh["head.weight"])  # updates happened
    assert int(s0["num_updates"]) == 3 * 4 * 2  # all pairs of both ranks were used
    for key, value in s0.items():
        assert torch.equal(value, s1[key]), key

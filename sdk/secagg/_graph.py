"""The SecAgg+ neighbour graph: a randomly relabelled Harary graph derived from a public seed."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["default_degree", "neighbour_graph"]


def default_degree(num_clients: int) -> int:
    """Bell et al. 2020: O(log N) neighbours; here 2*ceil(log2 N) + 2, capped at N - 1."""
    return min(num_clients - 1, 2 * math.ceil(math.log2(max(num_clients, 2))) + 2)


def neighbour_graph(participants: Sequence[int], degree: int, seed: bytes) -> dict[int, frozenset[int]]:
    """Each participant's neighbours (self excluded); every party computes the same graph.

    The participants are shuffled by a generator seeded from SHA-256(seed) and placed on a ring;
    each is linked to degree/2 ring neighbours per side (Harary graph H(k, n)). A degree >= N-1
    gives the complete graph of Bonawitz et al.
    """
    ids = sorted(participants)
    n = len(ids)
    if degree >= n - 1:
        return {c: frozenset(x for x in ids if x != c) for c in ids}
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(seed).digest(), "little"))
    ring = [ids[i] for i in rng.permutation(n)]
    half = (degree + 1) // 2  # an odd degree is rounded up to keep the graph regular
    nbrs: dict[int, set[int]] = {c: set() for c in ids}
    for pos, c in enumerate(ring):
        for off in range(1, half + 1):
            d = ring[(pos + off) % n]
            nbrs[c].add(d)
            nbrs[d].add(c)
    return {c: frozenset(s) for c, s in nbrs.items()}

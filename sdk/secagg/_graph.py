"""The SecAgg+ neighbour graph: a randomly relabelled Harary graph derived from a public seed."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from sdk.secagg._errors import ConfigError

__all__ = ["check_majority_threshold", "default_degree", "neighbour_graph", "share_holders"]


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


def share_holders(num_clients: int, degree: int) -> int:
    """How many participants hold shares of each client's secrets (itself and its neighbours
    in ``neighbour_graph``): N for the complete graph, else 2 * ceil(degree / 2) + 1."""
    if degree >= num_clients - 1:
        return num_clients
    return 2 * ((degree + 1) // 2) + 1


def check_majority_threshold(threshold: int, degree: int, num_clients: int) -> None:
    """Raise ``ConfigError`` unless 2 * threshold > each client's share holders: an honest
    holder answers for one signed survivor set only, so only a majority threshold keeps a
    hostile server from gathering both a client's self-mask and mask-key shares (its input)."""
    holders = share_holders(num_clients, degree)
    if 2 * threshold <= holders:
        raise ConfigError(
            f"threshold {threshold} is not a majority of the {holders} share holders of each "
            f"client (degree {degree}, {num_clients} participants): the rule is 2 x threshold "
            f"> share holders, else a hostile server can learn one client's input; use a "
            f"threshold of at least {holders // 2 + 1} (or omit it)")

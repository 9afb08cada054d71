"""The keyed stream of the river benchmarks: sticky walks over clusters of a large alphabet.

Each key (a user) sits in one of a few clusters and emits Zipf-distributed ranks mapped
through its cluster's permutation of the symbols, moving to a random cluster now and then:
a large alphabet with few counts per symbol and as many hidden directions as clusters, the
stream ``demos/bench_river.py``, ``demos/bench_background.py`` and the tests of
``rank="auto"`` on few counts share.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cluster_sessions"]


def cluster_sessions(n_events: int, n_symbols: int = 2_000, n_keys: int = 1_000,
                     n_clusters: int = 8, seed: int = 0) -> list[tuple[dict, int]]:
    """``(x, y)`` pairs: ``x = {"user": k}`` and the symbol ``y`` user ``k`` emitted next.

    Each user sits in one of ``n_clusters`` clusters (a new random one with probability
    0.1 per event) and emits a Zipf(1.1)-distributed rank mapped through its cluster's
    permutation of the symbols. O(n_symbols · n_clusters + n_events · log n_symbols) (the
    permutations, then the Zipf draws by inverse CDF), seeded.

    Examples
    --------
    >>> data = cluster_sessions(5, n_symbols=10, n_keys=2, seed=0)
    >>> len(data), sorted(data[0][0]), all(0 <= y < 10 for _, y in data)
    (5, ['user'], True)
    """
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, n_symbols + 1) ** 1.1
    p /= p.sum()
    perm = [rng.permutation(n_symbols) for _ in range(n_clusters)]
    state = rng.integers(0, n_clusters, n_keys)
    keys = rng.integers(n_keys, size=n_events)
    moves = rng.random(n_events) < 0.1
    ranks = rng.choice(n_symbols, size=n_events, p=p)
    data = []
    for k, move, r in zip(keys.tolist(), moves.tolist(), ranks.tolist(), strict=True):
        if move:
            state[k] = rng.integers(n_clusters)
        data.append(({"user": k}, int(perm[state[k]][r])))
    return data

"""Seeded higher-order Markov chains: memory of a fixed number of symbols, no hidden state.

A chain of order r over n symbols has n^r contexts, each with its own next-symbol row
(sparse Dirichlet rows): as an HMM, n^r states. Past the trigram's two symbols of memory and,
over 4 symbols at order 4 (256 states), past the backoff's HMM (at most 64 states), so only the
operator model with a long enough window filter predicts it well (:mod:`streamspec.core.
filter_window`; ``demos/bench_unseen.py``, ``tests/core/test_filter_window.py``).
:func:`short_sessions`: many very short sessions of a sparse first-order chain, where the
trigram's discounts matter (``tests/core/test_trigram_discounts.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["markov_chain", "markov_chain_loss", "short_sessions"]


def _rows(order: int, n: int, seed: int, concentration: float) -> np.ndarray:
    return np.random.default_rng([seed, 0]).dirichlet(np.full(n, concentration), size=n ** order)


def markov_chain(order: int, n: int, length: int, seed: int, concentration: float = 0.3) -> np.ndarray:
    """``length`` symbols of the chain of ``order`` over ``n`` symbols with rows
    Dirichlet(``concentration``) drawn from ``seed``; the first ``order`` symbols uniform.
    O(n^(order+1) + length · log n), one draw per symbol (inverse CDF).

    >>> x = markov_chain(2, 3, 1000, seed=0)
    >>> x.shape, int(x.min()) >= 0, int(x.max()) <= 2
    ((1000,), True, True)
    """
    cum = np.cumsum(_rows(order, n, seed, concentration), axis=1)
    rng = np.random.default_rng([seed, 1])
    u = rng.random(length)
    x = np.empty(length, dtype=np.int64)
    x[:order] = rng.integers(0, n, size=order)
    ctx = 0
    for t in range(min(order, length)):
        ctx = ctx * n + int(x[t])
    for t in range(order, length):
        s = min(int(np.searchsorted(cum[ctx], u[t], side="right")), n - 1)
        x[t] = s
        ctx = (ctx * n + s) % n ** order
    return x


def markov_chain_loss(order: int, n: int, seed: int, sequences, concentration: float = 0.3) -> float:
    """The true chain's log loss (nats per symbol) of ``sequences``, each from its start (its
    first ``order`` symbols uniform, as :func:`markov_chain` draws them). O(symbols).

    >>> x = markov_chain(1, 2, 10_000, seed=0, concentration=100.0)
    >>> bool(abs(markov_chain_loss(1, 2, 0, [x], concentration=100.0) - np.log(2)) < 0.01)
    True
    """
    P = _rows(order, n, seed, concentration)
    total, count = 0.0, 0
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        head = min(order, s.size)
        total += head * np.log(n)
        ctx = 0
        for t in range(head):
            ctx = ctx * n + int(s[t])
        for t in range(order, s.size):
            total -= np.log(P[ctx, s[t]])
            ctx = (ctx * n + int(s[t])) % n ** order
        count += s.size
    return float(total / count)


def short_sessions(n: int, count: int, seed: int) -> list[np.ndarray]:
    """``count`` sessions of 1 + Geometric(0.4) symbols over ``n`` (mean 2.5): the first
    Zipf(1) over a permutation, each next one ``(7 x + U{0..4}) mod n`` (a bigram with five
    successors, no memory past one symbol): sparse continuation counts, on which the modified
    Kneser–Ney discounts of the middle level grow too large (:func:`streamspec.core.trigram.
    chosen_trigram`). O(total length).

    >>> [s.tolist() for s in short_sessions(10, 3, seed=0)]
    [[2, 5, 9, 5, 5, 8, 9], [3, 5, 5, 5, 9], [2, 4]]
    """
    rng = np.random.default_rng(seed)
    cum = np.cumsum(1.0 / np.arange(1, n + 1))
    first = rng.permutation(n)[np.minimum(np.searchsorted(cum / cum[-1], rng.random(count)), n - 1)]
    out = []
    for a, length in zip(first, 1 + rng.geometric(0.4, size=count), strict=True):
        s = [int(a)]
        for step in rng.integers(0, 5, size=length - 1):
            s.append((7 * s[-1] + int(step)) % n)
        out.append(np.array(s, dtype=np.int64))
    return out

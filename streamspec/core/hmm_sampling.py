"""Drawing sequences from a discrete HMM in hmmlearn's orientation (``startprob``, ``transmat``,
``emissionprob``): the sampler behind :meth:`HiddenMarkovModel.sample`."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

__all__ = ["sample_sequences"]


def sample_sequences(startprob: np.ndarray, transmat: np.ndarray, emissionprob: np.ndarray,
                     lengths: Sequence[int], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(symbols, states)``: independent sequences of ``lengths``, concatenated (int64 indices).

    Each sequence starts from ``startprob``. O(T · log m) for T symbols in all, plus
    O(m · n) for the cumulative emission rows.

    Examples
    --------
    >>> x, h = sample_sequences(np.array([1.0, 0.0]), np.array([[0.0, 1.0], [1.0, 0.0]]),
    ...                         np.eye(2), [3, 2], np.random.default_rng(0))
    >>> x.tolist(), h.tolist()
    ([0, 1, 0, 0, 1], [0, 1, 0, 0, 1])
    """
    lens = [int(v) for v in lengths]
    if any(v < 0 for v in lens):
        raise ValueError(f"lengths must be non-negative, got {lens}")
    m, n = emissionprob.shape
    total = sum(lens)
    cumA = np.cumsum(transmat, axis=1).tolist()
    cum0 = np.cumsum(startprob)
    u = rng.random(total).tolist()
    states = np.empty(total, dtype=np.int64)
    t = 0
    for length in lens:
        if not length:
            continue
        h = min(int(np.searchsorted(cum0, rng.random(), side="right")), m - 1)
        for _ in range(length):
            states[t] = h
            h = min(bisect_right(cumA[h], u[t]), m - 1)
            t += 1
    cumE = np.cumsum(emissionprob, axis=1)
    v = rng.random(total)
    out = np.empty(total, dtype=np.int64)
    for h in range(m):
        at = states == h
        out[at] = np.minimum(np.searchsorted(cumE[h], v[at], side="right"), n - 1)
    return out, states

"""Which window to fit on: the rank the window Hankel matrices support above the noise.

The counts of window L hold the (2l+1)-grams of every ``l ≤ L`` (marginals). The Hankel
matrix of window l, ``H_l[w, p] = Pr(current window w, past p)`` (futures × pasts,
:meth:`~streamspec.core.window_triples.WindowTriples.hankel`), has rank at most the number of
hidden states, and at most the number of distinct windows. Its *supported rank* ``r_l``
is the number of its singular values above the sampling noise level ``N_l^(-1/2)`` (N_l the
weight of the complete (2l+1)-grams): the Frobenius norm of the noise of a matrix of
frequencies from N samples is about ``N^(-1/2)``, whatever its size (the rule of
:func:`streamspec.core.spectral.select_rank_by_spectrum`). ``r_l`` does not decrease with l in
the population (a shorter window's Hankel is a marginal of a longer one's).

- :func:`choose_window` (``window="auto"`` of the estimators): the smallest l whose
  windows already give every dimension the next longer window adds, ``r_l ≥ r_{l+1}``
  (else the longest). Counts of window 1 — every alphabet of 128 symbols or more under
  ``window="auto"`` — give 1 without any SVD.
- :func:`window_for_states` (``HMMEstimator``'s moments): the smallest l with ``r_l ≥ K``
  for K states (else, among the windows with ``n^l ≥ K``, the l of largest ``r_l``); 1
  without any SVD when the counts are triples.

Cost per window tried: the Hankel from the distinct grams, O(nnz · L + nnz log nnz), and
its singular values, dense up to 1,000 windows (O(W³)), else the top ``AUTO_RANK + 1`` by
ARPACK (O(nnz · AUTO_RANK) per iteration).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.subspace import DENSE_SVD_MAX, top_singular
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import AUTO_RANK, WindowCounts

__all__ = ["supported_rank", "window_ranks", "choose_window", "window_for_states"]


def supported_rank(counts: WindowCounts, max_rank: int = AUTO_RANK) -> int:
    """``r``: the singular values of the window Hankel of ``counts`` (complete grams only) above
    ``N^(-1/2)``, at most ``max_rank`` + 1 looked at above 1,000 windows. 0 for empty counts.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),   # 4 states, 2 symbols
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> [supported_rank(exact_windows(ring, L)) for L in (1, 2, 3)]
    [2, 4, 4]
    """
    full = counts.full()
    total = full.total
    if not total > 0:
        return 0
    H = WindowTriples.of(full).hankel()
    size = H.shape[0]
    if size <= DENSE_SVD_MAX:
        sv = np.linalg.svd(H.toarray(), compute_uv=False)
    else:
        sv = top_singular(sp.csr_matrix(H), min(size - 1, max_rank + 1))[1]
    return int((sv > 1.0 / np.sqrt(total)).sum())


def window_ranks(counts: WindowCounts, max_rank: int = AUTO_RANK) -> list[int]:
    """``[r_1, .., r_L]``: the supported rank of every window up to the counts' own. See
    :func:`supported_rank`; L SVDs."""
    return [supported_rank(counts.marginal(level), max_rank) for level in range(1, counts.window + 1)]


def choose_window(counts: WindowCounts, max_rank: int = AUTO_RANK) -> int:
    """The window of ``window="auto"``: the smallest l with ``r_l ≥ r_{l+1}`` (longer windows add
    no supported dimension), else L; 1 for counts of window 1 (no SVD). At most L + 1 SVDs.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> choose_window(exact_windows(ring, 3))                    # 4 states need pairs
    2
    >>> choose_window(exact_windows(HMM.random(2, 4, random_state=0), 3))
    1
    """
    ranks: list[int] = []
    for level in range(1, counts.window + 1):
        ranks.append(supported_rank(counts.marginal(level), max_rank))
        if len(ranks) > 1 and ranks[-2] >= ranks[-1]:
            return level - 1
    return counts.window


def window_for_states(counts: WindowCounts, n_states: int, max_rank: int = AUTO_RANK) -> int:
    """The smallest window whose Hankel supports ``n_states`` dimensions; when none does, of the
    windows with room for them (``n^l ≥ n_states``, else the longest) the one that supports the
    most (the shorter on a tie). 1 for counts of window 1 (no SVD). At most L SVDs.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> window_for_states(exact_windows(ring, 3), 4), window_for_states(exact_windows(ring, 3), 2)
    (2, 1)
    """
    if counts.window == 1:
        return 1
    room = [level for level in range(1, counts.window + 1) if counts.n**level >= n_states]
    best, best_rank = None, -1
    for level in room or [counts.window]:
        r = supported_rank(counts.marginal(level), max(max_rank, n_states))
        if r >= n_states:
            return level
        if r > best_rank:
            best, best_rank = level, r
    return best

"""Which window to fit on: the rank the window Hankel matrices support above the noise.

The counts of window L hold the (2l+1)-grams of every ``l ≤ L`` (marginals). The Hankel
matrix of window l, ``H_l[w, p] = Pr(current window w, past p)`` (futures × pasts,
:meth:`~streamspec.core.window_triples.WindowTriples.hankel`), has rank at most the number of
hidden states, and at most the number of distinct windows. Its *supported rank* ``r_l``
is the number of its singular values above the spectral norm of its sampling noise,
:func:`noise_level` ``(√max row sum + √max column sum) / √N_l`` (N_l the weight of the
complete (2l+1)-grams): one rule with the HMM sizes of the predictor
(:func:`streamspec.core.backoff_fit.hmm_states_for`, docs/math.md section 11). The level
before, ``N_l^(-1/2)`` (the Frobenius norm of the noise), is √W / 2 times it for W equally
frequent windows: 50× over the 10⁴ pairs of 100 symbols, where it hid 8 of the 10 states of a
sticky HMM at 10⁵ symbols. ``r_l`` does not decrease with l in the population (a shorter
window's Hankel is a marginal of a longer one's).

- :func:`choose_window` (``window="auto"`` of the estimators): the smallest l whose
  windows already give every dimension the next longer window adds, ``r_l ≥ r_{l+1}``
  (else the longest). Counts of window 1 — every alphabet of 128 symbols or more under
  ``window="auto"`` — give 1 without any SVD.
- :func:`window_for_states` (``HMMEstimator``'s moments): the smallest l with ``r_l ≥ K``
  for K states (else, among the windows with ``n^l ≥ K``, the l of largest ``r_l``); 1
  without any SVD when the counts are triples.

Cost per window tried: the Hankel from the distinct grams, O(nnz · L + nnz log nnz), and
its singular values, dense up to 1,000 windows (O(W³)), else the top ones by Lanczos
(:func:`~streamspec.core.subspace.top_singular`): 16 first, doubled while all of them are
above the noise, up to ``max_rank + 1`` (O(nnz · k) per iteration for k values; it was always
``AUTO_RANK + 1`` = 129: 7–9 of 16–23 CPU s of the default fit of a sticky 10-state,
100-symbol HMM at 10⁶ symbols, whose Hankels support 10).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.subspace import DENSE_SVD_MAX, top_singular
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import AUTO_RANK, WindowCounts

__all__ = ["supported_rank", "level_rank", "window_ranks", "choose_window", "window_for_states",
           "noise_level", "count_above_noise", "dense_singular_values"]

_FIRST_TOP = 16  # singular values looked at first above DENSE_SVD_MAX windows (then doubled)


def supported_rank(counts: WindowCounts, max_rank: int = AUTO_RANK) -> int:
    """``r``: the singular values of the window Hankel of ``counts`` (complete grams only) above
    the spectral norm of its sampling noise (:func:`noise_level`), at most ``max_rank`` + 1
    looked at above 1,000 windows (:func:`count_above_noise`). 0 for empty counts. The
    singular values are kept on the object ``counts`` (:func:`level_rank`): asked again, with
    any ``max_rank``, they are not recomputed.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),   # 4 states, 2 symbols
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> [supported_rank(exact_windows(ring, L).scaled(1e6)) for L in (1, 2, 3)]
    [2, 4, 4]
    """
    return level_rank(counts, counts.window, max_rank)


def level_rank(grams: WindowCounts, level: int, max_rank: int = AUTO_RANK) -> int:
    """:func:`supported_rank` of ``grams.marginal(level)``, each singular value computed once per
    ``(grams, level)``: the model's window choice (:func:`choose_window`), the predictor's HMM
    size (:func:`~streamspec.core.backoff_windows.hmm_states_for_windows`) and the EM window
    (:func:`window_for_states`) read the same Hankels of the same counts. Why: recomputed, they
    were ~18% of the default fit of a sticky 10-state HMM over 100 symbols at 10⁶ symbols. The
    answer is the same number :func:`count_above_noise` gives (the same SVDs replayed from the
    memo: the dense one, or the Lanczos ones of each k asked for).

    The memo is ``grams``' own (a few singular values per window, freed with it): a fit reads
    its counts once and passes that object down, and an accumulator gives the same
    :class:`~streamspec.core.windows.WindowCounts` while its counts are unchanged
    (:meth:`~streamspec.streaming.accumulator.MomentAccumulator.windows`), so nothing is
    shared between fits on different counts, nor kept in this module. Cost: as
    :func:`supported_rank` the first time, O(max_rank) after (a larger ``max_rank`` above
    1,000 windows may add Lanczos steps).

    >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 0, 1, 1], [1, 0, 1, 1, 0], [0, 0, 1, 0, 1]])
    >>> level_rank(g, 1) == supported_rank(g.marginal(1)), len(g._ranks)
    (True, 1)
    >>> g.scaled(1.0)._ranks is None          # another object: its own memo, empty
    True
    """
    level = int(level)
    memo = grams._ranks
    if memo is None:
        memo = grams._ranks = {}
    if level not in memo:
        memo[level] = _Spectrum(grams, level)
    return memo[level].count(max_rank, grams, level)


def dense_singular_values(H: sp.spmatrix) -> np.ndarray:
    """Every singular value of the (small) window Hankel ``H``, by a dense SVD: the one routine
    the supported ranks call below :data:`~streamspec.core.subspace.DENSE_SVD_MAX` windows
    (:func:`~streamspec.core.subspace.top_singular` above). O(W³) for W windows.

    >>> dense_singular_values(sp.csr_matrix(np.diag([1.0, 3.0]))).tolist()
    [3.0, 1.0]
    """
    return np.linalg.svd(H.toarray(), compute_uv=False)


class _Spectrum:
    """The singular values of one window Hankel, computed when first asked for: the dense SVD, or
    the top k by Lanczos for each k :func:`count_above_noise` asks for. The Hankel itself is not
    kept (rebuilt only if a larger ``max_rank`` needs more values than were computed)."""

    def __init__(self, grams: WindowCounts, level: int):
        self.size, self.level, self._dense, self._top = 0, 0.0, None, {}
        self._H: sp.csr_matrix | None = None  # kept only until the first count
        full = grams.marginal(level).full()
        self.total = full.total
        if self.total > 0:
            H = sp.csr_matrix(WindowTriples.of(full).hankel())
            self.size, self.level = H.shape[0], noise_level(H, self.total)
            if self.size <= DENSE_SVD_MAX:
                self._dense = dense_singular_values(H)
            else:
                self._H = H

    def count(self, max_rank: int, grams: WindowCounts, level: int) -> int:
        """``count_above_noise(H, level, max_rank)``, replayed on the values already computed."""
        if not self.total > 0:
            return 0
        if self._dense is not None:
            return int((self._dense > self.level).sum())

        def top(k: int) -> np.ndarray:  # each k's values computed once, the Hankel rebuilt if gone
            if k not in self._top:
                if self._H is None:
                    self._H = sp.csr_matrix(WindowTriples.of(grams.marginal(level).full()).hankel())
                self._top[k] = top_singular(self._H, k)[1]
            return self._top[k]

        try:
            return _doubling_count(top, self.size, self.level, max_rank)
        finally:
            self._H = None  # why: the Hankel is O(nnz); the values are all that is kept


def count_above_noise(H: sp.spmatrix, level: float, max_rank: int) -> int:
    """How many singular values of ``H`` exceed ``level``: all of them by a dense SVD up to
    :data:`~streamspec.core.subspace.DENSE_SVD_MAX` rows (``H`` square), else the top 16 by Lanczos, doubled
    while every one found is above the level, up to ``max_rank + 1`` (so the answer is exact up
    to ``max_rank``). Why doubling: the Lanczos cost grows with the values asked for, and the
    supported rank is usually far below the largest one allowed (10 of 129 on the 10⁴ pairs
    of 100 symbols). O(W³) dense, else O(nnz · k) per Lanczos step for the k reached.

    >>> count_above_noise(sp.csr_matrix(np.diag([3.0, 2.0, 1e-3])), 0.5, 8)
    2
    """
    size = H.shape[0]
    if size <= DENSE_SVD_MAX:
        return int((dense_singular_values(H) > level).sum())
    return _doubling_count(lambda k: top_singular(H, k)[1], size, level, max_rank)


def _doubling_count(top, size: int, level: float, max_rank: int) -> int:
    """The values of ``top(k)`` (the top k singular values of a ``size``-row Hankel) above
    ``level``, k = 16 first and doubled while all of them are above it, up to ``max_rank + 1``."""
    cap = min(size - 1, max_rank + 1)
    k = min(_FIRST_TOP, cap)
    while True:
        above = int((top(k) > level).sum())
        if above < k or k >= cap:
            return above
        k = min(2 * k, cap)


def noise_level(P: sp.spmatrix, total: float) -> float:
    """The largest singular value of the sampling noise of a matrix of pair frequencies ``P``
    (entries summing to 1) counted from ``total`` pairs: ``(√max_i r_i + √max_j c_j) / √N``
    with r, c its row and column sums. Why: an entry's noise has variance ≈ P_ij / N, and the
    spectral norm of a matrix of independent entries is about its largest row norm plus its
    largest column norm (Bandeira & van Handel 2016); the Frobenius norm ``N^(-1/2)`` of the
    noise, the level before, is √n / 2 times that for n equally frequent symbols (16× at
    1,000 symbols), which hid every state of a 1,000-symbol HMM at 10⁶ symbols. O(nnz).

    >>> round(noise_level(sp.csr_matrix(np.full((100, 100), 1e-4)), 1e6), 6)   # 2 / √(n N)
    0.0002
    """
    rows = np.asarray(P.sum(axis=1)).ravel()
    cols = np.asarray(P.sum(axis=0)).ravel()
    return float((np.sqrt(rows.max()) + np.sqrt(cols.max())) / np.sqrt(total))


def window_ranks(counts: WindowCounts, max_rank: int = AUTO_RANK) -> list[int]:
    """``[r_1, .., r_L]``: the supported rank of every window up to the counts' own. See
    :func:`supported_rank`; L SVDs."""
    return [level_rank(counts, level, max_rank) for level in range(1, counts.window + 1)]


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
        ranks.append(level_rank(counts, level, max_rank))
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
        r = level_rank(counts, level, max(max_rank, n_states))
        if r >= n_states:
            return level
        if r > best_rank:
            best, best_rank = level, r
    return best

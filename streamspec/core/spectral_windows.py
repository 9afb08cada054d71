"""θ_spec over windows: the observable operators of Hsu, Kakade & Zhang on window counts.

With counts of windows (``MomentAccumulator(window=L)``, ``docs/math.md`` section 11) the
Hankel matrix ``H[w, p] = Pr(current window w, past p)`` replaces P21 and the grams with
middle x, ``P_x[f, p] = Pr(past p, x, future f)``, replace P3x1[x]. Its rank can reach
the number of hidden states, beyond the alphabet. With U, V the top-k singular vectors of
H and ``M1 = Uᵀ H V``:

    b1 = Uᵀ Pr(current),   b∞ = M1⁻ᵀ Vᵀ Pr(past),   B_x = (Uᵀ P_x V) M1⁻¹,

the two-sided form of section 7 (7.1) over windows. ``b∞ᵀ Uᵀ = 1ᵀ`` on the column space of
H, and ``1ᵀ B_x = e_xᵀ M`` there (11.5), so ``b∞ᵀ B_x b / b∞ᵀ b`` is the next-symbol
probability, as for triples: the result is an ordinary
:class:`~streamspec.core.model.ObservableOperatorModel` over the n symbols, of dimension k
(up to the number of distinct windows), which filters, predicts, mixes with the backoff and
is saved like any other. At L = 1 (windows are symbols) these are exactly
:func:`~streamspec.core.spectral.sparse_spectral_operators`.

Costs: the windows interned, O(nnz · L + nnz log nnz); the top-k SVD of the sparse H (W
distinct windows: dense up to 1,000, else truncated), the B_x by
:func:`~streamspec.core.subspace.project_triples`, O(nnz · k + P · k²) for P distinct
(x, future) pairs; memory O(n · k² + W · k).
"""

from __future__ import annotations

import numpy as np

from streamspec.core.spectral_basis import MAX_AUTO_RANK
from streamspec.core.subspace import project_triples, top_singular
from streamspec.core.window_rank import choose_window, level_rank
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import WindowCounts

__all__ = ["window_spectral_operators", "window_rank_for", "max_window_rank"]


def max_window_rank(grams: WindowCounts) -> int:
    """The largest rank a model over these windows can have: the distinct windows (at most
    ``size − 1`` above 1,000 of them, for the truncated SVD). O(nnz · L).

    >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 0, 1, 1], [1, 0, 1, 1, 0]])
    >>> max_window_rank(g)
    3
    """
    size = WindowTriples.of(grams).size
    return size if size <= 1_000 else size - 1


def window_rank_for(grams: WindowCounts, rank: int | str) -> tuple[int, int]:
    """``(l, k)``: the window (:func:`~streamspec.core.window_rank.choose_window`, the smallest
    whose Hankel supports what a longer one does; for an integer ``rank`` above what that
    window holds, the shortest longer one that holds it, up to the counts' L) and the rank,
    for ``rank`` an integer (clipped to the windows) or ``"auto"`` (the supported rank at
    l, at least 1, at most :data:`~streamspec.core.spectral_basis.MAX_AUTO_RANK`). Up to L + 1 SVDs,
    none for a window whose singular values ``grams`` already holds
    (:func:`~streamspec.core.window_rank.level_rank`).
    """
    level = choose_window(grams, MAX_AUTO_RANK)
    counts = grams.marginal(level)
    while rank != "auto" and int(rank) > max_window_rank(counts) and level < grams.window:
        # why: an explicit rank above what the chosen window can hold (e.g. more states than
        # symbols, asked for by name) needs the longer windows the counts have
        level += 1
        counts = grams.marginal(level)
    if rank == "auto":
        k = level_rank(grams, level, MAX_AUTO_RANK)  # why: choose_window's SVD of that window
        return level, int(min(max(k, 1), MAX_AUTO_RANK, max_window_rank(counts)))
    return level, int(max(1, min(int(rank), max_window_rank(counts))))


def window_spectral_operators(grams: WindowCounts, k: int, random_state: int = 0,
                              bases: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b1, b∞, B)`` of θ_spec over the windows of ``grams`` (module docstring), B of shape
    (n, k, k). Every gram counts, padded ones included (a padded past is a sequence's
    prefix). ``bases``: a dict given receives the Hankel's top-k singular vectors as ``"U"``
    and ``"V"`` (a refit's :class:`~streamspec.core.projected_windows.WindowState`). Cost: see
    the module docstring.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),   # 4 states, 2 symbols
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> b1, binf, B = window_spectral_operators(exact_windows(ring, 2), 4)
    >>> B.shape, round(float(binf @ b1), 9)
    ((2, 4, 4), 1.0)
    """
    wt = WindowTriples.of(grams)
    H = wt.hankel()
    k = int(max(1, min(k, max_window_rank(grams))))
    U, _, V = top_singular(H, k, random_state=random_state)
    if bases is not None:
        bases.update(U=U, V=V)
    M1inv = np.linalg.pinv(U.T @ np.asarray(H @ V))  # why pinv: singular when rank H < k
    b1 = U.T @ np.asarray(H.sum(axis=1)).ravel()
    binf = M1inv.T @ (V.T @ wt.past_marginal())
    B = project_triples(wt.triples, U, V @ M1inv, middle=np.arange(grams.n))
    return b1, binf, B

"""Grams over an alphabet of windows: the triples (past, x, future) that the sparse machinery reads.

:class:`WindowTriples` interns the windows of :class:`~streamspec.core.windows.WindowCounts`:
every distinct L-symbol window seen as a past ``p = (p_1..p_L)``, a future ``f =
(f_1..f_L)`` or a *current* window ``(x, f_1..f_{L-1})`` (the future that starts at x)
gets an id, so that a gram is a triple ``(x1, x2, x3) = (past id, x, future id)`` of a
:class:`~streamspec.core.triples.Triples` over ``max(W, n)`` indices (W windows): the
sparse triple routines (``project_triples``, the E-steps, merges) apply unchanged. At
``L = 1`` the windows are the symbols themselves (the ids are the symbol indices) and the
triples are the counts' own codes, bit for bit. Section 10 of ``docs/math.md`` derives
the matrices below.

Memory O(nnz + W · L); nothing of size n^L is formed (only windows seen get an id).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.triples import BITS, Triples, pack
from streamspec.core.windows import WindowCounts, window_bits

__all__ = ["WindowTriples", "window_codes"]


def window_codes(digits: np.ndarray, bits: int) -> np.ndarray:
    """One int64 per row of window digits ((k, l), pads -1 → all-ones digit), ``bits`` a digit,
    first digit most significant, so that codes sort like the windows. O(k · l)."""
    pad = (1 << bits) - 1
    codes = np.zeros(digits.shape[0], dtype=np.int64)
    for j in range(digits.shape[1]):
        codes = (codes << bits) | np.where(digits[:, j] < 0, pad, digits[:, j])
    return codes


class WindowTriples:
    """The grams of window L as triples over interned windows.

    Attributes
    ----------
    n, window
        Symbols and L.
    windows
        (W, L) digits of each window id (stream order, pads -1), sorted by code.
    triples
        :class:`Triples` over ``max(W, n)``: ``x1`` the past's id, ``x2`` the symbol x,
        ``x3`` the future's id; the weights of the grams.
    current
        (nnz,) the id of ``(x, f_1..f_{L-1})`` for each entry of ``triples`` (its order).

    Build with :meth:`of`, O(nnz · L + nnz log nnz).

    Examples
    --------
    >>> from streamspec.core.windows import WindowCounts
    >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 1, 0, 1], [1, 1, 0, 1, 0]])
    >>> wt = WindowTriples.of(g)
    >>> wt.windows.tolist()                       # every window seen, in any role
    [[0, 1], [1, 0], [1, 1]]
    >>> wt.hankel().toarray().tolist()           # P(current, past)
    [[0.0, 0.0, 0.5], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> wt.one_step().toarray().tolist()         # M[x, w] = 1[w_1 = x]
    [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    """

    __slots__ = ("n", "window", "windows", "triples", "current")

    def __init__(self, n: int, window: int, windows: np.ndarray, triples: Triples, current: np.ndarray):
        self.n, self.window = int(n), int(window)
        self.windows, self.triples, self.current = windows, triples, current

    @classmethod
    def of(cls, counts: WindowCounts) -> WindowTriples:
        """Intern the windows of ``counts`` (all its grams, padded ones included: a padded past is
        a prefix of a sequence). At L = 1 the windows are the n symbols. O(nnz · L + nnz log nnz)."""
        L, n = counts.window, counts.n
        if L == 1:
            t = Triples(n, counts.codes, counts.weights)
            return cls(n, 1, np.arange(n, dtype=np.int64)[:, None], t, t.x2)
        d = counts.digits()
        b = window_bits(L)
        past, fut, cur = (window_codes(d[:, s], b) for s in
                          (slice(0, L), slice(L + 1, 2 * L + 1), slice(L, 2 * L)))
        codes = np.unique(np.concatenate([past, fut, cur]))
        if codes.size >= 1 << BITS:
            raise ValueError(f"{codes.size:,} distinct windows: at most {(1 << BITS) - 1:,} fit one triple")
        windows = np.empty((codes.size, L), dtype=np.int64)
        for j in range(L):  # the digits of each window code, first digit most significant
            windows[:, j] = (codes >> (b * (L - 1 - j))) & ((1 << b) - 1)
        windows[windows == (1 << b) - 1] = -1
        ids = [np.searchsorted(codes, c) for c in (past, fut, cur)]
        # gram codes sort by (x, future, past), and ids sort like window codes: already sorted
        t = Triples(max(codes.size, n), pack(ids[0], d[:, L], ids[1]), counts.weights)
        return cls(n, L, windows, t, ids[2])

    @property
    def n_windows(self) -> int:
        """W, the number of distinct windows."""
        return int(self.windows.shape[0])

    @property
    def size(self) -> int:
        """``max(W, n)``: the index range of :attr:`triples` (rows of every matrix below)."""
        return self.triples.n

    def hankel(self) -> sp.csr_matrix:
        """``H[w, p] = Pr(current window = w, past = p)``, sparse (size × size): the window P21.

        The future that starts at x is ``(x, f_1..f_{L-1})``, so H is the gram counts with
        the last future symbol summed out. At L = 1, ``Triples.P21``. O(nnz).
        """
        t = self.triples
        # counts first, then one division: at L = 1 the very floats of Triples.P21
        counts = sp.csr_matrix((t.weights, (self.current, t.x1)), shape=(self.size, self.size))
        if not t.total > 0:
            raise ValueError("no grams counted: cannot form probabilities from empty counts")
        return counts / t.total

    def past_marginal(self) -> np.ndarray:
        """``Pr(past = p)`` (size,): the column sums of :meth:`hankel`. O(nnz)."""
        return self.triples.P1()

    def one_step(self) -> sp.csr_matrix:
        """``M[x, w] = 1[w_1 = x]`` (n × size): the one-step marginal of a window distribution.

        ``M @ H`` is ``Pr(x, past)`` (the next symbol after each past); ``M b`` of a
        distribution b over current windows is the distribution of their first symbol
        (``docs/math.md`` (11.4)). O(W).
        """
        first = self.windows[:, 0]
        w = np.flatnonzero(first >= 0)
        return sp.csr_matrix((np.ones(w.size), (first[w], w)), shape=(self.n, self.size))

    def prefix_matrix(self) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        """``(S, D)`` over the (L−1)-symbol windows g: ``S[g, w] = 1[w_1..w_{L-1} = g]`` and
        ``D[g, w] = 1[w_2..w_L = g]``, both (G × size). At L = 1, G = 1 (the empty window)
        and both are rows of ones. O(W · L)."""
        L = self.window
        b = window_bits(L)
        heads = window_codes(self.windows[:, : L - 1], b)
        tails = window_codes(self.windows[:, 1:], b)
        g = np.unique(np.concatenate([heads, tails]))
        cols = np.arange(self.n_windows)
        ones = np.ones(self.n_windows)
        shape = (g.size, self.size)
        return (sp.csr_matrix((ones, (np.searchsorted(g, heads), cols)), shape=shape),
                sp.csr_matrix((ones, (np.searchsorted(g, tails), cols)), shape=shape))

    def __repr__(self) -> str:
        t = self.triples
        return f"WindowTriples(n={self.n}, window={self.window}, windows={self.n_windows}, nnz={t.nnz})"

"""Dense views of a :class:`~streamspec.streaming.accumulator.MomentAccumulator`'s counts.

:class:`AccumulatorViews`, a mixin of the accumulator: the counts ``c3`` and their
marginals, the probabilities P1, P21, P3x1 (docs/math.md section 1) and the second moments
of the moment conditions (section 3), all derived on demand from
:meth:`~streamspec.streaming.accumulator.MomentAccumulator.triples` (the counts are the
only state). The dense ones raise :class:`~streamspec.core.triples.DenseTooLarge` above
``DENSE_LIMIT`` cells.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.moments import probabilities, second_moment_blocks
from streamspec.core.triples import check_dense

__all__ = ["AccumulatorViews"]


class AccumulatorViews:
    """The views of the counts; reads ``n`` and ``triples()`` of the accumulator."""

    def counts(self) -> np.ndarray:
        """Triple counts ``c3[x2, x3, x1]`` of shape (n, n, n), float64 (a new dense array).

        Time and memory O(n³ + nnz); raises :class:`~streamspec.core.triples.DenseTooLarge`
        above ``DENSE_LIMIT`` cells (use :meth:`triples`).
        """
        check_dense((self.n,) * 3, "counts")
        return self.triples().to_dense()

    @property
    def c3(self) -> np.ndarray:
        """Alias of :meth:`counts`: ``c3[x2, x3, x1]``, dense (n, n, n)."""
        return self.counts()

    @property
    def c21(self) -> np.ndarray:
        """``c21[x2, x1]``: counts of pairs, the marginal of c3 over x3; dense (n, n), O(n² + nnz)."""
        check_dense((self.n,) * 2, "pair counts")
        return self.triples().c21().toarray()

    @property
    def c1(self) -> np.ndarray:
        """``c1[x1]``: counts of first symbols of the triples; dense (n,), O(n + nnz)."""
        return self.triples().c1()

    def probabilities(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(P1, P21, P3x1)`` at once, dense; O(n³ + nnz), raises ``DenseTooLarge`` like :meth:`counts`."""
        return probabilities(self.counts())

    @property
    def P1(self) -> np.ndarray:
        """``P1[j] = Pr(x1 = j)``, shape (n,); O(n + nnz), available at any alphabet size."""
        return self.triples().P1()

    @property
    def P21(self) -> np.ndarray:
        """``P21[i, j] = Pr(x2 = i, x1 = j)``, dense (n, n); O(n² + nnz); ``DenseTooLarge`` above limit."""
        check_dense((self.n,) * 2, "P21")
        return self.triples().P21().toarray()

    @property
    def P3x1(self) -> np.ndarray:
        """``P3x1[x][i, j] = Pr(x3 = i, x2 = x, x1 = j)``, dense (n, n, n); like :meth:`counts`."""
        return self.probabilities()[2]

    def second_moments(self, B: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
        """``sum_n m(X_n) m(X_n)ᵀ`` at operators ``B`` (n, n, n), as n blocks of n² × n².

        The moment conditions' second moments need no running state of their own:
        block j (x1 = j) is ``L D_j Lᵀ`` with ``D_j`` the counts (docs/math.md section 3).
        See :mod:`streamspec.core.weighting` for the factored forms the estimators use.
        Dense: O(n⁵) memory, small alphabets only (``DenseTooLarge`` otherwise).
        """
        B = np.asarray(B, dtype=np.float64)
        if B.shape != (self.n,) * 3:
            raise ValueError(f"B must have shape {(self.n,) * 3}, got {B.shape}")
        return second_moment_blocks(self.counts(), B, smoothing)

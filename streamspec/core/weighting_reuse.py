"""A projected weighting that reuses the blocks ``Σ_x⁻¹`` of symbols whose counts barely changed.

``Σ_x`` (docs/math.md section 7) is estimated from the triples whose middle symbol is x,
at the operators of the previous iterate. A warm refit in the same bases
(:mod:`streamspec.core.projected_warm`) keeps the inverse blocks of the previous fit's
GLS step for the symbols whose counts changed by at most a relative tolerance, and
builds new blocks, at the current operators, for the others: the cost of the
weighting then follows the symbols that changed, not the alphabet. A reused block is
the weighting estimated at the previous fit's operators and counts, which Algorithm 1
allows (W is always estimated at the previous iterate); it enters the GLS solution
only through the residual ``G_x``, whose weighting it changes by the relative change
of the counts (docs/math.md section 10).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from streamspec.core.projected_weighting import ProjectedWeighting
from streamspec.core.sigma_inverse import SigmaInverse

__all__ = ["ReusedWeighting"]


@dataclass(frozen=True)
class ReusedWeighting(ProjectedWeighting):
    """Blocks of an earlier weighting for the symbols ``reuse`` marks, ``fresh`` for the others.

    Parameters
    ----------
    blocks
        The earlier step's groups ``[(symbols, Σ⁻¹), ...]`` (sorted symbols each).
    reuse
        Boolean mask over the alphabet: the symbols whose earlier block is used.
    fresh
        The weighting of the other symbols (built for them alone).
    tau
        The scale of the losses.
    """

    blocks: list
    reuse: np.ndarray
    fresh: ProjectedWeighting
    tau: float
    mode: ClassVar[str] = "reused"

    def sigma_groups(self, symbols: np.ndarray, kp: int) -> Iterator[tuple[np.ndarray, SigmaInverse]]:
        """The earlier groups restricted to the reused symbols asked for (whole groups are
        yielded as they are, without a copy), then the fresh weighting's groups."""
        symbols = np.asarray(symbols, dtype=np.int64)
        wanted = np.zeros(self.reuse.size, dtype=bool)
        wanted[symbols] = True
        for g, inverse in self.blocks:
            keep = wanted[g] & self.reuse[g]
            if keep.all():
                yield g, inverse
            elif keep.any():
                rows = np.flatnonzero(keep)
                yield g[rows], inverse.take(rows)
        others = symbols[~self.reuse[symbols]]
        if others.size:
            yield from self.fresh.sigma_groups(others, kp)

    def solve(self, lo: int, hi: int, R: np.ndarray, factor: np.ndarray | None = None) -> np.ndarray:
        """``Σ_x⁻¹ R[x]`` for symbols lo..hi-1 (reused or fresh), by their groups. O(block · k'² r)."""
        symbols = np.arange(lo, hi)
        out = np.empty_like(R)
        for g, inverse in self.sigma_groups(symbols, R.shape[1]):
            out[g - lo] = inverse.apply(R[g - lo])
        return out

    def reused_count(self, symbols: np.ndarray) -> int:
        """How many of ``symbols`` use an earlier block."""
        return int(self.reuse[np.asarray(symbols, dtype=np.int64)].sum())

"""``Σ_x⁻¹`` of a group of symbols in the projected formulation, in its cheapest form.

The projected GLS step (:mod:`streamspec.core.projected`) only ever applies ``Σ_x⁻¹``
to right-hand sides of shape (b, k', r), b symbols at once. Each form below is one
small class with the same :meth:`SigmaInverse.apply`; which form a symbol gets is
decided once, by its weighting (:meth:`streamspec.core.projected_weighting.ProjectedWeighting.sigma_groups`).
``kind`` names the form (for tests and diagnostics, never dispatched on).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

__all__ = ["SigmaInverse", "IdentitySigmaInverse", "ScaleSigmaInverse", "DiagonalSigmaInverse",
           "WoodburySigmaInverse", "DenseSigmaInverse"]


class SigmaInverse(ABC):
    """``Σ_x⁻¹`` of a group of b symbols."""

    kind: ClassVar[str]

    @abstractmethod
    def apply(self, R: np.ndarray) -> np.ndarray:
        """``Σ_x⁻¹ R[x]`` for every symbol x of the group; R of shape (b, k', r)."""

    @abstractmethod
    def take(self, rows: np.ndarray) -> SigmaInverse:
        """The same inverses for the symbols ``rows`` of the group only (a warm refit reuses
        the blocks of the symbols whose counts did not change). O(len(rows) · block)."""


class IdentitySigmaInverse(SigmaInverse):
    """W = I: ``Σ_x = I``. Free."""

    kind: ClassVar[str] = "identity"

    def apply(self, R: np.ndarray) -> np.ndarray:
        """R itself, O(1)."""
        return R

    def take(self, rows: np.ndarray) -> IdentitySigmaInverse:
        return self


@dataclass(frozen=True)
class ScaleSigmaInverse(SigmaInverse):
    """``Σ_x = c_x I`` (a symbol with no counted pair, or shrunk all the way): ``inv[x] = 1 / c_x``."""

    inv: np.ndarray  # (b,)
    kind: ClassVar[str] = "scale"

    def apply(self, R: np.ndarray) -> np.ndarray:
        """O(b k' r)."""
        return R * self.inv[:, None, None]

    def take(self, rows: np.ndarray) -> ScaleSigmaInverse:
        return ScaleSigmaInverse(self.inv[rows])


@dataclass(frozen=True)
class DiagonalSigmaInverse(SigmaInverse):
    """Diagonal ``Σ_x``: ``inv[x]`` holds the inverse of its diagonal, (b, k')."""

    inv: np.ndarray  # (b, k')
    kind: ClassVar[str] = "diagonal"

    def apply(self, R: np.ndarray) -> np.ndarray:
        """O(b k' r)."""
        return R * self.inv[:, :, None]

    def take(self, rows: np.ndarray) -> DiagonalSigmaInverse:
        return DiagonalSigmaInverse(self.inv[rows])


@dataclass(frozen=True)
class WoodburySigmaInverse(SigmaInverse):
    """``Σ_x = c_x I + V_xᵀ V_x`` with V_x of m ≪ k' rows (a symbol seen after few distinct x1).

    Applied as ``(R - Vᵀ (c I + V Vᵀ)⁻¹ V R) / c``; ``inner`` holds ``(c I + V Vᵀ)⁻¹``,
    (b, m, m), ``V`` is (b, m, k') and ``c`` (b,).
    """

    inner: np.ndarray
    V: np.ndarray
    c: np.ndarray
    kind: ClassVar[str] = "woodbury"

    def apply(self, R: np.ndarray) -> np.ndarray:
        """O(b m k' r)."""
        VR = self.V @ R  # (b, m, r)
        return (R - self.V.transpose(0, 2, 1) @ (self.inner @ VR)) / self.c[:, None, None]

    def take(self, rows: np.ndarray) -> WoodburySigmaInverse:
        return WoodburySigmaInverse(self.inner[rows], V=self.V[rows], c=self.c[rows])


@dataclass(frozen=True)
class DenseSigmaInverse(SigmaInverse):
    """Explicit inverses ``inv[x] = Σ_x⁻¹``, (b, k', k')."""

    inv: np.ndarray
    kind: ClassVar[str] = "dense"

    def apply(self, R: np.ndarray) -> np.ndarray:
        """O(b k'² r)."""
        return self.inv @ R

    def take(self, rows: np.ndarray) -> DenseSigmaInverse:
        return DenseSigmaInverse(self.inv[rows])

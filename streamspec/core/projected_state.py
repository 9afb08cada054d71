"""What one projected fit hands to the next: its settings and its reusable state.

Both estimators fit in the projected formulation (θ_spec is its identity weighting with
k' = k, docs/math.md section 7). :class:`ProjectedSettings` is what a fit reads from
its estimator; :class:`ProjectedState` is what a warm refit
(:mod:`streamspec.core.projected_warm`) reuses: the bases, the moments that are linear
in the counts (kept unnormalised, so that new counts are added to them), the
weighting blocks of the last GLS step, and the counts themselves, which key the
change: the next refit diffs them against its own (:func:`~streamspec.core.triples_change.triples_change`)
to know which triples, hence which symbols, changed. docs/math.md section 10.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from streamspec.core import defaults
from streamspec.core.triples import Triples

__all__ = ["ProjectedSettings", "ProjectedState", "settings_of", "RefitInfo"]


@dataclass(frozen=True)
class ProjectedSettings:
    """The settings a projected fit reads (from a MEstimator or a SpectralEstimator).

    ``per_rank``: k' = ``per_rank`` · k when ``n_conditions`` is None (θ_M: 2, θ_spec: 1).
    ``auto_cap``: the largest rank ``rank="auto"`` may choose above 1,000 symbols.
    ``basis_tol`` and ``weighting_rtol``: the warm refit's tolerances (docs/math.md
    section 10). The other names are the estimators' parameters.
    """

    rank: int | str = defaults.RANK
    n_conditions: int | None = None
    weighting: str = defaults.WEIGHTING
    shrinkage: float | str = defaults.SHRINKAGE
    ridge: float = defaults.RIDGE
    tol: float = defaults.TOL
    filter: str = defaults.FILTER
    window: int | str = defaults.WINDOW
    min_proba: float = defaults.MIN_PROBA
    auto_cap: int = 100
    per_rank: int = 2
    random_state: int = 0
    basis_tol: float = defaults.BASIS_TOL
    weighting_rtol: float = defaults.WEIGHTING_RTOL

    @property
    def model_window(self) -> int:
        """The fitted model's window (:func:`~streamspec.core.defaults.filter_window`). O(1)."""
        return defaults.filter_window(self.window)


def settings_of(est: Any, **changes: Any) -> ProjectedSettings:
    """The :class:`ProjectedSettings` of an estimator: its same-named attributes, then ``changes``. O(1)."""
    names = ProjectedSettings.__dataclass_fields__
    found = {name: getattr(est, name) for name in names if getattr(est, name, None) is not None}
    if found.get("random_state") is None:
        found.pop("random_state", None)
    return replace(ProjectedSettings(**found), **changes)


@dataclass(frozen=True)
class RefitInfo:
    """How a fit was made, and why (the estimators' ``refit_`` attribute).

    Attributes
    ----------
    path
        ``"cold"``: no reusable state was given; ``"warm"``: the previous bases were kept
        and the moments updated from the changed triples alone; ``"rebased"``: the bases
        moved, block Krylov iterations from them converged to the new ones and the
        moments were projected again; ``"fallback"``: a state was given but could not be
        used (see ``reason``), so the fit was cold.
    reason
        Why the path was taken (empty for ``"cold"``).
    changed
        Distinct triples that changed, as a fraction of the new ones (NaN when cold).
    residual
        The previous bases' backward error on the new counts, in units of the sampling
        noise ``N^(-1/2)`` (NaN when cold): the bases were kept when it was at most
        ``basis_tol``.
    sines
        The largest principal sine between the previous left (k) and right (k') subspaces
        and the refined ones, after each Krylov round (empty when the
        bases were kept without iterating, or cold).
    reused
        Weighting blocks reused from the previous fit (symbols), and ``rebuilt``, built
        anew.
    """

    path: str = "cold"
    reason: str = ""
    changed: float = float("nan")
    residual: float = float("nan")
    sines: tuple[float, ...] = ()
    reused: int = 0
    rebuilt: int = 0


@dataclass
class ProjectedState:
    """The reusable state of one projected fit (θ_spec or θ_M), for a warm refit.

    Attributes
    ----------
    settings
        The settings of the fit (a warm refit with other settings starts cold).
    triples
        The counts fitted (codes and weights): the key a refit diffs its counts against.
    c1
        ``c1[x1]``, unnormalised, shape (n,).
    U, Q, s
        The left and right bases, (n, k') each (the operators use the first k columns of
        each: U and V), and the singular values of P21 they were computed for (k',).
    k
        The rank.
    Y, X
        ``c21 Q`` and ``c21ᵀ U``, unnormalised, (n, k') each: what the basis test needs.
    active, A
        The symbols whose conditions are kept (sorted) and their unnormalised conditions
        ``Uᵀ c3[x] Q``, (len(active), k, k').
    ops
        The operators of the fitted model (n, k, k), not a copy: rows outside ``active``
        hold θ_spec's operators in these bases, ``B_x = (Uᵀ c3[x] V)(Uᵀ c21 V)⁻¹``; times
        ``right`` when that is given (the model's factored form, as a warm refit of θ_spec
        writes it: the operators are ``ops[x] @ right``).
    n_middle
        Weight of the triples of each middle symbol, (n,).
    blocks
        The weighting blocks of the last GLS step, ``[(symbols, SigmaInverse), ...]``
        (None: no weighted step), with ``block_counts`` the ``n_middle`` of each symbol
        when its block was built and ``tau_x`` its scale.
    model
        The fitted model (its operators are ``ops``; with the backoff, the refit keeps its
        weights and warm-starts its HMM).
    info
        How this state's fit was made.

    Memory: the counts (16 bytes a distinct triple), O(n · k') for the bases and Y, X,
    O(len(active) · k · k') for A and up to O(len(active) · k'²) for the blocks; the
    operators are the model's own.
    """

    settings: ProjectedSettings
    triples: Triples
    c1: np.ndarray
    U: np.ndarray
    Q: np.ndarray
    s: np.ndarray
    k: int
    Y: np.ndarray
    X: np.ndarray
    active: np.ndarray
    A: np.ndarray
    ops: np.ndarray
    n_middle: np.ndarray
    blocks: list | None = None
    block_counts: np.ndarray | None = None
    tau_x: np.ndarray | None = None
    model: Any = None
    right: np.ndarray | None = None
    info: RefitInfo = field(default_factory=RefitInfo)

    @property
    def n(self) -> int:
        """Alphabet size of the fitted counts."""
        return self.triples.n

    @property
    def kp(self) -> int:
        """k', the width of the bases."""
        return int(self.Q.shape[1])

    @property
    def total(self) -> float:
        """Total weight of the fitted counts."""
        return self.triples.total

    def nbytes(self) -> int:
        """Bytes the state holds besides the model's operators."""
        arrays = [self.triples.codes, self.triples.weights, self.c1, self.U, self.Q, self.Y,
                  self.X, self.A, self.n_middle]
        size = sum(a.nbytes for a in arrays)
        for _, inverse in self.blocks or []:
            size += sum(v.nbytes for v in vars(inverse).values() if isinstance(v, np.ndarray))
        return int(size)

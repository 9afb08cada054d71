"""θ_M over windows: the projected GMM fit of the conditions ``P_x = B_x H`` (docs/math.md 11).

With window counts (``MomentAccumulator(window=L)``) the moment conditions of θ_M carry over
unchanged, with pasts and futures of L symbols in place of x1 and x3 ((11.3)):

    P_x[f, p] = Pr(past p, x, future f) = (B_x H)[f, p],   H[w, p] = Pr(current w, past p).

:class:`~streamspec.core.window_triples.WindowTriples` presents the grams as triples
``(past id, x, future id)`` over an alphabet of windows, the shape the projected fit
(:class:`~streamspec.core.projected.ProjectedFit`) consumes, so :class:`WindowProjectedFit`
is that fit with three of its hooks changed and nothing else:

- the second moment is the Hankel H (the current window ``(x, f_1..f_{L-1})`` is the row,
  not x itself), so U (top-k left) and Q (top-k' right singular vectors) are over windows,
  ``M = Uᵀ H Q`` and ``A_x = Uᵀ P_x Q`` (the same ``project_triples``);
- b1 projects the distribution of the current window, ``Uᵀ H 1`` ((11.4)–(11.5): ``b∞ᵀ Uᵀ``
  plays ``1ᵀ`` on the span of U, so ``b∞ᵀ B_x b`` is the next-symbol probability, the
  one-step marginal of :mod:`streamspec.core.spectral_windows`);
- the weightings' residual of a gram is ``u_f - B̃_x u_w`` with w its current window
  (:func:`~streamspec.core.projected_weighting.residual_pair_sums` with ``current``).

The first step (W = I) is therefore θ_spec over windows
(:func:`~streamspec.core.spectral_windows.window_spectral_operators`), and the next ones the
GLS steps of Algorithm 1 under the ``"diagonal"`` or ``"per_symbol"`` weighting. The
operators are over the n symbols, so the model is an ordinary
:class:`~streamspec.core.model.ObservableOperatorModel` of dimension k ≤ min(distinct pasts,
distinct current windows). At L = 1 the windows are the symbols and the fit is the triples'
(to rounding, on counts with the same first- and second-symbol marginals; b1 is ``Uᵀ P1``
there, ``Uᵀ Pr(x2)`` here).

Costs (nnz distinct grams, W distinct windows, P distinct (x, future) pairs, rank k, k'
conditions): interning O(nnz · L + nnz log nnz); the top-k' SVD of H (dense up to 1,000
windows, O(W³), else truncated, O(nnz · k') per iteration); ``A_x`` O(nnz · k' + P · k · k');
per outer iteration the weighting O(P · k² + nnz) and the step O(n · k'³) (per_symbol);
memory O(nnz + W · k' + n · k · k'). Nothing of size n^L is formed.

Refits (docs/math.md section 11, "Warm refits over windows"): :class:`WindowState` is what
``fit_with_state`` over windows keeps (the window l, the rank k, the grams, the bases over the
level-l window codes, the model), and :func:`plan_window_refit` keeps l and k while the grams'
mass moved little (:func:`gram_change_share`) and the previous bases are still the new
Hankel's within the sampling noise; the fit at (l, k) is then the cold one, without the
L + 1 SVDs that chose them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from streamspec.core.projected import ProjectedFit
from streamspec.core.projected_state import ProjectedSettings, RefitInfo
from streamspec.core.window_triples import WindowTriples, window_codes
from streamspec.core.windows import WindowCounts, window_bits

__all__ = ["WindowProjectedFit", "window_projected_rank", "WindowState", "window_state",
           "gram_change_share", "plan_window_refit", "WINDOW_REFIT_SHARE", "WINDOW_BASIS_TOL"]


def window_projected_rank(wt: WindowTriples, rank: int) -> int:
    """``rank`` clipped to what the windows can carry: 1 ≤ k ≤ min(distinct pasts, distinct
    current windows) (above 1,000 windows, below their number: a truncated SVD). O(nnz).

    Examples
    --------
    >>> g = WindowCounts.from_digits(2, 2, [[0, 1, 0, 1, 1], [1, 0, 1, 1, 0]])
    >>> window_projected_rank(WindowTriples.of(g), 10)
    2
    """
    pasts = np.unique(wt.triples.x1).size
    currents = np.unique(wt.current).size
    cap = min(pasts, currents)
    if wt.size > 1_000:
        cap = min(cap, wt.size - 1)
    return int(max(1, min(int(rank), cap)))


class WindowProjectedFit(ProjectedFit):
    """The projected θ_M fit over the windows of ``grams`` (module docstring), cold.

    Parameters
    ----------
    est
        The :class:`~streamspec.core.projected_state.ProjectedSettings`; an integer ``rank`` is
        clipped by :func:`window_projected_rank`.
    max_outer
        Outer iterations at most (Algorithm 1; 1 under the identity weighting).
    grams
        The window counts (every gram, padded ones included).
    labels
        The symbols' labels, or None.
    scored_only
        The model's predictions alone are used (the backoff's 90%).

    A warm start (``init``) is not taken: window ids are interned afresh from each set of
    counts, so a previous basis has no rows to map onto; the fit is cold and ``refit_`` says
    so (``"fallback"`` when a start was given). The estimators' refits over windows keep the
    window and rank instead (:class:`WindowState`, :func:`plan_window_refit`) and run this fit
    cold at them. Costs: see the module docstring.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> from streamspec.core.hmm_moments import exact_windows
    >>> from streamspec.core.projected_state import ProjectedSettings
    >>> from streamspec.core.warm_fit import run_steps
    >>> ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),   # 4 states, 2 symbols
    ...            O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    >>> fit = run_steps(WindowProjectedFit(ProjectedSettings(rank=4), 2, exact_windows(ring, 2), None))
    >>> fit.model.B.shape, fit.fitted["n_conditions_"], round(float(fit.model.binf @ fit.model.b1), 9)
    ((2, 4, 4), 4, 1.0)
    """

    def __init__(self, est: ProjectedSettings, max_outer: int, grams: WindowCounts,
                 labels: list | None, scored_only: bool = False):
        self.windows = WindowTriples.of(grams)
        if not isinstance(est.rank, str):
            est = replace(est, rank=window_projected_rank(self.windows, est.rank))
        super().__init__(est, max_outer, self.windows.triples, labels, None, scored_only,
                         keep_state=False)

    def second_moment_counts(self):
        """The Hankel counts ``N · H[current, past]`` (size × size, sparse). O(nnz)."""
        return self.windows.hankel() * self.triples.total

    def n_operators(self) -> int:
        """The n symbols (not the windows). O(1)."""
        return self.windows.n

    def start_counts(self, c1: np.ndarray) -> np.ndarray:
        """``N · H 1``: the current windows' counts ((11.4), as θ_spec over windows). O(nnz)."""
        t = self.triples
        return np.bincount(self.windows.current, weights=t.weights, minlength=t.n)

    def pair_current(self) -> np.ndarray:
        """The current window of each distinct pair (x, future): that of its first gram. O(P)."""
        return self.windows.current[self.index.pair_starts[:-1]]

    def initial_estimate(self, init) -> None:
        """Cold (θ_spec over windows first); a given start is recorded as not taken. O(1)."""
        self.ops = None
        if init is not None:
            self.info = RefitInfo(path="fallback", reason="warm refits are not supported over "
                                  "windows (window ids are interned afresh): cold fit")

    def finish(self):
        """The model (without factors: a warm start cannot use bases over other windows) and the
        fitted attributes, ``window_`` among them."""
        model, fitted = super().finish()
        model.factors = None
        fitted["window_"] = self.windows.window
        return model, fitted


# A refit over windows keeps the previous fit's window l and rank k while (a) the grams moved by
# at most this share of their mass (total variation) and (b) the previous bases are still, within
# ``basis_tol`` noise levels, the top singular subspaces of the new Hankel at l; else it is cold.
WINDOW_REFIT_SHARE = 0.25
# The backward error (in noise levels, window_rank.noise_level) up to which the window and rank
# are kept: within the sampling noise the new counts cannot tell the previous top-k subspaces
# from their own. Why not the triples' basis_tol (0.1): there the kept bases are used as they
# are; here the bases are recomputed at the kept (l, k) (an SVD of W ≤ a few hundred windows,
# milliseconds), so only the choice of l and k is kept. basis_tol = 0 still means "never kept".
WINDOW_BASIS_TOL = 1.0


@dataclass
class WindowState:
    """What a refit over windows reuses (``MEstimator.fit_with_state`` over windows).

    Attributes
    ----------
    level, k
        The window l and rank k of the fit (``count_window="auto"`` and ``rank="auto"``
        chose them with up to L + 1 SVDs: a warm refit keeps them).
    key
        The settings the choice depends on (rank, count_window, the counts' window L, n).
    grams
        The window counts fitted (all L), to measure how much they moved.
    codes, U, Q
        The codes (:func:`~streamspec.core.window_triples.window_codes`) of the windows at
        level l, in id order, and the fit's bases over them (size × k, size × k'): a window
        absent from the next counts drops, a new one gets a zero row.
    model
        The fitted model (with its backoff: a refit keeps its weights, HMM and merges its trigram).
    changed
        The mass share of the grams changed since the fit that chose l and k.

    Memory: the counts' arrays (shared with the accumulator's snapshot) and O(W · k') floats.
    """

    level: int
    k: int
    key: tuple
    grams: WindowCounts
    codes: np.ndarray
    U: np.ndarray
    Q: np.ndarray
    model: Any = None
    changed: float = 0.0

    def nbytes(self) -> int:
        """Bytes of the arrays held (the counts included). O(1)."""
        return int(self.grams.codes.nbytes + self.grams.weights.nbytes + self.codes.nbytes
                   + self.U.nbytes + self.Q.nbytes)


def window_state(grams: WindowCounts, level: int, k: int, key: tuple, basis: tuple,
                 model: Any = None, changed: float = 0.0, marginal: WindowCounts | None = None
                 ) -> WindowState:
    """The :class:`WindowState` of a fit over ``grams`` at window ``level``, rank k, with the fit's
    ``basis_`` ``(U, Q)`` over the windows of ``grams.marginal(level)`` (``marginal``, if
    already computed). O(nnz · L)."""
    wt = WindowTriples.of(grams.marginal(level) if marginal is None else marginal)
    codes = window_codes(wt.windows, window_bits(level))
    U, Q = basis
    return WindowState(level, k, key, grams, codes, np.asarray(U), np.asarray(Q), model, changed)


def gram_change_share(old: WindowCounts, new: WindowCounts) -> float:
    """Total variation between the normalised gram counts: ``½ Σ |new/N' − old/N|`` (0: the same
    distribution; 1: disjoint). On a small alphabet every gram's count changes at every refit,
    so the share of *distinct* grams changed (the triples' measure) says nothing; this is the
    share of the mass, ≤ the new data's share of the total (1% more data: at most 0.01).
    O(nnz) (two sorted code arrays merged)."""
    if old.total <= 0 or new.total <= 0:
        return 1.0
    # why no sort: both code arrays are sorted and distinct; the old ones are found in the new
    pos = np.searchsorted(new.codes, old.codes)
    inside = pos < new.codes.size
    found = np.zeros(old.codes.size, dtype=bool)
    found[inside] = new.codes[pos[inside]] == old.codes[inside]
    p_new, p_old = new.weights / new.total, old.weights / old.total
    both = np.abs(p_new[pos[found]] - p_old[found]).sum()
    only_new = p_new.sum() - p_new[pos[found]].sum()
    return float(0.5 * (both + max(only_new, 0.0) + p_old[~found].sum()))


def _mapped(rows: np.ndarray, old_codes: np.ndarray, new_codes: np.ndarray, size: int) -> np.ndarray:
    """``rows`` (indexed like ``old_codes``) moved to the ids of ``new_codes`` (both sorted);
    windows new to these counts get zero rows. O(W log W)."""
    out = np.zeros((size, rows.shape[1]))
    pos = np.searchsorted(new_codes, old_codes)
    inside = pos < new_codes.size
    found = np.zeros(old_codes.size, dtype=bool)
    found[inside] = new_codes[pos[inside]] == old_codes[inside]
    out[pos[found]] = rows[: old_codes.size][found]
    return out


def plan_window_refit(state: WindowState, grams: WindowCounts, key: tuple, basis_tol: float,
                      rank_auto: bool, marginal: WindowCounts | None = None
                      ) -> tuple[RefitInfo, float]:
    """Whether a refit over ``grams`` keeps ``state``'s window and rank (``path="warm"``) or is
    cold (``"fallback"``, with the reason), and the mass share changed since ``state``
    (:func:`gram_change_share`). Kept when the settings and alphabet are the same, the share
    summed since the choice is within :data:`WINDOW_REFIT_SHARE`, the previous bases' backward
    error on the new Hankel at level l, ``max(‖HQ − UUᵀHQ‖, ‖HᵀU − QQᵀHᵀU‖)`` (U, Q: the top k), is at most
    :data:`WINDOW_BASIS_TOL` noise levels (:func:`~streamspec.core.window_rank.noise_level`;
    never with ``basis_tol=0``), and under
    ``rank="auto"`` the singular values of ``UᵀHQ`` above the noise are still k. ``marginal``:
    ``grams.marginal(state.level)`` if already computed. O(nnz · L + W · k²)."""
    from streamspec.core.window_rank import noise_level

    if key != state.key:
        return RefitInfo("fallback", "the settings, alphabet or counted window changed: cold fit"), np.nan
    share = gram_change_share(state.grams, grams)
    changed = state.changed + share
    if not changed <= WINDOW_REFIT_SHARE:
        return RefitInfo("fallback", f"the grams moved: {changed:.3g} of their mass since the window "
                         f"and rank were chosen (> {WINDOW_REFIT_SHARE}): cold fit", share), share
    wt = WindowTriples.of(grams.marginal(state.level) if marginal is None else marginal)
    codes = window_codes(wt.windows, window_bits(state.level))
    U = _mapped(state.U, state.codes, codes, wt.size)
    # why the top k of Q: the conditions' k' > k columns span singular values below the k-th,
    # whose backward error is the Hankel's own tail, not a move of the bases
    Q = _mapped(state.Q[:, : state.k], state.codes, codes, wt.size)
    H = wt.hankel()
    noise = noise_level(H, wt.triples.total)
    HQ, HU = np.asarray(H @ Q), np.asarray(H.T @ U)
    residual = max(np.linalg.norm(HQ - U @ (U.T @ HQ), 2), np.linalg.norm(HU - Q @ (Q.T @ HU), 2))
    residual = float(residual / noise) if noise > 0 else np.inf
    tol = WINDOW_BASIS_TOL if basis_tol > 0 else 0.0
    if not residual <= tol:
        return RefitInfo("fallback", f"the window Hankel's bases moved (backward error {residual:.3g} "
                         f"noise > {tol:g}): cold fit", share, residual), share
    if rank_auto:
        s = np.linalg.svd(U.T @ HQ, compute_uv=False)
        count = int((s > noise).sum())
        if count != state.k and not (state.k == 1 and count == 0):
            return RefitInfo("fallback", f"the spectrum moved: {count} singular values above the "
                             f"noise, the rank is {state.k}: cold fit", share, residual), share
    return RefitInfo("warm", "window and rank kept", share, residual), share

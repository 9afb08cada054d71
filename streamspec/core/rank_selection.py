"""Choosing the rank by what predicts: held-out log loss of every rank, from one SVD.

The number of singular values of P21 above the sampling noise says how many
directions the counts can tell apart, not how many help prediction: on streams of
short sequences over a few symbols it chose rank 3, and the spectral model alone then
gave probability ≤ 1e-5 to a fifth of the held-out symbols. :func:`select_rank` chooses
by held-out log loss instead, cheaply:

* the counts are split at random (binomial thinning), ``holdout`` of them held out;
* one truncated SVD of the kept P21, ``P21 = U Σ Vᵀ``, at the largest rank allowed
  (:func:`max_rank`), and one projection of the kept triples ``Uᵀ P3x1[x] V Σ⁻¹``;
* θ_spec at every smaller rank k is the leading k × k block of those operators (and the
  first k entries of ``b1 = Uᵀ P1``, ``b∞ = Σ⁻¹ Vᵀ P1``): with exact singular vectors
  ``(U_kᵀ P21)⁺ = V_k Σ_k⁻¹``, so the blocks *are* the rank-k estimates;
* each rank of a geometric grid scores the held-out contexts ``(x1, x2) → x3`` (at most
  ``max_contexts`` distinct contexts, fewer on large alphabets: a budget of context ×
  symbol × rank products) with the window filter, clipped, renormalised and floored:
  first the ranks up to :func:`near_rank` of the number of singular values above the
  sampling noise (:func:`~streamspec.core.window_rank.noise_level`), the larger ones only
  when the best of those is the largest (on few counts the far ranks' scores are noise).

Cost: the SVD at the largest rank, O(nnz · k_max + P · k_max²) for the projection,
O(n · k_max²) memory for the operators, and the scoring budget (~1.5·10⁸ products).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from streamspec.core import defaults
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.subspace import DENSE_SVD_MAX, project_triples, top_singular
from streamspec.core.triples import Triples
from streamspec.core.window_rank import noise_level

__all__ = ["select_rank", "resolve_rank", "max_rank", "rank_candidates", "MODEL_FLOATS_MAX", "SCORE_BUDGET",
           "RANK_CHOSEN_ON", "with_metadata", "near_rank", "scored_near_first"]

MODEL_FLOATS_MAX = 1 << 23  # a candidate model holds n · k² floats: at most this many (64 MiB)
SCORE_BUDGET = 1.5e8  # context × symbol × rank products spent on scoring (~1.5 s)
_MAX_RANK = 64


def max_rank(n: int) -> int:
    """The largest rank tried on ``n`` symbols: ``n·k² ≤ 2²³``, ``k ≤ 64``, and below n above
    :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols (a truncated SVD). O(1).

    >>> max_rank(27), max_rank(20_000), max_rank(10**5)
    (27, 20, 9)
    """
    k = min(_MAX_RANK, int(np.sqrt(MODEL_FLOATS_MAX / max(n, 1))), n if n <= DENSE_SVD_MAX else n - 1)
    return max(1, k)


def rank_candidates(k_max: int) -> list[int]:
    """The ranks scored: 1, 2, 3, 4, then ×1.5 each step, up to ``k_max`` (always included). O(log k).

    >>> rank_candidates(27)
    [1, 2, 3, 4, 6, 9, 14, 21, 27]
    """
    grid, k = [], 1
    while k < k_max:
        grid.append(k)
        k = k + 1 if k < 4 else int(round(k * 1.5))
    return sorted(set(grid) | {k_max})


def _scores(triples: Triples, held: Triples, k_max: int, min_proba: float, window: int,
            max_contexts: int, rng: np.random.Generator) -> dict[int, float]:
    """Held-out log loss (nats per held-out triple) of θ_spec at each candidate rank."""
    n = triples.n
    P21 = triples.P21()
    U, s, V = top_singular(P21, k_max)
    ok = s > s[0] * 1e-12 if s.size else s
    k_max = max(1, int(ok.sum()))
    U, s, V = U[:, :k_max], s[:k_max], V[:, :k_max]
    P1 = triples.P1()
    B = project_triples(triples, U, V / s)
    b1, binf = U.T @ P1, (V.T @ P1) / s
    ranks = rank_candidates(k_max)
    # why first the ranks near the noise's: on few counts the far ranks' scores are noise (the
    # river stream's first fit, 7,215 triples over 1,603 symbols, 8 values above the noise,
    # scored rank 64 0.008 nats better than 9 with 14-48 worse), and a large rank costs every fit
    near = near_rank(int((s > noise_level(P21, triples.total)).sum()))
    # the held-out contexts: distinct (x1, x2), all their held-out x3, drawn ∝ weight
    ctx = held.x1 * n + held.x2
    uniq, inv = np.unique(ctx, return_inverse=True)
    m = int(min(max_contexts, max(50, SCORE_BUDGET / (n * sum(ranks)))))
    w = held.weights
    if uniq.size > m:
        ctx_w = np.bincount(inv, weights=w)
        draws = rng.choice(uniq.size, size=m, p=ctx_w / ctx_w.sum())
        w = np.bincount(draws, minlength=uniq.size)[inv] * w / ctx_w[inv]
    keep = w > 0
    x1, x2, x3, w = held.x1[keep], held.x2[keep], held.x3[keep], w[keep]
    contexts, which = np.unique(np.stack([x1, x2], axis=1)[:, max(0, 2 - window):], axis=0,
                                return_inverse=True)
    which = which.ravel()

    def score(k: int) -> float:
        model = ObservableOperatorModel(b1[:k], binf[:k], B[:, :k, :k], window=window,
                                        min_proba=min(min_proba, 0.5 / n))
        states = model.window_states(contexts) if contexts.shape[1] else b1[None, :k]
        p = np.maximum(model.clipped_probas(x3, states, which), model.min_proba)
        return float(-(w * np.log(p)).sum() / w.sum())

    return scored_near_first(ranks, near, score)


def scored_near_first(ranks: list[int], near: int, score: Callable[[int], float]) -> dict[int, float]:
    """``{rank: score(rank)}`` for the ``ranks`` up to ``near``, and for the larger ones only when
    the least score so far is the largest rank's (the best may lie further). O(len(ranks)) calls.

    >>> scored_near_first([1, 2, 4, 8, 16], 4, lambda k: abs(k - 2))
    {1: 1, 2: 0, 4: 2}
    >>> sorted(scored_near_first([1, 2, 4, 8, 16], 4, lambda k: -k))
    [1, 2, 4, 8, 16]
    """
    out: dict[int, float] = {}
    for group in ([k for k in ranks if k <= near], [k for k in ranks if k > near]):
        if out and min(out, key=out.get) < max(out):  # the best is not the largest scored
            break
        for k in group:
            out[k] = score(k)
    return out


def select_rank(triples: Triples, *, k_max: int | None = None, holdout: float = 0.1,
                random_state: int | None = 0, min_proba: float = 1e-6, window: int = 2,
                max_contexts: int = 2000) -> tuple[int, dict[int, float]]:
    """``(rank, scores)``: the rank of least held-out log loss, and every candidate's loss.

    See the module docstring. ``k_max`` defaults to :func:`max_rank`; ``window`` and
    ``min_proba`` are those of the model to be fitted. With too few counts to hold any out,
    ``(min(k_max, rank of P21), {})``.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> x = HMM.random(3, 8, random_state=0, concentration=0.3).sample(50_000, random_state=1)
    >>> t = Triples.from_arrays(8, x[:-2], x[1:-1], x[2:])
    >>> k, scores = select_rank(t)
    >>> k in (3, 4), sorted(scores)
    (True, [1, 2, 3, 4, 6, 8])
    """
    n = triples.n
    k_max = max_rank(n) if k_max is None else max(1, min(int(k_max), max_rank(n)))
    rng = np.random.default_rng(random_state)
    held_w = rng.binomial(np.rint(triples.weights).astype(np.int64), holdout).astype(np.float64)
    if not np.array_equal(triples.weights, np.rint(triples.weights)):  # forgetting: units of weight
        units = np.maximum(np.ceil(triples.weights), 1.0)
        held_w = rng.binomial(units.astype(np.int64), holdout) * (triples.weights / units)
    kept_w = triples.weights - held_w
    a, b = kept_w > 0, held_w > 0
    kept = Triples(n, triples.codes[a], kept_w[a])
    held = Triples(n, triples.codes[b], held_w[b])
    if kept.total <= 0 or held.total <= 0:
        return min(k_max, max(1, np.linalg.matrix_rank(triples.P21().toarray()) if n <= 256 else 1)), {}
    scores = _scores(kept, held, k_max, min_proba, window, max_contexts, rng)
    return min(scores, key=scores.get), scores


RANK_CHOSEN_ON = "rank_chosen_on"  # model metadata: the triples the rank was chosen on


def resolve_rank(estimator, triples: Triples, init=None) -> tuple[int, dict[int, float], dict[str, str]]:
    """``(rank, scores, metadata)`` an estimator fits ``triples`` with.

    An integer rank as it is. ``"auto"``: :func:`select_rank` with the estimator's window,
    floor and seed; in a refit (``init``, a previous model) the previous rank, so that the
    refit can start from its solution, until the counts have doubled since it was chosen
    (the model's metadata ``rank_chosen_on``), then chosen again, first among the ranks up to
    :func:`near_rank` of the previous one (all of them when the best is the largest of
    those: a choice costs its largest rank's SVD and projection). ``metadata`` is what the
    fitted model should carry (``{}`` for an integer rank). O(1), or the cost of
    :func:`select_rank`.

    >>> from streamspec import SpectralEstimator
    >>> t = Triples.from_arrays(3, [0, 1, 2] * 9, [1, 2, 0] * 9, [2, 0, 1] * 9)
    >>> resolve_rank(SpectralEstimator(rank=2), t)
    (2, {}, {})
    """
    rank = estimator.rank
    if not (isinstance(rank, str) and rank == "auto"):
        return int(rank), {}, {}
    previous = getattr(init, "rank", None)
    chosen_on = float((getattr(init, "metadata", None) or {}).get(RANK_CHOSEN_ON, "nan"))
    if (isinstance(previous, int | np.integer) and 1 <= previous <= max_rank(triples.n)
            and not triples.total >= 2 * chosen_on):  # NaN (not recorded): keep it
        return int(previous), {}, ({} if chosen_on != chosen_on else {RANK_CHOSEN_ON: f"{chosen_on:.0f}"})
    window = defaults.filter_window(estimator.window) if estimator.filter == "window" else 2
    seed = getattr(estimator, "random_state", 0)
    kwargs = {"min_proba": estimator.min_proba, "window": window,
              "random_state": 0 if seed is None else seed}
    cap = max_rank(triples.n)
    if isinstance(previous, int | np.integer) and near_rank(int(previous)) < cap:
        # why: the SVD and the projection at the largest rank are most of a selection; a
        # rechoice tries the ranks up to about twice the previous one, and all of them
        # only when the best is the largest tried
        k, scores = select_rank(triples, k_max=near_rank(int(previous)), **kwargs)
        if not scores or k < max(scores):
            return k, scores, {RANK_CHOSEN_ON: f"{triples.total:.0f}"}
    k, scores = select_rank(triples, **kwargs)
    return k, scores, {RANK_CHOSEN_ON: f"{triples.total:.0f}"}


def near_rank(previous: int) -> int:
    """The largest rank a rechoice of the rank tries first, after ``previous``: 2k + 4. O(1).

    >>> near_rank(6), near_rank(64)
    (16, 132)
    """
    return 2 * previous + 4


def with_metadata(model: ObservableOperatorModel, state, metadata: dict[str, str]) -> ObservableOperatorModel:
    """``model`` carrying ``metadata`` besides its own (``model`` itself when there is none);
    a refit state (anything with a ``model`` attribute) is pointed at the new model, so
    that the next refit reads it. O(1)."""
    if not metadata:
        return model
    model = model.replace(metadata={**model.metadata, **metadata})
    if state is not None and hasattr(state, "model"):
        state.model = model
    return model

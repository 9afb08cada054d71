"""``rank="auto"`` of the online learner: candidate ranks scored by their online log loss."""

from __future__ import annotations

import numpy as np

from streamspec.adapters.prediction_table import PredictionTable
from streamspec.core.fit_data import triples_of
from streamspec.core.params import Estimator, clone
from streamspec.core.subspace import DENSE_SVD_MAX, top_singular
from streamspec.core.triples import Triples
from streamspec.streaming.refitter import refit_estimator

__all__ = ["RankScores", "RankSelector", "spectrum_rank", "RANK_GRID", "MODEL_FLOATS_MAX"]

MODEL_FLOATS_MAX = 1 << 24  # rank="auto": candidate ranks k with n·k² above this are skipped
RANK_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


class RankScores:
    """Online (out-of-sample) log losses of the candidate ranks of the current model.

    The learner adds ``-log p(symbol)`` under each candidate before learning the symbol;
    the next fit reads them to choose its rank. Shared by :class:`SpectralHMM` and its
    :class:`RankSelector`.
    """

    def __init__(self):
        self.table: PredictionTable | None = None
        self.ranks: list[int] = []
        self.loss: list[float] = []
        self.count = 0

    def reset(self, table: PredictionTable) -> None:
        self.ranks = [r for r, _ in table.candidates]
        self.loss = [0.0] * len(self.ranks)
        self.count = 0
        self.table = table

    def mean(self) -> dict[int, float]:
        """Mean online log loss (nats per symbol) of each candidate rank so far."""
        n = self.count
        return {r: v / n for r, v in zip(self.ranks, list(self.loss), strict=True)} if n else {}

    def add(self, table: PredictionTable, code: int, i: int) -> None:
        """Add the online loss of symbol ``i`` after context ``code`` under each candidate rank
        of ``table`` (a new table restarts the scores). O(candidates) lookups."""
        if self.table is not table:
            self.reset(table)
        loss = self.loss
        for j, (_, cand) in enumerate(table.candidates):
            lr = cand.logrows.get(code)
            if lr is None:
                lr = cand.logrow(code)
            loss[j] += lr[i] if i < len(lr) else cand.log_floor
        self.count += 1

    def choose(self) -> int | None:
        """The candidate rank with the lowest online loss (``None`` without scores)."""
        scores = self.mean()
        return min(scores, key=scores.get) if scores else None


class RankSelector(Estimator):
    """Estimator wrapper that fits several ranks and keeps the one with the best online loss.

    Each fit uses the ranks of ``ranks`` within a factor 2 of the current choice (and the
    alphabet size). The choice is the candidate of the previous fit with the lowest log
    loss on the symbols that arrived after it (:class:`RankScores`): a progressive,
    out-of-sample criterion, as docs/math.md section 4 recommends. The first fit, with no
    scores yet, takes the number of singular values of P21 above the noise level
    ``N^(-1/2)``.

    Parameters
    ----------
    estimator
        The estimator template (its ``rank`` is replaced).
    ranks
        The grid of ranks.
    scores
        The shared :class:`RankScores`.

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator()
    >>> acc.learn_many("abcd" * 50)
    >>> model = RankSelector(SpectralEstimator(), ranks=(1, 2, 4), scores=RankScores()).fit(acc)
    >>> model.rank, sorted(model.candidates)
    (4, [2, 4])

    """

    def __init__(self, estimator, *, ranks: tuple = RANK_GRID, scores: RankScores | None = None):
        self.estimator = estimator
        self.ranks = ranks
        self.scores = scores

    def fit(self, data):
        """Fit the candidate ranks near the current choice; returns the chosen one's model.

        Costs one fit per candidate (2-5), plus, for the first fit, a truncated SVD of
        the sparse P21 (O(nnz · k) per iteration). Ranks k with n·k² above
        :data:`MODEL_FLOATS_MAX` floats are left out of the grid (a model holds n·k²).
        """
        n = data.n
        cap = n if n <= DENSE_SVD_MAX else n - 1  # a truncated SVD needs k < n
        grid = sorted({min(int(r), cap) for r in self.ranks})
        fits = [r for r in grid if n * r * r <= MODEL_FLOATS_MAX]
        grid = fits or grid[:1]
        choice = self.scores.choose() if self.scores is not None else None
        if choice is None:
            k = spectrum_rank(triples_of(data)[0], max(grid))
            choice = min(grid, key=lambda r: (abs(r - k), r))
        choice = min(choice, max(grid))
        near = sorted({r for r in grid if choice / 2 <= r <= choice * 2} | {choice})
        models = {}
        for r in near:
            # as the Refitter does: a model needs min_proba < 1/n
            est, _ = refit_estimator(clone(self.estimator, rank=r), n, None, 1)
            models[r] = est.fit(data)
        model = models[choice].replace(candidates=models)
        models[choice] = model  # why: prepare_table recognises the chosen model among them
        self.rank_ = choice
        return model


def spectrum_rank(triples: Triples, kmax: int) -> int:
    """Number of singular values of P21 above the noise level ``N^(-1/2)``, at most ``kmax``.

    P21 stays sparse: up to :data:`~streamspec.core.subspace.DENSE_SVD_MAX` symbols all its
    singular values are computed (O(n³)), above it only the top ``kmax`` (a truncated
    SVD, O(nnz · kmax) per iteration, O(n · kmax) memory).

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 2] * 30, x2=[1, 2, 0] * 30, x3=[2, 0, 1] * 30)
    >>> spectrum_rank(t, 3)
    3
    """
    total = triples.total
    if not total > 0:
        raise ValueError("cannot choose a rank from empty counts")
    P21 = triples.P21()
    if triples.n <= DENSE_SVD_MAX:
        sv = np.linalg.svd(P21.toarray(), compute_uv=False)
    else:
        sv = top_singular(P21, max(1, min(kmax, triples.n - 1)))[1]
    return max(1, min(int(kmax), int((sv > 1.0 / np.sqrt(total)).sum())))

"""Choosing the rank, the filter and its window by held-out log loss.

docs/math.md section 4: the recursive filter propagates estimation error, so much
that on long text it lost to a bigram model at every rank; restarting from b1
over the last few symbols bounds that error. Which rank and window are best
depends on the data, so they are chosen by measured log loss on held-out
sequences, never fixed in advance.

Measured on Alice (``demos/bench_core.py``, 80% / 20% split of the letters,
θ_M): the window filter with w = 2 at full rank gave 2.19 nats per letter, the
bigram 2.45, the recursive filter 5.96 to 7.74 at ranks 5 and 10.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from streamspec.core.fit_data import alphabet_size
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.params import clone

__all__ = ["PredictorSelection", "select_predictor", "rank_grid", "DEFAULT_WINDOWS"]

DEFAULT_WINDOWS = (1, 2, 3, 4)


@dataclass
class PredictorSelection:
    """The outcome of :func:`select_predictor`.

    Attributes
    ----------
    model
        The best model, with the chosen filter and window set.
    rank, filter, window
        The chosen settings.
    log_loss
        Its held-out log loss (nats per symbol).
    table
        One row per (rank, filter, window) tried: dicts with those keys and ``log_loss``.
    """

    model: ObservableOperatorModel
    rank: int
    filter: str
    window: int
    log_loss: float
    table: list[dict] = field(default_factory=list)


def rank_grid(n: int, size: int = 6) -> list[int]:
    """About ``size`` ranks spread geometrically over 1..n, always including n."""
    grid = np.unique(np.round(np.geomspace(1, n, num=min(size, n))).astype(int))
    return [int(k) for k in grid]


def select_predictor(
    estimator,
    train,
    validation: Sequence,
    ranks: Sequence[int] | None = None,
    windows: Sequence[int] = DEFAULT_WINDOWS,
    recursive: bool = True,
) -> PredictorSelection:
    """Fit ``estimator`` at each rank and keep the (rank, filter, window) of least held-out loss.

    Parameters
    ----------
    estimator
        A SpectralEstimator or MEstimator; it is copied, never modified.
    train
        A MomentAccumulator (or counts) to fit on; it is never densified here (each
        fit reads it as its estimator does).
    validation
        Held-out sequences of symbol indices.
    ranks
        Ranks to try; by default :func:`rank_grid` over 1..n.
    windows
        Windows of the window filter to try.
    recursive
        Also try the recursive filter.

    Costs one fit per rank plus, per (rank, filter, window), a pass over the validation
    symbols: O(T · (window · k² + n · k)) for T of them.

    Examples
    --------
    >>> from streamspec import HMM, MomentAccumulator, SpectralEstimator
    >>> hmm = HMM.random(n_states=2, n_symbols=4, random_state=0)
    >>> acc = MomentAccumulator(n_symbols=4)
    >>> acc.learn_many(hmm.sample(20_000, random_state=1))
    >>> best = select_predictor(SpectralEstimator(), acc, [hmm.sample(2_000, random_state=2)])
    >>> best.rank in (1, 2, 3, 4) and best.filter in ("window", "recursive")
    True
    >>> len(best.table), best.model.rank == best.rank
    (20, True)
    """
    n = alphabet_size(train)
    ranks = list(ranks) if ranks is not None else rank_grid(n)
    if not ranks:
        raise ValueError("no rank to try")
    validation = [np.asarray(v) for v in validation]
    if not sum(v.size for v in validation):
        raise ValueError("the validation data holds no symbol")
    configs = [("window", int(w)) for w in windows] + ([("recursive", 0)] if recursive else [])
    table, best = [], None
    for k in ranks:
        model = clone(estimator, rank=k).fit(train)
        for filt, w in configs:
            candidate = model.with_filter(filt, w if filt == "window" else model.window)
            loss = candidate.log_loss(validation)
            table.append({"rank": k, "filter": filt, "window": w, "log_loss": loss})
            if best is None or loss < best.log_loss:
                best = PredictorSelection(candidate, k, filt, w, loss)
    best.table = table
    return best

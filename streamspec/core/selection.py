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
from streamspec.core.rank_selection import MODEL_FLOATS_MAX, max_rank, rank_candidates

__all__ = ["PredictorSelection", "select_predictor", "DEFAULT_WINDOWS"]

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
        Ranks to try; by default :func:`~streamspec.core.rank_selection.rank_candidates` up to
        :func:`~streamspec.core.rank_selection.max_rank` (a model of rank k holds n·k²
        floats: at most 2²⁵). A rank above that bound is refused, naming the memory it
        would take.
    windows
        Windows of the window filter to try.
    recursive
        Also try the recursive filter.

    Costs one fit per rank (each linear in n and in the distinct triples) plus, per (rank,
    filter, window), a pass over the validation symbols: O(T · (window · k² + n · k)) for
    T of them; memory O(n · k²) for one model at a time, k ≤ ``max_rank(n)``.

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
    >>> select_predictor(SpectralEstimator(), acc, [[0, 1]], ranks=[4000])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: rank 4000 on 4 symbols: ...
    """
    n = alphabet_size(train)
    ranks = list(ranks) if ranks is not None else rank_candidates(max_rank(n))
    if not ranks:
        raise ValueError("no rank to try")
    too_big = [k for k in ranks if n * k * k > MODEL_FLOATS_MAX]
    if too_big:
        k = max(too_big)
        raise ValueError(f"rank {k} on {n} symbols: its model would hold {n * k * k * 8 / 1e9:.1f} GB "
                         f"of operators; try ranks up to {max_rank(n)}")
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

"""One refit of an estimator: a fresh copy for the counts, and its start (state, factors or cold).

Shared by :class:`~streamspec.streaming.refitter.Refitter` and
:class:`~streamspec.streaming.with_hmm.WithHMM` (and the adapters' rank selection), so that
every refit clamps the same settings and warm-starts the same way.
"""

from __future__ import annotations

import inspect
from typing import Any

from streamspec.core.params import clone, get_params

__all__ = ["fit_once", "refit_estimator", "keeps_state", "rank_bound"]


def fit_once(estimator, data, prev, state, sweeps: int) -> tuple[Any, Any, Any, bool, str]:
    """``(estimator, model, state, warm, path)`` of one refit on ``data`` after the model
    ``prev`` and its reusable ``state`` (either may be None).

    From the previous state when the estimator keeps one (``fit_with_state``), else from
    the previous model's factors (:func:`refit_estimator`), else cold; ``path`` says which
    (:class:`~streamspec.streaming.refitter.FitRecord`). Costs one fit of the estimator.
    """
    est, warm = refit_estimator(estimator, data.n, prev, sweeps, state=state, max_rank=rank_bound(data))
    if keeps_state(est):
        with_state = est.fit_with_state
        init = state if state is not None else (prev if warm else None)
        model, new_state = with_state(data, init=init)
        info = getattr(est, "refit_", None)
        path = info.path if info is not None and state is not None else (
            "model" if warm else "cold")
        return est, model, new_state, path in ("warm", "rebased", "model"), path
    model = est.fit(data, init=prev) if warm else est.fit(data)
    warm = bool(getattr(est, "warm_", warm))  # an adapter that warm-starts by itself says so
    info = getattr(est, "refit_", None)  # ... and how (WithHMM keeps its own state)
    if info is not None and info.path != "cold":
        return est, model, None, warm, info.path
    return est, model, None, warm, "model" if warm else "cold"


def rank_bound(data) -> int:
    """The largest rank counts ``data`` can support: the alphabet n over triples, n**L over
    windows of L symbols (a Hankel matrix over windows has at most that many rows; the
    estimators cap it further at the distinct windows they see). O(1).

    >>> from streamspec import MomentAccumulator
    >>> acc = MomentAccumulator(n_symbols=3, window=2)
    >>> acc.learn_many([0, 1, 2, 1, 0, 2, 2, 1])
    >>> rank_bound(acc), rank_bound(MomentAccumulator(n_symbols=3, window=1))
    (9, 3)
    """
    L = getattr(data, "current_window", getattr(data, "window", 1))
    L = L if isinstance(L, int) and not isinstance(L, bool) and L >= 1 else 1
    return int(data.n) ** L


def refit_estimator(estimator, n: int, prev, sweeps: int, state: Any = None,
                    max_rank: int | None = None) -> tuple[Any, bool]:
    """A fresh copy of ``estimator`` for ``n`` symbols, and whether it warm-starts from ``prev``.

    The copy (:func:`~streamspec.core.params.clone`) has ``rank`` clamped to ``max_rank``
    (default n; over windows :func:`rank_bound` of the counts, which may exceed n) and
    ``min_proba`` to ``0.5 / n`` when it is not below ``1 / n``. It warm-starts (the
    caller then fits it with ``fit(data, init=prev)``) when ``prev`` carries factors of
    the same rank and the estimator offers a warm start, ``estimator.warm_start(sweeps)``
    (:class:`~streamspec.MEstimator`: at most ``sweeps`` sweeps in one outer
    iteration); the refitter never sets an estimator's parameters by name for that.
    With ``state`` (a previous fit's reusable state) and an estimator that keeps one
    (``fit_with_state``), the copy is the estimator itself, unbounded (a warm refit from
    the state computes what a cold fit computes), and it is warm. Used by
    :class:`Refitter` and by :class:`~streamspec.WithHMM`. O(parameters).
    """
    params = get_params(estimator)
    changes: dict[str, Any] = {}
    rank = params.get("rank")
    top = n if max_rank is None else max_rank
    if isinstance(rank, int) and not isinstance(rank, bool) and rank > top:
        changes["rank"] = rank = top
    floor = params.get("min_proba")
    if isinstance(floor, float | int) and floor >= 1.0 / n:
        changes["min_proba"] = 0.5 / n  # a model needs min_proba < 1/n
    est = clone(estimator, **changes)
    if state is not None and keeps_state(est):
        return est, True
    factors = getattr(prev, "factors", None)
    warm_start = getattr(est, "warm_start", None)
    if prev is None or not _accepts(est, "init"):
        return est, False
    if factors is None or not callable(warm_start):
        # no factors to start from; a previous backoff (learned weights, HMM) still carries over
        return est, getattr(prev, "backoff", None) is not None
    if isinstance(rank, int) and factors.R.shape[2] != rank:
        return est, False  # the rank changed (a grown alphabet): start afresh
    warm = warm_start(sweeps)
    return (warm, True) if warm is not None else (est, False)


def keeps_state(estimator) -> bool:
    """Whether ``estimator.fit_with_state`` is the state-keeping form of its ``fit``: its class's
    ``fit`` is marked so (:func:`~streamspec.core.warm_fit.with_state`). A subclass that
    overrides ``fit`` alone (e.g. one fitting in another process) is not, and keeps its own
    ``fit``. O(1)."""
    fit = getattr(type(estimator), "fit", None)
    return bool(getattr(fit, "keeps_state", False)) and callable(
        getattr(estimator, "fit_with_state", None))


def _accepts(estimator, name: str) -> bool:
    try:
        return name in inspect.signature(estimator.fit).parameters
    except (TypeError, ValueError):
        return False

"""Data and metrics of the paper's experiments: triple counts, errors, their summaries.

Pure functions of arrays; no estimator is fitted here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from streamspec.core.model import ObservableOperatorModel

__all__ = [
    "triple_counts",
    "relative_error",
    "finite_mean",
    "standard_error",
    "median_ratio_and_wins",
    "next_symbol_scores",
]


def triple_counts(X: np.ndarray, n: int) -> np.ndarray:
    """Counts ``c3[x2, x3, x1]`` of the first triple of each row of ``X`` (m, t>=3).

    The same as feeding each row to a ``MomentAccumulator(n, mode="sequences")``
    under its own key, vectorised.

    Examples
    --------
    >>> c3 = triple_counts(np.array([[0, 1, 1, 0], [1, 1, 0, 0]]), 2)
    >>> int(c3[1, 1, 0]), int(c3[1, 0, 1]), int(c3.sum())
    (1, 1, 2)
    """
    X = np.asarray(X, dtype=np.int64)
    codes = (X[:, 1] * n + X[:, 2]) * n + X[:, 0]
    return np.bincount(codes, minlength=n**3).reshape(n, n, n).astype(np.float64)


def relative_error(model: ObservableOperatorModel, X_test: np.ndarray, p_true: np.ndarray) -> float:
    """``‖p̂ - p‖₂ / ‖p‖₂`` over the test sequences (``inf`` if p̂ overflows)."""
    with np.errstate(all="ignore"):
        p_hat = model.joint_proba_many(X_test)
        err = float(np.linalg.norm(p_hat - p_true) / np.linalg.norm(p_true))
    return err if np.isfinite(err) else math.inf


def standard_error(values: Sequence[float]) -> float:
    """``sd / sqrt(len)``: ``nan`` for fewer than 2 values, ``inf`` if any is not finite.

    Examples
    --------
    >>> standard_error([1.0, 3.0])
    1.0
    """
    v = np.asarray(values, dtype=float)
    if v.size < 2 or not np.isfinite(v).all():
        return math.nan if v.size < 2 else math.inf
    return float(v.std(ddof=1) / np.sqrt(v.size))


def finite_mean(values: Sequence[float]) -> float:
    """The mean, or ``inf`` if any value is not finite (an overflowing repetition).

    Examples
    --------
    >>> finite_mean([1.0, 2.0]), finite_mean([1.0, float("nan")])
    (1.5, inf)
    """
    v = np.asarray(values, dtype=float)
    return float(v.mean()) if np.isfinite(v).all() else math.inf


def median_ratio_and_wins(errs: dict, name: str, ref: str = "θ_spec") -> tuple[float, float]:
    """(median of ``errs[name] / errs[ref]``, share of repetitions where ``name`` is lower).

    Examples
    --------
    >>> median_ratio_and_wins({"a": [1.0, 4.0], "θ_spec": [2.0, 2.0]}, "a")
    (1.25, 0.5)
    """
    a = np.asarray(errs[name], dtype=float)
    b = np.asarray(errs[ref], dtype=float)
    with np.errstate(all="ignore"):
        ratio = float(np.median(a / b))
    return ratio, float(np.mean(a < b))


def next_symbol_scores(model, sequences: Iterable[np.ndarray],
                       min_proba: float = 1e-6) -> tuple[float, float]:
    """(next-symbol accuracy, mean log loss per symbol) over held-out sequences.

    Parameters
    ----------
    model
        Anything with ``predictive_sequence(seq) -> (len(seq), n)`` array of the
        predictive distribution of each symbol given those before it.
    sequences
        Held-out sequences of symbol indices.
    min_proba
        Floor of every predicted probability (then renormalised), so that one
        impossible symbol does not make the log loss infinite.

    Returns
    -------
    tuple of float
        Accuracy of the most probable symbol and the log loss in nats per symbol.
    """
    hits, nll, count = 0, 0.0, 0
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        P = model.predictive_sequence(s)
        P = np.maximum(P, min_proba)
        P /= P.sum(axis=1, keepdims=True)
        hits += int((P.argmax(axis=1) == s).sum())
        nll -= float(np.log(P[np.arange(s.size), s]).sum())
        count += s.size
    return hits / count, nll / count

"""Prediction: the filters that turn a history into a state, and valid distributions (docs/math.md section 4).

A state b_t of an observable-operator model is updated by ``b ↦ B_x b / (b∞ᵀ B_x b)``;
the *recursive* filter applies every symbol of the history from ``b1``, the *window*
filter (the default) only the last w. Predictions ``q_x = b∞ᵀ B_x b`` are clipped at
0, renormalised and floored. :class:`~streamspec.core.model.ObservableOperatorModel`
calls these functions with its own arrays; they hold no state of their own.

Costs for n symbols and dimension d: one update O(d²), one prediction O(n · d).

Every function that applies operators takes them as ``B`` and an optional ``right``
(d, d): the operators are then ``B[x] @ right`` (a warm refit's factored form,
docs/math.md section 10), applied as ``B[x] @ (right @ state)`` at the same O(d²) cost
per update, so that the product ``B @ right`` (O(n · d³)) is never formed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from streamspec.core import defaults
from streamspec.core.symbol_input import to_indices

__all__ = ["FILTERS", "symbol_indices", "safe_norm", "clip_normalise", "floor_normalise", "right_applied",
           "update_state", "window_states", "extend_states", "filter_chunks"]

FILTERS = defaults.FILTERS  # the names, defined once with the other allowed values


def symbol_indices(seq, n: int) -> np.ndarray:
    """``seq`` as int64 symbol indices in 0..n-1, else ValueError (:func:`symbol_input.to_indices`). O(t)."""
    return to_indices(seq, n)


def safe_norm(z, fallback):
    """``z`` where it is a usable positive normaliser, else the positive ``fallback``. O(size)."""
    z = np.asarray(z, dtype=np.float64)
    fb = np.where(fallback > 0, fallback, 1.0)
    return np.where(z > 1e-12 * fb, z, fb)


def clip_normalise(q: np.ndarray) -> np.ndarray:
    """Rows clipped at 0 and renormalised (uniform where nothing is left). O(size)."""
    q = np.clip(q, 0.0, None)
    s = q.sum(axis=-1, keepdims=True)
    return np.where(s > 0, q / np.where(s > 0, s, 1.0), 1.0 / q.shape[-1])


def floor_normalise(q: np.ndarray, min_proba: float) -> np.ndarray:
    """Rows clipped at 0, renormalised, floored at ``min_proba`` and renormalised. O(size)."""
    q = clip_normalise(q)
    if min_proba > 0:
        q = np.maximum(q, min_proba)
        q = q / q.sum(axis=-1, keepdims=True)
    return q


def right_applied(V: np.ndarray, right: np.ndarray | None) -> np.ndarray:
    """States (rows of V, or one state) with ``right`` applied: ``right @ v`` for each. O(m · d²)."""
    return V if right is None else V @ right.T


def update_state(B: np.ndarray, binf: np.ndarray, state: np.ndarray, x: int,
                 right: np.ndarray | None = None) -> np.ndarray:
    """The state after observing symbol index ``x``. O(d²) time, O(d) memory."""
    v = B[x] @ right_applied(state, right)
    z = binf @ v
    return v / safe_norm(z, np.abs(binf) @ np.abs(v))


def window_states(b1: np.ndarray, binf: np.ndarray, B: np.ndarray, X: np.ndarray,
                  step: int, right: np.ndarray | None = None) -> np.ndarray:
    """States after each row of ``X`` (m, w) from ``b1``, shape (m, d), ``step`` rows at a time.

    O(m · w · d²) time, O(step · d²) scratch.
    """
    d = B.shape[1]
    out = np.empty((X.shape[0], d))
    absb = np.abs(binf)
    for lo in range(0, X.shape[0], step):
        Xc = X[lo : lo + step]
        V = np.broadcast_to(b1, (Xc.shape[0], d)).copy()
        for t in range(X.shape[1]):
            Vn = np.einsum("tde,te->td", B[Xc[:, t]], right_applied(V, right))
            V = Vn / safe_norm(Vn @ binf, np.abs(Vn) @ absb)[:, None]
        out[lo : lo + step] = V
    return out


def extend_states(B: np.ndarray, binf: np.ndarray, states: np.ndarray,
                  right: np.ndarray | None = None) -> np.ndarray:
    """The states after each symbol from each of ``states`` (c, d): (c · n, d), row ``s·n + x``.

    Time O(c · n · d²), memory O(c · n · d): for small alphabets.
    """
    S = right_applied(np.atleast_2d(states), right)
    V = np.einsum("xde,ce->cxd", B, S).reshape(-1, B.shape[1])
    return V / safe_norm(V @ binf, np.abs(V) @ np.abs(binf))[:, None]


def filter_chunks(b1: np.ndarray, binf: np.ndarray, B: np.ndarray, x: np.ndarray, filter: str,
                  window: int, step: int, right: np.ndarray | None = None
                  ) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(start, stop, V, lasts)``: the states predicting ``x[start:stop]`` and the symbols before.

    Chunks of ``step`` positions. Recursive: one update per position, O(t · d²). Window:
    every position of a chunk restarts from ``b1`` and applies its last ``window``
    symbols, vectorised over the chunk, O(t · w · d²).
    """
    T, d = len(x), B.shape[1]
    prev = np.concatenate(([-1], x[:-1])) if T else x
    if filter == "recursive":
        state = b1.copy()
        for start in range(0, T, step):
            stop = min(T, start + step)
            V = np.empty((stop - start, d))
            for t in range(start, stop):
                V[t - start] = state
                state = update_state(B, binf, state, x[t], right)
            yield start, stop, V, prev[start:stop]
        return
    absb = np.abs(binf)
    for start in range(0, T, step):
        stop = min(T, start + step)
        V = np.broadcast_to(b1, (stop - start, d)).copy()
        pos = np.arange(start, stop)
        for lag in range(window, 0, -1):  # apply x[t-lag] for lag = w..1, where t - lag >= 0
            src = pos - lag
            ok = src >= 0
            if not ok.any():
                continue
            Vn = np.einsum("tde,te->td", B[x[src[ok]]], right_applied(V[ok], right))
            z = Vn @ binf
            V[ok] = Vn / safe_norm(z, np.abs(Vn) @ absb)[:, None]
        yield start, stop, V, prev[start:stop]

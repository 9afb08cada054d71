"""The model's window filter chosen on held-out stretches (``window="auto"``, the default).

The operator model's own prediction restarts from ``b1`` over the last w symbols (the window
filter, docs/math.md section 4). Over triples (L = 1) the held-out items have two symbols of
context, and w = 2 was the best there (docs/math.md section 4). Over windows of L ≥ 2 symbols
(small alphabets) the model is fitted on windows of L symbols and can carry longer memory,
which w = 2 throws away: on a 4th-order Markov chain over 4 symbols (10⁶ symbols, rank 113)
the model alone scored 1.318 nats at w = 2, the trigram's 1.318, and 0.744 at w = 4 (the truth
0.733), and the mixture dropped the model as no better than the trigram (0.902, its 64-state HMM
alone). The held-out stretches of the backoff's fit (:func:`~streamspec.core.held_out.
held_out_stretches`, L + 1 symbols before each held-out symbol) score every w in 1..L + 1; the
fit keeps 2 unless another w is better by :data:`MIN_WINDOW_GAIN` (docs/benchmarks.md, "The
model's window filter chosen on held-out stretches").
"""

from __future__ import annotations

import numpy as np

__all__ = ["stretch_probas", "choose_window", "MIN_WINDOW_GAIN", "MIN_STRETCH_GAIN"]

MIN_WINDOW_GAIN = 1e-3  # held-out nats per symbol another window must gain over w = 2
# what the model must add to the mixture on the stretches to be a component there when held-out
# triples said no: the stretches give the HMM only L + 1 symbols of history, so they overvalue the
# model against an HMM with longer memory. Measured (docs/benchmarks.md): 0.017 nats on a
# 50-state automaton over 20 symbols, whose HMM holds it (on the test streams the model then cost
# 0.0006), 0.12-0.24 on chains of order 3 and 4 that the HMM cannot hold (0.06-0.17 gained there);
# below a few hundredths the stretches do not tell the sign of the gain on test streams
MIN_STRETCH_GAIN = 0.05


def stretch_probas(model, ctx: np.ndarray, x: np.ndarray, window: int) -> np.ndarray:
    """The model's own (clipped, renormalised) probability of ``x[i]`` after the last
    ``window`` symbols of ``ctx[i]`` (stream order, pads -1 on the left where the stream began
    inside it: the window is then the stream's symbols so far), as the online predictor's
    window filter gives it: the state from ``b1`` over those symbols. One normaliser per
    distinct context. O(contexts · (window · d² + n · d) + m · d) for m rows.

    >>> from streamspec import ObservableOperatorModel
    >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
    >>> stretch_probas(m, np.array([[-1, 0], [1, 1]]), np.array([1, 0]), 2).tolist()
    [0.75, 0.25]
    """
    ctx, x = np.asarray(ctx, dtype=np.int64), np.asarray(x, dtype=np.int64)
    width = ctx.shape[1]
    length = np.minimum((ctx >= 0).sum(axis=1), window)  # pads only on the left
    out = np.empty(x.size)
    for ell in np.unique(length):
        idx = np.flatnonzero(length == ell)
        if ell == 0:
            out[idx] = model.clipped_probas(x[idx], model.b1[None, :], np.zeros(idx.size, dtype=np.int64))
            continue
        uniq, which = np.unique(ctx[idx, width - ell :], axis=0, return_inverse=True)
        out[idx] = model.clipped_probas(x[idx], model.window_states(uniq), which.ravel())
    return out


def choose_window(model, ctx: np.ndarray, x: np.ndarray, w: np.ndarray) -> tuple[int, dict[int, float]]:
    """``(window, losses)``: the window in 1..``ctx.shape[1]`` of least held-out log loss of the
    model alone (weights ``w``, floored at ``model.min_proba`` as without a backoff), 2 unless
    another is better by :data:`MIN_WINDOW_GAIN`; ``losses`` by window. O(L · stretch_probas).
    """
    w = np.asarray(w, dtype=np.float64)
    floor = max(float(model.min_proba), 1e-300)
    losses = {}
    for window in range(1, ctx.shape[1] + 1):
        p = np.maximum(stretch_probas(model, ctx, x, window), floor)
        losses[window] = float(-(w * np.log(p)).sum() / w.sum())
    base = min(2, ctx.shape[1])
    best = min(losses, key=losses.get)
    return (best if losses[best] < losses[base] - MIN_WINDOW_GAIN else base), losses

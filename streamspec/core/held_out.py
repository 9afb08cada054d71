"""The predictor's components scored on held-out counts: the contexts, each component's
probability of the symbol that followed, and the cross-fitted mixtures' log loss.

:func:`~streamspec.core.backoff_fit.fit_with_backoff` holds a share of the counts out and
scores its model, trigram and HMM here to choose the components and their first weights;
``learn`` and ``inspect`` report the same figures (:mod:`streamspec.cli.quality`).
"""

from __future__ import annotations

import numpy as np

from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_filter import symbol_probas
from streamspec.core.mixture import ExpertMixture
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.trigram import START
from streamspec.core.triples import BITS, Triples

__all__ = ["held_out_contexts", "held_out_scores", "model_probas", "hmm_probas"]


def held_out_contexts(triples: Triples, starts: StreamStarts, max_contexts: int,
                      rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``(u, v, x, weight)`` of held-out counts: each triple's ``(x1, x2) → x3`` and each start's
    ``(<s>, <s>) → x1`` and ``(<s>, x1) → x2``. At most ``max_contexts`` distinct contexts
    are kept, drawn with probability ∝ their weight (seeded, with replacement, each
    weighted by its draws), so the total weight is preserved in expectation. O(nnz)."""
    pa, pb, pw = starts.pair_arrays()
    fa = starts.first_codes
    u = np.concatenate([triples.x1, np.full(pa.size + fa.size, START)])
    v = np.concatenate([triples.x2, pa, np.full(fa.size, START)])
    x = np.concatenate([triples.x3, pb, fa])
    w = np.concatenate([triples.weights, pw, starts.first_weights])
    ctx = (u + 1) << (BITS + 1) | (v + 1)
    uniq, inv = np.unique(ctx, return_inverse=True)
    if uniq.size > max_contexts:
        ctx_w = np.bincount(inv, weights=w)
        draws = rng.choice(uniq.size, size=max_contexts, p=ctx_w / ctx_w.sum())
        mult = np.bincount(draws, minlength=uniq.size).astype(np.float64)
        w = mult[inv] * ctx_w.sum() / max_contexts * w / ctx_w[inv]
        keep = w > 0
        u, v, x, w = u[keep], v[keep], x[keep], w[keep]
    return u, v, x, w


def model_probas(model, u, v, x) -> np.ndarray:
    """The model's own (clipped, renormalised) probability of ``x`` after each context: one
    normaliser per distinct context. O(contexts · n · d + m · d)."""
    out = np.empty(x.size)
    for length, at in ((2, u >= 0), (1, (u < 0) & (v >= 0)), (0, v < 0)):
        idx = np.flatnonzero(at)
        if idx.size == 0:
            continue
        ctx = np.stack([u[idx], v[idx]], axis=1)[:, 2 - length:]
        ctx, which = np.unique(ctx[:, max(0, length - max(model.window, 1)):], axis=0, return_inverse=True)
        states = model.window_states(ctx) if ctx.shape[1] else model.b1[None, :]
        out[idx] = model.clipped_probas(x[idx], states, which.ravel())
    return out


def hmm_probas(hmm: HiddenMarkovModel, u, v, x, inside: np.ndarray | None = None) -> np.ndarray:
    """The HMM filter's probability of ``x`` after each context: ``Pr(x | u, v)`` with the
    state before ``u`` drawn from ``inside`` where the context is inside a stream (``u ≥ 0``)
    and from ``startprob_`` at a stream's start (``u``, or ``u`` and ``v``, the start marker).

    ``inside``: the distribution of the hidden state where a triple may begin, anywhere in a
    stream. ``None``: ``startprob_``, right for an HMM fitted on triples (EM treats every
    triple as a sequence, so its ``startprob_`` is the law of a triple's first state). An
    HMM fitted over windows has a ``startprob_`` of stream starts; pass its occupancy of the
    states (:meth:`~streamspec.core.hidden_markov_model.HiddenMarkovModel.occupancy`: over a
    gram's positions, not the chain's stationary distribution, which a fit on short windows
    may not know).
    Why: from ``startprob_`` the window HMM of a 10-state automaton over 8 symbols, whose
    streams start on two of its states, scored 1.780 nats on held-out triples, against
    1.535 from the stationary distribution (the trigram 1.533), and its starting weight in
    the mixture was too small. O(m · K²).

    Streams start in state 0; a context "b b" inside a stream is likelier to come from state 1:

    >>> from streamspec.core.hidden_markov_model import HiddenMarkovModel
    >>> hmm = HiddenMarkovModel([1.0, 0.0], [[0.9, 0.1], [0.1, 0.9]], [[0.8, 0.2], [0.2, 0.8]])
    >>> u, v, x = np.array([-1, 1]), np.array([-1, 1]), np.array([0, 0])   # "<s> <s> a", "b b a"
    >>> hmm_probas(hmm, u, v, x).round(4).tolist()
    [0.8, 0.5923]
    >>> hmm_probas(hmm, u, v, x, hmm.stationary()).round(4).tolist()
    [0.8, 0.2988]
    """
    E, T = hmm.emissionprob_, hmm.transmat_
    a = np.broadcast_to(hmm.startprob_, (x.size, hmm.n_states)).copy()
    if inside is not None:
        a[np.asarray(u) >= 0] = inside
    for sym in (u, v):
        at = sym >= 0
        post = a[at] * E[:, sym[at]].T
        z = post.sum(axis=1, keepdims=True)
        ok = z[:, 0] > 0
        post[ok] /= z[ok]
        post[~ok] = a[at][~ok]
        a[at] = post @ T
    return symbol_probas(a, E, x)


def held_out_scores(P: np.ndarray, buckets, w, u, v, unigram: np.ndarray, min_proba: float,
                    rng: np.random.Generator) -> dict[str, float]:
    """How good the predictor is on the held-out counts: mean log loss (nats per symbol) of the
    mixture of all the columns of ``P`` (model, trigram[, HMM]), of the mixture without the
    model, of each component alone and of the unigram, and the held-out weight scored.

    The mixtures are cross-fitted: the distinct contexts are split in two at random, the
    weights of each half come from the other, so no symbol is scored by weights it helped
    choose. The model alone is floored at ``min_proba`` (as without a backoff), the HMM at
    1e-12. O(m · E · K) for m held-out items.
    """
    ctx = (u + 2) * (1 << 22) + (v + 2)
    uniq, inv = np.unique(ctx, return_inverse=True)
    half = rng.random(uniq.size)[inv] < 0.5

    def loss(p) -> float:
        return float(-(w * np.log(np.maximum(p, 1e-300))).sum() / w.sum())

    def cross_fitted(Q: np.ndarray) -> float:
        mixed = np.empty(w.size)
        for side in (half, ~half):
            mix = ExpertMixture.from_held_out(Q.shape[1], buckets[~side], Q[~side], w[~side])
            mixed[side] = np.einsum("mk,mk->m", mix.blends(buckets[side]), Q[side])
        return loss(mixed)

    out = {"symbols": float(w.sum()), "mixture": cross_fitted(P),
           "mixture_without_model": cross_fitted(P[:, 1:]), "unigram": loss(unigram),
           "model": loss(np.maximum(P[:, 0], min_proba)), "trigram": loss(P[:, 1])}
    if P.shape[1] > 2:
        out["hmm"] = loss(np.maximum(P[:, 2], 1e-12))
    return out

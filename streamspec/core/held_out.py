"""The predictor's components scored on held-out counts: the contexts, each component's
probability of the symbol that followed, and the cross-fitted mixtures' log loss.

:func:`~streamspec.core.backoff_fit.fit_with_backoff` holds a share of the counts out and
scores its model, trigram and HMM here to choose the components and their first weights;
``learn`` and ``inspect`` report the same figures (:mod:`streamspec.cli.quality`).
"""

from __future__ import annotations

import numpy as np

from streamspec.core.count_split import CountSplit
from streamspec.core.filter_window import choose_window, stretch_probas
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm_filter import symbol_probas
from streamspec.core.mixture import ExpertMixture, bucket_of_counts
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.trigram import START
from streamspec.core.triples import BITS, Triples
from streamspec.core.windows import PAD, WindowCounts

__all__ = ["held_out_items", "held_out_scores", "held_out_stretches",
           "model_probas", "hmm_probas", "StretchWeights"]


def held_out_items(triples: Triples, starts: StreamStarts, max_contexts: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """``(context, x, weight, draws)`` of held-out counts: each triple's ``(x1, x2) → x3`` and
    each start's ``(<s>, <s>) → x1`` and ``(<s>, x1) → x2``, the context as two columns
    (``u``, ``v``). At most ``max_contexts`` distinct contexts are kept, drawn with
    probability ∝ their weight (seeded, with replacement, each weighted by its draws), so the
    total weight is preserved in expectation; ``draws`` is ``max_contexts`` then, else ∞. O(nnz)."""
    pa, pb, pw = starts.pair_arrays()
    fa = starts.first_codes
    u = np.concatenate([triples.x1, np.full(pa.size + fa.size, START)])
    v = np.concatenate([triples.x2, pa, np.full(fa.size, START)])
    x = np.concatenate([triples.x3, pb, fa])
    w = np.concatenate([triples.weights, pw, starts.first_weights])
    ctx = (u + 1) << (BITS + 1) | (v + 1)
    uniq, inv = np.unique(ctx, return_inverse=True)
    draws = np.inf
    if uniq.size > max_contexts:
        ctx_w = np.bincount(inv, weights=w)
        drawn = rng.choice(uniq.size, size=max_contexts, p=ctx_w / ctx_w.sum())
        mult = np.bincount(drawn, minlength=uniq.size).astype(np.float64)
        w = mult[inv] * ctx_w.sum() / max_contexts * w / ctx_w[inv]
        keep = w > 0
        u, v, x, w = u[keep], v[keep], x[keep], w[keep]
        draws = max_contexts
    return np.stack([u, v], axis=1), x, w, draws


class StretchWeights:
    """The mixture's first weights over windows, from the components' probabilities of
    held-out stretches (:func:`held_out_stretches`) instead of held-out triples.

    Why: the weights start the stream's mixture, whose HMM component filters the whole
    history; scored after two symbols a long-memory HMM looks no better than the trigram
    (the 10-state automaton of :func:`held_out_stretches`), so the stream had to learn the
    weights again: the mixture scored 1.455962 nats there, from these weights 1.455829. The
    components and the HMM's size are still chosen on the triples (measured: choosing the
    model component on the stretches dropped it where it helps on the test streams, +0.0013
    nats on the sticky 10-state set at 10⁶ symbols; docs/benchmarks.md).

    ``score`` takes the model and trigram fitted on the kept part, ``weights`` the HMM chosen
    there. O(max_items · (L · K² + n · d)) in all, plus the stretches' O(nnz · L).
    """

    def __init__(self, grams: WindowCounts, starts: StreamStarts, max_items: int, seed: int):
        rng = np.random.default_rng([seed, 1])  # why its own: the triples' draws stay as they were
        self.ctx, self.x, self.w, _ = held_out_stretches(grams, starts, max_items, rng)

    @classmethod
    def of(cls, split: CountSplit, max_items: int, seed: int) -> StretchWeights | None:
        """Those of a :class:`~streamspec.core.count_split.CountSplit`'s held-out grams and
        starts; ``None`` over triples (no grams)."""
        if split.held_grams is None:
            return None
        return cls(split.held_grams, split.held_starts, max_items, seed)

    def score(self, model, trigram, window: int | str = 2):
        """The model with its window filter (``window="auto"``: chosen on the stretches,
        :func:`~streamspec.core.filter_window.choose_window`; else as it is), after scoring it
        on the stretches' symbols after its window of their contexts
        (:func:`~streamspec.core.filter_window.stretch_probas`), the trigram after their last
        two, and the trigram's buckets of those contexts. O(L · m · n · d)."""
        self.chosen = None
        if window == "auto" and model.filter == "window":
            self.chosen = choose_window(model, self.ctx, self.x, self.w)[0]
            model = model.with_filter(window=self.chosen)
        u, v, x = self.ctx[:, -2], self.ctx[:, -1], self.x
        self.P = [stretch_probas(model, self.ctx, x, model.window), trigram.proba_of(u, v, x)]
        self.buckets = bucket_of_counts(trigram.context_counts(u, v))
        self.unigram, self.min_proba, self._hmm = trigram.unigram()[x], model.min_proba, None
        return model

    def _columns(self, hmm: HiddenMarkovModel | None, use_model: bool) -> np.ndarray:
        """The components' probabilities (m, c): the model's only with ``use_model``, the HMM
        filtered over each whole stretch (once). O(m · (L + 1) · K²)."""
        P = self.P[int(not use_model) :]
        if hmm is not None:  # over windows startprob_ is the law of a stream's start
            if self._hmm is None:
                self._hmm = hmm_probas(hmm, self.ctx, self.x, hmm.occupancy())
            P = [*P, self._hmm]
        return np.stack(P, axis=1)

    def model_gain(self, hmm: HiddenMarkovModel | None, seed: int) -> float:
        """What the model adds to the cross-fitted mixture on the stretches (nats per symbol,
        the mixture without it minus with it, :func:`held_out_scores`) where :meth:`score`
        chose a window past two symbols (what held-out triples cannot show), else 0.
        O(m · E · K)."""
        if self.chosen is None or self.chosen <= 2:
            return 0.0
        # (the caller asks for MIN_STRETCH_GAIN: the stretches overvalue the model against an HMM
        # that remembers more than L + 1 symbols, core/filter_window.py)
        s = held_out_scores(self._columns(hmm, True), self.buckets, self.w, self.ctx[:, -2],
                            self.ctx[:, -1], self.unigram, self.min_proba,
                            np.random.default_rng([seed, 2]))
        return s["mixture_without_model"] - s["mixture"]

    def weights(self, hmm: HiddenMarkovModel | None, use_model: bool) -> ExpertMixture:
        """The first weights of the components kept (the model's column only with
        ``use_model``; the HMM filtered over each whole stretch). O(m · (L + 1) · K² + m · E)."""
        P = self._columns(hmm, use_model)
        return ExpertMixture.from_held_out(P.shape[1], self.buckets, P, self.w)


def held_out_stretches(grams: WindowCounts, starts: StreamStarts, max_items: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Held-out symbols with up to L + 1 symbols before them, from held-out grams of window L
    and stream starts: ``(context (m, L + 1), x, weight, draws)``, the context in stream
    order with pads (-1) on the left where the stream began inside it.

    A gram centred on position c (1 … len − 2 of its stream) scores the symbol at c + 1 after
    the positions c − L … c: the trigram's item of its middle triple (x_{c−1}, x_c, x_{c+1}),
    which the split held out with the gram, with L − 1 more symbols before it; the starts
    score positions 0 and 1 (after nothing, after the first symbol). So each position of a
    stream is scored once, and no item's own triple was counted in the kept part. Why more
    than the triples' two symbols of context: a hidden state remembers more than two
    symbols, and the stream's predictor filters it over the whole history; from two symbols
    the window HMM of a 10-state automaton over 8 symbols scored 1.5339 nats on held-out
    triples against the trigram's 1.5331, so the mixture started at half weight on each,
    while on the test streams the HMM scored 1.4557 and the trigram 1.5300
    (docs/benchmarks.md). Subsampled, when there are more than ``max_items``, by
    ``max_items`` draws ∝ weight (seeded, each item weighted by its draws: the total weight
    is kept in expectation). O(nnz · L + starts).

    The stream "0 1 2 0" with window 2: 0 first, 1 after 0, 2 after 0 1, 0 after 0 1 2:

    >>> g = WindowCounts.from_digits(3, 2, [[-1, 0, 1, 2, 0], [0, 1, 2, 0, -1]])
    >>> s = StreamStarts(3, [0], [1.0], [0 << BITS | 1], [1.0])
    >>> ctx, x, w, draws = held_out_stretches(g, s, 10, np.random.default_rng(0))
    >>> ctx.tolist(), x.tolist(), w.tolist(), draws
    ([[-1, -1, -1], [-1, -1, 0], [-1, 0, 1], [0, 1, 2]], [0, 1, 2, 0], [1.0, 1.0, 1.0, 1.0], inf)
    """
    L = grams.window
    d, weights = grams.digits(), grams.weights  # every centre has a real neighbour on each side
    pa, pb, pw = starts.pair_arrays()
    fa, fw = starts.first_codes, starts.first_weights
    first = np.full((fa.size + pa.size, L + 1), PAD, dtype=np.int64)
    first[fa.size :, -1] = pa
    ctx = np.concatenate([first, d[:, : L + 1]])
    x = np.concatenate([fa, pb, d[:, L + 1]]).astype(np.int64)
    w = np.concatenate([fw, pw, weights])
    if x.size <= max_items:
        return ctx, x, w, np.inf
    draws = np.bincount(rng.choice(x.size, size=max_items, p=w / w.sum()), minlength=x.size)
    keep = draws > 0
    return ctx[keep], x[keep], draws[keep] * (w.sum() / max_items), max_items


def model_probas(model, u, v, x) -> np.ndarray:
    """The model's own (clipped, renormalised) probability of ``x`` after each context ``(u, v)``
    (-1: before the stream's start): :func:`~streamspec.core.filter_window.stretch_probas` of
    the two-symbol contexts at the model's window (at least one symbol).
    O(contexts · n · d + m · d)."""
    return stretch_probas(model, np.stack([u, v], axis=1), x, max(model.window, 1))


def hmm_probas(hmm: HiddenMarkovModel, context, x, inside: np.ndarray | None = None) -> np.ndarray:
    """The HMM filter's probability of ``x`` after each ``context`` (m, c) (stream order, pads
    -1 on the left where the stream began inside it): the state before the context drawn
    from ``inside`` where the context is inside a stream (its first symbol real) and from
    ``startprob_`` at a stream's start, then filtered over the context's symbols.

    ``inside``: the distribution of the hidden state where a context may begin, anywhere in a
    stream. ``None``: ``startprob_``, right for an HMM fitted on triples (EM treats every
    triple as a sequence, so its ``startprob_`` is the law of a triple's first state). An
    HMM fitted over windows has a ``startprob_`` of stream starts; pass its occupancy of the
    states (:meth:`~streamspec.core.hidden_markov_model.HiddenMarkovModel.occupancy`: over a
    gram's positions, not the chain's stationary distribution, which a fit on short windows
    may not know).
    Why: from ``startprob_`` the window HMM of a 10-state automaton over 8 symbols, whose
    streams start on two of its states, scored 1.780 nats on held-out triples, against
    1.535 from the stationary distribution (the trigram 1.533), and its starting weight in
    the mixture was too small. O(m · c · K²).

    Streams start in state 0; a context "b b" inside a stream is likelier to come from state 1:

    >>> from streamspec.core.hidden_markov_model import HiddenMarkovModel
    >>> hmm = HiddenMarkovModel([1.0, 0.0], [[0.9, 0.1], [0.1, 0.9]], [[0.8, 0.2], [0.2, 0.8]])
    >>> ctx, x = np.array([[-1, -1], [1, 1]]), np.array([0, 0])   # "<s> <s> a", "b b a"
    >>> hmm_probas(hmm, ctx, x).round(4).tolist()
    [0.8, 0.5923]
    >>> hmm_probas(hmm, ctx, x, hmm.stationary()).round(4).tolist()
    [0.8, 0.2988]
    """
    E, T = hmm.emissionprob_, hmm.transmat_
    context = np.asarray(context, dtype=np.int64).reshape(len(x), -1)
    a = np.broadcast_to(hmm.startprob_, (len(x), hmm.n_states)).copy()
    if inside is not None and context.shape[1]:
        a[context[:, 0] >= 0] = inside
    for sym in context.T:
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

"""The mixed next-symbol row of one stream in one matrix-vector product.

:class:`~streamspec.streaming.online_predictor.OnlinePredictor` mixes, for each stream,
the HMM filter's row (its emissions times the stream's predictive state), the trigram's
row (a lower level, the continuation or the unigram, scaled, plus the context's few
direct entries) and, when it is a part, the model's own row (``b∞ᵀ B_x`` times the
window state, clipped at 0 and renormalised). Done one part at a time that is a dozen
passes over the n symbols and as many numpy calls, each ~1 µs whatever its size, which
is most of an event's cost on a 2,000-symbol alphabet (docs/benchmarks.md, "River model
throughput"). :class:`StackedRows` keeps the dense parts stacked in one ``(K + 3, n)``
matrix per model, ``[E; p1; p_freq; own]`` (the last row a buffer for the context's own
row), so that the whole dense row is one GEMV of the stacked weights
``[λ_hmm · state, λ_t γ3 γ2 | 0, 0 | λ_t γ3, λ_own / total]``; the trigram's sparse
direct entries are added after it. The own row cannot join the product unclipped (the
clip at 0 is not linear), so it is made in the buffer first (one GEMV of the window
state, a clip, a sum) and its normalisation is folded into its weight.

The sums are those of the part-by-part definition in another order: equal to it up to
rounding (tests/streaming/test_online_fast_paths.py holds it to 1e-9).
"""

from __future__ import annotations

import numpy as np

__all__ = ["StackedRows", "StackedPart", "STACK_MAX_FLOATS", "add_trigram"]

# The stack copies the HMM's emissions: made only where that copy is small (the models
# whose argmax takes the whole row anyway: n < PRUNE_RATIO · K · TOP, i.e. at most
# 8 · 64 · 32 · 67 ≈ 1.1 M floats at K = 64); larger models mix part by part.
STACK_MAX_FLOATS = 1 << 21


class StackedRows:
    """The dense parts of one model's mixed rows, stacked (module docstring).

    Parameters
    ----------
    emissions
        The HMM's emission matrix, (K, n).
    continuation, unigram
        The trigram's two lower levels, (n,) each.
    own
        The model's rows as columns ``C[:, x] = b∞ᵀ B_x``, (d, n), or ``None`` when the
        model is not a part.

    Attributes
    ----------
    last
        ``(window, scale)`` of the own row in the buffer (``scale = 1 / total``), or
        ``None``: :meth:`own_proba` reads it back without recomputing the row.

    Memory O((K + 3) · n).
    """

    def __init__(self, emissions: np.ndarray, continuation: np.ndarray, unigram: np.ndarray,
                 own: np.ndarray | None = None):
        K, n = emissions.shape
        self.K, self.n = K, n
        self.M = np.empty((K + 3, n))
        self.M[:K] = emissions
        self.M[K] = continuation
        self.M[K + 1] = unigram
        self.M[K + 2] = 0.0
        self.M_mix = self.M[: K + 2]  # without the own row: a view, contiguous
        self.buffer = self.M[K + 2]
        self.coef = np.zeros(K + 3)
        self.coef_state = self.coef[:K]
        self.coef_mix = self.coef[: K + 2]
        self.C = own
        self.last: tuple[tuple[int, ...], float] | None = None

    def own_from_state(self, window: tuple[int, ...], state: np.ndarray) -> float:
        """Make the own row of the window state ``state`` in the buffer, clipped at 0;
        returns ``1 / total`` (its normalisation), or 0 when nothing is left after the
        clip (the row is then the uniform one, as ``_Rows._own_row``). O(n · d)."""
        q = self.buffer
        np.dot(state, self.C, out=q)
        np.maximum(q, 0.0, out=q)
        total = float(q.sum())
        if total > 0:
            scale = 1.0 / total
        else:
            q.fill(1.0 / self.n)
            scale = 1.0
        self.last = (window, scale)
        return scale

    def own_from_row(self, window: tuple[int, ...], row: np.ndarray) -> float:
        """Put an own row already made (normalised, e.g. cached) in the buffer. O(n)."""
        np.copyto(self.buffer, row)
        self.last = (window, 1.0)
        return 1.0

    def own_proba(self, window: tuple[int, ...], i: int) -> float | None:
        """The own row's probability of symbol ``i`` after ``window`` if that row is in the
        buffer, else ``None``. O(1)."""
        last = self.last
        if last is None or last[0] != window:
            return None
        return float(self.buffer[i]) * last[1]

    def row(self, tables: tuple, lam: list[float], state: np.ndarray,
            own_weight: float | None) -> np.ndarray:
        """The mixed row: ``λ_hmm · stateᵀE + λ_t · trigram row [+ own_weight · buffer]``.

        ``tables``: the trigram context's :meth:`~streamspec.core.trigram.KneserNeyTrigram.tables`;
        ``lam``: the blend ``[λ_own,] λ_t, λ_hmm``; ``own_weight``: ``λ_own / total`` of the
        own row in the buffer (:meth:`own_from_state`), ``None`` when the model is not a
        part. A new array. O((K + 3) · n + entries) in one GEMV and the sparse adds."""
        g3, g2, top_next, top_direct, mid_next, mid_direct, unigram = tables
        K, c = self.K, self.coef
        lt = lam[-2]
        np.multiply(state, lam[-1], out=self.coef_state)
        lt3 = lt * g3
        if unigram:  # why: the same products as the part-by-part sum, in its order
            c[K], c[K + 1] = 0.0, lt3 * 1.0
        else:
            c[K], c[K + 1] = lt3 * g2, 0.0
        if own_weight is None:
            out = np.dot(self.coef_mix, self.M_mix)
        else:
            c[K + 2] = own_weight
            out = np.dot(c, self.M)
        if mid_next.size:
            out[mid_next] += lt3 * mid_direct
        if top_next.size:
            out[top_next] += lt * top_direct
        return out


class StackedPart:
    """The stacked path of the online predictor's per-model row cache (mixed into it): the
    cache holds ``model``, ``n``, its cached rows (``_cache``, ``own``), the model's rows as
    columns (``_columns``) and the window states (``_window_state``); this adds the stack,
    made on first use, and the rows read from it."""

    def stack(self) -> StackedRows | None:
        """The model's dense parts stacked (:class:`~streamspec.streaming.dense_row.StackedRows`),
        or ``None`` without an HMM or where the stack would hold more than
        :data:`~streamspec.streaming.dense_row.STACK_MAX_FLOATS`. O((K + d) · n) once."""
        if self._stack is False:
            backoff = self.model.backoff
            hmm = None if backoff is None else backoff.hmm
            self._stack = None
            if hmm is not None and (hmm.n_states + 3) * self.n <= STACK_MAX_FLOATS:
                trigram = backoff.trigram
                self._stack = StackedRows(hmm.emissionprob_, trigram.continuation_of(),
                                          trigram.unigram_of(),
                                          self._columns() if backoff.use_model else None)
        return self._stack

    def mixed(self, window: tuple[int, ...], tables: tuple, lam: list[float],
              state: np.ndarray) -> np.ndarray:
        """The mixed row from the stack (:meth:`stack` not ``None``), with the model's own
        row of ``window`` when it is a part: read from the cache if a path made it there,
        else made in the stack's buffer (not cached: most contexts of a large alphabet are
        met once). O((K + 3) · n + n · d + entries)."""
        st, weight = self._stack, None
        if st.C is not None:
            last = st.last
            if last is not None and last[0] == window:
                scale = last[1]
            else:
                entry = self._cache.get(("own", window))
                scale = (st.own_from_row(window, entry[0]) if entry is not None
                         else st.own_from_state(window, self._window_state(window)))
            weight = lam[0] * scale
        return st.row(tables, lam, state, weight)

    def own_proba(self, window: tuple[int, ...], i: int) -> float:
        """``own(window)[i]``, from the stack's buffer when it holds that row. O(1) then,
        else :meth:`own`."""
        st = self._stack
        if st:
            p = st.own_proba(window, i)
            if p is not None:
                return p
        return float(self.own(window)[i])


def add_trigram(out: np.ndarray, trigram, top: int, mid: int, lam: float) -> None:
    """``out += lam · trigram.row1(context)`` without making the row: the lower level scaled
    in one pass, the context's direct terms added where they are. O(n + entries)."""
    g3, g2, top_next, top_direct, mid_next, mid_direct, unigram = trigram.tables(top, mid)
    low = trigram.unigram_of() if unigram else trigram.continuation_of()
    out += (lam * g3 * (1.0 if unigram else g2)) * low
    if mid_next.size:
        out[mid_next] += (lam * g3) * mid_direct
    if top_next.size:
        out[top_next] += lam * top_direct

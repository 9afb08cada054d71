"""The E-step of EM over counted (2L+1)-grams, by messages shared between grams.

A gram is (past, x, future). Given the hidden state of x, the past and the future are
independent, so its likelihood is ``((α_p T ᵀ) ∘ O[x]) · β_f`` with ``α_p = Pr(past, state at
its last symbol)`` and ``β_f = Pr(future | state at x)``: one forward pass per *distinct* past
and one backward pass per *distinct* future serve every gram. The expected counts inside a
past are linear in the backward message the grams send into it, so those messages are
summed over the grams that share the past, and one backward pass per distinct past gives
all their counts (likewise forward into each distinct future). Cost per E-step:
O(nnz · m + (P + F) · L · m²) for nnz distinct grams, P distinct pasts and F distinct
futures, instead of O(nnz · L · m²) gram by gram.

Pads: a past padded before its first symbol starts a sequence, its first real state is
drawn from ``pi0`` (else the past's first state from ``pi``); a future padded after its
last symbol simply has no symbols there, and no transitions into them are counted.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import WindowCounts, window_bits

__all__ = ["GramMessages", "estep_units", "GRAM_UNIT"]

# per distinct gram, past or future step: the work of an E-step beyond its m or m² products
# (numpy gathers and sums; as the 30 of a triple's K² + 30 in backoff_fit's EM budget)
GRAM_UNIT = 30


def estep_units(counts: WindowCounts, m: int) -> float:
    """Work units of one E-step over ``counts`` with ``m`` states, on the scale of the triples'
    ``nnz · (m² + 30)`` (1.2–4.3 ns a unit of CPU for 200,000 triples and 8–64 states):
    for the message E-step of :class:`GramMessages`, ``nnz · (m + 30)`` for the grams and
    ``Q · (m + 30)`` for the Q distinct pairs (x, future) (gathers and elementwise products
    of (nnz × m) arrays), ``(P + F) · L · (m²/8 + 30)`` for the passes through the P
    distinct pasts and F distinct futures ((P × m)·(m × m) BLAS products, about 8 times
    cheaper a multiply). Measured 1.0–1.9 ns a unit (CPU) over 1,560–200,000 distinct
    grams of 4, 8 and 20 symbols, L = 2–4, 8–64 states. Triples (L = 1): ``nnz · (m² + 30)``.

    Why not ``nnz · L · m²`` a gram: the messages are shared, so where the windows repeat
    (small alphabets: 546 pasts and 584 futures among 141,888 distinct 7-grams of 8
    symbols) the E-step costs about m a gram, not L · m²; charging L · m² overstated it
    20–100 times and cut EM over windows to its minimum of iterations. O(nnz) (the codes
    are sorted) plus one sort of the pasts' codes.

    >>> g = WindowCounts.from_digits(2, 2, [[-1, 0, 1, 1, 0], [0, 1, 1, 0, 1], [1, 1, 1, 0, 1]])
    >>> estep_units(g, 2)   # 3 grams; 3 pasts, 2 futures of 2 symbols; 2 pairs (x, future)
    465.0
    """
    nnz, L = counts.nnz, counts.window
    if L == 1 or nnz == 0:
        return float(nnz * (m * m + GRAM_UNIT))
    b = window_bits(L)
    low = (1 << (b * L)) - 1
    head = counts.codes >> (b * L)  # (x, future): sorted, since the codes are
    pairs = 1 + int(np.count_nonzero(head[1:] != head[:-1]))
    pasts = int(np.unique(counts.codes & low).size)
    futures = int(np.unique(head & low).size)
    return float((nnz + pairs) * (m + GRAM_UNIT) + (pasts + futures) * L * (m * m / 8 + GRAM_UNIT))


def _gather(ids: np.ndarray, size: int) -> sp.csr_matrix:
    """(size × nnz) 0/1 matrix summing the grams' rows into their past (or future)."""
    return sp.csr_matrix((np.ones(ids.size), (ids, np.arange(ids.size))), shape=(size, ids.size))


class GramMessages:
    """The grams of ``counts`` arranged for the message E-step (built once per fit). O(nnz · L).

    Examples
    --------
    >>> g = WindowCounts.from_digits(2, 2, [[-1, 0, 1, 1, 0], [0, 1, 1, 0, 1]])
    >>> T, O = np.array([[0.9, 0.2], [0.1, 0.8]]), np.array([[0.7, 0.1], [0.3, 0.9]])
    >>> ll, _ = GramMessages(g).estep(np.array([0.5, 0.5]), np.array([0.5, 0.5]), T, O)
    >>> from streamspec.core.hmm_em import window_log_likelihood
    >>> from streamspec.core.hidden_markov_model import HiddenMarkovModel
    >>> bool(np.isclose(ll, window_log_likelihood(g, HiddenMarkovModel([0.5, 0.5], T.T, O.T))))
    True
    """

    def __init__(self, counts: WindowCounts):
        wt = WindowTriples.of(counts)
        t = wt.triples
        self.L, self.n = counts.window, counts.n
        self.w = t.weights / t.total
        pasts, self.past_of = np.unique(t.x1, return_inverse=True)
        futures, future_of = np.unique(t.x3, return_inverse=True)
        self.past = wt.windows[pasts]  # (P, L) digits, pads -1 first
        self.future = wt.windows[futures]  # (F, L) digits, pads -1 last
        self.first = (self.past < 0).sum(axis=1)  # each past's first real position
        # the grams sort by (x, future, past): each distinct pair (x, future) is a run of them
        pair = t.x2 * futures.size + future_of
        new = np.concatenate(([True], pair[1:] != pair[:-1]))
        self.pair_of = np.cumsum(new) - 1
        starts = np.flatnonzero(new)
        self.pair_x, self.pair_future = t.x2[starts], future_of[starts]
        # C[p, q] = the weight of the gram (past p, pair q), data in gram order (CSC, sorted)
        self.C = sp.csc_matrix((self.w, self.past_of, np.append(starts, t.nnz)),
                               shape=(pasts.size, starts.size))
        self.pair_to_future = _gather(self.pair_future, futures.size)
        self.pair_to_x = _gather(self.pair_x, self.n)
        self.past_symbol = [_gather(np.maximum(self.past[:, t], 0), self.n) for t in range(self.L)]
        self.future_symbol = [_gather(np.maximum(self.future[:, t], 0), self.n) for t in range(self.L)]

    def _forward_pasts(self, pi, pi0, T, O):
        """Scaled forward messages (L, P, m), their step normalisers (L, P) and log-scale sums."""
        P, m = self.past.shape[0], T.shape[0]
        alpha, scale = np.zeros((self.L, P, m)), np.ones((self.L, P))
        a = np.zeros((P, m))
        for t in range(self.L):
            d = self.past[:, t]
            started = self.first < t
            a = np.where(started[:, None], a @ T.T, np.where((self.first > 0)[:, None], pi0, pi))
            a = a * np.where((d >= 0)[:, None], O[np.maximum(d, 0)], 0.0)
            s = a.sum(axis=1)
            live = self.first <= t
            scale[t] = np.where(live & (s > 0), s, 1.0)
            a = a / scale[t][:, None]
            alpha[t] = a
        with np.errstate(divide="ignore"):
            logs = np.where(self.first[None, :] <= np.arange(self.L)[:, None], np.log(scale), 0.0)
        return alpha, scale, logs.sum(axis=0)

    def _backward_futures(self, T, O):
        """Scaled backward messages (L+1, F, m), β[0] at x; step normalisers (L, F); log-scale sums."""
        F, m = self.future.shape[0], T.shape[0]
        beta, scale = np.ones((self.L + 1, F, m)), np.ones((self.L, F))
        for t in range(self.L - 1, -1, -1):
            d = self.future[:, t]
            e = np.where((d >= 0)[:, None], O[np.maximum(d, 0)], 1.0)  # a pad: no symbol
            raw = (e * beta[t + 1]) @ T
            s = raw.sum(axis=1)
            scale[t] = np.where((d >= 0) & (s > 0), s, 1.0)  # after the end: Pr(nothing) = 1
            beta[t] = raw / scale[t][:, None]
        return beta, scale, np.log(scale).sum(axis=0)

    def estep(self, pi, pi0, T, O, stats: bool = True):
        """``(ll, (s_pi, s_pi0, s_T, s_O))``: mean log-likelihood per gram weight and expected
        counts (``T[h2, h1]``, ``O[x, h]`` column-stochastic). O(nnz · m + (P + F) · L · m²)."""
        alpha, a_scale, a_log = self._forward_pasts(pi, pi0, T, O)
        beta, b_scale, b_log = self._backward_futures(T, O)
        AT = alpha[-1] @ T.T  # (P, m): Pr(past, state at x), scaled
        Y = O[self.pair_x] * beta[0][self.pair_future]  # (pairs, m): Pr(x, future | state at x)
        z = self._gram_probas(AT, Y)  # Pr(gram), scaled
        with np.errstate(divide="ignore"):
            ll = float(self.w @ (np.log(z) + a_log[self.past_of] + b_log[self.pair_future[self.pair_of]]))
        if not stats:
            return ll, None
        C = self.C.copy()
        C.data = np.divide(self.w, z, out=np.zeros_like(z), where=z > 0)  # weight / Pr, per gram
        Vp = np.asarray(C @ Y)  # (P, m): the messages into each past's last state, summed
        Uq = np.asarray(C.T @ AT) * O[self.pair_x]  # (pairs, m): Σ weight/Pr · Pr(past, x, state)
        s_T = T * (Vp.T @ alpha[-1])  # ξ between the past's last symbol and x
        s_O = np.asarray(self.pair_to_x @ (Uq * beta[0][self.pair_future]))  # the posterior at x
        s_pi, s_pi0 = self._past_counts(alpha, a_scale, Vp @ T, T, O, s_T, s_O)
        self._future_counts(np.asarray(self.pair_to_future @ Uq), beta, b_scale, T, O, s_T, s_O)
        return ll, (s_pi, s_pi0, s_T, s_O)

    def _gram_probas(self, AT: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """``z[g] = AT[past of g] · Y[pair of g]``: through the dense (P × pairs) product when it is
        not much larger than the grams (one BLAS product: O(P · pairs · m)), else row by row
        (O(nnz · m), but many times slower per operation)."""
        P, Q = AT.shape[0], Y.shape[0]
        if P * Q <= min(32 * self.w.size, 1 << 22):
            return (AT @ Y.T)[self.past_of, self.pair_of]
        return (AT[self.past_of] * Y[self.pair_of]).sum(axis=1)

    def _past_counts(self, alpha, scale, R, T, O, s_T, s_O):
        """Backward inside every distinct past from its summed message R (P, m); adds its counts
        to ``s_T``, ``s_O``; returns the start counts ``(s_pi, s_pi0)``."""
        m = T.shape[0]
        s_pi, s_pi0 = np.zeros(m), np.zeros(m)
        for t in range(self.L - 1, -1, -1):
            live = self.first <= t
            g = alpha[t] * R * live[:, None]
            d = self.past[:, t]
            s_O += np.asarray(self.past_symbol[t] @ g)
            at_start = self.first == t
            s_pi += g[at_start & (self.first == 0)].sum(axis=0)
            s_pi0 += g[at_start & (self.first > 0)].sum(axis=0)
            if t == 0:
                break
            v = O[np.maximum(d, 0)] * R / scale[t][:, None] * (self.first < t)[:, None]
            s_T += T * (v.T @ alpha[t - 1])
            R = v @ T
        return s_pi, s_pi0

    def _future_counts(self, Q, beta, scale, T, O, s_T, s_O) -> None:
        """Forward inside every distinct future from its summed message Q (F, m) at x; adds its
        counts to ``s_T``, ``s_O`` (nothing at the pads after a sequence's end)."""
        A = Q
        for t in range(self.L):
            d = self.future[:, t]
            real = (d >= 0)[:, None]
            e = O[np.maximum(d, 0)] * real
            v = e * beta[t + 1] / scale[t][:, None]
            s_T += T * (v.T @ A)
            A = (A @ T.T) * e / scale[t][:, None]
            s_O += np.asarray(self.future_symbol[t] @ (A * beta[t + 1]))

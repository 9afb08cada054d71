"""EM for an HMM on counted triples or windows, each distinct one a weighted sample.

The likelihood maximised is that of the *counted* triples (or (2L+1)-grams): each
distinct one a sample of a short HMM run — three steps, or the 2L + 1 steps of a gram —
weighted by its count (a composite likelihood in sliding mode, where they overlap). The
E-steps are vectorised over the distinct triples or grams, O(nnz · m + min(n, nnz) · m²)
per iteration for triples and O(nnz · L · m²) for grams, whatever the stream's length, and
EM never lowers this likelihood (``history`` below).

**Pads.** A gram padded before its first symbol starts a sequence: its first real
symbol's state is drawn from ``pi0``, the state distribution at a sequence start;
every other gram's first state from ``pi``, the distribution of a gram's first state
(near the stationary one in sliding mode). Pads after the end are simply absent
symbols. So the grams are grouped by their pads and each group is a plain run of
``2L + 1 − pads`` symbols (``docs/math.md`` section 11).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.progress import Progress
from streamspec.core.triples import Triples
from streamspec.core.window_estep import GramMessages
from streamspec.core.windows import WindowCounts

__all__ = ["refine", "refine_windows", "triple_log_likelihood", "window_log_likelihood",
           "forward_backward"]

_CHUNK = 1 << 16  # distinct triples per block of the E-step: bounds its scratch memory
_BLOCK_FLOATS = 1 << 22  # floats of one (rows × positions × states) array of the window E-step


class _Chunks:
    """The triples of an E-step in blocks of :data:`_CHUNK`, each with its weights per unit total,
    the symbols it has at positions 1 and 3 (``None``: the whole alphabet, when it is smaller
    than the block) with each triple's index among them, and the sparse map of its cells to
    ``(position, symbol)`` (block-diagonal, one one-hot block per position, over the alphabet
    or over the block's symbols there), made once per EM run: the sums over the triples of each
    position's symbol are then one sparse product. O(nnz log c) once.

    Also the E-step's scratch arrays (:meth:`scratch`), made once per number of states and
    reused by every E-step of the run. Why: a dozen (c × m) temporaries per block, freed at
    every return, go back to the kernel (glibc trims a heap top above twice its largest
    freed block) and are faulted in again, page by page, by the next E-step: that cost
    ~2/3 of an E-step (9.1 ms against 2.8 ms at c = 20,000, m = 8)."""

    def __init__(self, triples: Triples):
        n = self.n = triples.n
        x1a, x2a, x3a, wa = triples.x1, triples.x2, triples.x3, triples.weights / triples.total
        self.blocks = []
        for lo in range(0, triples.nnz, _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            x1, x2, x3 = x1a[sl], x2a[sl], x3a[sl]
            c = x1.size
            if n <= c:  # the tables of every symbol, once per E-step
                symbols, (i1, i3) = None, (x1, x3)
                rows, n_rows = np.concatenate([x1, x2 + n, x3 + 2 * n]), 3 * n
            else:  # why: a large alphabet's (n × m) tables per block would cost more than the block
                (u1, i1), (u2, i2), (u3, i3) = (np.unique(x, return_inverse=True) for x in (x1, x2, x3))
                symbols = (u1, u2, u3)
                rows = np.concatenate([i1, i2 + u1.size, i3 + u1.size + u2.size])
                n_rows = u1.size + u2.size + u3.size
            cells = sp.csr_matrix((np.ones(3 * c), (rows, np.arange(3 * c))), shape=(n_rows, 3 * c))
            self.blocks.append((i1, x2, i3, wa[sl], cells, symbols))
        self._scratch: tuple[int, dict[str, np.ndarray]] | None = None

    def scratch(self, m: int) -> dict[str, np.ndarray]:
        """The scratch arrays of an E-step with ``m`` states, for the largest block (a block uses
        their first rows): four (c, m), one (3c, m) and three (c,). O(c · m) once per m (a run's
        m is fixed; another m replaces them)."""
        if self._scratch is None or self._scratch[0] != m:
            c = max((b[0].size for b in self.blocks), default=0)
            buf = {name: np.empty((c, m)) for name in ("e2", "f2", "b3", "fb")}
            buf.update(G=np.empty((3 * c, m)), p=np.empty(c), logp=np.empty(c), r=np.empty(c))
            self._scratch = (m, buf)
        return self._scratch[1]


def _estep(triples: Triples | _Chunks, pi, T, O, stats: bool = True):
    """Triple log-likelihood (per unit weight) and, if ``stats``, expected sufficient statistics.

    O(nnz · m + min(n, nnz) · m²) time: what depends on one symbol of a triple is computed
    once per symbol (the tables ``A``, ``B`` below, over the alphabet or a block's symbols)
    and gathered, and the posteriors are summed per symbol (one sparse product) before the
    (m × m) products. O(chunk · m + n · m) memory (the scratch of :meth:`_Chunks.scratch`).

    With ``a1 = π ∘ O[x1]``, ``f2 = (a1 T^T) ∘ O[x2]``, ``b3 = O[x3] T`` and ``r = w / Pr(triple)``,
    the posteriors are ``g1 = ((e2 ∘ b3 ∘ r) T) ∘ a1``, ``g2 = f2 ∘ b3 ∘ r`` and ``g3 = O[x3] ∘
    ((r f2) T^T)``, and the two-slice counts ``T ∘ Σ (e2 ∘ b3 ∘ r)^T a1`` and ``T ∘ Σ (r O[x3])^T
    f2``: in each, the factor of one symbol comes out of the sum over the triples sharing it.
    """
    n, m = O.shape
    chunks = triples if isinstance(triples, _Chunks) else _Chunks(triples)
    buf = chunks.scratch(m)
    TT = np.ascontiguousarray(T.T)
    ll = 0.0
    s_pi, s_O = np.zeros(m), np.zeros((n, m))
    xi12, xi23 = np.zeros((m, m)), np.zeros((m, m))  # Σ (e2 ∘ b3 ∘ r)^T a1, Σ (r O[x3])^T f2
    whole = None  # the tables over the alphabet, made at the first block that uses them
    ones_m = np.ones(m)
    for i1, x2, i3, w, cells, symbols in chunks.blocks:
        if symbols is None:
            if whole is None:
                Opi = O * pi
                whole = (O, Opi, Opi @ TT, O @ T)
            O3, Opi1, A, B = whole
        else:
            O3, Opi1 = O[symbols[2]], O[symbols[0]] * pi
            A, B = Opi1 @ TT, O3 @ T  # Pr(x1, h2), Pr(x3 | h2) of the block's symbols
        c = x2.size
        e2, f2, b3, fb = (buf[k][:c] for k in ("e2", "f2", "b3", "fb"))
        p, logp, r = buf["p"][:c], buf["logp"][:c], buf["r"][:c]
        # mode "clip": the indices are in range, and numpy buffers ``out`` in the default mode
        np.take(O, x2, axis=0, out=e2, mode="clip")
        np.take(A, i1, axis=0, out=f2, mode="clip")
        f2 *= e2  # Pr(x1, x2, h2)
        np.take(B, i3, axis=0, out=b3, mode="clip")
        np.multiply(f2, b3, out=fb)
        np.matmul(fb, ones_m, out=p)
        with np.errstate(divide="ignore"):
            np.log(p, out=logp)
            ll += float(w @ logp)
        if not stats:
            continue
        r[:] = 0.0
        np.divide(w, p, out=r, where=p > 0)
        rc = r[:, None]
        G = buf["G"][: 3 * c]  # per triple, stacked as the cells' columns
        np.multiply(e2, b3, out=G[:c])
        G[:c] *= rc  # Pr(x2, x3 | h2) / Pr(triple)
        np.multiply(fb, rc, out=G[c:2 * c])  # the posterior of h2
        np.multiply(f2, rc, out=G[2 * c:])
        per_symbol = cells @ G
        k1 = Opi1.shape[0]
        k2 = per_symbol.shape[0] - k1 - O3.shape[0]
        S1, S2, S3 = per_symbol[:k1], per_symbol[k1:k1 + k2], per_symbol[k1 + k2:]
        g1 = (S1 @ T) * Opi1  # Σ g1 per symbol x1
        s_pi += g1.sum(axis=0)
        g3 = O3 * (S3 @ TT)  # Σ g3 per symbol x3
        xi12 += S1.T @ Opi1
        xi23 += O3.T @ S3
        if symbols is None:
            s_O += g1 + S2 + g3
        else:  # each symbol once in u: no repeated index in the +=
            s_O[symbols[0]] += g1
            s_O[symbols[1]] += S2
            s_O[symbols[2]] += g3
    if not stats:
        return ll, None
    return ll, (s_pi, T * (xi12 + xi23), s_O)


def triple_log_likelihood(triples: Triples, model: HiddenMarkovModel) -> float:
    """Mean log-likelihood per counted triple of ``triples`` under ``model``. O(nnz · m + min(n, nnz) · m²).

    Each triple is scored as three consecutive symbols whose first hidden state is
    drawn from ``model.startprob_``.

    Examples
    --------
    >>> model = HiddenMarkovModel([1.0], [[1.0]], [[0.5, 0.5]])
    >>> t = Triples.from_arrays(2, x1=[0, 1], x2=[1, 1], x3=[0, 0])
    >>> round(triple_log_likelihood(t, model), 6), round(3 * float(np.log(0.5)), 6)
    (-2.079442, -2.079442)
    """
    if triples.n != model.n_symbols:
        raise ValueError(f"triples over {triples.n} symbols, model over {model.n_symbols}")
    return _estep(triples, model.startprob_, model.transmat_.T, model.emissionprob_.T, stats=False)[0]


def _squarem(estep, params: tuple, mstep, n_iter: int, tol: float):
    """EM (alternate ``estep``: params -> (ll, stats), and ``mstep``: stats, params -> params)
    accelerated by SQUAREM (Varadhan & Roland 2008), kept monotone.

    A cycle takes two EM steps ``θ1 = F(θ0)``, ``θ2 = F(θ1)`` and jumps to ``θ0 − 2αr + α²v``
    (``r = θ1 − θ0``, ``v = θ2 − 2θ1 + θ0``, ``α = −‖r‖/‖v‖`` at most −1), projected back onto
    the distributions (clipped at 0, columns renormalised); the jump is kept only if its
    likelihood is at least θ2's, so the likelihood never decreases. ``n_iter`` bounds the
    cycles (at most three E-steps each); ``history`` holds the likelihood at the start and
    after each cycle.
    """
    ll, st = estep(*params)
    history = [ll]
    progress = Progress("hmm-em", *params[-1].shape)  # a long fit says where it is
    for it in range(int(n_iter)):
        p1 = mstep(st, params)
        ll1, st1 = estep(*p1)
        p2 = mstep(st1, p1)
        ll2, st2 = estep(*p2)
        best = (ll2, p2, st2)
        alpha = _step_length(params, p1, p2)
        if alpha < -1.0:
            p3 = tuple(_project(a - 2 * alpha * (b - a) + alpha**2 * (c - 2 * b + a))
                       for a, b, c in zip(params, p1, p2, strict=True))
            ll3, st3 = estep(*p3)
            if ll3 >= ll2:
                best = (ll3, p3, st3)
        ll, params, st = best
        history.append(ll)
        progress.line(f"cycle={it + 1}/{int(n_iter)}", -ll)
        if ll - history[-2] < tol:
            return params, history, True
    return params, history, False


def _step_length(p0: tuple, p1: tuple, p2: tuple) -> float:
    r = np.concatenate([(b - a).ravel() for a, b in zip(p0, p1, strict=True)])
    v = np.concatenate([(c - 2 * b + a).ravel() for a, b, c in zip(p0, p1, p2, strict=True)])
    nv = float(np.linalg.norm(v))
    return min(-1.0, -float(np.linalg.norm(r)) / nv) if nv > 0 else -1.0


# probabilities below this are set to 0 by the M-step and the SQUAREM projection. Why: EM drives
# unused entries towards 0 geometrically, and an entry of 1e-300 (the old clip) times a message
# is a subnormal float, 10-100x slower in every product: a 64-state EM over 5-grams of 20 symbols
# ran its E-steps in 209 ms instead of 17 ms. No count can tell 1e-60 from 0, and every column
# keeps an entry of at least 1/K, so the columns still sum to 1
_TINY = 1e-60


def _flushed(a: np.ndarray) -> np.ndarray:
    """``a`` with its entries below :data:`_TINY` set to 0. O(size)."""
    return np.where(a < _TINY, 0.0, a)


def _project(a: np.ndarray) -> np.ndarray:
    """Columns (or a vector) clipped at 0, entries below 1e-60 flushed, renormalised to sum to 1
    (an extrapolation keeps each column's sum, 1, so one entry is at least 1/K)."""
    a = _flushed(a)
    return a / a.sum(axis=0, keepdims=True)


def _normalised(s: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Columns of expected counts scaled to sum to 1, entries below 1e-60 flushed to 0; a column
    without counts keeps ``old``."""
    col = s.sum(axis=0, keepdims=True)
    return np.where(col > 0, _flushed(s / np.where(col > 0, col, 1.0)), old)


def refine(triples: Triples, pi, T, O, n_iter: int, tol: float):
    """EM on the counted triples from ``(pi, T, O)`` (column-stochastic), accelerated by
    SQUAREM (:func:`_squarem`); ``n_iter`` bounds the E-steps, O(nnz · m + min(n, nnz) · m²)
    each: ⌈n_iter / 3⌉ cycles of at most three.

    Returns ``(pi, T, O, history, converged)``: ``history[k]`` is the mean triple
    log-likelihood of the parameters after k cycles (non-decreasing).
    Stops early when a cycle gains less than ``tol``.
    """
    def mstep(st, params):
        s_pi, s_T, s_O = st
        return s_pi / s_pi.sum(), _normalised(s_T, params[1]), _normalised(s_O, params[2])

    chunks = _Chunks(triples)  # why: the blocks and their one-hot maps are made once, not per iteration
    # why SQUAREM: at the same E-steps it ends nearer the optimum than plain EM, whose linear
    # convergence is slow (river's keyed stream: log loss 0.014-0.082 nats better at equal CPU)
    cycles = -(-int(n_iter) // 3)
    (pi, T, O), history, converged = _squarem(lambda *p: _estep(chunks, *p), (pi, T, O), mstep, cycles, tol)
    return pi, T, O, history, converged


# ---------------------------------------------------------------------- windows


def _groups(grams: WindowCounts) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """The grams as runs without pads, grouped by their pads: ``(symbols (k, ℓ), weights per unit
    total (k,), starts a sequence)`` per group. O(nnz · L)."""
    d = grams.digits()
    span = d.shape[1]
    pad = d < 0
    left = np.argmin(np.concatenate([pad, np.zeros((d.shape[0], 1), bool)], axis=1), axis=1)
    right = np.argmin(np.concatenate([pad[:, ::-1], np.zeros((d.shape[0], 1), bool)], axis=1), axis=1)
    w = grams.weights / grams.total
    out = []
    for a, b in sorted(set(zip(left.tolist(), right.tolist(), strict=True))):
        rows = np.flatnonzero((left == a) & (right == b))
        out.append((d[rows, a : span - b], w[rows], a > 0))
    return out


def forward_backward(X: np.ndarray, w: np.ndarray, start, T, O, stats: bool = True):
    """Weighted log-likelihood of the runs ``X`` (k, ℓ) and, if ``stats``, their expected counts.

    Scaled forward and backward passes vectorised over the runs; ``T[h2, h1]``, ``O[x, h]``,
    first state from ``start``. Returns ``(ll, (s_start, s_T, s_O))`` with ``ll = Σ w log
    Pr(run)`` (-inf if a run is impossible). O(k · ℓ · m²) time, O(k · ℓ · m) memory.
    """
    k, span = X.shape
    n, m = O.shape
    E = O[X.T]  # (ℓ, k, m): one contiguous block per position
    alpha = np.empty((span, k, m))
    scale = np.empty((span, k))
    a = E[0] * start
    for t in range(span):
        if t:
            a = (alpha[t - 1] @ T.T) * E[t]
        scale[t] = a.sum(axis=1)
        alpha[t] = a / np.where(scale[t] > 0, scale[t], 1.0)[:, None]
    with np.errstate(divide="ignore"):
        ll = float(np.log(scale).sum(axis=0) @ w)
    if not stats:
        return ll, None
    safe = np.where(scale > 0, scale, np.inf)  # an impossible run adds no counts
    s_T = np.zeros((m, m))
    gamma = alpha  # overwritten in place, position by position, from the last
    beta = np.ones((k, m))
    for t in range(span - 1, -1, -1):
        if t:
            v = E[t] * beta / safe[t][:, None]
            beta_prev = v @ T
            s_T += T * ((v * w[:, None]).T @ alpha[t - 1])  # ξ[h2, h1] between t - 1 and t
        gamma[t] *= beta * w[:, None]
        if t:
            beta = beta_prev
    G = gamma.reshape(span * k, m)
    S = sp.csr_matrix((np.ones(span * k), (X.T.ravel(), np.arange(span * k))), shape=(n, span * k))
    return ll, (gamma[0].sum(axis=0), s_T, np.asarray(S @ G))


def _window_estep(groups, pi, pi0, T, O, stats: bool = True):
    """Log-likelihood (per unit weight) of the grams and their expected counts
    ``(s_pi, s_pi0, s_T, s_O)``. O(nnz · L · m²)."""
    n, m = O.shape
    ll, s_pi, s_pi0, s_T, s_O = 0.0, np.zeros(m), np.zeros(m), np.zeros((m, m)), np.zeros((n, m))
    for X, w, starts in groups:
        rows = max(1, _BLOCK_FLOATS // (X.shape[1] * m))
        for lo in range(0, X.shape[0], rows):
            part, st = forward_backward(X[lo : lo + rows], w[lo : lo + rows], pi0 if starts else pi,
                                        T, O, stats)
            ll += part
            if stats:
                (s_pi0 if starts else s_pi)[:] += st[0]
                s_T += st[1]
                s_O += st[2]
    return ll, (s_pi, s_pi0, s_T, s_O)


def window_log_likelihood(grams: WindowCounts, model: HiddenMarkovModel, pi0=None) -> float:
    """Mean log-likelihood per counted gram under ``model`` (grams padded before their first symbol
    start from ``pi0``, default ``model.startprob_``). O(nnz · L · m²).

    Examples
    --------
    >>> model = HiddenMarkovModel([1.0], [[1.0]], [[0.5, 0.5]])
    >>> g = WindowCounts.from_digits(2, 2, [[-1, 0, 1, 1, 0], [0, 1, 1, 0, 1]])
    >>> round(window_log_likelihood(g, model), 6), round(4.5 * float(np.log(0.5)), 6)
    (-3.119162, -3.119162)
    """
    if grams.n != model.n_symbols:
        raise ValueError(f"grams over {grams.n} symbols, model over {model.n_symbols}")
    pi = model.startprob_
    pi0 = pi if pi0 is None else np.asarray(pi0, dtype=np.float64)
    return _window_estep(_groups(grams), pi, pi0, model.transmat_.T, model.emissionprob_.T, False)[0]


def refine_windows(grams: WindowCounts, pi, pi0, T, O, n_iter: int, tol: float):
    """EM on the counted grams from ``(pi, pi0, T, O)`` (column-stochastic). O(nnz · L · m²) per
    iteration.

    Returns ``(pi, pi0, T, O, history, converged)``: ``history[k]`` is the mean gram
    log-likelihood after k iterations (non-decreasing); ``pi0`` (a sequence's first
    state) is kept as given when no gram starts a sequence.
    """
    messages = GramMessages(grams)

    def mstep(st, params):
        s_pi, s_pi0, s_T, s_O = st
        return (s_pi / s_pi.sum() if s_pi.sum() > 0 else params[0],
                s_pi0 / s_pi0.sum() if s_pi0.sum() > 0 else params[1],
                _normalised(s_T, params[2]), _normalised(s_O, params[3]))

    params, history, converged = _squarem(messages.estep, (pi, pi0, T, O), mstep, n_iter, tol)
    return (*params, history, converged)

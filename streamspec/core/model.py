"""The observable-operator model: probabilities, filters, prediction and sampling.

Costs are stated for n symbols and dimension d: a prediction costs O(n · d) (one
product of the state with the n × d matrix ``C = b∞ᵀ B``), a state update O(d²).
Batched routines work in chunks of positions sized so that their scratch stays
under ~2²² floats (32 MiB), whatever n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from streamspec.core import filters
from streamspec.core.checkpoint import check_metadata
from streamspec.core.factors import MFactors
from streamspec.core.filters import FILTERS, clip_normalise
from streamspec.core.model_io import ModelIO
from streamspec.core.model_sequences import SequencePrediction
from streamspec.core.symbol_input import to_indices

__all__ = ["ObservableOperatorModel", "FILTERS"]

_CHUNK = 4096  # positions filtered at once by the vectorised window filter (small alphabets)
_SCRATCH = 1 << 22  # floats of scratch a chunk may take: chunks shrink as n (or d²) grows


class ObservableOperatorModel(SequencePrediction, ModelIO):
    """An HMM in observable-operator form: ``Pr(x_1..x_t) = b∞ᵀ B_{x_t} … B_{x_1} b1``.

    Parameters
    ----------
    b1
        Initial state, shape (d,).
    binf
        Normaliser, shape (d,).
    B
        Operators, shape (n, d, d): ``B[x]`` for each symbol x.
    filter
        How a history becomes a state for prediction. ``"window"`` (default):
        restart from ``b1`` and apply only the last ``window`` symbols, which bounds
        the propagation of estimation error (docs/math.md section 4); the prediction is
        then ``Pr(next | last w symbols)`` under the stationary model.
        ``"recursive"``: the textbook filter over the whole history.
    window
        Number of symbols the window filter looks back (>= 0).
    min_proba
        Floor of every predicted probability. Spectral estimates can give negative
        or unnormalised values: predictions are clipped at 0, renormalised, then
        floored at ``min_proba`` and renormalised again, so every prediction is a
        valid distribution and every log loss is finite.
    symbols
        Optional labels: methods take indices or these labels (unknown ones skipped: symbol_input).
    backoff
        Optional :class:`~streamspec.core.backoff.Backoff` (every estimator's default):
        predictions become the online mixture of this model's own prediction (clipped at
        0 and renormalised, not floored: the trigram keeps every symbol possible), an
        interpolated Kneser–Ney trigram of the same counts (stream starts included) and
        the forward filter of an HMM of the same counts, with weights per bucket of the
        trigram context's count that learn from every symbol read
        (:mod:`streamspec.core.model_sequences`). :meth:`without_backoff` gives the
        model alone.
    rank
        The rank k the estimator used (an int; ``None``: the dimension d). It differs
        from d for the dense M-estimator, whose n × n operators have rank k, and it
        is what ``rank="auto"`` chose. Kept by :meth:`with_filter` and by
        :meth:`save` / :meth:`load`.
    factors
        The fitted :class:`~streamspec.core.factors.MFactors` of θ_M (``None`` for other
        estimators): what a warm start (``MEstimator().fit(acc, init=model)``) needs.
        Part of the model: kept by :meth:`with_filter` / :meth:`with_backoff` and saved
        by :meth:`save` / :meth:`to_bytes`.
    candidates
        Optional ``{rank: model}`` of the ranks fitted alongside this one by a rank
        selector (``rank`` is the one chosen); kept by :meth:`with_filter`, not saved.
    hmm
        Optional hidden Markov model fitted on the same counts (by
        :class:`~streamspec.WithHMM`); kept by :meth:`with_filter`, not saved (it has
        its own checkpoint).
    metadata
        Optional ``dict[str, str]`` about the model, e.g. ``{"encoding": "utf-8"}``, the
        encoding its symbols were read with, so that a reader splits a history the way
        the counts were. Kept by :meth:`with_filter` / :meth:`replace` and saved (JSON);
        ``{}`` when not given and for checkpoints written before it was kept.
    right
        Optional (d, d) matrix: the operators are then ``B[x] @ right`` (the factored form a
        warm refit writes, docs/math.md section 10: the refit changes ``right`` and the rows of
        the symbols whose counts changed, instead of all n · d² numbers). Every method applies
        ``right`` to the state first, at the same cost; :attr:`B` forms the product once, when
        asked for (O(n · d³)), and :attr:`operator_factors` gives ``(B, right)`` as stored.

    Memory: O(n · d²) for the operators, plus O(nnz + n · K) for a backoff over nnz
    distinct triples with a K-state HMM.

    Notes
    -----
    ``log_proba`` uses the chain rule over these clipped predictive
    distributions, so it is the log-probability under a proper (normalised)
    sequence model; :meth:`joint_proba` is the raw operator product, which may be
    negative for an estimated model and is what the paper's error metric compares.
    When a state update divides by a non-positive normaliser (the model gave the
    observed symbol no mass), the state is rescaled by ``|b∞|ᵀ|state|`` instead.

    Examples
    --------
    A two-symbol i.i.d. coin as a one-dimensional model:

    >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
    >>> m.predict_proba_next([0, 1, 1]).tolist()
    [0.25, 0.75]
    >>> abs(m.log_proba([1, 1]) - 2 * float(np.log(0.75))) < 1e-12
    True

    """

    def __init__(
        self,
        b1,
        binf,
        B,
        filter: str = "window",
        window: int = 2,
        min_proba: float = 1e-6,
        symbols: Sequence | None = None,
        backoff=None,
        rank: int | None = None,
        factors: MFactors | None = None,
        candidates: dict | None = None,
        hmm=None,
        metadata: dict[str, str] | None = None,
        right=None,
    ):
        self._assign(b1, binf, B, filter, window, min_proba, symbols, backoff, rank, factors,
                     candidates, hmm, metadata, right)
        self._check()
        ops, right = self._parts
        C = np.einsum("d,xde->xe", self.binf, ops)  # C[x] · b = b∞ᵀ B_x b
        self._C = C if right is None else C @ right  # factored: b∞ᵀ B_x = (b∞ᵀ B̃_x) R

    def _assign(self, b1, binf, B, filter, window, min_proba, symbols, backoff, rank, factors,
                candidates, hmm, metadata, right=None) -> None:
        """The constructor's arguments as attributes (``rank`` as given; :meth:`_check` then
        resolves it). O(1) for float64 arrays."""
        self.b1 = np.asarray(b1, dtype=np.float64)
        self.binf = np.asarray(binf, dtype=np.float64)
        # why one tuple: the operators and their right factor are read together, and :attr:`B`
        # replaces both at once, so a thread predicting meanwhile never sees a mixed pair
        self._parts = (np.asarray(B, dtype=np.float64),
                       None if right is None else np.asarray(right, dtype=np.float64))
        self.filter = filter
        self.window = window
        self.min_proba = min_proba
        self.symbols = list(symbols) if symbols is not None else None
        self.backoff = backoff
        self.rank = rank
        self.factors = factors
        self.candidates = candidates
        self.hmm = hmm
        self.metadata = check_metadata(metadata)

    def _check(self, arrays: bool = True) -> None:
        """Validate the attributes (``arrays``: the finiteness of ``b1``, ``binf``, ``B`` and
        ``right`` too, O(n · d²)) and resolve ``rank``."""
        ops, right = self._parts
        if ops.ndim != 3 or ops.shape[1] != ops.shape[2]:
            raise ValueError(f"B must have shape (n, d, d), got {ops.shape}")
        d = ops.shape[1]
        if self.b1.shape != (d,) or self.binf.shape != (d,):
            raise ValueError(
                f"b1 and binf must have shape ({d},), got {self.b1.shape} and {self.binf.shape}"
            )
        if right is not None and right.shape != (d, d):
            raise ValueError(f"right must have shape ({d}, {d}), got {right.shape}")
        named = {"b1": self.b1, "binf": self.binf, "B": ops, "right": right}
        for name, a in named.items() if arrays else ():
            if a is None:
                continue
            step = max(1, _SCRATCH // max(1, a[0].size)) if a.ndim > 1 and len(a) else max(1, a.size)
            # why in blocks of rows: a boolean copy of B is n·d² bytes (250 MB at n = 10⁵, d = 50)
            if not all(np.isfinite(a[lo : lo + step]).all() for lo in range(0, max(len(a), 1), step)):
                raise ValueError(f"{name} holds NaN or infinite values")
        if self.filter not in FILTERS:
            raise ValueError(f"filter must be one of {FILTERS}, got {self.filter!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int | np.integer):
            raise ValueError(f"window must be a non-negative integer, got {self.window!r}")
        if self.window < 0:
            raise ValueError(f"window must be a non-negative integer, got {self.window!r}")
        if not 0 <= self.min_proba < 1.0 / self.n_symbols:
            raise ValueError(f"min_proba must be in [0, 1/n), got {self.min_proba!r}")
        if self.symbols is not None and len(self.symbols) != self.n_symbols:
            raise ValueError(f"{len(self.symbols)} symbol labels for {self.n_symbols} symbols")
        r = self.rank
        if r is not None and (isinstance(r, bool) or not isinstance(r, int | np.integer)
                              or not 1 <= r <= max(self.n_symbols, self.dim)):
            raise ValueError(f"rank must be an integer in 1..{max(self.n_symbols, self.dim)}, got {r!r}")
        if self.backoff is not None and getattr(self.backoff, "n", None) != self.n_symbols:
            raise ValueError(
                f"a backoff over {getattr(self.backoff, 'n', None)} symbols for a model of {self.n_symbols}"
            )
        self.rank = int(ops.shape[1] if r is None else r)

    def __setstate__(self, state: dict) -> None:
        """Unpickling: a model pickled before the operators could be factored kept ``B`` itself."""
        if "_parts" not in state and "B" in state:
            state["_parts"] = (state.pop("B"), None)
        self.__dict__.update(state)

    @property
    def B(self) -> np.ndarray:
        """The operators, shape (n, d, d): ``B[x]`` for each symbol x. O(1); for a factored
        model (``right`` given) the product ``B[x] @ right`` is formed on the first call, in
        blocks of rows (O(n · d³), n · d² floats), and kept instead of the factors."""
        ops, right = self._parts
        if right is None:
            return ops
        full = np.empty_like(ops)
        d = ops.shape[1]
        for lo in range(0, ops.shape[0], 8192):  # one matrix product per block of rows
            np.matmul(ops[lo : lo + 8192].reshape(-1, d), right,
                      out=full[lo : lo + 8192].reshape(-1, d))
        self._parts = (full, None)
        return full

    @property
    def operator_factors(self) -> tuple[np.ndarray, np.ndarray | None]:
        """``(B, right)`` as stored: the operators are ``B[x] @ right`` (``right`` None: ``B``
        itself). What the model's own methods, a checkpoint and a refit read. O(1)."""
        return self._parts

    @property
    def symbol_rows(self) -> np.ndarray:
        """``C[x] = b∞ᵀ B_x``, shape (n, d): the model's own prediction from a state s is
        ``C s`` before clipping (made once, with the model). O(1)."""
        return self._C

    @property
    def n_symbols(self) -> int:
        """Alphabet size n. O(1)."""
        return self._parts[0].shape[0]

    @property
    def dim(self) -> int:
        """Dimension d of the states. O(1)."""
        return self._parts[0].shape[1]

    def replace(self, **changes) -> ObservableOperatorModel:
        """A copy with some constructor arguments changed, every other one kept. O(n · d²), O(n)
        when ``b1``, ``binf`` and ``B`` are kept (then shared, not copied, and not checked again).

        The arguments are the whole definition of a model (no other attribute is
        copied), so ``factors``, ``candidates``, ``hmm`` and ``metadata`` survive every
        copy.

        Examples
        --------
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.replace(window=5).window
        5
        """
        ops, right = self._parts
        args = dict(b1=self.b1, binf=self.binf, B=ops, filter=self.filter, window=self.window,
                    min_proba=self.min_proba, symbols=self.symbols, backoff=self.backoff,
                    rank=self.rank, factors=self.factors, candidates=self.candidates,
                    hmm=self.hmm, metadata=self.metadata, right=right) | changes
        if any(name in changes for name in ("b1", "binf", "B", "right")):
            return ObservableOperatorModel(**args)
        # why: the same operators (a backoff attached, another filter) need neither their
        # finiteness checked nor b∞ᵀ B_x again: ~1 s and n·d² bytes of scratch at n = 10⁵, d = 50
        new = ObservableOperatorModel.__new__(ObservableOperatorModel)
        new._assign(**args)
        new._check(arrays=False)
        new._C = self._C
        return new

    def with_filter(self, filter: str | None = None, window: int | None = None) -> ObservableOperatorModel:
        """The same model (operators, backoff, ``factors``) with another filter or window. O(n · d²).

        Examples
        --------
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.with_filter("recursive").filter
        'recursive'
        """
        changes = {}
        if filter is not None:
            changes["filter"] = filter
        if window is not None:
            changes["window"] = window
        return self.replace(**changes)

    def with_backoff(self, backoff) -> ObservableOperatorModel:
        """The same model mixed with ``backoff`` (a :class:`~streamspec.core.backoff.Backoff`). O(n · d²)."""
        return self.replace(backoff=backoff)

    def without_backoff(self) -> ObservableOperatorModel:
        """The HMM alone (predictions clipped, renormalised and floored at ``min_proba``). O(n · d²).

        Examples
        --------
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.without_backoff().backoff is None
        True
        """
        return self.replace(backoff=None)

    def _chunk(self) -> int:
        """Positions per batch, so that (chunk, n) and (chunk, d, d) scratch stay ≤ ~2²² floats."""
        return max(1, min(_CHUNK, _SCRATCH // max(self.n_symbols, self.dim * self.dim, 1)))

    def _seq(self, seq) -> np.ndarray:  # input checks
        return to_indices(seq, self.n_symbols, self.symbols)

    # ------------------------------------------------------------------ filtering

    def initial_state(self) -> np.ndarray:
        """A copy of ``b1``, the state before any symbol. O(d)."""
        return self.b1.copy()

    def update_state(self, state: np.ndarray, x: int) -> np.ndarray:
        """The state after observing symbol index ``x``. O(d²) time, O(d) memory."""
        ops, right = self._parts
        return filters.update_state(ops, self.binf, state, x, right)

    def predict_from_state(self, state: np.ndarray) -> np.ndarray:
        """The model's own next-symbol distribution from a state (d,), or from each row of (c, d).

        Clipped at 0, renormalised and floored at ``min_proba`` without a backoff; with one,
        clipped and renormalised only (the backoff's trigram keeps every symbol possible),
        as the ``"model"`` component of the mixture. The mixed prediction of a history is
        :meth:`predict_proba_next`. Time O(n · d) per state; scratch in chunks of ≤ ~2²²
        floats besides the (c, n) result.

        Examples
        --------
        >>> m = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]])
        >>> m.predict_from_state(np.array([1.0])).tolist()
        [0.25, 0.75]
        """
        S = np.asarray(state, dtype=np.float64)
        out = self._rows(np.atleast_2d(S))
        return out[0] if S.ndim == 1 else out

    def _rows(self, V: np.ndarray) -> np.ndarray:
        """The model's own rows (c, n) from states (c, d), chunked."""
        c, step = V.shape[0], self._chunk()
        if c <= step:
            return self._rows_chunk(V)
        out = np.empty((c, self.n_symbols))
        for lo in range(0, c, step):
            out[lo : lo + step] = self._rows_chunk(V[lo : lo + step])
        return out

    def _rows_chunk(self, V: np.ndarray) -> np.ndarray:
        q = V @ self._C.T
        return clip_normalise(q) if self.backoff is not None else self._normalise(q)

    def clipped_row_sums(self, states: np.ndarray) -> np.ndarray:
        """``Σ_x max(C[x] · s, 0)`` for each state s (rows of (c, d)): the normalisers. O(c · n · d)."""
        S = np.atleast_2d(np.asarray(states, dtype=np.float64))
        out = np.empty(S.shape[0])
        step = self._chunk()
        for lo in range(0, S.shape[0], step):
            out[lo : lo + step] = np.clip(S[lo : lo + step] @ self._C.T, 0.0, None).sum(axis=1)
        return out

    def clipped_entries(self, symbols: np.ndarray, states: np.ndarray) -> np.ndarray:
        """``max(C[x_i] · s_i, 0)`` for paired symbols and states (m, d), no whole rows. O(m·d)."""
        C = self._C[np.asarray(symbols, dtype=np.int64)]
        return np.clip(np.einsum("md,md->m", C, np.atleast_2d(states)), 0.0, None)

    def clipped_probas(self, symbols: np.ndarray, states: np.ndarray, which=None) -> np.ndarray:
        """The clipped, renormalised probability of ``symbols[i]`` from ``states[which[i]]`` (uniform
        where nothing is left): the ``"model"`` component for those symbols. ``which``
        (default: ``i``) lets many symbols share a state, whose normaliser is computed once.
        O(c · n · d + m · d) for c states and m symbols."""
        which = np.arange(len(symbols)) if which is None else np.asarray(which, dtype=np.int64)
        states = np.atleast_2d(states)
        denom = self.clipped_row_sums(states)[which]
        num = self.clipped_entries(symbols, states[which])
        ok = denom > 0
        return np.where(ok, num / np.where(ok, denom, 1.0), 1.0 / self.n_symbols)

    def window_states(self, contexts) -> np.ndarray:
        """States after each row of ``contexts`` (m, w) from ``b1``, shape (m, d). O(m · w · d²).

        Row i is ``state_for(contexts[i])`` of a window filter with window ≥ w.
        """
        X = np.asarray(contexts, dtype=np.int64)
        if X.ndim != 2:
            raise ValueError(f"expected an (m, w) array of contexts, got shape {X.shape}")
        self._seq(X.ravel())
        ops, right = self._parts
        return filters.window_states(self.b1, self.binf, ops, X, self._chunk(), right)

    def extend_states(self, states: np.ndarray) -> np.ndarray:
        """The states after each symbol, from each of ``states`` (shape (c, d)).

        Returns shape (c * n, d), ordered by state then symbol: row ``s * n + x``
        is ``update_state(states[s], x)``. Used to tabulate every context at once.
        Time O(c · n · d²), memory O(c · n · d): for small alphabets.
        """
        ops, right = self._parts
        return filters.extend_states(ops, self.binf, states, right)

    def state_for(self, history) -> np.ndarray:
        """The state this model's filter assigns to a history. O(w · d²) (window) or O(t · d²)."""
        h = self._seq(history)
        if self.filter == "window":
            h = h[max(0, len(h) - self.window) :]
        state = self.initial_state()
        for x in h:
            state = self.update_state(state, x)
        return state

    def _normalise(self, q: np.ndarray) -> np.ndarray:
        return filters.floor_normalise(q, self.min_proba)

    def _chunks(self, x: np.ndarray):
        """``(start, stop, V, lasts)``: the states predicting ``x[start:stop]`` and the symbols before."""
        ops, right = self._parts
        return filters.filter_chunks(self.b1, self.binf, ops, x, self.filter, self.window,
                                     self._chunk(), right)

    def joint_proba(self, seq) -> float:
        """The raw operator product ``b∞ᵀ B_{x_t} … B_{x_1} b1`` (may be negative; the HMM
        alone, never the backoff). O(t · d²).

        Computed with running rescaling, so only the final value can underflow.
        """
        x = self._seq(seq)
        ops, right = self._parts
        v = self.b1.copy()
        log_scale = 0.0
        for s in x:
            v = ops[s] @ filters.right_applied(v, right)
            norm = np.abs(v).max()
            if norm == 0:
                return 0.0
            v /= norm
            log_scale += np.log(norm)
        return float(self.binf @ v * np.exp(log_scale))

    def joint_proba_many(self, sequences: np.ndarray) -> np.ndarray:
        """Raw joint probabilities of many sequences of one length, shape (m, t) in, (m,) out.

        The HMM alone. O(m · t · d²) time, O(m · d²) memory.
        """
        X = np.asarray(sequences)
        if X.ndim != 2:
            raise ValueError(f"expected an (m, t) array of sequences, got shape {X.shape}")
        self._seq(X.ravel())
        ops, right = self._parts
        V = np.broadcast_to(self.b1, (X.shape[0], self.dim)).copy()
        for t in range(X.shape[1]):
            V = np.einsum("mde,me->md", ops[X[:, t]], filters.right_applied(V, right))
        return V @ self.binf

    def __repr__(self) -> str:
        return (
            f"ObservableOperatorModel(n_symbols={self.n_symbols}, dim={self.dim}, rank={self.rank}, "
            f"filter={self.filter!r}, window={self.window}"
            + (", backoff" if self.backoff is not None else "") + ")"
        )


"""The observable-operator model: probabilities, filters, prediction and sampling."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from streamspec.checkpoint import (
    CheckpointError,
    decode_value,
    dump_checkpoint,
    encode_value,
    load_checkpoint_bytes,
    read_checkpoint,
    write_checkpoint,
)

__all__ = ["ObservableOperatorModel", "FILTERS"]

FILTERS = ("window", "recursive")
_CHUNK = 4096  # positions filtered at once by the vectorised window filter


class ObservableOperatorModel:
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
        the propagation of estimation error (math.md section 4); the prediction is
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
        Optional labels of the symbol indices (informational; methods take indices).

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
    ):
        self.b1 = np.asarray(b1, dtype=np.float64)
        self.binf = np.asarray(binf, dtype=np.float64)
        self.B = np.asarray(B, dtype=np.float64)
        self.filter = filter
        self.window = window
        self.min_proba = min_proba
        self.symbols = list(symbols) if symbols is not None else None
        self._check()
        self._C = np.einsum("d,xde->xe", self.binf, self.B)  # C[x] · b = b∞ᵀ B_x b

    def _check(self) -> None:
        if self.B.ndim != 3 or self.B.shape[1] != self.B.shape[2]:
            raise ValueError(f"B must have shape (n, d, d), got {self.B.shape}")
        d = self.B.shape[1]
        if self.b1.shape != (d,) or self.binf.shape != (d,):
            raise ValueError(
                f"b1 and binf must have shape ({d},), got {self.b1.shape} and {self.binf.shape}"
            )
        for name in ("b1", "binf", "B"):
            if not np.isfinite(getattr(self, name)).all():
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

    @property
    def n_symbols(self) -> int:
        return self.B.shape[0]

    @property
    def dim(self) -> int:
        return self.B.shape[1]

    def with_filter(self, filter: str | None = None, window: int | None = None):
        """The same operators with another filter or window."""
        return ObservableOperatorModel(
            self.b1,
            self.binf,
            self.B,
            filter=self.filter if filter is None else filter,
            window=self.window if window is None else window,
            min_proba=self.min_proba,
            symbols=self.symbols,
        )

    # ------------------------------------------------------------------ input checks

    def _seq(self, seq) -> np.ndarray:
        arr = np.asarray(seq)
        if arr.size == 0:
            return np.empty(0, dtype=np.int64)
        if arr.ndim != 1:
            raise ValueError(f"a sequence must be 1-D, got shape {arr.shape}")
        if arr.dtype.kind not in "iu":
            raise ValueError(f"symbols must be integer indices 0..{self.n_symbols - 1}, got {arr.dtype}")
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= self.n_symbols:
            bad = lo if lo < 0 else hi
            raise ValueError(f"unknown symbol {bad}: the model has symbols 0..{self.n_symbols - 1}")
        return arr.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ filtering

    def initial_state(self) -> np.ndarray:
        return self.b1.copy()

    def update_state(self, state: np.ndarray, x: int) -> np.ndarray:
        """The state after observing symbol index ``x``."""
        v = self.B[x] @ state
        z = self.binf @ v
        return v / _safe_norm(z, np.abs(self.binf) @ np.abs(v))

    def predict_from_state(self, state: np.ndarray) -> np.ndarray:
        """Next-symbol distribution from a state, or from each row of an array of states
        (clipped, renormalised, floored)."""
        return self._normalise(np.asarray(state) @ self._C.T)

    def extend_states(self, states: np.ndarray) -> np.ndarray:
        """The states after each symbol, from each of ``states`` (shape (c, d)).

        Returns shape (c * n, d), ordered by state then symbol: row ``s * n + x``
        is ``update_state(states[s], x)``. Used to tabulate every context at once.
        """
        V = np.einsum("xde,ce->cxd", self.B, np.atleast_2d(states)).reshape(-1, self.dim)
        return V / _safe_norm(V @ self.binf, np.abs(V) @ np.abs(self.binf))[:, None]

    def state_for(self, history) -> np.ndarray:
        """The state this model's filter assigns to a history."""
        h = self._seq(history)
        if self.filter == "window":
            h = h[max(0, len(h) - self.window) :]
        state = self.initial_state()
        for x in h:
            state = self.update_state(state, x)
        return state

    def predict_proba_next(self, history) -> np.ndarray:
        """Distribution of the next symbol given ``history`` (indices), shape (n,).

        Always a valid distribution: non-negative, sums to 1.
        """
        return self.predict_from_state(self.state_for(history))

    def _normalise(self, q: np.ndarray) -> np.ndarray:
        q = np.clip(q, 0.0, None)
        s = q.sum(axis=-1, keepdims=True)
        n = q.shape[-1]
        q = np.where(s > 0, q / np.where(s > 0, s, 1.0), 1.0 / n)
        if self.min_proba > 0:
            q = np.maximum(q, self.min_proba)
            q = q / q.sum(axis=-1, keepdims=True)
        return q

    def predictive_sequence(self, seq) -> np.ndarray:
        """Predictive distributions before each symbol of ``seq``: shape (t, n).

        Row t is the prediction of ``seq[t]`` from ``seq[:t]`` by this model's filter.
        """
        x = self._seq(seq)
        T, d = len(x), self.dim
        out = np.empty((T, self.n_symbols))
        if self.filter == "recursive":
            state = self.initial_state()
            for t in range(T):
                out[t] = self.predict_from_state(state)
                state = self.update_state(state, x[t])
            return out
        w = self.window
        absb = np.abs(self.binf)
        for start in range(0, T, _CHUNK):
            stop = min(T, start + _CHUNK)
            V = np.broadcast_to(self.b1, (stop - start, d)).copy()
            pos = np.arange(start, stop)
            for lag in range(w, 0, -1):  # apply x[t-lag] for lag = w..1, where t - lag >= 0
                src = pos - lag
                ok = src >= 0
                if not ok.any():
                    continue
                Vn = np.einsum("tde,te->td", self.B[x[src[ok]]], V[ok])
                z = Vn @ self.binf
                V[ok] = Vn / _safe_norm(z, np.abs(Vn) @ absb)[:, None]
            out[start:stop] = self._normalise(V @ self._C.T)
        return out

    # ------------------------------------------------------------------ probabilities

    def log_proba(self, seq) -> float:
        """``log Pr(x_1..x_t)`` by the chain rule over the predictive distributions.

        Never underflows: a sum of log conditionals, each at least ``log(min_proba)``.
        """
        x = self._seq(seq)
        if x.size == 0:
            return 0.0
        P = self.predictive_sequence(x)
        return float(np.log(P[np.arange(len(x)), x]).sum())

    def joint_proba(self, seq) -> float:
        """The raw operator product ``b∞ᵀ B_{x_t} … B_{x_1} b1`` (may be negative).

        Computed with running rescaling, so only the final value can underflow.
        """
        x = self._seq(seq)
        v = self.b1.copy()
        log_scale = 0.0
        for s in x:
            v = self.B[s] @ v
            norm = np.abs(v).max()
            if norm == 0:
                return 0.0
            v /= norm
            log_scale += np.log(norm)
        return float(self.binf @ v * np.exp(log_scale))

    def joint_proba_many(self, sequences: np.ndarray) -> np.ndarray:
        """Raw joint probabilities of many sequences of one length, shape (m, t) in, (m,) out."""
        X = np.asarray(sequences)
        if X.ndim != 2:
            raise ValueError(f"expected an (m, t) array of sequences, got shape {X.shape}")
        self._seq(X.ravel())
        V = np.broadcast_to(self.b1, (X.shape[0], self.dim)).copy()
        for t in range(X.shape[1]):
            V = np.einsum("mde,me->md", self.B[X[:, t]], V)
        return V @ self.binf

    def log_loss(self, sequences: Iterable) -> float:
        """Mean negative log-likelihood per symbol (nats) over held-out sequences."""
        total, count = 0.0, 0
        for seq in sequences:
            x = self._seq(seq)
            total -= self.log_proba(x)
            count += x.size
        if count == 0:
            raise ValueError("log_loss needs at least one symbol")
        return total / count

    def accuracy(self, sequences: Iterable) -> float:
        """Fraction of symbols equal to the argmax of their predictive distribution."""
        hits, count = 0, 0
        for seq in sequences:
            x = self._seq(seq)
            if x.size:
                hits += int((self.predictive_sequence(x).argmax(axis=1) == x).sum())
                count += x.size
        if count == 0:
            raise ValueError("accuracy needs at least one symbol")
        return hits / count

    def sample(self, length: int, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """Draw a sequence of ``length`` symbol indices from the model's predictions."""
        rng = np.random.default_rng(random_state)
        out = np.empty(int(length), dtype=np.int64)
        u = rng.random(out.size)
        state = self.initial_state()
        for t in range(out.size):
            if self.filter == "window":
                state = self.state_for(out[max(0, t - self.window) : t])
            p = self.predict_from_state(state)
            out[t] = min(int(np.searchsorted(np.cumsum(p), u[t], side="right")), self.n_symbols - 1)
            if self.filter == "recursive":
                state = self.update_state(state, out[t])
        return out

    # ------------------------------------------------------------------ persistence

    _FORMAT = "streamspec.ObservableOperatorModel"
    _VERSION = 1

    def _header_arrays(self) -> tuple[dict, dict]:
        header = {
            "filter": self.filter,
            "window": int(self.window),
            "min_proba": float(self.min_proba),
            "symbols": None if self.symbols is None else [encode_value(s) for s in self.symbols],
        }
        arrays = {"b1": self.b1, "binf": self.binf, "B": self.B}
        factors = getattr(self, "factors", None)
        if factors is not None:  # kept so that a restarted refitter can warm-start
            header["factorization"] = factors.factorization
            arrays["R"], arrays["S"] = factors.R, factors.S
        return header, arrays

    def to_bytes(self) -> bytes:
        """The model as a checkpoint in bytes (npz + JSON header, checksummed; no pickle)."""
        return dump_checkpoint(self._FORMAT, self._VERSION, *self._header_arrays())

    def save(self, path: str | os.PathLike) -> None:
        write_checkpoint(path, self._FORMAT, self._VERSION, *self._header_arrays())

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "model") -> ObservableOperatorModel:
        header, arrays = load_checkpoint_bytes(data, cls._FORMAT, cls._VERSION, source)
        return cls._from_parts(header, arrays, source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ObservableOperatorModel:
        header, arrays = read_checkpoint(path, cls._FORMAT, cls._VERSION)
        return cls._from_parts(header, arrays, str(path))

    @classmethod
    def _from_parts(cls, header, arrays, source) -> ObservableOperatorModel:
        try:
            symbols = header["symbols"]
            model = cls(
                arrays["b1"],
                arrays["binf"],
                arrays["B"],
                filter=header["filter"],
                window=header["window"],
                min_proba=header["min_proba"],
                symbols=None if symbols is None else [decode_value(s) for s in symbols],
            )
            if "R" in arrays:
                from streamspec.mestimator import MFactors

                model.factors = MFactors(arrays["R"], arrays["S"], header["factorization"])
            return model
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{source}: malformed model checkpoint ({exc})") from None

    def __repr__(self) -> str:
        return (
            f"ObservableOperatorModel(n_symbols={self.n_symbols}, dim={self.dim}, "
            f"filter={self.filter!r}, window={self.window})"
        )


def _safe_norm(z, fallback):
    """``z`` where it is a usable positive normaliser, else the positive ``fallback``."""
    z = np.asarray(z, dtype=np.float64)
    fb = np.where(fallback > 0, fallback, 1.0)
    return np.where(z > 1e-12 * fb, z, fb)

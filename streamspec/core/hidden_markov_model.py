"""A fitted discrete hidden Markov model, in hmmlearn's orientation, with its inference.

:class:`HiddenMarkovModel` holds ``startprob_`` (m,), ``transmat_`` (m, m) and
``emissionprob_`` (m, n), each row a probability distribution, exactly as
hmmlearn's ``CategoricalHMM`` does, and answers the usual questions about a
sequence: its log-likelihood (:meth:`~HiddenMarkovModel.score`), the filtered and
smoothed state posteriors (:meth:`~HiddenMarkovModel.filter`,
:meth:`~HiddenMarkovModel.predict_proba`), the most likely state path
(:meth:`~HiddenMarkovModel.decode`, Viterbi) and the distribution of the next
symbol (:meth:`~HiddenMarkovModel.predict_proba_next`).

Every recursion is scaled (the forward and backward vectors are normalised at
each step, Viterbi works in logarithms), so sequences of any length neither
underflow nor overflow. A sequence of length T costs O(T · m²) time and O(T · m)
memory; nothing depends on the alphabet size beyond one lookup per symbol.

Symbols are indices ``0..n-1``, or, when the model keeps ``symbols`` (the labels of
the accumulator it was learnt from), those labels. Models are saved as
checksummed npz checkpoints (:mod:`streamspec.core.checkpoint`), never pickled.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence

import numpy as np

from streamspec.core.checkpoint import (
    CheckpointError,
    check_metadata,
    decode_value,
    dump_checkpoint,
    encode_value,
    load_checkpoint_bytes,
    read_checkpoint,
    write_checkpoint,
)
from streamspec.core.hmm_sampling import sample_sequences
from streamspec.core.symbol_input import split_lengths, to_indices

__all__ = ["HiddenMarkovModel"]

_KIND = "streamspec.HiddenMarkovModel"
_VERSION = 1
_ATOL = 1e-6  # how far from 1 a row of probabilities may sum before it is refused


def _stochastic_rows(a, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A float64 copy of ``a``, checked: ``shape``, finite, non-negative, rows summing to 1."""
    a = np.array(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} holds NaN or infinite values")
    if (a < 0).any():
        raise ValueError(f"{name} holds negative probabilities")
    sums = a.sum(axis=-1, keepdims=True)
    if not np.allclose(sums, 1.0, rtol=0.0, atol=_ATOL):
        raise ValueError(f"the rows of {name} must sum to 1 (sums: {np.ravel(sums).round(8).tolist()})")
    return a


class HiddenMarkovModel:
    """A discrete HMM with ``m`` hidden states and ``n`` symbols (hmmlearn's orientation).

    Parameters
    ----------
    startprob
        ``startprob[h] = Pr(h_1 = h)``, shape (m,).
    transmat
        ``transmat[i, j] = Pr(h_{t+1} = j | h_t = i)``, shape (m, m), rows sum to 1.
    emissionprob
        ``emissionprob[h, x] = Pr(x_t = x | h_t = h)``, shape (m, n), rows sum to 1.
    symbols
        Optional labels of the n symbols (e.g. ``MomentAccumulator.symbols``). When
        given, sequences passed to the methods are sequences of these labels;
        otherwise they are indices ``0..n-1``.
    metadata
        Optional ``dict[str, str]`` about the model (e.g. ``{"encoding": "utf-8"}``, the
        encoding its symbols were read with); saved in its checkpoint (JSON), ``{}``
        when not given and for checkpoints written before it was kept.
    occupancy
        Optional share of the symbols at each state as the fit estimated it, shape (m,);
        :meth:`occupancy` returns it instead of the stationary distribution. Not saved.

    Rows are checked (non-negative, summing to 1 within 1e-6); the arrays are
    copied verbatim into ``startprob_``, ``transmat_`` and ``emissionprob_``.

    Examples
    --------
    >>> hmm = HiddenMarkovModel(startprob=[0.5, 0.5], transmat=[[0.9, 0.1], [0.2, 0.8]],
    ...                         emissionprob=[[0.8, 0.2], [0.1, 0.9]], symbols=["a", "b"])
    >>> round(hmm.score(["a", "a", "b"]), 4)
    -2.4534
    >>> hmm.decode(["a", "a", "b"])[1].tolist()
    [0, 0, 0]
    >>> hmm.predict_proba(["a", "a", "b"]).round(3).tolist()
    [[0.94, 0.06], [0.929, 0.071], [0.623, 0.377]]
    >>> hmm.predict_proba_next(["a", "a"]).round(3).tolist()
    [0.717, 0.283]
    """

    def __init__(self, startprob, transmat, emissionprob, symbols: Sequence[Hashable] | None = None,
                 metadata: dict[str, str] | None = None, occupancy=None):
        E = np.asarray(emissionprob, dtype=np.float64)
        if E.ndim != 2 or E.shape[0] < 1 or E.shape[1] < 1:
            raise ValueError(f"emissionprob must be a non-empty (n_states, n_symbols) array, got {E.shape}")
        m, n = E.shape
        self.startprob_ = _stochastic_rows(startprob, "startprob", (m,))
        self.transmat_ = _stochastic_rows(transmat, "transmat", (m, m))
        self.emissionprob_ = _stochastic_rows(E, "emissionprob", (m, n))
        self.symbols = None if symbols is None else list(symbols)
        self.metadata = check_metadata(metadata)
        self.occupancy_ = None if occupancy is None else _stochastic_rows(occupancy, "occupancy", (m,))
        self._index: dict | None = None
        if self.symbols is not None:
            if len(self.symbols) != n:
                raise ValueError(f"{len(self.symbols)} symbol labels for {n} symbols")
            self._index = {s: i for i, s in enumerate(self.symbols)}
            if len(self._index) != n:
                raise ValueError("symbol labels must be distinct")

    # ------------------------------------------------------------------ shape

    @property
    def n_states(self) -> int:
        return int(self.transmat_.shape[0])

    @property
    def n_symbols(self) -> int:
        return int(self.emissionprob_.shape[1])

    def __repr__(self) -> str:
        labels = "" if self.symbols is None else ", labelled"
        return f"HiddenMarkovModel(n_states={self.n_states}, n_symbols={self.n_symbols}{labels})"

    # ------------------------------------------------------------------ symbols

    def encode(self, seq) -> np.ndarray:
        """Symbol indices of a sequence: indices, labels or hmmlearn's (T, 1) array. O(T).

        As every method reads its input (:mod:`streamspec.core.symbol_input`): integers
        are indices, other values labels; an unknown label is ``-1`` (no evidence at
        its position, also as an index; ``"<other>"`` if the model has it), with an
        :class:`~streamspec.core.symbol_input.UnknownSymbolsWarning`. A model whose
        labels are integers encodes them with ``symbol_input.encode_labels``.

        Examples
        --------
        >>> hmm = HiddenMarkovModel([1.0], [[1.0]], [[0.5, 0.5]], symbols=["x", "y"])
        >>> hmm.encode(["y", "x"]).tolist(), hmm.encode([1, 0]).tolist()
        ([1, 0], [1, 0])
        """
        return to_indices(seq, self.n_symbols, self.symbols, unknown="mark")

    def decode_symbols(self, indices) -> list | np.ndarray:
        """Labels of symbol indices (a list), or the indices themselves for a model without labels."""
        idx = np.asarray(indices, dtype=np.int64)
        if self.symbols is None:
            return idx
        return [self.symbols[i] for i in idx.tolist()]

    # ------------------------------------------------------------------ recursions

    def _likelihoods(self, x: np.ndarray) -> np.ndarray:
        """``L[t, h] = Pr(x_t | h_t = h)``, shape (T, m); 1 where ``x_t`` is unobserved (-1)."""
        L = self.emissionprob_[:, x].T
        if x.size and x.min() < 0:
            L[x < 0] = 1.0
        return L

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Normalised forward vectors (T, m) and the scale of each step (T,)."""
        L = self._likelihoods(x)
        Tn, m = L.shape
        alpha = np.empty((Tn, m))
        scale = np.empty(Tn)
        A = self.transmat_
        a = self.startprob_ * L[0] if Tn else self.startprob_
        for t in range(Tn):
            if t:
                a = (alpha[t - 1] @ A) * L[t]
            c = a.sum()
            if not c > 0:
                scale[t:] = 0.0
                alpha[t:] = np.nan
                return alpha, scale
            alpha[t] = a / c
            scale[t] = c
        return alpha, scale

    def _backward(self, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        L = self._likelihoods(x)
        Tn, m = L.shape
        beta = np.empty((Tn, m))
        beta[-1:] = 1.0
        A = self.transmat_
        for t in range(Tn - 2, -1, -1):
            beta[t] = (A @ (L[t + 1] * beta[t + 1])) / scale[t + 1]
        return beta

    def _pieces(self, X, lengths) -> list[np.ndarray]:
        """The index arrays of hmmlearn's ``(X, lengths)`` (``lengths=None``: one sequence)."""
        return [self.encode(seq) for seq in split_lengths(X, lengths)]

    def _impossible(self, scale: np.ndarray) -> None:
        if not (scale > 0).all():
            t = int(np.flatnonzero(~(scale > 0))[0])
            raise ValueError(f"the sequence has probability 0 under the model (first impossible at {t})")

    def score(self, X, lengths: Sequence[int] | None = None) -> float:
        """Log-likelihood ``log Pr(x_1..x_T)`` (natural log), by the scaled forward algorithm.

        ``X``: labels or indices, or hmmlearn's ``(X, lengths)`` (the sum over the
        sequences). An empty sequence scores 0. O(T · m²) time, O(T · m) memory;
        ``-inf`` if the sequence is impossible.

        Examples
        --------
        >>> hmm = HiddenMarkovModel([1.0, 0.0], [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]])
        >>> float(np.exp(hmm.score([0, 1, 1]))), hmm.score([])
        (0.25, 0.0)
        >>> float(np.exp(hmm.score(np.array([[0], [1], [0]]), lengths=[2, 1])))
        0.5
        """
        total = 0.0
        for x in self._pieces(X, lengths):
            _, scale = self._forward(x)
            with np.errstate(divide="ignore"):
                total += float(np.log(scale).sum())
        return total

    def filter(self, X, lengths: Sequence[int] | None = None) -> np.ndarray:
        """Filtered posteriors ``Pr(h_t = h | x_1..x_t)``, shape (T, m). O(T · m²).

        Examples
        --------
        >>> hmm = HiddenMarkovModel([0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]], [[0.9, 0.1], [0.2, 0.8]])
        >>> hmm.filter([0, 0, 1]).round(3).tolist()
        [[0.818, 0.182], [0.933, 0.067], [0.407, 0.593]]
        """
        out = []
        for x in self._pieces(X, lengths):
            alpha, scale = self._forward(x)
            self._impossible(scale)
            out.append(alpha)
        return np.concatenate(out) if out else np.empty((0, self.n_states))

    def predict_proba(self, X, lengths: Sequence[int] | None = None) -> np.ndarray:
        """Smoothed posteriors ``Pr(h_t = h | x_1..x_T)``, shape (T, m) (forward-backward). O(T · m²).

        With ``lengths``, each sequence on its own, rows concatenated (as hmmlearn).

        Examples
        --------
        >>> hmm = HiddenMarkovModel([0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]], [[0.9, 0.1], [0.2, 0.8]])
        >>> hmm.predict_proba([0, 0, 1]).round(3).tolist()
        [[0.824, 0.176], [0.763, 0.237], [0.407, 0.593]]
        """
        out = []
        for x in self._pieces(X, lengths):
            alpha, scale = self._forward(x)
            self._impossible(scale)
            gamma = alpha * self._backward(x, scale)
            out.append(gamma / gamma.sum(axis=1, keepdims=True))
        return np.concatenate(out) if out else np.empty((0, self.n_states))

    def decode(self, X, lengths: Sequence[int] | None = None) -> tuple[float, np.ndarray]:
        """``(log_prob, states)``: the most likely state path (Viterbi) and its joint log-probability.

        As hmmlearn's ``decode(X, lengths, algorithm="viterbi")`` (with ``lengths``, the
        paths concatenated and the log-probabilities summed). O(T · m²) time, O(T · m) memory.

        Examples
        --------
        >>> hmm = HiddenMarkovModel([0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]], [[0.9, 0.1], [0.2, 0.8]])
        >>> logp, path = hmm.decode([0, 0, 1, 1])
        >>> round(logp, 4), path.tolist()
        (-3.8635, [0, 0, 1, 1])
        """
        total, paths = 0.0, []
        for x in self._pieces(X, lengths):
            logp, path = self._viterbi(x)
            total += logp
            paths.append(path)
        return total, np.concatenate(paths) if paths else np.empty(0, dtype=np.int64)

    def _viterbi(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        if x.size == 0:
            return 0.0, np.empty(0, dtype=np.int64)
        with np.errstate(divide="ignore"):
            logA = np.log(self.transmat_)
            logL = np.log(self._likelihoods(x))
            delta = np.log(self.startprob_) + logL[0]
        Tn, m = logL.shape
        back = np.empty((Tn, m), dtype=np.int64)
        for t in range(1, Tn):
            cand = delta[:, None] + logA  # [from, to]
            back[t] = cand.argmax(axis=0)
            delta = cand[back[t], np.arange(m)] + logL[t]
        path = np.empty(Tn, dtype=np.int64)
        path[-1] = int(delta.argmax())
        for t in range(Tn - 1, 0, -1):
            path[t - 1] = back[t, path[t]]
        return float(delta.max()), path

    def predict(self, X, lengths: Sequence[int] | None = None) -> np.ndarray:
        """The Viterbi state path (as hmmlearn's ``predict(X, lengths)``). O(T · m²)."""
        return self.decode(X, lengths)[1]

    def predict_proba_next(self, history=()) -> np.ndarray:
        """``Pr(x_{T+1} = x | x_1..x_T)`` for every symbol, shape (n,). O(T · m² + m · n).

        An empty history gives the distribution of the first symbol.

        Examples
        --------
        >>> hmm = HiddenMarkovModel([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
        >>> hmm.predict_proba_next([]).tolist(), hmm.predict_proba_next([0]).tolist()
        ([1.0, 0.0], [0.0, 1.0])
        """
        x = self.encode(history)
        if x.size == 0:
            state = self.startprob_
        else:
            alpha, scale = self._forward(x)
            self._impossible(scale)
            state = alpha[-1] @ self.transmat_
        p = state @ self.emissionprob_
        return p / p.sum()

    def stationary(self) -> np.ndarray:
        """The stationary distribution of the hidden chain, shape (m,). O(m³)."""
        w, v = np.linalg.eig(self.transmat_.T)
        p = np.abs(np.real(v[:, np.argmin(np.abs(w - 1.0))]))
        return p / p.sum()

    def occupancy(self) -> np.ndarray:
        """Each state's share of the symbols: ``occupancy`` as given, else :meth:`stationary`
        (which a near-absorbing state of a fit on short windows takes whole). O(m) or O(m³)."""
        return self.stationary() if self.occupancy_ is None else self.occupancy_

    def sample(self, n_samples: int = 1, random_state=None, *,
               lengths: Sequence[int] | None = None) -> tuple[list | np.ndarray, np.ndarray]:
        """``(symbols, states)``: ``n_samples`` symbols and their hidden states (hmmlearn's call).

        With ``lengths``, independent sequences of those lengths, concatenated, so that
        ``score(symbols, lengths)`` reads them back. Symbols are labels (a list) for a
        model with labels, an int array of indices otherwise (hmmlearn's (T, 1):
        ``encode(symbols).reshape(-1, 1)``). Seeded. O(T · log m + m · n).

        Examples
        --------
        >>> hmm = HiddenMarkovModel([1.0, 0.0], [[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]],
        ...                         symbols=["a", "b"])
        >>> hmm.sample(4, random_state=0)
        (['a', 'b', 'a', 'b'], array([0, 1, 0, 1]))
        >>> hmm.sample(random_state=0, lengths=[1, 2])[0]
        ['a', 'a', 'b']
        """
        if lengths is None:
            if int(n_samples) < 0:
                raise ValueError(f"n_samples must be non-negative, got {n_samples}")
            lengths = [int(n_samples)]
        out, states = sample_sequences(self.startprob_, self.transmat_, self.emissionprob_, lengths,
                                       np.random.default_rng(random_state))
        return self.decode_symbols(out), states

    # ------------------------------------------------------------------ conversions

    def to_hmmlearn(self):
        """A fitted ``hmmlearn.hmm.CategoricalHMM`` with the same parameters (needs hmmlearn).

        Its sequences are symbol indices in hmmlearn's (T, 1) layout (use :meth:`encode`).
        """
        try:
            from hmmlearn.hmm import CategoricalHMM
        except ImportError as exc:  # pragma: no cover - hmmlearn is a test dependency
            raise ImportError("to_hmmlearn needs hmmlearn: pip install hmmlearn") from exc
        h = CategoricalHMM(n_components=self.n_states, n_features=self.n_symbols, init_params="")
        h.startprob_ = self.startprob_.copy()
        h.transmat_ = self.transmat_.copy()
        h.emissionprob_ = self.emissionprob_.copy()
        return h

    @classmethod
    def from_hmmlearn(cls, h, symbols: Sequence[Hashable] | None = None) -> HiddenMarkovModel:
        """The model of a fitted hmmlearn ``CategoricalHMM`` (or anything with its three arrays)."""
        return cls(h.startprob_, h.transmat_, h.emissionprob_, symbols=symbols)

    def to_hmm(self):
        """The same model as a :class:`streamspec.core.hmm.HMM` (column-stochastic ``T``, ``O``)."""
        from streamspec.core.hmm import HMM

        return HMM(self.transmat_.T, self.emissionprob_.T, self.startprob_)

    @classmethod
    def from_hmm(cls, hmm, symbols: Sequence[Hashable] | None = None) -> HiddenMarkovModel:
        """The model of a :class:`streamspec.core.hmm.HMM` (transposes its ``T`` and ``O``)."""
        return cls(hmm.pi, np.asarray(hmm.T).T, np.asarray(hmm.O).T, symbols=symbols)

    def errors_against(self, reference) -> tuple[float, float, np.ndarray]:
        """Parameter errors against a known model, after matching the states.

        ``reference`` is a :class:`HiddenMarkovModel` (or a :class:`streamspec.core.hmm.HMM`)
        with as many states. States are matched by the assignment of least total
        emission L1 distance (Hungarian algorithm). Returns ``(emission_error,
        transition_error, perm)``: the largest total-variation distance between matched
        emission distributions, the largest entry-wise error of the transition matrix,
        and ``perm[h]``, this model's state matched to reference state h. O(m² n + m³).

        Examples
        --------
        >>> a = HiddenMarkovModel([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]], [[1.0, 0.0], [0.0, 1.0]])
        >>> b = HiddenMarkovModel([0.5, 0.5], [[0.8, 0.2], [0.1, 0.9]], [[0.0, 1.0], [1.0, 0.0]])
        >>> e_o, e_t, perm = b.errors_against(a)
        >>> float(e_o), float(e_t), perm.tolist()
        (0.0, 0.0, [1, 0])
        """
        from scipy.optimize import linear_sum_assignment

        if not isinstance(reference, HiddenMarkovModel):
            reference = HiddenMarkovModel.from_hmm(reference)
        if reference.n_states != self.n_states:
            raise ValueError(f"the reference has {reference.n_states} states, this model "
                             f"{self.n_states}: states cannot be matched")
        E, R = self.emissionprob_, reference.emissionprob_  # (m, n) rows
        cost = np.abs(R[:, None, :] - E[None, :, :]).sum(axis=2)
        rows, cols = linear_sum_assignment(cost)
        perm = cols[np.argsort(rows)]
        e_o = float(0.5 * np.abs(R - E[perm]).sum(axis=1).max())
        e_t = float(np.abs(reference.transmat_ - self.transmat_[np.ix_(perm, perm)]).max())
        return e_o, e_t, perm

    # ------------------------------------------------------------------ persistence

    def to_checkpoint(self) -> tuple[str, int, dict, dict[str, np.ndarray]]:
        """``(kind, version, header, arrays)`` for :func:`streamspec.core.checkpoint.dump_checkpoint`."""
        header = {
            "n_states": self.n_states,
            "n_symbols": self.n_symbols,
            "labels": None if self.symbols is None else [encode_value(s) for s in self.symbols],
        }
        if self.metadata:  # why: absent when empty, so models without metadata save as before
            header["metadata"] = dict(self.metadata)
        arrays = {
            "startprob": self.startprob_,
            "transmat": self.transmat_,
            "emissionprob": self.emissionprob_,
        }
        return _KIND, _VERSION, header, arrays

    @classmethod
    def from_checkpoint(cls, header: dict, arrays: dict, source: str = "checkpoint") -> HiddenMarkovModel:
        try:
            labels = header.get("labels")
            symbols = None if labels is None else [decode_value(v) for v in labels]
            model = cls(arrays["startprob"], arrays["transmat"], arrays["emissionprob"], symbols=symbols,
                        metadata=header.get("metadata"))  # absent before it was kept: {}
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{source}: invalid HMM checkpoint ({exc})") from None
        if (model.n_states, model.n_symbols) != (header.get("n_states"), header.get("n_symbols")):
            raise CheckpointError(f"{source}: arrays do not match the header's sizes")
        return model

    def to_bytes(self) -> bytes:
        """The model as checkpoint bytes (npz + JSON header, checksummed; no pickle). O(m · n)."""
        return dump_checkpoint(*self.to_checkpoint())

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "HMM") -> HiddenMarkovModel:
        """The model of :meth:`to_bytes`; :class:`CheckpointError` on any defect. O(m · n)."""
        header, arrays = load_checkpoint_bytes(data, _KIND, _VERSION, source)
        return cls.from_checkpoint(header, arrays, source=source)

    def save(self, path: str | os.PathLike) -> None:
        """Write a checksummed npz checkpoint (atomic; labels kept as JSON). O(m · n)."""
        write_checkpoint(path, *self.to_checkpoint())

    @classmethod
    def load(cls, path: str | os.PathLike) -> HiddenMarkovModel:
        """Read a checkpoint written by :meth:`save`; raises :class:`CheckpointError` on any defect."""
        header, arrays = read_checkpoint(path, _KIND, _VERSION)
        return cls.from_checkpoint(header, arrays, source=str(path))

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, HiddenMarkovModel)
            and self.symbols == other.symbols
            and self.metadata == other.metadata
            and np.array_equal(self.startprob_, other.startprob_)
            and np.array_equal(self.transmat_, other.transmat_)
            and np.array_equal(self.emissionprob_, other.emissionprob_)
        )

    __hash__ = None

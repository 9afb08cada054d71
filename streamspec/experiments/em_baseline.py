"""The EM baseline of the paper's real-data experiment: ``hmmlearn``'s CategoricalHMM.

``hmmlearn`` is optional (the ``paper`` extra) and imported only when
:func:`fit_em` runs, so that the rest of the experiments work without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["EMModel", "fit_em"]


@dataclass
class EMModel:
    """A discrete HMM fitted by EM; predicts with the exact forward filter.

    Parameters
    ----------
    startprob
        (k,) initial state distribution.
    transmat
        (k, k), row-stochastic: ``transmat[a, b] = Pr(b | a)``.
    emission
        (k, n): ``emission[a, x] = Pr(x | a)``.
    n_restarts
        How many random starts the fit kept the best of.
    train_loglik
        The training log-likelihood of the kept fit.
    """

    startprob: np.ndarray  # (k,)
    transmat: np.ndarray  # (k, k), row-stochastic: transmat[a, b] = Pr(b | a)
    emission: np.ndarray  # (k, n), emission[a, x] = Pr(x | a)
    n_restarts: int = 0
    train_loglik: float = math.nan

    def predictive_sequence(self, seq) -> np.ndarray:
        """(len(seq), n): the distribution of each symbol given the symbols before it.

        Examples
        --------
        >>> m = EMModel(np.array([1.0]), np.array([[1.0]]), np.array([[0.25, 0.75]]))
        >>> m.predictive_sequence([0, 1]).tolist()
        [[0.25, 0.75], [0.25, 0.75]]
        """
        x = np.asarray(seq, dtype=np.int64)
        out = np.empty((x.size, self.emission.shape[1]))
        alpha = self.startprob.copy()
        for t, s in enumerate(x):
            out[t] = alpha @ self.emission
            a = alpha * self.emission[:, s]
            alpha = (a / max(a.sum(), 1e-300)) @ self.transmat
        return out


def _chunks(sequences: Sequence[np.ndarray], chunk: int) -> list[np.ndarray]:
    """The sequences cut into non-empty pieces of at most ``chunk`` symbols, in order."""
    pieces = []
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        pieces.extend(s[i : i + chunk] for i in range(0, s.size, chunk) if s[i : i + chunk].size)
    return pieces


def fit_em(
    sequences: Sequence[np.ndarray],
    n_states: int,
    n_symbols: int,
    n_restarts: int = 5,
    n_iter: int = 100,
    tol: float = 1e-3,
    chunk: int = 1000,
    random_state: int = 0,
) -> EMModel:
    """``hmmlearn`` CategoricalHMM, best training log-likelihood of ``n_restarts`` random starts.

    Long sequences are cut into chunks of at most ``chunk`` symbols (``lengths=``).

    Parameters
    ----------
    sequences
        Training sequences of symbol indices ``0..n_symbols-1``.
    n_states, n_symbols
        Hidden states of the fitted HMM and size of the alphabet.
    n_restarts, n_iter, tol
        Random starts (seeded ``random_state``, ``random_state + 1``, ...), EM
        iterations at most and convergence tolerance of each.
    chunk
        Longest piece handed to hmmlearn.
    random_state
        Seed of the first start.

    Returns
    -------
    EMModel
        The start with the best training log-likelihood.

    Raises
    ------
    ImportError
        With a hint, when hmmlearn is not installed.
    """
    try:
        from hmmlearn.hmm import CategoricalHMM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("EM needs hmmlearn: pip install 'streamspec[paper]'") from exc
    import logging

    logging.getLogger("hmmlearn").setLevel(logging.ERROR)
    pieces = _chunks(sequences, chunk)
    X = np.concatenate(pieces)[:, None]
    lengths = [p.size for p in pieces]
    best, best_ll = None, -math.inf
    for r in range(n_restarts):
        hmm = CategoricalHMM(n_components=n_states, n_features=n_symbols, n_iter=n_iter, tol=tol,
                             random_state=random_state + r, init_params="ste", params="ste")
        hmm.fit(X, lengths)
        ll = hmm.score(X, lengths)
        if ll > best_ll:
            best, best_ll = hmm, ll
    return EMModel(best.startprob_.copy(), best.transmat_.copy(), best.emissionprob_.copy(),
                   n_restarts, float(best_ll))

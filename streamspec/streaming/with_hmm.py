"""An estimator adapter for refits: the operator model plus a hidden Markov model."""

from __future__ import annotations

import warnings

import numpy as np

from streamspec.core.hmm_estimator import HMMEstimator
from streamspec.core.params import Estimator
from streamspec.streaming.refits import keeps_state, rank_bound, refit_estimator

__all__ = ["WithHMM"]


class LastFit:
    """The models of the last fit of a :class:`WithHMM` (shared by its copies)."""

    def __init__(self):
        self.model = None
        self.state = None  # the operator model's reusable state (warm refits)
        self.hmm = None
        self.warm_hmm = False  # the last HMM fit started from the previous HMM
        self.error: str | None = None


class WithHMM(Estimator):
    """Fit an estimator's operator model and a ``n_states``-state HMM on the same counts.

    Each :meth:`fit` first fits ``estimator`` exactly as :class:`~streamspec.Refitter`
    would (a fresh copy, rank and floor clamped to the alphabet, warm-started from the
    previous model when the estimator supports it), then an
    :class:`~streamspec.HMMEstimator` with ``n_states`` states (``random_state=0``) on
    the same counts, warm-started from the previous HMM. The HMM is attached to the
    returned model as ``model.hmm``, so that a refitter swaps both in at once. A failed
    HMM fit (fewer symbols than states, say) keeps the previous HMM (``None`` at first)
    and is recorded in :attr:`error`; the operator model is kept either way.

    A refitter rebuilds its estimator from the constructor parameters for every fit;
    ``last`` (shared by those copies) carries the previous models from one fit to the
    next, which a refitter runs one at a time.

    Cost: the estimator's fit plus O(nnz · n_states² · n_iter) for the HMM's refinement
    over nnz distinct triples (its moment step is O(nnz · n_states²) as well).

    Parameters
    ----------
    estimator
        (Positional, with ``n_states``: callers outside this package pass both so.)
        The operator-model estimator (``SpectralEstimator``, ``MEstimator``, ...).
    n_states
        Hidden states of the HMM.
    sweeps
        Sweeps of a warm-started refit of ``estimator`` (as :class:`Refitter`'s).
    last
        The shared record of the previous fit (a new one if omitted).

    Examples
    --------
    >>> from streamspec import MomentAccumulator, SpectralEstimator
    >>> acc = MomentAccumulator()
    >>> acc.learn_many(list("abcabcabcbacbacabcabcbbacbabcabcacbabc" * 20))
    >>> est = WithHMM(SpectralEstimator(rank=2, backoff=None), n_states=2)
    >>> model = est.fit(acc)
    >>> model.hmm.n_states, model.hmm.symbols
    (2, ['a', 'b', 'c'])
    >>> est.fit(acc).hmm.n_states, est.warm_hmm_
    (2, True)
    """

    def __init__(self, estimator, n_states: int, *, sweeps: int = 3, last: LastFit | None = None):
        self.estimator = estimator
        self.n_states = n_states
        self.sweeps = sweeps
        self.last = last if last is not None else LastFit()

    @property
    def error(self) -> str | None:
        """Why the last HMM fit failed (``None`` if it succeeded)."""
        return self.last.error

    def adopt(self, model, hmm=None) -> None:
        """Warm-start the next fit from ``model`` and ``hmm`` (e.g. read back on a restart)."""
        self.last.model, self.last.hmm, self.last.state = model, hmm, None

    def fit(self, data):
        """Fit both models on ``data`` (an accumulator or its view); the model, with ``.hmm``.

        Sets ``rank_``, ``loss_history_``, ``warm_`` (the operator model was warm-started),
        ``refit_`` (how, for an estimator keeping a state) and ``warm_hmm_`` (the HMM was
        warm-started), which the refitter's records read.
        """
        last = self.last
        prev = last.model
        est, warm = refit_estimator(self.estimator, data.n, prev, self.sweeps, state=last.state,
                                    max_rank=rank_bound(data))
        self.refit_ = None
        if keeps_state(est):  # a warm refit from the previous state (docs/math.md section 10)
            init = last.state if last.state is not None else (prev if warm else None)
            model, last.state = est.fit_with_state(data, init=init)
            self.refit_ = getattr(est, "refit_", None)
            if self.refit_ is not None and self.refit_.path in ("cold", "fallback"):
                warm = False
        else:
            model = est.fit(data, init=prev) if warm else est.fit(data)
        self.rank_ = getattr(est, "rank", None)
        self.loss_history_ = getattr(est, "loss_history_", None)
        self.warm_ = warm
        hmm = last.hmm
        init = hmm if hmm is not None and hmm.n_states == self.n_states else None
        self.warm_hmm_ = False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                hmm = HMMEstimator(n_states=self.n_states, random_state=0).fit(data, init=init)
            self.warm_hmm_ = init is not None
            last.error = None
        except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
            last.error = f"{type(exc).__name__}: {exc}"
        last.warm_hmm = self.warm_hmm_
        model = model.replace(hmm=hmm)
        last.model, last.hmm = model, hmm
        return model

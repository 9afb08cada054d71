"""What a refit of the daemon (or of ``learn --follow``) starts from, light enough to send away.

A refit ``MEstimator().fit(counts, init=previous)`` with a previous model that carries a
backoff skips the held-out stage of a first fit (:mod:`streamspec.core.backoff_fit`): it
keeps the previous weights, which the stream taught, starts the HMM from the previous
one, and starts θ_M from the previous factors. :class:`RefitStart` is that ``previous``
without the model's operators and trigram (which the refit recomputes anyway): the
factors, the HMM, the weights and whether the model itself is a part. It has no
``rank``, so that ``rank="auto"`` chooses the rank again on the new counts (a full model
would keep its rank for ever). It is what the daemon's worker process receives
(:class:`~connectors.process_fit.ProcessMEstimator`: it refits from the state its last fit
kept, with these weights), and where ``learn --follow`` takes the weights its records
taught (its saves refit from the last fit's state too, ``streamspec.cli.fitting``).

Examples
--------
>>> from streamspec import MEstimator, MomentAccumulator
>>> acc = MomentAccumulator()
>>> acc.learn_many("abcabcabcaabbccabcbca" * 30)
>>> first = MEstimator(rank=2).fit(acc)
>>> start = RefitStart.of(first)
>>> start.backoff.mixture is not first.backoff.mixture, start.factors is first.factors
(True, True)
>>> again = MEstimator(rank=2).fit(acc, init=start)
>>> again.backoff.held_out  # a refit: the weights were kept, nothing was held out
{}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from streamspec.core.factors import MFactors, factors_of
from streamspec.core.hmm_filter import HMMFilter
from streamspec.core.mixture import ExpertMixture

__all__ = ["RefitStart", "StartBackoff"]


@dataclass(frozen=True)
class StartBackoff:
    """The parts of a previous backoff a refit keeps: its HMM, weights and choice of parts,
    and the counts its HMM size was chosen at (``Backoff.states_chosen_at``)."""

    hmm: HMMFilter | None
    mixture: ExpertMixture
    use_model: bool
    states_chosen_at: float = float("nan")


@dataclass(frozen=True)
class RefitStart:
    """A previous model as a refit reads it: its factors (``None``: none) and its backoff.

    Memory O(factors + n · K + E), not the operators' n · d² nor the trigram's O(nnz).
    """

    factors: MFactors | None
    backoff: StartBackoff | None

    @classmethod
    def of(cls, model, mixture: ExpertMixture | None = None) -> RefitStart | None:
        """The start of a refit from ``model`` (``None``: none), with ``mixture`` as its
        weights if given (e.g. the ones learned from the stream since), else the model's. O(E)."""
        if model is None:
            return None
        backoff = getattr(model, "backoff", None)
        start = None
        if backoff is not None:
            weights = mixture if mixture is not None else backoff.mixture
            start = StartBackoff(backoff.hmm, weights.copy(), bool(backoff.use_model),
                                 float(getattr(backoff, "states_chosen_at", float("nan"))))
        return cls(factors_of(model), start)

    def onto(self, state):
        """A fit's kept state (``MEstimator.fit_with_state``'s) whose model carries these
        weights, so that a warm refit from it keeps what the stream taught; ``state`` itself
        when either has no backoff. The state's model is replaced by a copy (its backoff
        shallow-copied), never changed: the saved model may still be in use. O(E).

        >>> from streamspec import MEstimator, MomentAccumulator
        >>> acc = MomentAccumulator()
        >>> acc.learn_many("abcabcabcaabbccabcbca" * 30)
        >>> model, state = MEstimator(rank=2).fit_with_state(acc)
        >>> start = RefitStart.of(model)
        >>> moved = start.onto(state)
        >>> weights = start.backoff.mixture
        >>> moved.model.backoff.mixture is weights, model.backoff.mixture is weights
        (True, False)
        """
        backoff = getattr(getattr(state, "model", None), "backoff", None)
        if backoff is None or self.backoff is None:
            return state
        backoff = copy.copy(backoff)
        backoff.mixture = self.backoff.mixture
        state.model = state.model.replace(backoff=backoff)
        return state

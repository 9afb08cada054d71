"""What one fit of a :class:`~streamspec.streaming.refitter.Refitter` did: its record."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FitRecord"]


@dataclass(frozen=True)
class FitRecord:
    """What one fit did.

    Attributes
    ----------
    index
        1 for the first fit attempted, 2 for the next, ...
    warm
        Whether it started from the previous fit: its reusable state
        (``fit_with_state(acc, init=state)``: bases, moments, weighting blocks) or the
        previous model's factors (``fit(acc, init=model)``).
    n_seen
        Symbols observed (the running total passed to :meth:`Refitter.observe`) when the
        snapshot was taken.
    n_triples
        Triples (total weight) in the snapshot.
    n_alphabet
        Alphabet size of the snapshot.
    rank
        The rank of the fitted model (``model.rank``: what ``rank="auto"`` chose); for a
        failed fit, or a model without one, the rank the estimator was given (clamped to
        the alphabet size).
    seconds
        Wall-clock duration of the fit (and of ``prepare``).
    sweeps
        Alternating sweeps run in all (``None`` for estimators without sweeps).
    losses
        Training loss after each sweep, outer iterations concatenated (empty for
        estimators that do not report one). Losses of different outer iterations are
        taken under different weightings.
    error
        ``None``, or ``"ExceptionType: message"`` when the fit failed (the previous model
        was then kept).
    path
        How a fit from a reusable state went (the estimator's ``refit_.path``:
        ``"warm"``, ``"rebased"``, ``"fallback"`` or ``"cold"``; docs/math.md section 10),
        ``"model"`` for a warm start from the previous model (its factors, its backoff), ``"cold"``
        otherwise.
    cpu_seconds
        CPU time of the fit: the fitting thread's, plus that of a worker process the
        estimator fitted in (its ``worker_cpu_seconds_``). Below ``seconds`` when other
        work had the cores; what a duty cycle on refits should count.

    """

    index: int
    warm: bool
    n_seen: int
    n_triples: float
    n_alphabet: int
    rank: int | str | None
    seconds: float
    sweeps: int | None
    losses: tuple[float, ...]
    error: str | None = None
    path: str = "cold"
    cpu_seconds: float = float("nan")

    @property
    def loss(self) -> float:
        """The last training loss of the fit (NaN when none was reported)."""
        return self.losses[-1] if self.losses else float("nan")

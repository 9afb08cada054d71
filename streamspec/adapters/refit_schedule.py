"""When :class:`~streamspec.adapters.river_model.SpectralHMM` refits, counted in symbols.

Inline, a fit runs when the refitter's trigger fires. In background, with ``refit_every``,
each fit runs when it is due, on a snapshot of the counts of exactly the symbols an inline
refit sees, from the model current then, in the worker thread, and the learner waits for it
before the next symbol: models change at the same symbols as inline refits, each one is the
inline refit's, so the predictions are inline's and a run repeats exactly, whatever the
clock (tests/adapters/test_river_model.py; docs/benchmarks.md, "Background refits").

There is no lead any more: fits used to start a tenth of ``refit_every`` early and be redone
inline at the due symbol (a "catch-up"), because inline's model at the due symbol can only
be fitted on the counts of the due symbol. A lead of 0 gave exactly the inline model
(0 hits and 0.0 nats background − inline on 7 streams, docs/benchmarks.md) with one fit per
refit instead of two, so the lead was removed.
"""

from __future__ import annotations

__all__ = ["RefitSchedule", "TIME_CHECK"]

TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock


class RefitSchedule:
    """The countdown to the next refit (mixed into SpectralHMM, which holds the refitter
    ``_refitter``, the counts ``_acc``, the symbols seen ``_n`` and the next scheduled fit
    ``_fit_at``)."""

    def _first_fit_at(self) -> int | None:
        """The symbol the schedule's first fit starts at: ``refit_every`` in background
        (``None``: no schedule, inline or without ``refit_every``: the refitter's own
        triggers). O(1)."""
        return self.refit_every if self.background and self.refit_every is not None else None

    def _next_countdown(self) -> int:
        if self._fit_at is not None:  # the schedule: the next fit, by symbols
            n = max(1, self._fit_at - self._n)
        else:
            n = self._refitter.until_due()
        if self.refit_interval is not None:
            n = min(n, TIME_CHECK)
        if self._refitter.busy:
            n = min(n, 64)  # a coalesced trigger: look again soon after the fit ends
        return n

    def _trigger(self) -> None:
        """A countdown ran out: report the symbols to the refitter (which fits when a trigger
        fires) and, on the schedule of background fits, start the fit that is due and wait for
        it, so that its model, the inline refit's, is swapped in at the next symbol, as inline.
        Costs a fit inline; in background a snapshot of the counts and the wait for the fit."""
        r = self._refitter
        started = r.observe(self._unreported, self._acc)
        self._unreported = 0
        if self._fit_at is not None and self._n >= self._fit_at:
            if started or r.fit_now(self._acc):
                r.wait()  # whatever the clock: deterministic, the model of the due symbol's counts
            every = self.refit_every
            self._fit_at = (self._n // every + 1) * every
        self._countdown = self._next_countdown()

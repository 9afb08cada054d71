"""When :class:`~streamspec.adapters.river_model.SpectralHMM` refits, counted in symbols.

Inline, a fit runs when the refitter's trigger fires. In background, with ``refit_every``,
a fit starts ``refit_every // LEAD_FRACTION`` symbols before it is due and its model is
swapped in exactly when it is due (the learner waits for it there if needed), so that
models change at the same symbols as inline refits and a run repeats exactly, whatever
the clock.
"""

from __future__ import annotations

__all__ = ["RefitSchedule", "LEAD_FRACTION", "TIME_CHECK"]

TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock
LEAD_FRACTION = 10  # background: a fit starts refit_every // LEAD_FRACTION symbols before it is due


class RefitSchedule:
    """The countdown to the next refit or swap (mixed into SpectralHMM, which holds the
    refitter ``_refitter``, the counts ``_acc``, the symbols seen ``_n`` and the schedule
    ``_fit_at``/``_swap_at``)."""

    def _lead(self) -> int | None:
        """Symbols between the start of a scheduled background fit and its swap (``None``: no
        schedule, the refitter's own triggers). O(1)."""
        if not self.background or self.refit_every is None:
            return None
        return self.refit_every // LEAD_FRACTION

    def _next_countdown(self) -> int:
        if self._fit_at is not None:  # the schedule: the next fit or swap, by symbols
            n = min(self._fit_at, self._swap_at if self._swap_at is not None else self._fit_at)
            n = max(1, n - self._n)
        else:
            n = self._refitter.until_due()
        if self.refit_interval is not None:
            n = min(n, TIME_CHECK)
        if self._refitter.busy and self._swap_at is None:
            n = min(n, 64)  # a coalesced trigger: look again soon after the fit ends
        return n

    def _trigger(self) -> None:
        """A countdown ran out: report the symbols to the refitter (which fits when a trigger
        fires) and, on the schedule of background fits, start the next fit ``lead`` symbols
        before it is due and swap its model in when it is due (waiting for it if needed),
        so that models change at the same symbols as inline refits do. Costs a fit inline, a
        snapshot of the counts in background."""
        r = self._refitter
        if self._swap_at is not None and self._n >= self._swap_at:
            r.wait()  # the scheduled model is swapped in now, whatever the clock: deterministic
            self._swap_at = None
        started = r.observe(self._unreported, self._acc)
        self._unreported = 0
        if self._fit_at is not None and self._n >= self._fit_at:
            while self._fit_at <= self._n:
                self._fit_at += self.refit_every
            started = started or r.fit_now(self._acc)
            if started:
                self._swap_at = self._n + self._lead()
                if self._swap_at <= self._n:  # no lead: the fit is swapped in at the next symbol
                    r.wait()
                    self._swap_at = None
        self._countdown = self._next_countdown()

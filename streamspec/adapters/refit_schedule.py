"""When :class:`~streamspec.adapters.river_model.SpectralHMM` refits, counted in symbols.

Inline, a fit runs when the refitter's trigger fires. In background, with ``refit_every``,
models change at the same symbols as inline refits and a run repeats exactly, whatever
the clock, and each model swapped in has seen every count an inline refit there would
have (docs/benchmarks.md, "Background refits", measures what each step was worth):

* the first fit runs on the counts of exactly ``refit_every`` symbols and the learner
  waits for it, as inline: that fit chooses the sizes every later refit keeps (the
  HMM's number of states; the rank until the counts double), and chosen on a tenth
  fewer counts they came out smaller and worse for the whole stream;
* each later fit runs when it is due (by default), on a snapshot of the counts in the
  worker thread, from the model current then, and the learner waits for it: its model is
  the inline refit's, so the predictions are inline's (tests/adapters/test_river_model.py).
  With ``LEAD_FRACTION`` > 0 a fit starts ``refit_every // LEAD_FRACTION`` symbols before it
  is due, on a snapshot, while learning and predicting go on with the previous model; when
  it is due the learner waits for it if needed, then refits as inline does on every count
  (:meth:`~streamspec.Refitter.catch_up`, from the model the early fit started from) and
  swaps that in: inline's model again, with the early fit's work thrown away. Catch-ups
  from the early fit itself gave other models than inline's, better on some streams and
  worse on others (docs/benchmarks.md, "Background refits"), and there is no way to have
  inline's model at the due symbol without fitting on the counts of the due symbol.
"""

from __future__ import annotations

__all__ = ["RefitSchedule", "LEAD_FRACTION", "TIME_CHECK"]

TIME_CHECK = 256  # with refit_interval: symbols between two looks at the clock
# background: a refit starts refit_every // LEAD_FRACTION symbols before it is due (0: at it).
# 0, because the model swapped in must be inline's (issue 21): a fit started early has to be
# redone at its due symbol on every count (Refitter.catch_up), so a lead only adds its work
LEAD_FRACTION = 0


class RefitSchedule:
    """The countdown to the next refit or swap (mixed into SpectralHMM, which holds the
    refitter ``_refitter``, the counts ``_acc``, the symbols seen ``_n`` and the schedule
    ``_fit_at``/``_swap_at``)."""

    def _lead(self) -> int | None:
        """Symbols between the start of a scheduled background refit and its swap (``None``: no
        schedule, the refitter's own triggers). O(1)."""
        if not self.background or self.refit_every is None:
            return None
        return self.refit_every // LEAD_FRACTION if LEAD_FRACTION else 0

    def _first_fit_at(self) -> int | None:
        """The symbol the schedule's first fit starts at: ``refit_every`` itself, without a lead
        (``None``: no schedule). O(1)."""
        return None if self._lead() is None else self.refit_every

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
        fires) and, on the schedule of background fits, start the next fit and swap its model
        in when it is due (waiting for it), so that models change at the same symbols as
        inline refits do and are inline's. The first fit, and every fit with the default lead
        of 0, starts when it is due and is waited for at once; with a lead (``LEAD_FRACTION``
        > 0) a later fit starts ``lead`` symbols early and at its swap is replaced by inline's
        refit on every count (:meth:`~streamspec.Refitter.catch_up`). Costs a fit inline; in
        background a snapshot of the counts and the wait for the fit, plus with a lead the
        catch-up (an inline refit)."""
        r = self._refitter
        swap = self._swap_at is not None and self._n >= self._swap_at
        if swap:
            r.wait()  # the scheduled model is swapped in now, whatever the clock: deterministic
            self._swap_at = None
        started = r.observe(self._unreported, self._acc)
        self._unreported = 0
        if (swap and r.model is not None and r.model is not self._online.model
                and r.fitted_on_symbols < self._n):
            # the fit ran on a snapshot a lead old; an inline refit here has every count: a
            # warm refit from the fit's state catches up with them before the swap
            r.catch_up(self._acc)
        if self._fit_at is not None and self._n >= self._fit_at:
            every, lead = self.refit_every, self._lead()
            # a fit started without a model yet is the first: due now, not lead symbols later
            first = r.model is None
            started = started or r.fit_now(self._acc)
            this_lead = 0 if first else lead
            if started:
                self._swap_at = self._n + this_lead
                if self._swap_at <= self._n:  # no lead: the fit is swapped in at the next symbol
                    r.wait()
                    self._swap_at = None
            # the next due point after this one (this fit was due at n + this_lead); the next
            # fit starts lead symbols before it once there is a model, at it while there is none
            due = ((self._n + this_lead) // every + 1) * every
            self._fit_at = due - (lead if r.model is not None or r.busy else 0)
        self._countdown = self._next_countdown()

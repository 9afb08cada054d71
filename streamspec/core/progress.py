"""Progress lines of long fits on the ``"streamspec.fit"`` logger."""

from __future__ import annotations

import logging
import time

__all__ = ["Progress", "PROGRESS_AFTER"]

PROGRESS_AFTER = 2.0  # seconds into a fit after which its progress lines are logged at INFO

log = logging.getLogger("streamspec.fit")


class Progress:
    """Progress lines of one fit on the ``"streamspec.fit"`` logger.

    One line per outer iteration (and, dense, per sweep at most every few seconds),
    with the loss and the elapsed time: at DEBUG level during the first
    :data:`PROGRESS_AFTER` seconds, so that quick fits (refits of a daemon) stay quiet,
    then at INFO, so that a long fit shows that it is alive and where it is.
    """

    def __init__(self, formulation: str, n: int, k: int):
        self.formulation, self.n, self.k = formulation, n, k
        self.t0 = self.last = time.perf_counter()

    def line(self, what: str, loss: float, every: float = 0.0) -> None:
        now = time.perf_counter()
        if now - self.last < every:
            return
        self.last = now
        elapsed = now - self.t0
        level = logging.INFO if elapsed >= PROGRESS_AFTER else logging.DEBUG
        if log.isEnabledFor(level):
            log.log(level, "event=fit_progress formulation=%s symbols=%d rank=%d %s loss=%.6g "
                    "seconds=%.2f", self.formulation, self.n, self.k, what, loss, elapsed)

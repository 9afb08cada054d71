"""What a command shows on a terminal while it works: the counting bar and the status of long steps.

:class:`CountingBar` is the bar of ``learn`` while it reads its files (bytes or
records, rate). :func:`step` wraps any other step (fitting the model, fitting an
HMM): once the step has run for :data:`SHOW_AFTER` seconds, one status line on
stderr shows what it is, how long it has been running and its latest progress
(the ``event=fit_progress`` lines of :mod:`streamspec.core.progress`, which it
shows in place of printing them), and says how long it took when it ends. A step
shorter than that prints nothing; without a terminal (or with ``-q``) nothing is
drawn and the log lines stay as they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterator

__all__ = ["CountingBar", "SHOW_AFTER", "step"]

SHOW_AFTER = 2.0  # seconds a step runs before its status line appears
_REDRAW = 0.5  # seconds between redraws of a status line
_DETAIL = re.compile(r"\b(outer|sweep|iteration)=(\S+)")


class CountingBar:
    """A one-line progress bar on stderr: bytes read of the files, records, rate."""

    def __init__(self, paths: list[str], enabled: bool, follow: bool):
        self.enabled = enabled
        self.follow = follow
        self.total = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, records: int, positions: dict, final: bool = False) -> None:
        """Redraw after ``records`` records at ``positions`` (at most every 0.2 s)."""
        now = time.monotonic()
        if not self.enabled or (not final and now - self.last < 0.2):
            return
        self.last = now
        rate = records / max(now - self.start, 1e-9)
        if self.follow or not self.total:
            line = f"\r{records:,} records  {rate:,.0f}/s"
        else:
            done = sum(int(pos.get("offset", 0)) for pos in positions.values())
            frac = min(1.0, done / self.total)
            bar = "#" * int(30 * frac)
            line = f"\r[{bar:<30}] {100 * frac:5.1f}%  {records:,} records  {rate:,.0f}/s"
        sys.stderr.write(line + ("\n" if final else ""))
        sys.stderr.flush()

    def bytes_done(self, done: int, total: int) -> None:
        """The bar of a backfill: ``done`` of ``total`` bytes counted (chunk by chunk)."""
        now = time.monotonic()
        final = done >= total
        if not self.enabled or (not final and now - self.last < 0.2):
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self.start, 1e-9) / 2**20
        sys.stderr.write(f"\r[{'#' * int(30 * frac):<30}] {100 * frac:5.1f}%  "
                         f"{done / 2**20:,.1f} MiB  {rate:,.1f} MiB/s" + ("\n" if final else ""))
        sys.stderr.flush()


class _Status(logging.Filter):
    """The status line of one step; as a log filter it takes the fit's progress lines."""

    def __init__(self, label: str):
        super().__init__()
        self.label, self.detail = label, ""
        self.t0 = time.monotonic()
        self.shown = False
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "event=fit_progress" not in message:
            return True
        found = _DETAIL.findall(message)
        if found:
            self.detail = ", ".join(f"{name} {value}" for name, value in found)
        return not self.shown  # shown in the status line instead of on a line of its own

    def draw(self, end: bool = False) -> None:
        with self.lock:
            elapsed = time.monotonic() - self.t0
            if not end and elapsed < SHOW_AFTER:
                return
            if end and not self.shown:
                return
            self.shown = True
            detail = f" ({self.detail})" if self.detail and not end else ""
            text = f"done in {elapsed:.1f} s" if end else f"{elapsed:.0f} s{detail}"
            sys.stderr.write(f"\r\x1b[K{self.label}: {text}" + ("\n" if end else ""))
            sys.stderr.flush()


@contextlib.contextmanager
def step(label: str, enabled: bool) -> Iterator[None]:
    """Show ``label``'s status line while the block runs, once it has run ``SHOW_AFTER`` s.

    ``enabled`` False (no terminal, ``-q``): nothing is drawn, nothing filtered.
    """
    if not enabled:
        yield
        return
    status = _Status(label)
    handlers = logging.getLogger().handlers
    for h in handlers:
        h.addFilter(status)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(_REDRAW):
            status.draw()

    thread = threading.Thread(target=tick, name="streamspec-status", daemon=True)
    status.draw()  # why: a step is shown as soon as it is due, not at the first redraw only
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        status.draw(end=True)
        for h in handlers:
            h.removeFilter(status)

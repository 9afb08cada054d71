"""Malformed input: one report and one policy for files and Kafka.

A record that cannot be parsed (a line of a file, a Kafka message) is skipped,
never learned. :class:`MalformedReport` says so and decides when skipping becomes
failure, the same way wherever the record came from:

* **every skipped record is a WARNING** naming where it was (``FILE, line N`` or
  ``TOPIC-PARTITION offset N``), the reason (:data:`~connectors.records.REASONS`)
  and what to do about it (:func:`hint`: ``oversized`` → raise ``--max-bytes``,
  ``bad-json`` → is it CSV? ...). The first :data:`SHOWN` of each reason get a line
  each; after that one line every :data:`EVERY` records of that reason (with the
  count so far), so that a file with many bad lines cannot flood the log;
* **a summary** when reading ends: how many, of how many read, by reason
  (:meth:`MalformedReport.summary`);
* **the limit** (``--max-malformed``, :func:`parse_limit`): a count ``N``, or a share
  ``P%`` of the records read, computed over at least :data:`MIN_SAMPLE` of them (so
  that a few bad lines of a small file are skipped, not fatal); ``none`` never
  fails. Once past it, :class:`TooManyMalformed` is raised as soon as it is seen,
  so that a wrong ``--encoding`` fails within the first lines, not after hours.
  The default is :data:`DEFAULT_LIMIT`. A file: the command stops with an error
  and saves no model (a ``--state`` keeps what was counted before); Kafka: the
  daemon stops cleanly (checkpoint, commit) with exit status 3, its dead letters
  already sent. Input where every record was malformed fails at its end whatever
  the share (``learn``).

Examples
--------
>>> from connectors.records import MalformedRecord
>>> report = MalformedReport("1%")
>>> report.read(149)
>>> report.skipped("a.txt, line 7", MalformedRecord("oversized", "line of 9 bytes"))
>>> report.summary()
'1 of 150 records skipped as malformed (oversized: 1)'
>>> report.skipped("a.txt, line 9", MalformedRecord("oversized", "line of 9 bytes"))
... # doctest: +ELLIPSIS
Traceback (most recent call last):
...
connectors.malformed.TooManyMalformed: 2 of 151 records skipped as malformed (oversized: 2): more than ...
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

__all__ = ["DEFAULT_LIMIT", "EVERY", "MIN_SAMPLE", "SHOWN", "MalformedReport",
           "TooManyMalformed", "hint", "parse_limit"]

DEFAULT_LIMIT = "1%"  # --max-malformed when not given
MIN_SAMPLE = 100  # a share is taken of at least this many records read
SHOWN = 20  # skipped records of one reason reported one line each
EVERY = 1000  # after those, one line in this many

log = logging.getLogger("streamspec.input")


class TooManyMalformed(ValueError):
    """More malformed records than ``--max-malformed`` allows (the message says how many)."""


def parse_limit(text: Any) -> tuple[float, bool]:
    """``(limit, is_share)`` of a ``--max-malformed`` value: ``N``, ``P%`` or ``none``.

    Examples
    --------
    >>> parse_limit("1%"), parse_limit("250"), parse_limit("none"), parse_limit(0)
    ((0.01, True), (250.0, False), (inf, False), (0.0, False))
    >>> parse_limit("lots")
    Traceback (most recent call last):
    ...
    ValueError: --max-malformed must be a count (e.g. 100), a share (e.g. 1%) or none, not 'lots'
    """
    raw = str(text).strip().lower()
    try:
        if raw in ("none", "inf", "unlimited"):
            return math.inf, False
        if raw.endswith("%"):
            share = float(raw[:-1]) / 100.0
            if not 0.0 <= share <= 1.0:
                raise ValueError
            return share, True
        count = float(int(raw))
        if count < 0:
            raise ValueError
        return count, False
    except ValueError:
        raise ValueError(f"--max-malformed must be a count (e.g. 100), a share (e.g. 1%) or "
                         f"none, not {text!r}") from None


_HINTS = {
    "oversized": "raise --max-bytes",
    "undecodable": "not UTF-8: convert the file, e.g. iconv -f latin1 -t utf-8",
    "bad-json": "not JSON: is it CSV? then --encoding csv",
    "bad-csv": "an unclosed quote, or a field holding a line break?",
    "missing-field": "is the field named by --symbol-field (or --key-field) there?",
    "bad-field": "a value of the wrong type (--int-symbols? a timestamp that is no time?)",
    "empty": "a tombstone?",
    "unknown-symbol": "a symbol outside --alphabet",
    "unprocessable": "the record could not be learned",
}


def hint(reason: str) -> str:
    """What to do about a malformed record of ``reason``.

    >>> hint("oversized")
    'raise --max-bytes'
    """
    return _HINTS.get(reason, "")


class MalformedReport:
    """Reports skipped records and enforces ``--max-malformed`` (see the module).

    Parameters
    ----------
    limit
        A ``--max-malformed`` value (``None``: :data:`DEFAULT_LIMIT`).
    what
        The noun of what is read, for the messages (``"lines"``, ``"messages"``).
    logger
        Where the WARNING lines go.
    event
        The ``event=`` of those lines (``skipped``; the daemon's: ``dead-letter``).

    Attributes
    ----------
    total, by_reason
        Records skipped, in all and by reason; ``seen`` records read (good or bad).
    """

    def __init__(self, limit: Any = None, what: str = "records",
                 logger: logging.Logger | None = None, event: str = "skipped"):
        self.limit_text = str(DEFAULT_LIMIT if limit is None else limit)
        self.limit, self.is_share = parse_limit(self.limit_text)
        self.what = what
        self.log = logger or log
        self.event = event
        self.seen = 0
        self.total = 0
        self.by_reason: Counter[str] = Counter()
        self.first: str | None = None

    def read(self, n: int = 1) -> None:
        """Count ``n`` records read (good or bad). O(1)."""
        self.seen += n

    def skipped(self, where: str, exc: Any, *, seen: int | None = None, counted: bool = False,
                check: bool = True) -> None:
        """Report one skipped record (``exc``: a MalformedRecord) read at ``where``.

        ``seen``: the records read so far, this one included (else it is counted one
        more, unless ``counted``: it is already among :meth:`read`'s). Raises
        :class:`TooManyMalformed` past the limit (``check=False``: only counts). O(1).
        """
        reason = getattr(exc, "reason", "malformed")
        detail = getattr(exc, "detail", str(exc))
        if seen is not None:
            self.seen = max(self.seen, int(seen))
        elif not counted:
            self.seen += 1
        self.total += 1
        self.by_reason[reason] += 1
        text = f"{where}: {reason}: {detail}" + (f" ({hint(reason)})" if hint(reason) else "")
        if self.first is None:
            self.first = text
        n = self.by_reason[reason]
        if n <= SHOWN or n % EVERY == 0:
            more = f" [{n:,} {reason} so far; one line in {EVERY:,} from now on]" if n >= SHOWN else ""
            self.log.warning("event=%s %s%s", self.event, text, more)
        if check:
            self.check()

    def add_counts(self, by_reason: dict[str, int], seen: int,
                   samples: list[tuple[str, str, str]]) -> None:
        """Add records read and skipped elsewhere (a chunk counted in another process).

        ``by_reason``: the skipped ones by reason; ``seen``: all read; ``samples``:
        ``(where, reason, detail)`` of the first few, reported as :meth:`skipped` does.
        Then :meth:`check`. O(samples + reasons).
        """
        from connectors.records import MalformedRecord

        self.seen += seen
        shown: Counter[str] = Counter()
        for where, reason, detail in samples:
            self.skipped(where, MalformedRecord(reason, detail), counted=True, check=False)
            shown[reason] += 1
        for reason, n in by_reason.items():
            rest = n - shown[reason]
            if rest > 0:
                self.by_reason[reason] += rest
                self.total += rest
        self.check()

    def exceeded(self, final: bool = False) -> bool:
        """Whether the skipped records are past the limit; ``final`` (reading has ended):
        also when every record read was malformed (unless the limit is ``none``)."""
        if not self.total or self.limit == math.inf:
            return False
        if final and self.total >= self.seen:
            return True
        if not self.is_share:
            return self.total > self.limit
        return self.total > self.limit * max(self.seen, MIN_SAMPLE)

    def check(self, final: bool = False) -> None:
        """Raise :class:`TooManyMalformed` if past the limit (see :meth:`exceeded`)."""
        if self.exceeded(final):
            if final and self.total >= self.seen:
                why = "nothing else was read"
            else:
                share = f" (of at least {MIN_SAMPLE})" if self.is_share else ""
                why = f"more than --max-malformed {self.limit_text}{share}"
            raise TooManyMalformed(f"{self.summary()}: {why}; first: {self.first}")

    def summary(self) -> str:
        """``N of M records skipped as malformed (reason: n, ...)``, or ``""`` if none."""
        if not self.total:
            return ""
        reasons = ", ".join(f"{r}: {n:,}" for r, n in self.by_reason.most_common())
        return f"{self.total:,} of {self.seen:,} {self.what} skipped as malformed ({reasons})"

    def log_summary(self) -> None:
        """One WARNING line with :meth:`summary` (nothing when nothing was skipped)."""
        if self.total:
            self.log.warning("event=malformed-summary %s", self.summary())

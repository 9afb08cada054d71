"""One ingest loop: a source of records → an accumulator, with checkpoint and save cadences.

:class:`IngestLoop` reads ``(record, position)`` pairs from a source (a
:class:`~connectors.files.FileSource`, or anything iterable with ``stop()``,
``stopped``, ``errors_by_reason`` and ``position()``) in a reader thread
(:func:`read_in_thread`), learns every record into a
:class:`~streamspec.streaming.accumulator.MomentAccumulator`, remembers the
position of the last record learned from each input, and calls its hooks:

``checkpoint()``
    after ``checkpoint_every`` records, ``checkpoint_interval`` seconds, or when
    the source has been idle (a followed file that does not grow) with unsaved
    records: the caller makes the counts and :attr:`IngestLoop.positions` durable.
``save()``
    every ``save_interval`` seconds while new records come (``learn --follow
    --out``: fit and save the model); a checkpoint is taken just before, so that
    the durable state is never behind the model saved.
``progress(records, positions)``
    after every item, for a progress bar.
``learned(records, number)``
    after every record learned, with the symbols learned before it (``learn --follow``
    scores it: :class:`~connectors.record_scoring.RecordScorer`).

Malformed records are counted by the source (``errors_by_reason``);
:meth:`IngestLoop.errors` adds them to the counts of earlier runs. ``learn``
runs the loop with :meth:`IngestLoop.run`; a reader that has its own poll loop
(a daemon) can call :meth:`IngestLoop.learn` per record and
:meth:`IngestLoop.tick` when idle, and get the same cadences.

Examples
--------
>>> from connectors.records import Record
>>> from streamspec.streaming.accumulator import MomentAccumulator
>>> class ListSource:  # the smallest source: three records, then the end
...     stopped = False
...     errors_by_reason: dict = {}
...     def __iter__(self):
...         return iter([(Record("u", s), None) for s in "abc"])
...     def stop(self):
...         self.stopped = True
>>> loop = IngestLoop(ListSource(), MomentAccumulator(window=1))
>>> loop.run(), loop.records, loop.acc.n_triples
(True, 3, 1.0)
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from connectors.ingest import learn_record

__all__ = ["DONE", "IngestLoop", "read_in_thread"]

DONE = object()  # read_in_thread: the source has ended
_QUEUE_SIZE = 10_000  # records read ahead of the learner at most


def read_in_thread(source: Any, timeout: float) -> Iterator[Any]:
    """Iterate ``source`` in a thread; yield its items, ``None`` after ``timeout`` s without one,
    and :data:`DONE` at its end (re-raising its error, if any).

    Reading in a thread lets the caller keep its cadences (checkpoints, saves) while
    the source blocks waiting for data. ``source.stopped`` is checked while the
    queue is full, so that a stopped caller does not leave the reader blocked.
    """
    q: queue.Queue = queue.Queue(maxsize=_QUEUE_SIZE)
    failure: list[BaseException] = []

    def reader() -> None:
        try:
            for item in source:
                while True:
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        if source.stopped:
                            return
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            try:
                q.put(DONE, timeout=1.0)
            except queue.Full:  # nobody reads any more: the caller stopped
                pass

    thread = threading.Thread(target=reader, name="streamspec-file-reader", daemon=True)
    thread.start()
    while True:
        try:
            item = q.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            yield None
            continue
        if item is DONE and failure:
            raise failure[0]
        yield item
        if item is DONE:
            return


class IngestLoop:
    """Learn the records of ``source`` into ``acc``, calling the cadence hooks (see the module).

    Parameters
    ----------
    source
        Iterable of ``(record, position)``; ``position`` has ``path`` and
        ``to_dict()`` (or is ``None``: nothing to remember).
    acc
        The accumulator records are learned into (``learn_one``, ``end``).
    records
        Symbols learned by earlier runs (a resumed state): :attr:`records` starts here.
    positions
        Positions of earlier runs, by path: :attr:`positions` starts from a copy.
    errors
        Malformed-record counts of earlier runs, by reason (see :meth:`errors`).
    checkpoint, checkpoint_every, checkpoint_interval
        The checkpoint hook (``None``: no checkpoints) and its cadence: records, seconds.
    save, save_interval
        The periodic save hook (``None``: none) and its cadence in seconds.
    progress
        ``progress(records, positions)`` after every item.
    learned
        ``learned(records, number)`` after every record learned (``[record]``, and the
        symbols learned before it).
    """

    def __init__(self, source: Any, acc: Any, *, records: int = 0,
                 positions: Mapping[str, Any] | None = None,
                 errors: Mapping[str, int] | None = None,
                 checkpoint: Callable[[], Any] | None = None, checkpoint_every: int = 100_000,
                 checkpoint_interval: float = 1.0,
                 save: Callable[[], Any] | None = None, save_interval: float = math.inf,
                 progress: Callable[[int, dict], Any] | None = None,
                 learned: Callable[[list, int], Any] | None = None) -> None:
        self.source = source
        self.acc = acc
        self.records = records
        # positions of the records learned so far: the reader thread may be ahead of them
        self.positions: dict[str, Any] = dict(positions or {})
        self._base_errors = dict(errors or {})
        self._checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.checkpoint_interval = checkpoint_interval
        self._save = save
        self.save_interval = save_interval
        self._progress = progress
        self._learned = learned
        self.finished = False  # the source ended (rather than being stopped)
        self._stop = False
        self._last_ckpt, self._since = time.monotonic(), 0  # records since the checkpoint
        self._last_save, self._unsaved = time.monotonic(), 0  # symbols since the save

    def stop(self) -> None:
        """End :meth:`run` after the current item (safe from a signal handler)."""
        self._stop = True
        self.source.stop()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop

    def errors(self) -> dict[str, int]:
        """Malformed records by reason: earlier runs' counts plus the source's."""
        out = dict(self._base_errors)
        out.update(getattr(self.source, "errors_by_reason", {}))
        return out

    def run(self) -> bool:
        """Read the source to its end or until :meth:`stop`; whether it ended by itself.

        The source is stopped on return; the final checkpoint is the caller's (at the
        natural end, ``source.position()`` is exact and also covers trailing blank or
        malformed lines).
        """
        timeout = min(self.checkpoint_interval, self.save_interval)
        try:
            for item in read_in_thread(self.source, timeout=timeout):
                if self._stop:
                    break
                if item is DONE:
                    self.finished = True
                    break
                if item is None:
                    self.tick(idle=True)
                else:
                    self.learn(*item)
        finally:
            self.source.stop()
        return self.finished

    def learn(self, rec: Any, pos: Any) -> None:
        """Learn one record read at ``pos``, then checkpoint or save if it is time."""
        learned = learn_record(self.acc, [rec])  # all or nothing, as the daemon learns
        if self._learned is not None:
            self._learned([rec], self.records)
        self.records += learned
        self._unsaved += learned
        if pos is not None:
            self.positions[pos.path] = pos.to_dict()
        self._since += 1
        self.tick()

    def tick(self, idle: bool = False) -> None:
        """Checkpoint and save if their cadence says so (``idle``: no record for a while)."""
        now = time.monotonic()
        if self._checkpoint is not None and self._since and (
                idle or self._since >= self.checkpoint_every
                or now - self._last_ckpt >= self.checkpoint_interval):
            self._take_checkpoint()
        if self._save is not None and self._unsaved and now - self._last_save >= self.save_interval:
            if self._checkpoint is not None:  # the state is never behind the model saved
                self._take_checkpoint()
            self._save()
            self._last_save, self._unsaved = time.monotonic(), 0
        if self._progress is not None:
            self._progress(self.records, self.positions)

    def _take_checkpoint(self) -> None:
        self._checkpoint()
        self._last_ckpt, self._since = time.monotonic(), 0


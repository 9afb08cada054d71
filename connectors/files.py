"""A source of records read from text files, once or following them as they grow.

:class:`FileSource` reads files in binary and splits lines itself, so that every
record comes with an exact :class:`Position`: the file's path and inode and the
byte offset just after the record's line. ``source.position()`` collects the
position of every file into a JSON-ready dict; passing it back as ``start=``
resumes exactly after the last record given out, with no record lost or repeated.

In follow mode (like ``tail -F``) the files are polled as they grow; a file that
is renamed away (log rotation) is read to its end before the new file at the
same path is read from its beginning, and a file that gets shorter (truncated)
is read again from its beginning.

One file's reading and :class:`Position` are in :mod:`connectors.file_reader`;
the checks of input files before reading (:func:`check_files`) in
:mod:`connectors.file_checks`. Both are re-exported here.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.file_checks import InputError, check_files, looks_like
from connectors.file_reader import FileReader, Line, Position, is_gzip, normalise_paths
from connectors.records import MalformedRecord, Record, RecordFormat

__all__ = ["FileSource", "InputError", "LineInfo", "Position", "check_files", "looks_like"]


@dataclass(frozen=True, slots=True)
class LineInfo:
    """A line that gave no records because it is malformed (passed to ``on_error``).

    Parameters
    ----------
    path
        The path the source was given.
    line
        1-based line number in the file.
    offset
        Byte offset where the line starts.
    data
        The line's bytes (only the first 256 for an oversized line).
    """

    path: str
    line: int
    offset: int
    data: bytes



ErrorHandler = Callable[[LineInfo, MalformedRecord], Any]


class FileSource:
    """Records from text files, read once or followed as they grow.

    Parameters
    ----------
    paths
        A path or a sequence of paths. One-pass mode reads them in order; follow
        mode reads them side by side. ``.gz`` files are decompressed (one-pass only;
        offsets then count decompressed bytes).
    fmt
        The record format of every file's lines.
    follow
        Keep reading as the files grow, like ``tail -F``, until :meth:`stop` is
        called or ``idle_timeout`` passes without new data. A path that does not
        exist yet is waited for.
    poll_interval
        Seconds to sleep when no file has new data (follow mode).
    start
        Where to resume: the dict returned by :meth:`position`, a
        :class:`Position`, or an iterable of positions. Files without a position
        are read from their beginning.
    idle_timeout
        Follow mode: stop after this many seconds without a new byte in any file.
    on_error
        Called as ``on_error(line_info, exc)`` for every malformed line, which is
        then skipped; exceptions it raises propagate (so it can make reading strict).

    Attributes
    ----------
    errors : int
        Number of malformed lines seen (skipped).
    errors_by_reason : collections.Counter
        The same, by :attr:`MalformedRecord.reason`.
    lines : int
        Lines read (records or not), for the share of malformed ones.

    Notes
    -----
    The position of a line that gave no records (blank, header, malformed) is
    taken as consumed once the following line is read or the file ends, so that a
    resumed source does not report the same malformed line again.

    Limitations: lines are split at ``\n`` only, so a CSV field holding a line
    break is not supported. Truncation is noticed when the file is shorter than
    what was read at the next poll (a file truncated and rewritten past that
    length in between goes unnoticed, as with ``tail -F``). Bytes written to a
    rotated-away file after it was read to its end are not read. Resuming from a
    position whose file was rotated away finds that file by inode among the
    uncompressed files next to the path whose names start with its name
    (``app.log.1``); otherwise the new file is read from its start.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from connectors.records import RecordFormat
    >>> folder = tempfile.mkdtemp()
    >>> path = pathlib.Path(folder, "words.txt")
    >>> _ = path.write_text("the cat\\nsat\\n")
    >>> src = FileSource(path, RecordFormat("tokens"))
    >>> [(rec.symbol, pos.offset) for rec, pos in src]
    [('the', 8), ('cat', 8), ('sat', 12)]
    >>> again = FileSource(path, RecordFormat("tokens"), start=src.position())
    >>> list(again)
    []

    Resuming after the first record of a line reads the rest of that line:

    >>> first = next(iter(FileSource(path, RecordFormat("tokens"))))
    >>> first[1].skip
    1
    >>> [rec.symbol for rec, _ in FileSource(path, RecordFormat("tokens"), start=first[1])]
    ['cat', 'sat']
    >>> import shutil; shutil.rmtree(folder)

    """

    def __init__(
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        fmt: RecordFormat,
        follow: bool = False,
        poll_interval: float = 0.2,
        start: Mapping[str, Any] | Position | Iterable[Position] | None = None,
        *,
        idle_timeout: float | None = None,
        on_error: ErrorHandler | None = None,
    ):
        self.paths = normalise_paths(paths)
        if not isinstance(fmt, RecordFormat):
            raise ValueError(f"fmt must be a RecordFormat, got {type(fmt).__name__}")
        if not _positive_number(poll_interval):
            raise ValueError(f"poll_interval must be a positive number, got {poll_interval!r}")
        if idle_timeout is not None and not (
            _positive_number(idle_timeout) or idle_timeout == 0
        ):
            raise ValueError(f"idle_timeout must be a non-negative number or None, "
                             f"got {idle_timeout!r}")
        if on_error is not None and not callable(on_error):
            raise ValueError("on_error must be callable")
        if follow:
            gz = [p for p in self.paths if is_gzip(p)]
            if gz:
                raise ValueError(f"cannot follow a gzip file ({gz[0]}); read it in one pass")
        else:
            missing = [p for p in self.paths if not os.path.exists(p)]
            if missing:
                raise FileNotFoundError(f"no such file: {missing[0]}")
        self.fmt = fmt
        self.follow = bool(follow)
        self.poll_interval = float(poll_interval)
        self.idle_timeout = None if idle_timeout is None else float(idle_timeout)
        self.on_error = on_error
        self.errors = 0
        self.lines = 0
        self.errors_by_reason: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # position() may be called from another thread
        self._iterating = False
        wanted = set(self.paths)
        # positions of paths the source does not read are dropped: files may be removed
        self._positions: dict[str, Position] = {
            p: pos for p, pos in _start_positions(start).items() if p in wanted
        }

    # ------------------------------------------------------------------ public

    def stop(self) -> None:
        """Make iteration end at the next record boundary (safe from any thread)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has been called."""
        return self._stop.is_set()

    def position(self) -> dict[str, dict[str, Any]]:
        """Position after the last record given out, per path, as JSON-ready dicts.

        Pass it back as ``start=`` to resume exactly there. Paths not read yet are
        absent (they are read from their beginning).
        """
        with self._lock:
            snapshot = dict(self._positions)
        return {path: pos.to_dict() for path, pos in snapshot.items()}

    def __iter__(self) -> Iterator[tuple[Record, Position]]:
        if self._iterating:
            raise RuntimeError("this FileSource is already being iterated")
        return self._iterate()

    # ------------------------------------------------------------------ reading

    def _iterate(self) -> Iterator[tuple[Record, Position]]:
        self._iterating = True
        readers = [FileReader(p, self.fmt) for p in self.paths]
        try:
            if self.follow:
                yield from self._follow(readers)
            else:
                yield from self._one_pass(readers)
        finally:
            for r in readers:
                r.close()
            self._iterating = False

    def _one_pass(self, readers: list[FileReader]) -> Iterator[tuple[Record, Position]]:
        for r in readers:
            if self._stop.is_set():
                return
            r.open_at(self._positions.get(r.path), must_exist=True)
            while True:
                for ln in r.lines(final=True, budget=None):
                    yield from self._emit(r, ln)
                    if self._stop.is_set():
                        return
                if not r.draining:
                    break
                # resumed inside a rotated-away file: its successor is at the path
                if not r.switch_to_path():
                    break
                self._moved(r)

    def _follow(self, readers: list[FileReader]) -> Iterator[tuple[Record, Position]]:
        last_data = time.monotonic()
        while not self._stop.is_set():
            active = False
            for r in readers:
                for ln in r.poll(self._positions.get(r.path)):
                    active = True
                    yield from self._emit(r, ln)
                    if self._stop.is_set():
                        return
                active = active or r.got_data
            now = time.monotonic()
            if active:
                last_data = now
                continue  # there may be more: poll again at once
            wait = self.poll_interval
            if self.idle_timeout is not None:
                left = self.idle_timeout - (now - last_data)
                if left <= 0:
                    return
                wait = min(wait, left)
            # Event.wait instead of sleep: stop() ends the wait at once
            self._stop.wait(wait)

    def _emit(self, r: FileReader, ln: Line) -> Iterator[tuple[Record, Position]]:
        if ln.data is None:
            self._set_position(r.consumed_position())
            return
        skip = r.take_skip()
        self.lines += 1
        records: list[Record] = []
        if ln.oversized:
            self._report(r, ln, MalformedRecord(
                "oversized", f"line is longer than max_bytes={self.fmt.max_bytes}"))
        else:
            try:
                records = r.parser.parse(ln.data)
            except MalformedRecord as exc:
                self._report(r, ln, exc)
        n = len(records)
        if skip >= n:
            self._set_position(Position(r.path, r.inode, ln.end, ln.number, ln.start, 0))
            return
        for taken in range(skip + 1, n + 1):
            pos = Position(r.path, r.inode, ln.end, ln.number, ln.start,
                           0 if taken == n else taken)
            self._set_position(pos)
            yield records[taken - 1], pos
            if self._stop.is_set():
                return

    def _moved(self, r: FileReader) -> None:
        self._set_position(r.consumed_position())

    def _set_position(self, pos: Position) -> None:
        with self._lock:
            self._positions[pos.path] = pos

    def _report(self, r: FileReader, ln: Line, exc: MalformedRecord) -> None:
        self.errors += 1
        self.errors_by_reason[exc.reason] += 1
        if self.on_error is not None:
            self.on_error(LineInfo(r.path, ln.number, ln.start, ln.data or b""), exc)



# ---------------------------------------------------------------------- helpers


def _positive_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x > 0



def _start_positions(start: Any) -> dict[str, Position]:
    if start is None:
        return {}
    if isinstance(start, Position):
        return {start.path: start}
    if isinstance(start, Mapping):
        if set(start) >= {"path", "inode"}:
            pos = Position.from_dict(start)  # one position's dict
            return {pos.path: pos}
        out = {}
        for path, value in start.items():
            pos = value if isinstance(value, Position) else Position.from_dict(value)
            if pos.path != path:
                raise ValueError(f"start position for {path!r} is for {pos.path!r}")
            out[path] = pos
        return out
    out = {}
    for value in start:
        pos = value if isinstance(value, Position) else Position.from_dict(value)
        out[pos.path] = pos
    return out

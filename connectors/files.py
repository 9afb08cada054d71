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
"""

from __future__ import annotations

import gzip
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import IO, Any, NamedTuple

from .records import MalformedRecord, Record, RecordFormat, RecordParser, parse_line

__all__ = ["FileSource", "InputError", "LineInfo", "Position", "check_files"]

# lines read from one file before the other files of a follow-mode source get a turn
_FAIR_SHARE = 1000
# bytes of an oversized line kept to show in its error report
_HEAD = 256
# bytes of a file's beginning that check_files looks at
_SNIFF = 64 << 10


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record was read, and where reading resumes after it.

    Parameters
    ----------
    path
        The path the source was given (the logical file; after rotation the bytes
        may have come from a renamed file, identified by ``inode``).
    inode
        The inode of the file the record's line was read from.
    offset
        Byte offset just after the record's line (its line break included).
    line
        1-based number of the record's line in that file.
    line_start
        Byte offset where the record's line starts.
    skip
        0 when this record is the last of its line, so reading resumes at
        ``offset``. Otherwise (a line of several records, e.g. characters) the
        number of the line's records given out so far: reading resumes by reading
        the line at ``line_start`` again and skipping that many records.

    Examples
    --------
    >>> p = Position("data.txt", inode=42, offset=10, line=2, line_start=6)
    >>> p.to_dict()
    {'path': 'data.txt', 'inode': 42, 'offset': 10, 'line': 2, 'line_start': 6, 'skip': 0}
    >>> Position.from_dict(p.to_dict()) == p
    True
    >>> Position.from_dict({"path": "data.txt", "inode": 42})
    Traceback (most recent call last):
    ...
    ValueError: position is missing offset, line

    """

    path: str
    inode: int
    offset: int
    line: int
    line_start: int = 0
    skip: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The position as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Position:
        """The position saved by :meth:`to_dict`; ValueError for anything else."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a position must be a dict, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"position has unknown fields {', '.join(map(str, unknown))}")
        missing = [n for n in ("path", "inode", "offset", "line") if n not in data]
        if missing:
            raise ValueError(f"position is missing {', '.join(missing)}")
        if not isinstance(data["path"], str) or not data["path"]:
            raise ValueError(f"position path must be a non-empty string, got {data['path']!r}")
        for n in names[1:]:
            v = data.get(n, 0)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"position {n} must be a non-negative integer, got {v!r}")
        return cls(**data)


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


class _Line(NamedTuple):
    data: bytes | None  # None: no line, the reader moved on (new or truncated file)
    start: int
    end: int
    number: int
    oversized: bool = False


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
        self.paths = _normalise_paths(paths)
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
            gz = [p for p in self.paths if _is_gzip(p)]
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
        readers = [_Reader(p, self.fmt) for p in self.paths]
        try:
            if self.follow:
                yield from self._follow(readers)
            else:
                yield from self._one_pass(readers)
        finally:
            for r in readers:
                r.close()
            self._iterating = False

    def _one_pass(self, readers: list[_Reader]) -> Iterator[tuple[Record, Position]]:
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

    def _follow(self, readers: list[_Reader]) -> Iterator[tuple[Record, Position]]:
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

    def _emit(self, r: _Reader, ln: _Line) -> Iterator[tuple[Record, Position]]:
        if ln.data is None:
            self._set_position(r.consumed_position())
            return
        skip = r.take_skip()
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

    def _moved(self, r: _Reader) -> None:
        self._set_position(r.consumed_position())

    def _set_position(self, pos: Position) -> None:
        with self._lock:
            self._positions[pos.path] = pos

    def _report(self, r: _Reader, ln: _Line, exc: MalformedRecord) -> None:
        self.errors += 1
        self.errors_by_reason[exc.reason] += 1
        if self.on_error is not None:
            self.on_error(LineInfo(r.path, ln.number, ln.start, ln.data or b""), exc)


class _Reader:
    """One path's open file, its line splitting, and how far it has been consumed."""

    def __init__(self, path: str, fmt: RecordFormat):
        self.path = path
        self.fmt = fmt
        self.parser = RecordParser(fmt)
        self.fh: IO[bytes] | None = None
        self.ident: tuple[int, int] = (0, 0)  # (device, inode) of the open file
        self.offset = 0  # start of the next unconsumed line
        self.line = 0  # lines consumed
        self.read_pos = 0  # bytes read from fh (consumed, partial or being discarded)
        self.partial = b""  # an incomplete last line, waiting for its line break
        self.discard: tuple[int, bytes] | None = None  # (start, head) of an oversized line
        self.skip = 0  # records of the next line already given out (mid-line resume)
        self.draining = False  # the open file is no longer at path: read it to its end
        self.got_data = False  # the last poll read at least one byte
        self.at_eof = False  # the last lines() call stopped at the end of the file
        self.started = False  # the path has been opened once (start position used)

    @property
    def inode(self) -> int:
        return self.ident[1]

    def consumed_position(self) -> Position:
        return Position(self.path, self.inode, self.offset, self.line, self.offset, 0)

    def take_skip(self) -> int:
        skip, self.skip = self.skip, 0
        return skip

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    # ------------------------------------------------------------------ opening

    def open_at(self, pos: Position | None, must_exist: bool) -> bool:
        """Open the path, resuming at ``pos``; False if it does not exist (yet)."""
        self.started = True
        try:
            inode: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            inode = None
        if pos is not None and pos.inode != inode:
            # the file we were reading was rotated away: finish it first if it is near
            old = _find_rotated(self.path, pos.inode)
            if old is not None and self._open(old, pos):
                self.draining = True
                return True
            pos = None
        if self._open(self.path, pos):
            return True
        if must_exist:
            raise FileNotFoundError(f"no such file: {self.path}")
        return False

    def switch_to_path(self) -> bool:
        """Leave the drained file for the (new) file at the path, from its start."""
        self.close()
        self.draining = False
        return self._open(self.path, None)

    def _open(self, path: str, pos: Position | None) -> bool:
        try:
            fh = gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")
        except FileNotFoundError:
            return False
        st = os.fstat(fh.fileno())
        if pos is not None and pos.inode != st.st_ino:
            pos = None  # replaced since it was looked at: its offsets mean nothing here
        self.close()
        self.fh = fh
        self.ident = (st.st_dev, st.st_ino)
        self.partial, self.discard, self.skip = b"", None, 0
        self.parser.reset()
        self.offset = self.read_pos = self.line = 0
        if pos is None:
            return True
        resume = pos.line_start if pos.skip else pos.offset
        if not _is_gzip(path) and resume > st.st_size:
            return True  # shorter than where we were: truncated since, read it all again
        if resume > 0:
            if self.fmt.encoding == "csv":
                # the header is behind us, but named columns still need it
                self.parser.prime(fh.readline(self.fmt.max_bytes + 2))
            else:
                self.parser.started = True
            fh.seek(resume)
        self.offset = self.read_pos = resume
        self.line = pos.line - 1 if pos.skip else pos.line
        self.skip = pos.skip
        return True

    # ------------------------------------------------------------------ following

    def poll(self, pos: Position | None) -> Iterator[_Line]:
        """Follow mode: the lines available now, then a check for rotation.

        ``pos`` is where to resume when the path is opened for the first time.
        """
        self.got_data = False
        if self.fh is None:
            opened = self._open(self.path, None) if self.started else self.open_at(pos, False)
            if not opened:
                return
        yield from self.lines(final=self.draining, budget=_FAIR_SHARE)
        if not self.at_eof:
            return  # the fair share is used up: the other files' turn
        if not self.draining:
            change = self._path_change()
            if change is None:
                return
            if change == "truncated":
                self._rewind()
                yield self._moved_marker()
                return
            # rotated: read what is left of the old file first (a writer may still be
            # flushing to it), then move on to the new file at the path
            self.draining = True
            yield from self.lines(final=True, budget=_FAIR_SHARE)
            if not self.at_eof:
                return
        if self.switch_to_path():
            yield self._moved_marker()
        # else: the path is gone for now; the next poll opens it once it is back

    def _rewind(self) -> None:
        assert self.fh is not None
        self.fh.seek(0)
        self.offset = self.read_pos = self.line = 0
        self.partial, self.discard, self.skip = b"", None, 0
        self.parser.reset()

    def _moved_marker(self) -> _Line:
        return _Line(None, self.offset, self.offset, self.line)

    def _path_change(self) -> str | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None  # renamed away, the new file not there yet: keep the old one
        if (st.st_dev, st.st_ino) != self.ident:
            return "rotated"
        if st.st_size < self.read_pos:
            return "truncated"
        return None

    # ------------------------------------------------------------------ lines

    def lines(self, final: bool, budget: int | None) -> Iterator[_Line]:
        """Complete lines available now (``final``: also a last line without break).

        Offsets are counted from the bytes read, never from ``tell()``, so they stay
        exact for gzip files too. An oversized line is not held in memory: its bytes
        are dropped as they are read, keeping only the head for the error report.
        """
        assert self.fh is not None
        limit = self.fmt.max_bytes + 2  # the longest allowed line with its "\r\n"
        produced = 0
        self.at_eof = False
        while budget is None or produced < budget:
            chunk = self.fh.readline(limit - len(self.partial))
            if chunk:
                self.read_pos += len(chunk)
                self.got_data = True
            ended = chunk.endswith(b"\n") or (final and not chunk)
            if self.discard is not None:
                if ended:
                    start, head = self.discard
                    self.discard = None
                    produced += 1
                    yield self._finish(head, start, oversized=True)
                elif not chunk:
                    self.at_eof = True
                    return
                continue
            data = self.partial + chunk if self.partial else chunk
            if ended and data:
                self.partial = b""
                produced += 1
                yield self._finish(data, self.offset)
            elif len(data) >= limit:
                self.partial = b""
                self.discard = (self.offset, data[:_HEAD])
            elif not chunk:
                self.at_eof = True  # a partial line waits for its line break
                return
            else:
                self.partial = data

    def _finish(self, data: bytes, start: int, oversized: bool = False) -> _Line:
        self.offset = self.read_pos
        self.line += 1
        return _Line(data, start, self.offset, self.line, oversized)


# ---------------------------------------------------------------------- helpers


def _normalise_paths(paths: Any) -> tuple[str, ...]:
    if isinstance(paths, str | bytes | os.PathLike):
        paths = [paths]
    out = tuple(os.fsdecode(p) for p in paths)
    if not out:
        raise ValueError("FileSource needs at least one path")
    if len(set(out)) != len(out):
        raise ValueError("FileSource paths must be distinct")
    return out


def _positive_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and x > 0


def _is_gzip(path: str) -> bool:
    return path.endswith(".gz")


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


def _find_rotated(path: str, inode: int) -> str | None:
    """A file next to ``path``, named like it (``app.log.1``), with the given inode."""
    folder = os.path.dirname(path) or "."
    base = os.path.basename(path)
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if (entry.name != base and entry.name.startswith(base)
                        and entry.inode() == inode and entry.is_file()):
                    return entry.path
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------- input checks


class InputError(ValueError):
    """A file that is not text input of the given record format (see :func:`check_files`)."""


_SIGNATURES = (  # what a refused file most likely is, by its first bytes
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"), (b"\x7fELF", "an executable (ELF)"),
    (b"PK\x03\x04", "a zip archive (a streamspec checkpoint?)"),
    (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"),
)


def looks_like(head: bytes) -> str:
    """``", it looks like <kind>"`` for the first bytes of a known binary format, else ``""``.

    >>> looks_like(b"\\x89PNG\\r\\n")
    ', it looks like a PNG image'
    """
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return f", it looks like {what}"
    return ""


def check_files(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    fmt: RecordFormat,
    given_fields: Mapping[str, str | int] | None = None,
    *,
    missing_ok: bool = False,
) -> None:
    """Refuse files that cannot be input of ``fmt``, before anything is read from them.

    Looks at the first 64 KiB of every file (decompressed for ``.gz``):

    * a directory, or (unless ``missing_ok``) a path that does not exist;
    * a binary file: a NUL byte, or bytes that are not UTF-8;
    * ``csv``: a header row (see ``RecordFormat.csv_header``) without the symbol
      field or one of ``fields``; a first row that holds another field's name but
      not the symbol field's (a header lacking it); a first row that is no header
      while ``fields`` names a column (names need a header);
    * ``jsonl``: a first JSON object without the symbol field (and not an end
      marker) or without one of ``fields``.

    Later malformed lines are not looked for: a source skips and counts them.

    Parameters
    ----------
    paths
        The files.
    fmt
        Their record format.
    given_fields
        Fields the user named explicitly, by option name (e.g.
        ``{"--key-field": "user"}``); only names (``str``) are checked.
    missing_ok
        Accept paths that do not exist (yet), e.g. files to follow.

    Raises
    ------
    InputError
        A ``ValueError`` naming the file and the problem (and, for a missing
        field, the fields the file has).
    FileNotFoundError
        For a missing file, unless ``missing_ok``.

    Notes
    -----
    Cost: O(64 KiB) read per file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.csv").write_text("user,page\\nu1,home\\n")
    >>> fmt = RecordFormat("csv", symbol_field="item")
    >>> check_files([folder / "a.csv"], fmt, {"--symbol-field": "item"})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    connectors.files.InputError: ...has no field 'item' (--symbol-field); its fields are: user, page...
    >>> _ = (folder / "b.bin").write_bytes(b"\\x00\\x01\\x02")
    >>> check_files([folder / "b.bin"], RecordFormat("chars"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    connectors.files.InputError: ...b.bin: not a text file (a NUL byte at offset 0)
    >>> import shutil; shutil.rmtree(folder)

    """
    named = {opt: f for opt, f in (given_fields or {}).items() if isinstance(f, str)}
    for path in _normalise_paths(paths):
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, not a file (give the files in it, "
                             f"e.g. {os.path.join(path, '*')})")
        if not os.path.exists(path):
            if missing_ok:
                continue
            raise FileNotFoundError(f"no such file: {path}")
        try:
            with (gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")) as fh:
                head = fh.read(_SNIFF)
                complete = not fh.read(1)
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise InputError(f"{path}: cannot be read ({exc})") from None
        _check_text(path, head, complete)
        if fmt.encoding == "csv":
            _check_csv_header(path, head, fmt, named)
        elif fmt.encoding == "jsonl":
            _check_json_fields(path, head, fmt, named)


def _check_text(path: str, head: bytes, complete: bool) -> None:
    nul = head.find(b"\x00")
    if nul >= 0:
        raise InputError(f"{path}: not a text file (a NUL byte at offset {nul}"
                         f"{looks_like(head)})")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a character cut by the end of the block is no error
        if complete or exc.start < len(head) - 3 or exc.reason != "unexpected end of data":
            raise InputError(
                f"{path}: not UTF-8 text (byte 0x{head[exc.start:exc.start + 1].hex()} at "
                f"offset {exc.start}{looks_like(head)})") from None


def _first_line(head: bytes) -> bytes:
    return head.split(b"\n", 1)[0]


def _options_of(fmt: RecordFormat, named: Mapping[str, str]) -> dict[str, str]:
    """Field name -> the option that names it (explicit options first, then the symbol's)."""
    out = {f: opt for opt, f in named.items()}
    if isinstance(fmt.symbol_field, str):
        out.setdefault(fmt.symbol_field, "--symbol-field")
    return out


def _check_csv_header(path: str, head: bytes, fmt: RecordFormat, named: Mapping[str, str]) -> None:
    if fmt.csv_header is False or not head:
        return
    parser = RecordParser(fmt)
    parser.prime(_first_line(head))  # takes the header as a source would, if it is one
    if parser.header is not None:
        cells = parser.header
        missing = [(f, opt) for f, opt in _options_of(fmt, named).items() if f not in cells]
        if missing:
            f, opt = missing[0]
            raise InputError(f"{path}: the CSV header has no field {f!r} ({opt}); its fields "
                             f"are: {', '.join(cells)}")
        return
    cells = tuple(c.strip() for c in _first_line(head).decode("utf-8", "replace")
                  .rstrip("\r").split(fmt.delimiter))
    others = [s for _, s in fmt.field_specs() if isinstance(s, str) and s != fmt.symbol_field]
    if any(s in cells for s in others) or named:
        # a first row naming other fields is a header lacking the symbol field; and a field
        # given by name can only be found through a header
        if "--symbol-field" in named or isinstance(fmt.symbol_field, str):
            f, opt = named.get("--symbol-field", fmt.symbol_field), "--symbol-field"
        else:  # the symbol by position: one of the named fields is what is missing
            opt = next(iter(named))
            f = named[opt]
        raise InputError(
            f"{path}: the CSV header has no field {f!r} ({opt}); its fields are: "
            f"{', '.join(cells)} (without a header row, give columns by position, "
            f"e.g. --symbol-field 1)")


def _check_json_fields(path: str, head: bytes, fmt: RecordFormat, named: Mapping[str, str]) -> None:
    import json

    for number, line in enumerate(head.split(b"\n")[:-1] or [head], start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return  # a malformed first line: skipped and counted like any other
        if not isinstance(obj, dict):
            return  # a scalar symbol of the default stream
        try:
            ends = any(r.end for r in parse_line(line, fmt))
        except MalformedRecord:
            ends = False
        wanted = _options_of(fmt, named)
        if ends:  # a pure end marker need not carry the symbol
            wanted = {f: opt for f, opt in wanted.items() if opt != "--symbol-field"}
        missing = [(f, opt) for f, opt in wanted.items() if f not in obj]
        if missing:
            f, opt = missing[0]
            raise InputError(f"{path}, line {number}: the JSON object has no field {f!r} "
                             f"({opt}); its fields are: {', '.join(map(str, obj))}")
        return

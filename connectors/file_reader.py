"""Reading one file by lines, with exact positions: :class:`Position` and :class:`FileReader`.

A :class:`FileReader` splits one path's bytes into lines itself, so that every line
comes with the byte offsets it spans; it follows the file through rotation
(renamed away: read to its end first) and truncation (read again from the start).
:class:`~connectors.files.FileSource` reads several of them.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import IO, Any, NamedTuple

from connectors.records import RecordFormat, RecordParser

__all__ = ["FAIR_SHARE", "FileReader", "Line", "Position", "is_gzip", "normalise_paths"]

# lines read from one file before the other files of a follow-mode source get a turn
FAIR_SHARE = 1000
# bytes of an oversized line kept to show in its error report
_HEAD = 256


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



class Line(NamedTuple):
    data: bytes | None  # None: no line, the reader moved on (new or truncated file)
    start: int
    end: int
    number: int
    oversized: bool = False



class FileReader:
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
            fh = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
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
        if not is_gzip(path) and resume > st.st_size:
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

    def poll(self, pos: Position | None) -> Iterator[Line]:
        """Follow mode: the lines available now, then a check for rotation.

        ``pos`` is where to resume when the path is opened for the first time.
        """
        self.got_data = False
        if self.fh is None:
            opened = self._open(self.path, None) if self.started else self.open_at(pos, False)
            if not opened:
                return
        yield from self.lines(final=self.draining, budget=FAIR_SHARE)
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
            yield from self.lines(final=True, budget=FAIR_SHARE)
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

    def _moved_marker(self) -> Line:
        return Line(None, self.offset, self.offset, self.line)

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

    def lines(self, final: bool, budget: int | None) -> Iterator[Line]:
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

    def _finish(self, data: bytes, start: int, oversized: bool = False) -> Line:
        self.offset = self.read_pos
        self.line += 1
        return Line(data, start, self.offset, self.line, oversized)



def is_gzip(path: str) -> bool:
    return path.endswith(".gz")



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


def normalise_paths(paths: Any) -> tuple[str, ...]:
    """One path or several as distinct strings (``ValueError`` for none or a repeated one)."""
    if isinstance(paths, str | bytes | os.PathLike):
        paths = [paths]
    out = tuple(os.fsdecode(p) for p in paths)
    if not out:
        raise ValueError("FileSource needs at least one path")
    if len(set(out)) != len(out):
        raise ValueError("FileSource paths must be distinct")
    return out

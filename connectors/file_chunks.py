"""Cutting files into chunks at line boundaries, so that every line belongs to one chunk.

Gzip files are one chunk each (their byte offsets cannot be sought).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["DEFAULT_CHUNK_BYTES", "Chunk", "chunk_bounds", "file_chunks"]

DEFAULT_CHUNK_BYTES = 64 << 20
_SCAN = 1 << 16  # bytes read at a time while looking for a line break


@dataclass(frozen=True, slots=True)
class Chunk:
    """A byte range of one file: whole lines, from ``start`` up to ``end`` (excluded).

    ``end`` is ``None`` for a whole gzip file (read to its end, decompressed).
    """

    path: str
    start: int = 0
    end: int | None = None


def _bounds(size: int, chunk_bytes: int, next_line_start: Callable[[int], int]) -> list[tuple[int, int]]:
    """Chunk ranges of ``size`` bytes, given where the line at or after an offset starts."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    cuts = [0]
    for offset in range(chunk_bytes, size, chunk_bytes):
        cut = next_line_start(offset)
        if cut > cuts[-1]:
            cuts.append(cut)
        if cut >= size:
            break
    if cuts[-1] < size:
        cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def chunk_bounds(data: bytes, chunk_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` of ``data`` holding whole lines, about ``chunk_bytes`` each.

    A chunk nominally starts at a multiple of ``chunk_bytes``; it actually starts
    just after the first line break at or after that offset (offset 0 excepted), and
    ends where the next chunk starts. Every line (with its ``\\n``) is in exactly one
    chunk; ranges are never empty; a last line without a line break is kept.

    Examples
    --------
    >>> chunk_bounds(b"ab\\ncd\\n\\nefgh\\nij", 3)
    [(0, 6), (6, 7), (7, 12), (12, 14)]
    >>> chunk_bounds(b"one long line", 4)
    [(0, 13)]
    >>> chunk_bounds(b"", 4)
    []
    """
    size = len(data)

    def next_line_start(offset: int) -> int:
        nl = data.find(b"\n", offset)
        return size if nl < 0 else nl + 1

    return _bounds(size, chunk_bytes, next_line_start)


def file_chunks(paths: Iterable[str | os.PathLike], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> list[Chunk]:
    """The chunks of files, in order: file by file, each cut as :func:`chunk_bounds` does.

    Only a few bytes around each nominal cut are read. A ``.gz`` file is one chunk.
    Empty files give no chunk.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "f.txt")
    >>> _ = path.write_bytes(b"ab\\ncd\\n\\nefgh\\nij")
    >>> [(c.start, c.end) for c in file_chunks([path], 3)]
    [(0, 6), (6, 7), (7, 12), (12, 14)]
    >>> path.unlink()
    """
    out: list[Chunk] = []
    for p in paths:
        path = os.fsdecode(p)
        size = os.path.getsize(path)
        if path.endswith(".gz"):
            out.append(Chunk(path))
            continue
        if size == 0:
            continue
        with open(path, "rb") as fh:

            def next_line_start(offset: int, fh=fh, size=size) -> int:
                fh.seek(offset)
                while True:
                    block = fh.read(_SCAN)
                    if not block:
                        return size
                    nl = block.find(b"\n")
                    if nl >= 0:
                        return offset + nl + 1
                    offset += len(block)

            out.extend(Chunk(path, s, e) for s, e in _bounds(size, chunk_bytes, next_line_start))
    return out

"""Backfills: count the symbol triples of many files in parallel, then reduce exactly.

A backfill reads files once (no following, no resume state) and returns one
:class:`~streamspec.streaming.accumulator.MomentAccumulator` equal to the one a single
process would build by reading the files in the given order with
:class:`~connectors.files.FileSource` and feeding every record to ``learn_one``
(and every end marker to ``end``). The work is split three ways:

1. **Chunking** (:func:`chunk_bounds`, :func:`file_chunks`): every file is cut into
   byte ranges at line boundaries, so that every line belongs to exactly one
   chunk. Gzip files are one chunk each (their byte offsets cannot be sought).
2. **Counting** (:func:`count_chunk`): each task parses its chunk with the shared
   :class:`~connectors.records.RecordParser` and counts it into an accumulator
   built with ``track_heads=True``. Plain ``chars`` input has a vectorised path
   that gives the same counts without building a record per character.
3. **Reduction** (:func:`reduce_in_order`): the files are one long record sequence
   (file 1, then file 2, ...), and the chunk results are joined in that order by a
   tree of :meth:`~streamspec.streaming.accumulator.MomentAccumulator.concat`, which counts
   the triples straddling chunk borders. The join is associative, so the tree
   gives exactly the serial counts whatever the stream keys are, even when keys
   recur across files.

:func:`backfill` runs the tasks on a Dask cluster (``scheduler``: an address, a
``distributed.Client`` or a ``LocalCluster``; install ``streamspec[dask]``), else
in a local process pool, or in this process when ``n_workers == 1``. Dask workers
must see the files at the same paths (a shared file system).

Examples
--------
>>> import pathlib, tempfile
>>> from connectors.records import RecordFormat
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "a.txt").write_text("abracadabra\\nabra")
>>> _ = (folder / "b.txt").write_text("cadabra\\n")
>>> acc = backfill([folder / "a.txt", folder / "b.txt"], RecordFormat("chars"),
...                n_workers=1, chunk_bytes=4)
>>> acc.n_triples        # 22 characters in one sequence: 20 triples
20.0
>>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import argparse
import gzip
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamspec.core.checkpoint import CheckpointError, encode_value
from streamspec.streaming.accumulator import MomentAccumulator

from .records import MalformedRecord, RecordFormat, RecordParser

__all__ = [
    "Chunk",
    "ChunkResult",
    "add_backfill_arguments",
    "backfill",
    "backfill_result",
    "backfill_result_from_args",
    "chunk_bounds",
    "count_chunk",
    "file_chunks",
    "pool_size",
    "reduce_in_order",
    "run_backfill_from_args",
    "serial_count",
    "wants_backfill",
]

DEFAULT_CHUNK_BYTES = 64 << 20
_BLOCK = 16 << 20  # bytes of a chunk read (and counted) at a time
_SCAN = 1 << 16  # bytes read at a time while looking for a line break
_TOKENS_PIECE = 1 << 20  # characters of tokens text split and counted at a time
_UNICODE_PIECE = 4 << 20  # bytes of non-ASCII chars text counted at a time
_DASK_HINT = "the Dask backfill needs dask.distributed: pip install 'streamspec[dask]'"

log = logging.getLogger("streamspec.backfill")


# ----------------------------------------------------------------------------- chunking


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


# ----------------------------------------------------------------------------- counting


@dataclass(slots=True)
class ChunkResult:
    """What counting a chunk (or a run of consecutive chunks) gave.

    Attributes
    ----------
    acc
        The counts, with ``track_heads=True`` so that results can be joined.
    records
        Number of symbols learned (records with a symbol).
    lines
        Number of lines read.
    errors
        Malformed lines skipped, by :attr:`~connectors.records.MalformedRecord.reason`.
    """

    acc: MomentAccumulator
    records: int = 0
    lines: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def then(self, later: ChunkResult) -> ChunkResult:
        """This result followed by ``later`` (the next piece of the record sequence)."""
        errors = Counter(self.errors)
        errors.update(later.errors)
        return ChunkResult(self.acc.concat(later.acc), self.records + later.records,
                           self.lines + later.lines, dict(errors))


def _new_acc(alphabet: Sequence[Hashable] | None) -> MomentAccumulator:
    acc = MomentAccumulator(track_heads=True)
    if alphabet is not None:
        acc.alphabet.add_labels(alphabet)
    return acc


def count_chunk(chunk: Chunk, fmt: RecordFormat, alphabet: Sequence[Hashable] | None = None) -> ChunkResult:
    """Count the records of one chunk into a fresh accumulator (``track_heads=True``).

    Lines are parsed exactly as :class:`~connectors.files.FileSource` parses them
    (the file's CSV header is looked up when the chunk starts after it); malformed
    lines are skipped and counted in ``errors``.

    Parameters
    ----------
    chunk
        The byte range to read.
    fmt
        The record format.
    alphabet
        Labels to give the first indices, in this order (the others follow in order
        of first appearance).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from connectors.records import RecordFormat
    >>> path = pathlib.Path(tempfile.mkdtemp(), "f.csv")
    >>> _ = path.write_text("key,symbol\\nu1,a\\nu2,b\\nu1,c\\n{oops\\n")
    >>> res = count_chunk(Chunk(str(path), 0, path.stat().st_size), RecordFormat("csv"))
    >>> res.records, res.acc.keys, res.acc.symbols, res.errors
    (3, ['u1', 'u2'], ['a', 'b', 'c'], {'missing-field': 1})
    >>> res = count_chunk(Chunk(str(path), 0, 11), RecordFormat("jsonl"))
    >>> res.records, res.errors
    (0, {'bad-json': 1})
    >>> path.unlink()
    """
    acc = _new_acc(alphabet)
    result = ChunkResult(acc)
    errors: Counter[str] = Counter()
    parser = _parser_at(chunk, fmt)
    plain = not fmt.end_each_line and not fmt.int_symbols
    fast_chars = fmt.encoding == "chars" and plain and _encodable(fmt.key)
    fast_tokens = fmt.encoding == "tokens" and plain
    for block in _blocks(chunk):
        if fast_chars:
            # non-ASCII text takes 4 bytes a character and more: counted in smaller pieces
            pieces = [block] if block.isascii() else list(_pieces(block, _UNICODE_PIECE))
            counted = [_count_chars_block(piece, fmt, result.acc.symbols) for piece in pieces[:1]]
            for piece in pieces[1:]:
                if counted[-1] is None:
                    break
                labels = counted[-1][0].symbols
                counted.append(_count_chars_block(piece, fmt, labels))
            if all(c is not None for c in counted):
                for block_acc, n_symbols, n_lines in counted:
                    result.acc = result.acc.concat(block_acc)
                    result.records += n_symbols
                    result.lines += n_lines
                continue
        elif fast_tokens:
            counted_tokens = _count_tokens_block(block, fmt, result.acc)
            if counted_tokens is not None:
                result.records += counted_tokens[0]
                result.lines += counted_tokens[1]
                continue
        result.lines += _count_lines(block, fmt, parser, result, errors)
    result.errors = dict(errors)
    return result


def _encodable(key: Hashable) -> bool:
    try:
        encode_value(key)
    except CheckpointError:
        return False
    return True


def _parser_at(chunk: Chunk, fmt: RecordFormat) -> RecordParser:
    """A parser in the state FileSource's parser has when it reaches ``chunk.start``."""
    parser = RecordParser(fmt)
    if chunk.start == 0 or fmt.encoding != "csv":
        parser.started = chunk.start > 0
        return parser
    # FileSource hands the first line that is not oversized to the parser, which takes
    # the header from it (or not); replay that on the lines before the chunk
    offset = 0
    with open(chunk.path, "rb") as fh:
        for line in fh:
            if offset >= chunk.start:
                break
            offset += len(line)
            if not _oversized(line, fmt):
                try:
                    parser.parse(line)
                except MalformedRecord:
                    pass
                break
    return parser


def _oversized(line: bytes, fmt: RecordFormat) -> bool:
    """Whether FileSource drops the line unparsed (longer than ``max_bytes`` + its "\\r\\n")."""
    return len(line) - line.endswith(b"\n") > fmt.max_bytes + 1


def _blocks(chunk: Chunk) -> Iterator[bytes]:
    """The chunk's bytes in blocks of whole lines (a block ends with "\\n" or the data)."""
    opener = gzip.open if chunk.end is None and chunk.path.endswith(".gz") else open
    with opener(chunk.path, "rb") as fh:
        fh.seek(chunk.start)
        left = None if chunk.end is None else chunk.end - chunk.start
        carry = b""
        while left is None or left > 0:
            data = fh.read(_BLOCK if left is None else min(_BLOCK, left))
            if not data:
                break
            if left is not None:
                left -= len(data)
            data = carry + data if carry else data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                carry = data
                continue
            carry = data[cut:]
            yield data[:cut]
        if carry:
            yield carry


def _count_lines(block: bytes, fmt: RecordFormat, parser: RecordParser, result: ChunkResult,
                 errors: Counter[str]) -> int:
    """Count the lines of ``block`` record by record (any encoding); the number of lines."""
    acc = result.acc
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the block ends with a line break: no line after it
    single = fmt.encoding in ("chars", "tokens")
    for line in lines:
        if _oversized(line, fmt):
            errors["oversized"] += 1
            continue
        try:
            records = parser.parse(line)
        except MalformedRecord as exc:
            errors[exc.reason] += 1
            continue
        if single:  # one stream, symbols then at most one end marker
            symbols = [r.symbol for r in records if r.symbol is not None]
            if symbols:
                acc.learn_many(symbols, fmt.key)
                result.records += len(symbols)
            if records and records[-1].end:
                acc.end(fmt.key)
            continue
        for rec in records:
            if rec.symbol is not None:
                acc.learn_one(rec.symbol, rec.key)
                result.records += 1
            if rec.end:
                acc.end(rec.key)
    return len(lines)


def _chars_tables(fmt: RecordFormat) -> tuple[bytes, bytes]:
    """``bytes.translate`` table and deletions turning ASCII chars input into its symbols."""
    table = bytearray(range(256))
    delete = bytearray(b"\r\n")
    for b in range(128):
        ch = chr(b)
        if fmt.lowercase:
            table[b] = ord(ch.lower())
        if ch not in "\r\n" and fmt.keep is not None and chr(table[b]) not in fmt.keep:
            delete.append(b)
    return bytes(table), bytes(delete)


def _line_ends(block: bytes, fmt: RecordFormat) -> np.ndarray | None:
    """Offsets of the ends of the block's lines, or None if a line may be oversized."""
    arr = np.frombuffer(block, dtype=np.uint8)
    breaks = np.flatnonzero(arr == 10)
    ends = np.append(breaks, arr.size) if breaks.size == 0 or breaks[-1] != arr.size - 1 else breaks
    lengths = np.diff(ends, prepend=-1) - 1
    if lengths.size and int(lengths.max()) > fmt.max_bytes:
        return None  # an oversized line: the slow path, line by line
    return ends


def _block_text(block: bytes) -> str | None:
    """The block as text, or None when the parser must see it line by line: bytes that
    are not UTF-8 (malformed lines), or a byte-order mark (dropped at a line's start only)."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\ufeff" in text else text


def _pieces(block: bytes, size: int) -> Iterator[bytes]:
    """The block in pieces of whole lines, of about ``size`` bytes (a long line: whole)."""
    start = 0
    while start < len(block):
        cut = block.find(b"\n", start + size)
        stop = len(block) if cut < 0 else cut + 1
        yield block[start:stop]
        start = stop


def _count_tokens_block(block: bytes, fmt: RecordFormat,
                        acc: MomentAccumulator) -> tuple[int, int] | None:
    """Count a ``tokens`` block in one ``learn_many`` (symbols, lines), else None.

    The tokens of consecutive lines continue one sequence, and a line break is
    whitespace: splitting the whole block gives the tokens of its lines in order.
    None (nothing counted) when a line must go through the parser: an oversized or
    undecodable line, a byte-order mark. O(block) time.
    """
    ends = _line_ends(block, fmt)
    text = None if ends is None else _block_text(block)
    if text is None:
        return None
    if fmt.lowercase:  # lower-casing per token or per block is the same: spaces separate
        text = text.lower()
    n_tokens, start = 0, 0
    while start < len(text):
        # pieces of whole lines: the tokens of a whole block at once take 10x the memory
        cut = text.find("\n", start + _TOKENS_PIECE)
        stop = len(text) if cut < 0 else cut + 1
        tokens = text[start:stop].split()
        if tokens:
            acc.learn_many(tokens, fmt.key)
        n_tokens += len(tokens)
        start = stop
    return n_tokens, int(ends.size)


def _count_chars_block(
    block: bytes, fmt: RecordFormat, labels: list
) -> tuple[MomentAccumulator, int, int] | None:
    """Vectorised count of a ``chars`` block with no oversized line, else None.

    Gives what the parser and ``learn_one`` give: within a line "\\r" is never a
    symbol; lines are lower-cased then filtered by ``keep``; all lines continue one
    sequence of stream ``fmt.key``. The counts are taken with a fixed alphabet of the
    symbols present (fast), then relabelled: ``labels`` first, new characters in
    order of first appearance. ASCII blocks are mapped byte by byte; other UTF-8
    text by code point (an undecodable line or a byte-order mark: None, the parser's
    path).
    """
    ends = _line_ends(block, fmt)
    if ends is None:
        return None
    if not block.isascii():
        return _count_unicode_chars(block, fmt, labels, ends)
    table, delete = _chars_tables(fmt)
    symbols = block.translate(table, delete)
    # the characters present, in order of first appearance: those of a prefix, then the
    # others (which do not occur in the prefix, so their order in the rest is the order)
    seen = dict.fromkeys(symbols[:_SCAN])
    seen.update(dict.fromkeys(symbols[_SCAN:].translate(None, bytes(seen))))
    index = {label: i for i, label in enumerate(labels)}
    new_labels = list(labels) + [chr(v) for v in seen if chr(v) not in index]
    index = {label: i for i, label in enumerate(new_labels)}
    n = len(new_labels)
    if n <= 256:
        to_index = bytearray(256)
        for v in seen:
            to_index[v] = index[chr(v)]
        idx = np.frombuffer(symbols.translate(to_index), dtype=np.uint8).astype(np.int64)
    else:
        lookup = np.zeros(256, dtype=np.int64)
        for v in seen:
            lookup[v] = index[chr(v)]
        idx = lookup[np.frombuffer(symbols, dtype=np.uint8)]
    return _relabelled_counts(idx, new_labels, fmt.key), len(symbols), int(ends.size)


def _count_unicode_chars(
    block: bytes, fmt: RecordFormat, labels: list, ends: np.ndarray
) -> tuple[MomentAccumulator, int, int] | None:
    """:func:`_count_chars_block` for UTF-8 text that is not ASCII: by code point."""
    text = _block_text(block)
    if text is None or (fmt.lowercase and "\u03a3" in text):
        return None  # capital sigma lower-cases by context: the parser's path, line by line
    if fmt.lowercase:
        text = text.lower()
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    mask = (cp != 10) & (cp != 13)
    if fmt.keep is not None:
        mask &= np.isin(cp, np.fromiter((ord(c) for c in fmt.keep), dtype=np.uint32))
    cp = cp[mask]
    uniq, first = np.unique(cp, return_index=True)
    index = {label: i for i, label in enumerate(labels)}
    new_labels = list(labels)
    for c in uniq[np.argsort(first, kind="stable")].tolist():  # order of first appearance
        if chr(c) not in index:
            index[chr(c)] = len(new_labels)
            new_labels.append(chr(c))
    to_index = np.fromiter((index[chr(c)] for c in uniq.tolist()), dtype=np.int64,
                           count=uniq.size)
    idx = to_index[np.searchsorted(uniq, cp)]
    return _relabelled_counts(idx, new_labels, fmt.key), int(cp.size), int(ends.size)


def _relabelled_counts(idx: np.ndarray, new_labels: list, key: Hashable) -> MomentAccumulator:
    """Counts of the index sequence ``idx`` of stream ``key``, labelled ``new_labels``."""
    n = len(new_labels)
    fixed = MomentAccumulator(n_symbols=max(1, n), track_heads=True)
    fixed.learn_many(idx, key=key)
    _, _, header, arrays = fixed.to_checkpoint()
    header = dict(header, n_symbols=None, labels=[encode_value(s) for s in new_labels])
    if "c3" in arrays:  # a dense (version 1) accumulator
        arrays = dict(arrays, c3=arrays["c3"][:n, :n, :n])
    # sparse counts (version 2) are indexed like the labels already: only the header changes
    return MomentAccumulator.from_checkpoint(header, arrays)


# ----------------------------------------------------------------------------- reduction


def reduce_in_order(items: Sequence[Any], join: Callable[[Any, Any], Any] | None = None) -> Any:
    """Join ``items`` in order by a balanced tree of ``join(left, right)`` calls.

    ``join`` defaults to ``left.then(right)`` (for :class:`ChunkResult`) or
    ``left.concat(right)`` (for accumulators). Exact for any associative join.

    Examples
    --------
    >>> reduce_in_order(["a", "b", "c", "d", "e"], join=lambda x, y: f"({x}{y})")
    '(((ab)(cd))e)'
    """
    if not items:
        raise ValueError("nothing to reduce")
    join = join or _join
    level = list(items)
    while len(level) > 1:
        nxt = [join(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _join(left: Any, right: Any) -> Any:
    return left.then(right) if isinstance(left, ChunkResult) else left.concat(right)


# ----------------------------------------------------------------------------- executors


def _require_distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(_DASK_HINT) from exc
    return distributed


def backfill_result(
    paths: Sequence[str | os.PathLike],
    fmt: RecordFormat,
    scheduler: Any = None,
    n_workers: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    alphabet: Sequence[Hashable] | None = None,
    progress: Callable[[int, int], Any] | None = None,
) -> ChunkResult:
    """Like :func:`backfill`, but the whole :class:`ChunkResult` (counts, records, errors).

    ``progress(done, total)`` is called with the bytes of the chunks counted so far
    and of all chunks (local runs: after every chunk; Dask: once at the end).
    """
    if not isinstance(fmt, RecordFormat):
        raise ValueError(f"fmt must be a RecordFormat, got {type(fmt).__name__}")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int)
                                  or n_workers < 1):
        raise ValueError(f"n_workers must be a positive integer or None, got {n_workers!r}")
    # absolute paths: Dask workers may run in another directory (they need the same files)
    names = [os.path.abspath(os.fsdecode(p))
             for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
    folders = [p for p in names if os.path.isdir(p)]
    if folders:
        raise IsADirectoryError(f"{folders[0]}: is a directory, not a file")
    missing = [p for p in names if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"no such file: {missing[0]}")
    alphabet = None if alphabet is None else list(alphabet)
    t0 = time.perf_counter()
    chunks = file_chunks(names, chunk_bytes)
    total = sum(_chunk_size(c) for c in chunks)
    report = progress or (lambda done, total: None)
    path = "dask" if scheduler is not None else "processes"
    if not chunks:
        result = ChunkResult(_new_acc(alphabet))
    elif scheduler is not None:
        result = _run_dask(chunks, fmt, alphabet, scheduler, n_workers)
    else:
        workers, why = pool_size(chunks, n_workers)
        if workers > 1:
            path = f"{workers} processes"
            result = _run_pool(chunks, fmt, alphabet, workers, report, total)
        else:
            path = f"serial ({why})"
            results, done = [], 0
            for c in chunks:
                results.append(count_chunk(c, fmt, alphabet))
                done += _chunk_size(c)
                report(done, total)
            result = reduce_in_order(results)
    report(total, total)
    log.info("event=backfilled files=%d chunks=%d records=%d malformed=%d seconds=%.2f path=%s",
             len(names), len(chunks), result.records, sum(result.errors.values()),
             time.perf_counter() - t0, path)
    return result


PARALLEL_MIN_BYTES = 32 << 20
"""Inputs smaller than this are counted in this process even when workers are asked for:
starting a worker process (importing numpy and streamspec) costs about as much as
counting 16 MiB (docs/benchmarks.md, "learn --workers")."""


def _chunk_size(chunk: Chunk) -> int:
    if chunk.end is None:
        return os.path.getsize(chunk.path)
    return chunk.end - chunk.start


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _load() -> float:
    """The 1-minute load average (0 where the system does not tell it)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def pool_size(chunks: Sequence[Chunk], n_workers: int | None) -> tuple[int, str]:
    """How many local processes to count ``chunks`` in, and why 1 when it is 1.

    More processes than chunks or than usable CPUs cannot be faster, nor more than
    one plus the CPUs left idle by the machine's other jobs (its load average), nor
    any pool for less than :data:`PARALLEL_MIN_BYTES` of input, where starting the
    workers costs more than they save: then 1 (count in this process).

    Examples
    --------
    >>> big = [Chunk("a", 0, 64 << 20), Chunk("a", 64 << 20, 128 << 20)]
    >>> pool_size(big, 1)
    (1, '--workers 1')
    >>> pool_size(big[:1], 4)
    (1, 'one chunk')
    >>> pool_size([Chunk("a", 0, 1 << 20), Chunk("a", 1 << 20, 2 << 20)], 2)
    (1, 'input under 32 MiB')
    """
    if n_workers == 1:
        return 1, "--workers 1"
    if len(chunks) < 2:
        return 1, "one chunk"
    if sum(_chunk_size(c) for c in chunks) < PARALLEL_MIN_BYTES:
        return 1, f"input under {PARALLEL_MIN_BYTES >> 20} MiB"
    cpus = _cpus()
    if cpus < 2:
        return 1, "one CPU"
    load = _load()
    idle = int(max(0.0, cpus - load))
    workers = min(n_workers or cpus, len(chunks), cpus, 1 + idle)
    if workers < 2:
        return 1, f"no idle CPU: load average {load:.1f} on {cpus} CPUs"
    return workers, ""


def backfill(
    paths: Sequence[str | os.PathLike],
    fmt: RecordFormat,
    scheduler: Any = None,
    n_workers: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    alphabet: Sequence[Hashable] | None = None,
) -> MomentAccumulator:
    """Count the records of ``paths`` (one long sequence, in order) in parallel.

    Parameters
    ----------
    paths
        Text files (``.gz``: decompressed, one chunk each), read as one record
        sequence in this order: a stream key recurring in a later file continues.
    fmt
        The record format of every line.
    scheduler
        Run on Dask: a scheduler address (``"tcp://host:8786"``), ``"local"`` (a
        ``LocalCluster`` of ``n_workers`` processes started for this call), a
        ``distributed.Client`` or a ``LocalCluster``. ``None``: local processes.
    n_workers
        Without ``scheduler``: processes of the pool (default: CPU count); 1 counts
        in this process.
    chunk_bytes
        Nominal bytes per task (cut at line breaks).
    alphabet
        Labels to give the first indices, in this order; others follow in order of
        first appearance (the same order as a serial run).

    Returns
    -------
    MomentAccumulator
        Sliding-mode counts with ``track_heads=True``, equal to those of one
        accumulator fed every record in order (``learn_one`` / ``end``).

    Raises
    ------
    ImportError
        When ``scheduler`` is given and ``dask.distributed`` is not installed.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from connectors.records import RecordFormat
    >>> path = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = path.write_text("the cat sat\\non the mat\\n")
    >>> acc = backfill([path], RecordFormat("tokens"), n_workers=1, chunk_bytes=8)
    >>> acc.symbols, acc.n_triples
    (['the', 'cat', 'sat', 'on', 'mat'], 4.0)
    >>> path.unlink()
    """
    return backfill_result(paths, fmt, scheduler, n_workers, chunk_bytes, alphabet).acc


def serial_count(paths: Sequence[str | os.PathLike], fmt: RecordFormat) -> MomentAccumulator:
    """Count the records of ``paths`` one by one in this process: the reference of :func:`backfill`.

    A :class:`~connectors.files.FileSource` read in order, every record fed to one
    accumulator (``learn_one`` / ``end``), as ``streamspec learn`` does without a
    backfill; :func:`backfill` gives the same counts.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = path.write_text("the cat sat\\non the mat\\n")
    >>> acc = serial_count([path], RecordFormat("tokens"))
    >>> acc.symbols, acc.n_triples
    (['the', 'cat', 'sat', 'on', 'mat'], 4.0)
    >>> path.unlink()
    """
    from .files import FileSource

    acc = MomentAccumulator()
    for rec, _ in FileSource([os.fspath(p) for p in paths], fmt):
        if rec.symbol is not None:
            acc.learn_one(rec.symbol, rec.key)
        if rec.end:
            acc.end(rec.key)
    return acc


def _run_pool(chunks: list[Chunk], fmt: RecordFormat, alphabet, workers: int,
              report: Callable[[int, int], Any], total: int) -> ChunkResult:
    import multiprocessing
    from concurrent.futures import as_completed

    # spawn: the caller may run threads (a Dask client, a daemon), which fork would copy locked
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(count_chunk, c, fmt, alphabet): c for c in chunks}
        done = 0
        for f in as_completed(futures):
            f.result()  # a failed chunk fails at once
            done += _chunk_size(futures[f])
            report(done, total)
        return reduce_in_order([f.result() for f in futures])


def _run_dask(chunks: list[Chunk], fmt: RecordFormat, alphabet, scheduler: Any,
              n_workers: int | None) -> ChunkResult:
    distributed = _require_distributed()
    own_cluster = own_client = None
    if isinstance(scheduler, distributed.Client):
        client = scheduler
    else:
        if isinstance(scheduler, str) and scheduler == "local":
            own_cluster = scheduler = distributed.LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                dashboard_address=None)
        own_client = client = distributed.Client(scheduler)
    try:
        futures = client.map(count_chunk, chunks, fmt=fmt, alphabet=alphabet, pure=False)
        # the joins run on the workers too: a tree of tasks, in order
        top = reduce_in_order(futures, join=lambda a, b: client.submit(_join, a, b, pure=False))
        return top.result()
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


# ----------------------------------------------------------------------------- command line


def add_backfill_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--dask ADDRESS``, ``--workers N`` and ``--chunk-mb MB`` to a ``learn`` parser.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> add_backfill_arguments(p)
    >>> args = p.parse_args(["--dask", "tcp://127.0.0.1:8786", "--chunk-mb", "16"])
    >>> args.dask, args.workers, args.chunk_mb, wants_backfill(args)
    ('tcp://127.0.0.1:8786', None, 16, True)
    >>> wants_backfill(p.parse_args([]))
    False
    """
    g = parser.add_argument_group("parallel backfill (files read once, counted in chunks)")
    g.add_argument("--dask", metavar="SCHEDULER_ADDRESS",
                   help="count on this Dask cluster ('local': start one with --workers "
                        "processes); needs pip install 'streamspec[dask]'")
    g.add_argument("--workers", type=int, metavar="N",
                   help="without --dask: count in up to N local processes (1: in this one, "
                        "the default of a one-pass learn). Processes are started only when "
                        f"they can be faster: {PARALLEL_MIN_BYTES >> 20} MiB of input or more, "
                        "in 2 chunks or more, with 2 CPUs or more not busy with other jobs "
                        "(load average); the log line event=backfilled says which path was "
                        "taken")
    g.add_argument("--chunk-mb", type=int, default=DEFAULT_CHUNK_BYTES >> 20, metavar="MB",
                   help=f"bytes per task, in MiB (default {DEFAULT_CHUNK_BYTES >> 20})")


def wants_backfill(args: argparse.Namespace) -> bool:
    """Whether the parsed arguments ask for a parallel backfill (``--dask`` or ``--workers``)."""
    return getattr(args, "dask", None) is not None or getattr(args, "workers", None) is not None


def run_backfill_from_args(args: argparse.Namespace, fmt: RecordFormat,
                           progress: Callable[[int, int], Any] | None = None) -> MomentAccumulator:
    """Run :func:`backfill` for parsed ``learn`` arguments (``files``, ``--dask``, ...).

    ``progress(done, total)``: bytes counted so far (see :func:`backfill_result`).
    :func:`backfill_result_from_args` gives the whole :class:`ChunkResult`.

    Raises
    ------
    ValueError
        For options a backfill cannot honour: ``--follow``, ``--state``, a mode other
        than ``sliding``, a bad ``--workers`` or ``--chunk-mb``.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> add_backfill_arguments(p)
    >>> args = p.parse_args(["--workers", "2"])
    >>> args.files, args.follow = ["x.txt"], True
    >>> run_backfill_from_args(args, RecordFormat())
    Traceback (most recent call last):
    ...
    ValueError: --dask/--workers read the files once: they cannot be combined with --follow
    """
    return backfill_result_from_args(args, fmt, progress).acc


def backfill_result_from_args(args: argparse.Namespace, fmt: RecordFormat,
                              progress: Callable[[int, int], Any] | None = None) -> ChunkResult:
    """:func:`run_backfill_from_args`, but the whole :class:`ChunkResult` (records, errors)."""
    for flag in ("follow", "state"):
        if getattr(args, flag, None):
            raise ValueError(f"--dask/--workers read the files once: they cannot be combined "
                             f"with --{flag}")
    mode = getattr(args, "mode", None) or "sliding"
    if mode != "sliding":
        raise ValueError(f"--dask/--workers count in sliding mode only, not --mode {mode}")
    if getattr(args, "max_symbols", None) is not None:
        raise ValueError("--dask/--workers count chunks independently: they cannot be combined "
                         "with --max-symbols (which symbols fit the cap depends on the order); "
                         "count serially")
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    chunk_mb = getattr(args, "chunk_mb", DEFAULT_CHUNK_BYTES >> 20)
    if chunk_mb < 1:
        raise ValueError(f"--chunk-mb must be at least 1, got {chunk_mb}")
    return backfill_result(args.files, fmt, scheduler=getattr(args, "dask", None),
                           n_workers=workers, chunk_bytes=chunk_mb << 20, progress=progress)

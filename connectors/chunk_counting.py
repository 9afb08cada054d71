"""Counting one chunk of a file into an accumulator (:func:`count_chunk`), exactly as a serial read.

Each chunk is parsed with the shared :class:`~connectors.records.RecordParser` and
counted into an accumulator built with ``track_heads=True``, so that the chunk
results can be joined in order (:func:`connectors.backfill.reduce_in_order`).
Plain ``chars`` and ``tokens`` input have vectorised paths that give the same
counts without building a record per symbol.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from connectors.file_chunks import Chunk
from connectors.records import WORD_PATTERN, MalformedRecord, RecordFormat, RecordParser
from streamspec.core.checkpoint import CheckpointError, encode_value
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["ChunkResult", "count_chunk", "new_chunk_accumulator"]

_BLOCK = 16 << 20  # bytes of a chunk read (and counted) at a time
_SCAN = 1 << 16  # symbols of a chars block whose distinct values are collected first
_TOKENS_PIECE = 1 << 20  # characters of tokens text split and counted at a time
_UNICODE_PIECE = 4 << 20  # bytes of non-ASCII chars text counted at a time
_SAMPLES = 20  # malformed lines of a result reported one by one (the others are counted)



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
    lines_by_path
        Lines read of each file.
    samples
        The first malformed lines, ``(path, line, reason, detail)``: ``line`` is
        1-based, counted from the first line of ``path`` in this result (add the
        lines of that file in the results before it).
    """

    acc: MomentAccumulator
    records: int = 0
    lines: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lines_by_path: dict[str, int] = field(default_factory=dict)
    samples: list[tuple[str, int, str, str]] = field(default_factory=list)

    def then(self, later: ChunkResult) -> ChunkResult:
        """This result followed by ``later`` (the next piece of the record sequence)."""
        errors = Counter(self.errors)
        errors.update(later.errors)
        lines = Counter(self.lines_by_path)
        lines.update(later.lines_by_path)
        shift = self.lines_by_path
        samples = self.samples + [(p, n + shift.get(p, 0), r, d) for p, n, r, d in later.samples]
        return ChunkResult(self.acc.concat(later.acc), self.records + later.records,
                           self.lines + later.lines, dict(errors), dict(lines),
                           samples[:_SAMPLES])


def new_chunk_accumulator(alphabet: Sequence[Hashable] | None, window: int = 1) -> MomentAccumulator:
    """The empty counts of a chunk: triples (``window`` 1, the default) or windows of L symbols
    (with the whole ``alphabet`` given, as ``learn`` does on its second pass). O(n)."""
    acc = MomentAccumulator(track_heads=True, window=window)
    if alphabet is not None:
        acc.alphabet.add_labels(alphabet)
    return acc


def count_chunk(chunk: Chunk, fmt: RecordFormat, alphabet: Sequence[Hashable] | None = None,
                window: int = 1) -> ChunkResult:
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
    window
        The window L of the counts: 1 (default) counts triples; L ≥ 2 the (2L+1)-grams
        (the labels' indices must stay below what L holds: give the whole alphabet).

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
    acc = new_chunk_accumulator(alphabet, window)
    result = ChunkResult(acc)
    errors: Counter[str] = Counter()
    parser = _parser_at(chunk, fmt)
    plain = not fmt.end_each_line and not fmt.int_symbols
    fast_chars = fmt.encoding == "chars" and plain and _encodable(fmt.key)
    fast_tokens = fmt.encoding in ("tokens", "words") and plain
    for block in _blocks(chunk):
        if fast_chars:
            # non-ASCII text takes 4 bytes a character and more: counted in smaller pieces
            pieces = [block] if block.isascii() else list(_pieces(block, _UNICODE_PIECE))
            counted = [_count_chars_block(piece, fmt, result.acc.symbols, window)
                       for piece in pieces[:1]]
            for piece in pieces[1:]:
                if counted[-1] is None:
                    break
                labels = counted[-1][0].symbols
                counted.append(_count_chars_block(piece, fmt, labels, window))
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
        result.lines += _count_lines(block, fmt, parser, result, errors, chunk.path)
    result.errors = dict(errors)
    result.lines_by_path = {chunk.path: result.lines}
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
                 errors: Counter[str], path: str) -> int:
    """Count the lines of ``block`` record by record (any encoding); the number of lines."""
    acc = result.acc
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the block ends with a line break: no line after it
    single = fmt.encoding in ("chars", "tokens", "words")
    # chars reads a line break as a space: the parser must see which lines had one
    breaks = fmt.encoding == "chars"
    last = len(lines) - 1 if not block.endswith(b"\n") else len(lines)
    for number, line in enumerate(lines):
        if breaks and number < last:
            line += b"\n"
        if _oversized(line, fmt):
            errors["oversized"] += 1
            if len(result.samples) < _SAMPLES:
                size = len(line) - line.endswith(b"\n") - line.rstrip(b"\n").endswith(b"\r")
                result.samples.append((path, result.lines + number + 1, "oversized",
                                       f"line of {size} bytes exceeds max_bytes={fmt.max_bytes}"))
            continue
        try:
            records = parser.parse(line)
        except MalformedRecord as exc:
            errors[exc.reason] += 1
            if len(result.samples) < _SAMPLES:
                result.samples.append((path, result.lines + number + 1, exc.reason, exc.detail))
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
    """``bytes.translate`` table and deletions turning ASCII chars input into its symbols.

    A line break becomes a space (deleted with the spaces when ``keep`` drops them);
    the breaks of blank lines must have been turned into "\r" first (:func:`_blank_breaks`).
    """
    table = bytearray(range(256))
    delete = bytearray(b"\r")
    for b in range(128):
        ch = chr(b)
        if fmt.lowercase:
            table[b] = ord(ch.lower())
        if ch not in "\r\n" and fmt.keep is not None and chr(table[b]) not in fmt.keep:
            delete.append(b)
    table[10] = 32
    if fmt.keep is not None and " " not in fmt.keep:
        delete.append(10)
    return bytes(table), bytes(delete)


def _blank_breaks(arr: np.ndarray, breaks: np.ndarray) -> np.ndarray:
    """Which of the line breaks at ``breaks`` (positions in ``arr``) end a blank line.

    A blank line holds nothing but "\r": its break is no space. ``arr`` holds bytes
    (or code points); the first line's start is the block's.
    """
    content = np.cumsum((arr != 10) & (arr != 13))
    before = np.concatenate(([0], content[breaks[:-1]])) if breaks.size else breaks
    return content[breaks] - before == 0


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
    """Count a ``tokens`` (or ``words``) block in one ``learn_many`` (symbols, lines), else None.

    The tokens of consecutive lines continue one sequence, and a line break is
    whitespace: splitting the whole block gives the tokens of its lines in order.
    None (nothing counted) when a line must go through the parser: an oversized or
    undecodable line, a byte-order mark. O(block) time.
    """
    ends = _line_ends(block, fmt)
    text = None if ends is None else _block_text(block)
    if text is None:
        return None
    words = fmt.encoding == "words"
    if fmt.lowercase and not words:  # per token or per block is the same: spaces separate
        text = text.lower()
    n_tokens, start = 0, 0
    while start < len(text):
        # pieces of whole lines: the tokens of a whole block at once take 10x the memory
        cut = text.find("\n", start + _TOKENS_PIECE)
        stop = len(text) if cut < 0 else cut + 1
        piece = text[start:stop]
        tokens = WORD_PATTERN.findall(piece) if words else piece.split()
        if words and fmt.lowercase:  # as the parser: found first, then lower-cased
            tokens = [t.lower() for t in tokens]
        if tokens:
            acc.learn_many(tokens, fmt.key)
        n_tokens += len(tokens)
        start = stop
    return n_tokens, int(ends.size)


def _count_chars_block(
    block: bytes, fmt: RecordFormat, labels: list, window: int = 1
) -> tuple[MomentAccumulator, int, int] | None:
    """Vectorised count of a ``chars`` block with no oversized line, else None.

    Gives what the parser and ``learn_one`` give: within a line "\\r" is never a
    symbol; a line break is a space except that of a blank line; lines are
    lower-cased then filtered by ``keep``; all lines continue one sequence of stream
    ``fmt.key``. The counts are taken with a fixed alphabet of the
    symbols present (fast), then relabelled: ``labels`` first, new characters in
    order of first appearance. ASCII blocks are mapped byte by byte; other UTF-8
    text by code point (an undecodable line or a byte-order mark: None, the parser's
    path).
    """
    ends = _line_ends(block, fmt)
    if ends is None:
        return None
    if not block.isascii():
        return _count_unicode_chars(block, fmt, labels, ends, window)
    table, delete = _chars_tables(fmt)
    arr = np.frombuffer(block, dtype=np.uint8)
    breaks = np.flatnonzero(arr == 10)
    blank = breaks[_blank_breaks(arr, breaks)]
    if blank.size:  # the breaks of blank lines add no space: make them "\r" (deleted)
        arr = arr.copy()
        arr[blank] = 13
        block = arr.tobytes()
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
    return _relabelled_counts(idx, new_labels, fmt.key, window), len(symbols), int(ends.size)


def _count_unicode_chars(
    block: bytes, fmt: RecordFormat, labels: list, ends: np.ndarray, window: int = 1
) -> tuple[MomentAccumulator, int, int] | None:
    """:func:`_count_chars_block` for UTF-8 text that is not ASCII: by code point."""
    text = _block_text(block)
    if text is None or (fmt.lowercase and "\u03a3" in text):
        return None  # capital sigma lower-cases by context: the parser's path, line by line
    if fmt.lowercase:
        text = text.lower()
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).copy()
    breaks = np.flatnonzero(cp == 10)
    blank = _blank_breaks(cp, breaks)
    cp[breaks[~blank]] = 32  # a line break is a space, except that of a blank line
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
    return _relabelled_counts(idx, new_labels, fmt.key, window), int(cp.size), int(ends.size)


def _relabelled_counts(idx: np.ndarray, new_labels: list, key: Hashable,
                       window: int = 1) -> MomentAccumulator:
    """Counts of the index sequence ``idx`` of stream ``key``, labelled ``new_labels`` (gram
    codes and tail digits do not depend on the alphabet's size: only the header changes)."""
    n = len(new_labels)
    fixed = MomentAccumulator(n_symbols=max(1, n), track_heads=True, window=window)
    fixed.learn_many(idx, key=key)
    _, _, header, arrays = fixed.to_checkpoint()
    header = dict(header, n_symbols=None, labels=[encode_value(s) for s in new_labels])
    if "c3" in arrays:  # a dense (version 1) accumulator
        arrays = dict(arrays, c3=arrays["c3"][:n, :n, :n])
    # sparse counts (version 2) are indexed like the labels already: only the header changes
    return MomentAccumulator.from_checkpoint(header, arrays)

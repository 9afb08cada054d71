"""The record every connector source produces, and the one parser they all share.

A source (a file being read or followed, a Kafka topic) turns its raw input into
:class:`Record` objects: a stream key, a symbol, an optional timestamp and an
end-of-sequence flag. How raw input maps to records is described by one
:class:`RecordFormat`, so a file and a Kafka topic holding the same data give
the same records.

Text lines (files) are parsed by :func:`parse_line` (or, for CSV files whose first
line may be a header, by a :class:`RecordParser` per file); Kafka messages by
:func:`parse_kafka`. Input that cannot be understood raises
:class:`MalformedRecord`, whose ``reason`` says why in one word, so that a source
can count, log or skip bad input without ever stopping on it.

Encodings of text lines
-----------------------
``"chars"``
    Every character of the line is one symbol, and the line break is read as a
    space (wrapped prose keeps its words apart), except the break of a blank line
    (a paragraph break adds nothing) and with ``end_each_line`` or ``int_symbols``
    (the break then ends the line's sequence, or is no integer). ``keep`` filters
    that space like any other.
``"tokens"``
    Every whitespace-separated token is one symbol.
``"words"``
    Words and punctuation: a run of letters and digits (with inner apostrophes or
    hyphens: ``don't``, ``well-known``) is one symbol, every other non-space
    character one symbol of its own (:data:`WORD_PATTERN`).
``"csv"``
    One record per row; the key, symbol, timestamp and end-flag columns are named
    by ``key_field``, ``symbol_field``, ``time_field`` and ``end_field`` (names
    resolved through a header row, or column positions). A row is one line: quoted
    fields holding line breaks are not supported.
``"jsonl"``
    One JSON object per line with the same field names (a bare JSON scalar is
    also accepted as a symbol of the default stream).

The types live in :mod:`connectors.record_format` (re-exported here), CSV rows in
:mod:`connectors.csv_records`, JSON values in :mod:`connectors.json_records`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence

from connectors.csv_records import csv_columns, csv_row, header_key, looks_like_header, record_from_row
from connectors.json_records import loads_json, records_from_json
from connectors.record_fields import text_symbol
from connectors.record_format import (
    DEFAULT_MAX_BYTES,
    ENCODINGS,
    REASONS,
    VALUE_FORMATS,
    MalformedRecord,
    Record,
    RecordFormat,
    format_from_options,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENCODINGS",
    "REASONS",
    "VALUE_FORMATS",
    "MalformedRecord",
    "Record",
    "RecordFormat",
    "RecordParser",
    "WORD_PATTERN",
    "format_from_options",
    "parse_kafka",
    "parse_line",
]


WORD_PATTERN = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]")
"""The ``words`` encoding's tokens: words (inner ``'``, ``’``, ``-`` kept) and single punctuation marks.

>>> WORD_PATTERN.findall("Don't stop, Mr. well-known--now!")
["Don't", 'stop', ',', 'Mr', '.', 'well-known', '-', '-', 'now', '!']
"""


def parse_line(
    line: str | bytes, fmt: RecordFormat, header: Sequence[str] | None = None
) -> list[Record]:
    """Records of one text line.

    Parameters
    ----------
    line
        The line, with or without its line break (``\\n`` or ``\\r\\n``); bytes are
        decoded as UTF-8. A leading byte-order mark is ignored.
    fmt
        The record format.
    header
        CSV only: the column names of the file's header row, which named fields are
        looked up in. Use :class:`RecordParser` to have it taken from the first line.

    Returns
    -------
    list of Record
        Empty for a blank line (and a ``chars`` line whose characters are all dropped).

    Raises
    ------
    MalformedRecord
        ``oversized``, ``undecodable``; ``bad-csv``, ``bad-json``, ``missing-field``,
        ``bad-field`` for CSV/JSON lines.

    Examples
    --------
    >>> [r.symbol for r in parse_line(b"ab c\\n", RecordFormat("chars"))]
    ['a', 'b', ' ', 'c', ' ']
    >>> [r.symbol for r in parse_line("ab c", RecordFormat("chars"))]  # no line break given
    ['a', 'b', ' ', 'c']
    >>> [r.symbol for r in parse_line("the  cat sat", RecordFormat("tokens"))]
    ['the', 'cat', 'sat']
    >>> [r.symbol for r in parse_line("the cat, sat.", RecordFormat("words"))]
    ['the', 'cat', ',', 'sat', '.']
    >>> parse_line('{"key": "u1", "symbol": 3, "ts": 1.5}', RecordFormat("jsonl"))
    [Record(key='u1', symbol=3, timestamp=1.5, end=False)]
    >>> parse_line("u1,x,,1", RecordFormat("csv"))
    [Record(key='u1', symbol='x', timestamp=None, end=True)]
    >>> parse_line(b"\\xff", RecordFormat("chars"))
    Traceback (most recent call last):
    ...
    connectors.record_format.MalformedRecord: undecodable: line is not valid UTF-8 (byte 0xff at 0)

    """
    text = _line_text(line, fmt.max_bytes)
    if fmt.encoding == "chars":
        return _parse_chars(text, fmt, _has_break(line))
    if fmt.encoding == "tokens":
        return _symbols_to_records(text.split(), fmt)
    if fmt.encoding == "words":
        return _symbols_to_records(WORD_PATTERN.findall(text), fmt)
    if fmt.encoding == "csv":
        row = csv_row(text, fmt.delimiter)
        if not row:
            return []
        return [record_from_row(row, csv_columns(fmt, header_key(header)), fmt)]
    # jsonl
    if not text.strip():
        return []
    return records_from_json(loads_json(text), fmt.key, fmt, None)


class RecordParser:
    """Parser of the lines of one file: like :func:`parse_line`, plus CSV headers.

    The first line given to the parser is checked for a CSV header (see
    ``RecordFormat.csv_header``); a header line gives no records and names the
    columns of the following lines. For other encodings this is just
    :func:`parse_line`.

    Parameters
    ----------
    fmt
        The record format.

    Examples
    --------
    >>> p = RecordParser(RecordFormat("csv"))
    >>> p.parse("ts,symbol,key")
    []
    >>> p.header
    ('ts', 'symbol', 'key')
    >>> p.parse("12,a,u7")
    [Record(key='u7', symbol='a', timestamp=12.0, end=False)]

    """

    def __init__(self, fmt: RecordFormat):
        self.fmt = fmt
        self.header: tuple[str, ...] | None = None
        self.started = False

    def reset(self) -> None:
        """Forget the header: the next line is again a file's first line."""
        self.header = None
        self.started = False

    def prime(self, first_line: str | bytes) -> None:
        """Take the header (if any) from a file's first line, without parsing records.

        Used when reading resumes after the first line, so that named CSV fields
        still resolve. A first line that cannot be decoded leaves no header.
        """
        self.started = True
        self.header = None
        if self.fmt.encoding == "csv" and self.fmt.csv_header is not False:
            try:
                self._take_header(first_line)
            except MalformedRecord:
                pass

    def parse(self, line: str | bytes) -> list[Record]:
        """Records of the next line (none for a header line)."""
        if not self.started:
            self.started = True
            if self.fmt.encoding == "csv" and self.fmt.csv_header is not False:
                if self._take_header(line):
                    return []
        return parse_line(line, self.fmt, self.header)

    def _take_header(self, line: str | bytes) -> bool:
        row = csv_row(_line_text(line, self.fmt.max_bytes), self.fmt.delimiter)
        cells = tuple(c.strip() for c in row)
        if self.fmt.csv_header is True or looks_like_header(cells, self.fmt):
            self.header = cells
            return True
        return False


def _line_text(line: str | bytes, max_bytes: int) -> str:
    """Decoded line without its line break, after the size check."""
    if isinstance(line, bytes | bytearray | memoryview):
        data = bytes(line)
        if data.endswith(b"\n"):
            data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
        if len(data) > max_bytes:
            raise MalformedRecord("oversized", f"line of {len(data)} bytes exceeds "
                                               f"max_bytes={max_bytes}")
        text = _decode(data, "line")
    elif isinstance(line, str):
        text = line[:-1] if line.endswith("\n") else line
        text = text[:-1] if text.endswith("\r") else text
        # a character is at least one UTF-8 byte: encode only when it could matter
        if len(text) > max_bytes or (
            4 * len(text) > max_bytes and len(text.encode("utf-8", "surrogatepass")) > max_bytes
        ):
            raise MalformedRecord("oversized", f"line exceeds max_bytes={max_bytes}")
    else:
        raise TypeError(f"a line must be str or bytes, got {type(line).__name__}")
    return text[1:] if text.startswith("\ufeff") else text


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        raise MalformedRecord(
            "undecodable", f"{what} is not valid UTF-8 (byte 0x{bad} at {exc.start})"
        ) from None


def _has_break(line: str | bytes) -> bool:
    return line[-1:] in ("\n", b"\n")


def _parse_chars(text: str, fmt: RecordFormat, broken: bool = False) -> list[Record]:
    """The symbols of a chars line; ``broken``: the line ended with a line break (a space)."""
    if fmt.lowercase:
        text = text.lower()
    keep = fmt.keep
    # line breaks inside a str line are never symbols (they separate lines)
    chars = [c for c in text if c not in "\r\n"]
    if broken and chars and not (fmt.end_each_line or fmt.int_symbols):
        chars.append(" ")  # wrapped prose: the break between two words is whitespace
    symbols = chars if keep is None else [c for c in chars if c in keep]
    return _records_of(symbols, fmt, already_lower=True)


def _symbols_to_records(tokens: Iterable[str], fmt: RecordFormat) -> list[Record]:
    return _records_of(list(tokens), fmt, already_lower=False)


def _records_of(symbols: list[str], fmt: RecordFormat, already_lower: bool) -> list[Record]:
    key = fmt.key
    out = [
        Record(key, text_symbol(s, fmt, lower=not already_lower, field="symbol"))
        for s in symbols
    ]
    if fmt.end_each_line and out:
        out.append(Record(key, None, end=True))
    return out


# ----------------------------------------------------------------------------- Kafka


def parse_kafka(
    key: bytes | str | None,
    value: bytes | None,
    fmt: RecordFormat,
    timestamp: float | None = None,
) -> list[Record]:
    """Records of one Kafka message.

    Parameters
    ----------
    key
        The message key: decoded as UTF-8, it is the stream key; ``None`` (or empty)
        gives ``fmt.key``.
    value
        The message value. With ``fmt.value_format == "text"`` it is one symbol (a
        trailing line break is dropped); with ``"json"`` a JSON scalar symbol or an
        object with the format's field names, whose key field overrides the message
        key.
    fmt
        The record format (``encoding`` is not used for Kafka).
    timestamp
        Seconds since the epoch to give the record when the value carries none
        (e.g. the message timestamp, which Kafka gives in milliseconds).

    Raises
    ------
    MalformedRecord
        ``empty`` (no value, an empty one or JSON null), ``oversized`` (longer than
        ``fmt.max_bytes``), ``undecodable``, ``bad-json``, ``missing-field``,
        ``bad-field``.

    Examples
    --------
    >>> parse_kafka(b"user-1", b"click", RecordFormat())
    [Record(key='user-1', symbol='click', timestamp=None, end=False)]
    >>> fmt = RecordFormat(value_format="json")
    >>> parse_kafka(None, b'{"key": "u2", "symbol": 4.0, "ts": 10}', fmt)
    [Record(key='u2', symbol=4, timestamp=10.0, end=False)]
    >>> parse_kafka(b"u3", b'{"end": true}', fmt)
    [Record(key='u3', symbol=None, timestamp=None, end=True)]
    >>> parse_kafka(b"u3", b"", fmt)
    Traceback (most recent call last):
    ...
    connectors.record_format.MalformedRecord: empty: message value is empty

    """
    if value is None:
        raise MalformedRecord("empty", "message has no value (a tombstone)")
    if isinstance(value, str):
        value = value.encode("utf-8")
    if len(value) == 0:
        raise MalformedRecord("empty", "message value is empty")
    if len(value) > fmt.max_bytes:
        raise MalformedRecord(
            "oversized", f"message value of {len(value)} bytes exceeds max_bytes={fmt.max_bytes}"
        )
    stream_key: Hashable
    if key is None or len(key) == 0:
        stream_key = fmt.key
    else:
        stream_key = key if isinstance(key, str) else _decode(bytes(key), "message key")
    text = _decode(bytes(value), "message value")
    if fmt.value_format == "json":
        return records_from_json(loads_json(text), stream_key, fmt, timestamp)
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    if not text:
        raise MalformedRecord("empty", "message value is only a line break")
    return [Record(stream_key, text_symbol(text, fmt), timestamp)]

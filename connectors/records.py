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
    Every character of the line is one symbol; the line break is not.
``"tokens"``
    Every whitespace-separated token is one symbol.
``"csv"``
    One record per row; the key, symbol, timestamp and end-flag columns are named
    by ``key_field``, ``symbol_field``, ``time_field`` and ``end_field`` (names
    resolved through a header row, or column positions). A row is one line: quoted
    fields holding line breaks are not supported.
``"jsonl"``
    One JSON object per line with the same field names (a bare JSON scalar is
    also accepted as a symbol of the default stream).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENCODINGS",
    "REASONS",
    "VALUE_FORMATS",
    "MalformedRecord",
    "Record",
    "RecordFormat",
    "RecordParser",
    "format_from_options",
    "parse_kafka",
    "parse_line",
]

ENCODINGS = ("chars", "tokens", "csv", "jsonl")
"""Encodings of text lines understood by :func:`parse_line`."""

VALUE_FORMATS = ("text", "json")
"""Formats of Kafka message values understood by :func:`parse_kafka`."""

REASONS = (
    "empty",  # a Kafka value that is absent, empty or JSON null
    "undecodable",  # bytes that are not UTF-8
    "bad-json",  # invalid JSON, or JSON of the wrong shape (a list)
    "bad-csv",  # a CSV row the csv module rejects (e.g. an unclosed quote)
    "missing-field",  # no symbol (and not an end marker), or the symbol column is unknown
    "bad-field",  # a field of the wrong type or value (bool symbol, bad timestamp, ...)
    "oversized",  # longer than ``max_bytes``
)
"""Every value of :attr:`MalformedRecord.reason`."""

DEFAULT_MAX_BYTES = 1 << 20

_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"", "0", "false", "f", "no", "n", "off"})


@dataclass(frozen=True, slots=True)
class Record:
    """One symbol of one stream, or the end of a sequence.

    Parameters
    ----------
    key
        The stream key (any hashable; ``None`` is the default stream).
    symbol
        The symbol, a hashable label (``str`` or ``int`` from the parsers). It may be
        ``None`` only for a pure end marker.
    timestamp
        Seconds since the epoch, when the input carried one.
    end
        True marks the end of the key's current sequence. A record may carry both a
        symbol and ``end=True`` (the symbol is then the sequence's last one).

    Examples
    --------
    >>> Record("user-1", "a")
    Record(key='user-1', symbol='a', timestamp=None, end=False)
    >>> Record("user-1", None, end=True).end
    True
    >>> Record("user-1", None)
    Traceback (most recent call last):
    ...
    ValueError: a record without a symbol must be an end marker (end=True)

    """

    key: Hashable
    symbol: Hashable
    timestamp: float | None = None
    end: bool = False

    def __post_init__(self) -> None:
        if self.symbol is None and not self.end:
            raise ValueError("a record without a symbol must be an end marker (end=True)")
        for name in ("key", "symbol"):
            try:
                hash(getattr(self, name))
            except TypeError:
                raise ValueError(f"record {name} {getattr(self, name)!r} is not hashable") from None


class MalformedRecord(ValueError):
    """Input that cannot be turned into records.

    Parameters
    ----------
    reason
        A short machine-readable cause, one of :data:`REASONS`.
    detail
        A human-readable description of the problem.

    Examples
    --------
    >>> err = MalformedRecord("bad-json", "invalid JSON: Expecting value at column 1")
    >>> err.reason
    'bad-json'
    >>> str(err)
    'bad-json: invalid JSON: Expecting value at column 1'
    >>> isinstance(err, ValueError)
    True

    """

    def __init__(self, reason: str, detail: str):
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}; expected one of {', '.join(REASONS)}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self):
        # the default would call MalformedRecord(message) and fail: keep both arguments
        return (type(self), (self.reason, self.detail))


Field = str | int | None


@dataclass(frozen=True)
class RecordFormat:
    """How raw lines and Kafka messages map to records.

    Parameters
    ----------
    encoding
        Encoding of text lines: one of :data:`ENCODINGS`.
    key
        The stream key of records whose input names none (every ``chars`` and
        ``tokens`` record; CSV/JSON rows without a key; Kafka messages without one).
    lowercase
        Lower-case every text symbol.
    keep
        ``chars`` only: the characters allowed as symbols (a string or a set of
        one-character strings); other characters are dropped. Applied after
        ``lowercase``.
    end_each_line
        ``chars`` and ``tokens``: follow the symbols of every non-blank line by an
        end marker, so that each line is a sequence of its own. By default all lines
        continue one sequence.
    int_symbols
        Convert text symbols to ``int`` (a symbol that is not an integer is then
        malformed, reason ``"bad-field"``). JSON integers are ints in any case.
    delimiter
        CSV field delimiter (one character; ``"\\t"`` for TSV).
    csv_header
        Whether the first line of a CSV file is a header: ``True``, ``False``, or
        ``None`` to detect it (it is a header when it contains the name of the
        symbol field, or, when the symbol field is given by position, the name of
        another named field).
    key_field, symbol_field, time_field, end_field
        Where CSV/JSON input keeps the key, symbol, timestamp and end flag: a name,
        or (CSV only) a 0-based column position; ``None`` (except for the symbol)
        means the input has no such field. Without a header row, named CSV fields
        are read in the order key, symbol, time, end (skipping ``None`` fields) when
        all fields are named; positions are used as given.
    value_format
        Kafka message values: ``"text"`` (the value is one symbol) or ``"json"``
        (a JSON scalar symbol, or an object with the fields above).
    max_bytes
        Longest accepted line or message value, in bytes (default 1 MiB).

    Raises
    ------
    ValueError
        For an unknown encoding or value format, a misplaced or invalid option.

    Examples
    --------
    >>> fmt = RecordFormat("chars", lowercase=True, keep="abcdefghijklmnopqrstuvwxyz")
    >>> [r.symbol for r in parse_line("Hi, Bob!", fmt)]
    ['h', 'i', 'b', 'o', 'b']
    >>> RecordFormat("xml")
    Traceback (most recent call last):
    ...
    ValueError: unknown encoding 'xml'; expected one of chars, tokens, csv, jsonl

    """

    encoding: str = "chars"
    key: Hashable = None
    lowercase: bool = False
    keep: frozenset[str] | str | None = None
    end_each_line: bool = False
    int_symbols: bool = False
    delimiter: str = ","
    csv_header: bool | None = None
    key_field: Field = "key"
    symbol_field: str | int = "symbol"
    time_field: Field = "ts"
    end_field: Field = "end"
    value_format: str = "text"
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(
                f"unknown encoding {self.encoding!r}; expected one of {', '.join(ENCODINGS)}"
            )
        if self.value_format not in VALUE_FORMATS:
            raise ValueError(
                f"unknown value_format {self.value_format!r}; "
                f"expected one of {', '.join(VALUE_FORMATS)}"
            )
        for name in ("lowercase", "end_each_line", "int_symbols"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.csv_header is not None and not isinstance(self.csv_header, bool):
            raise ValueError(f"csv_header must be True, False or None, got {self.csv_header!r}")
        try:
            hash(self.key)
        except TypeError:
            raise ValueError(f"key {self.key!r} is not hashable") from None
        object.__setattr__(self, "keep", _check_keep(self.keep, self.encoding))
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1 or (
            self.delimiter in '\r\n"'
        ):
            raise ValueError(
                f"delimiter must be one character other than a quote or line break, "
                f"got {self.delimiter!r}"
            )
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or (
            self.max_bytes < 1
        ):
            raise ValueError(f"max_bytes must be a positive integer, got {self.max_bytes!r}")
        self._check_fields()

    def _check_fields(self) -> None:
        if self.symbol_field is None:
            raise ValueError("symbol_field cannot be None: every record format needs a symbol")
        seen: dict[str | int, str] = {}
        for name, spec in self._field_specs():
            if spec is None:
                continue
            if isinstance(spec, bool) or not isinstance(spec, str | int):
                raise ValueError(f"{name} must be a field name, a column position or None, "
                                 f"got {spec!r}")
            if isinstance(spec, int) and spec < 0:
                raise ValueError(f"{name} must be a non-negative column position, got {spec}")
            if isinstance(spec, str) and not spec:
                raise ValueError(f"{name} must not be an empty name")
            if isinstance(spec, int) and self.encoding == "jsonl":
                raise ValueError(f"{name}={spec}: JSON fields are named, not numbered")
            if spec in seen:
                raise ValueError(f"{name} and {seen[spec]} both name the field {spec!r}")
            seen[spec] = name

    def _field_specs(self) -> tuple[tuple[str, Field], ...]:
        return (
            ("key_field", self.key_field),
            ("symbol_field", self.symbol_field),
            ("time_field", self.time_field),
            ("end_field", self.end_field),
        )


def _check_keep(keep: Any, encoding: str) -> frozenset[str] | None:
    if keep is None:
        return None
    if encoding != "chars":
        raise ValueError(f"keep applies only to the chars encoding, not to {encoding!r}")
    chars = frozenset(keep)
    if not chars:
        raise ValueError("keep must allow at least one character")
    bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
    if bad:
        raise ValueError(f"keep must hold single characters, got {bad[0]!r}")
    return chars


# ----------------------------------------------------------------------------- options


_BOOL_OPTIONS = ("lowercase", "end_each_line", "int_symbols")
_FIELD_OPTIONS = ("key_field", "symbol_field", "time_field", "end_field")


def format_from_options(**options: Any) -> RecordFormat:
    """Build a :class:`RecordFormat` from command-line style options.

    Option names may use dashes or underscores. Options that are ``None`` are left
    at their defaults (an unset command-line flag). Strings are converted: booleans
    from ``true/false/yes/no/1/0``, ``csv_header`` also from ``auto``, integers for
    ``max_bytes``, field specs that are digits to column positions and ``""`` or
    ``none`` to no field, and the delimiter ``tab`` or ``\\t`` to a tab.

    Raises
    ------
    ValueError
        For an unknown option name or a value that cannot be converted.

    Examples
    --------
    >>> fmt = format_from_options(encoding="csv", symbol_field="1", key_field="0",
    ...                           time_field="", end_field="none", csv_header="false",
    ...                           delimiter="tab", lowercase=None)
    >>> fmt.symbol_field, fmt.key_field, fmt.time_field, fmt.delimiter, fmt.csv_header
    (1, 0, None, '\\t', False)
    >>> format_from_options(encodng="csv")
    Traceback (most recent call last):
    ...
    ValueError: unknown record format option 'encodng'

    """
    known = {f.name for f in fields(RecordFormat)}
    kwargs: dict[str, Any] = {}
    for raw_name, value in options.items():
        name = raw_name.replace("-", "_")
        if name not in known:
            raise ValueError(f"unknown record format option {raw_name!r}")
        if value is None:
            continue
        kwargs[name] = _convert_option(name, value)
    return RecordFormat(**kwargs)


def _convert_option(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if name in _BOOL_OPTIONS:
        return _option_flag(name, text)
    if name == "csv_header":
        return None if text.lower() == "auto" else _option_flag(name, text)
    if name == "max_bytes":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"max_bytes must be an integer, got {value!r}") from None
    if name in _FIELD_OPTIONS:
        if text.lower() in ("", "none"):
            if name == "symbol_field":
                raise ValueError("symbol_field cannot be empty")
            return None
        return int(text) if text.isdigit() else text
    if name == "delimiter":
        return "\t" if value in ("tab", "\\t") else value
    return value


def _option_flag(name: str, text: str) -> bool:
    low = text.lower()
    if low in _TRUE and low:
        return True
    if low in _FALSE and low:
        return False
    raise ValueError(f"{name} must be true or false, got {text!r}")


# ----------------------------------------------------------------------------- lines


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
    ['a', 'b', ' ', 'c']
    >>> [r.symbol for r in parse_line("the  cat sat", RecordFormat("tokens"))]
    ['the', 'cat', 'sat']
    >>> parse_line('{"key": "u1", "symbol": 3, "ts": 1.5}', RecordFormat("jsonl"))
    [Record(key='u1', symbol=3, timestamp=1.5, end=False)]
    >>> parse_line("u1,x,,1", RecordFormat("csv"))
    [Record(key='u1', symbol='x', timestamp=None, end=True)]
    >>> parse_line(b"\\xff", RecordFormat("chars"))
    Traceback (most recent call last):
    ...
    connectors.records.MalformedRecord: undecodable: line is not valid UTF-8 (byte 0xff at 0)

    """
    text = _line_text(line, fmt.max_bytes)
    if fmt.encoding == "chars":
        return _parse_chars(text, fmt)
    if fmt.encoding == "tokens":
        return _symbols_to_records(text.split(), fmt)
    if fmt.encoding == "csv":
        row = _csv_row(text, fmt.delimiter)
        if not row:
            return []
        return [_record_from_row(row, _csv_columns(fmt, _header_key(header)), fmt)]
    # jsonl
    if not text.strip():
        return []
    return _records_from_json(_loads(text), fmt.key, fmt, None)


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
        row = _csv_row(_line_text(line, self.fmt.max_bytes), self.fmt.delimiter)
        cells = tuple(c.strip() for c in row)
        if self.fmt.csv_header is True or _looks_like_header(cells, self.fmt):
            self.header = cells
            return True
        return False


def _looks_like_header(cells: Sequence[str], fmt: RecordFormat) -> bool:
    if isinstance(fmt.symbol_field, str):
        return fmt.symbol_field in cells
    names = [s for _, s in fmt._field_specs() if isinstance(s, str)]
    return any(n in cells for n in names)


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


def _parse_chars(text: str, fmt: RecordFormat) -> list[Record]:
    if fmt.lowercase:
        text = text.lower()
    keep = fmt.keep
    # line breaks inside a str line are never symbols (they separate lines)
    symbols = [c for c in text if c not in "\r\n" and (keep is None or c in keep)]
    return _records_of(symbols, fmt, already_lower=True)


def _symbols_to_records(tokens: Iterable[str], fmt: RecordFormat) -> list[Record]:
    return _records_of(list(tokens), fmt, already_lower=False)


def _records_of(symbols: list[str], fmt: RecordFormat, already_lower: bool) -> list[Record]:
    key = fmt.key
    out = [
        Record(key, _text_symbol(s, fmt, lower=not already_lower, field="symbol"))
        for s in symbols
    ]
    if fmt.end_each_line and out:
        out.append(Record(key, None, end=True))
    return out


def _text_symbol(text: str, fmt: RecordFormat, lower: bool = True, field: str = "symbol"):
    if lower and fmt.lowercase:
        text = text.lower()
    if fmt.int_symbols:
        try:
            return int(text)
        except ValueError:
            raise MalformedRecord(
                "bad-field", f"{field} {text!r} is not an integer (int_symbols is set)"
            ) from None
    return text


# ----------------------------------------------------------------------------- CSV


def _csv_row(text: str, delimiter: str) -> list[str]:
    try:
        rows = list(csv.reader([text], delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise MalformedRecord("bad-csv", f"invalid CSV row: {exc}") from None
    return rows[0] if rows else []


def _header_key(header: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if header is None else tuple(h.strip() for h in header)


@lru_cache(maxsize=128)
def _csv_columns(
    fmt: RecordFormat, header: tuple[str, ...] | None
) -> tuple[int | None, int | None, int | None, int | None]:
    """Column index of the key, symbol, time and end fields (None: not in the input)."""
    specs = [spec for _, spec in fmt._field_specs()]
    if header is None:
        named = [s for s in specs if s is not None]
        if all(isinstance(s, str) for s in named):
            # no header and all fields named: the conventional order key, symbol, time, end
            order = {s: i for i, s in enumerate(named)}
            return tuple(None if s is None else order[s] for s in specs)  # type: ignore[return-value]
        return tuple(s if isinstance(s, int) else None for s in specs)  # type: ignore[return-value]
    index = {name: i for i, name in reversed(list(enumerate(header)))}
    return tuple(  # type: ignore[return-value]
        s if isinstance(s, int) else (None if s is None else index.get(s)) for s in specs
    )


def _record_from_row(
    row: list[str], columns: tuple[int | None, ...], fmt: RecordFormat
) -> Record:
    def cell(i: int | None) -> str:
        return row[i].strip() if i is not None and i < len(row) else ""

    ki, si, ti, ei = columns
    end = _flag(cell(ei), "end") if ei is not None else False
    raw_symbol = cell(si)
    if si is None and not end:
        raise MalformedRecord(
            "missing-field", f"no column {fmt.symbol_field!r} for the symbol in this CSV input"
        )
    if raw_symbol:
        symbol = _text_symbol(raw_symbol, fmt)
    elif end:
        symbol = None
    else:
        raise MalformedRecord("missing-field", f"CSV row has no symbol in column {si}")
    key = cell(ki) or fmt.key
    ts = _timestamp(cell(ti)) if cell(ti) else None
    return Record(key, symbol, ts, end)


# ----------------------------------------------------------------------------- JSON


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise MalformedRecord("bad-json", f"invalid JSON: {exc}") from None
    except ValueError as exc:  # NaN / Infinity, which JSON does not have
        raise MalformedRecord("bad-json", f"invalid JSON: {exc}") from None
    except RecursionError:
        raise MalformedRecord("bad-json", "invalid JSON: nested too deeply") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _records_from_json(
    obj: Any, default_key: Hashable, fmt: RecordFormat, default_ts: float | None
) -> list[Record]:
    if isinstance(obj, dict):
        return [_record_from_object(obj, default_key, fmt, default_ts)]
    if obj is None:
        raise MalformedRecord("empty", "JSON value is null")
    if isinstance(obj, list):
        raise MalformedRecord("bad-json", "expected a JSON object or a scalar symbol, got a list")
    return [Record(default_key, _json_symbol(obj, fmt), default_ts)]


def _get(obj: dict, spec: Field) -> Any:
    return None if spec is None else obj.get(str(spec))


def _record_from_object(
    obj: dict, default_key: Hashable, fmt: RecordFormat, default_ts: float | None
) -> Record:
    end = _flag(_get(obj, fmt.end_field), "end")
    raw = _get(obj, fmt.symbol_field)
    if raw is None or raw == "":
        if not end:
            raise MalformedRecord(
                "missing-field", f"JSON object has no {fmt.symbol_field!r} field"
            )
        symbol = None
    else:
        symbol = _json_symbol(raw, fmt)
    key = _json_key(_get(obj, fmt.key_field), default_key)
    raw_ts = _get(obj, fmt.time_field)
    ts = default_ts if raw_ts is None or raw_ts == "" else _timestamp(raw_ts)
    return Record(key, symbol, ts, end)


def _json_symbol(value: Any, fmt: RecordFormat) -> Hashable:
    if isinstance(value, bool):
        raise MalformedRecord("bad-field", f"symbol {value!r} is a boolean, not a label")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        # 3.0 and 3 are the same JSON number; a fractional one is no discrete label
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise MalformedRecord("bad-field", f"symbol {value!r} is not an integer or a string")
    if isinstance(value, str):
        if not value:
            raise MalformedRecord("missing-field", "symbol is an empty string")
        return _text_symbol(value, fmt)
    raise MalformedRecord(
        "bad-field", f"symbol must be a string or an integer, got {type(value).__name__}"
    )


def _json_key(value: Any, default: Hashable) -> Hashable:
    if value is None or value == "":
        return default
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise MalformedRecord(
        "bad-field", f"key must be a string or an integer, got {type(value).__name__}"
    )


def _timestamp(value: Any) -> float:
    """Seconds since the epoch from a number, a numeric string or an ISO 8601 string."""
    if isinstance(value, bool):
        raise MalformedRecord("bad-field", f"timestamp {value!r} is a boolean")
    if isinstance(value, int | float):
        ts = float(value)
    elif isinstance(value, str):
        try:
            ts = float(value)
        except ValueError:
            try:
                when = datetime.fromisoformat(value)
            except ValueError:
                raise MalformedRecord(
                    "bad-field", f"timestamp {value!r} is neither a number nor ISO 8601"
                ) from None
            if when.tzinfo is None:  # a naive time is taken as UTC, never as local time
                when = when.replace(tzinfo=UTC)
            ts = when.timestamp()
    else:
        raise MalformedRecord("bad-field", f"timestamp must be a number, got "
                                           f"{type(value).__name__}")
    if not math.isfinite(ts):
        raise MalformedRecord("bad-field", f"timestamp {value!r} is not finite")
    return ts


def _flag(value: Any, field: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise MalformedRecord("bad-field", f"{field} flag {value!r} is not true/false/1/0")


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
    connectors.records.MalformedRecord: empty: message value is empty

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
        return _records_from_json(_loads(text), stream_key, fmt, timestamp)
    text = text[:-1] if text.endswith("\n") else text
    text = text[:-1] if text.endswith("\r") else text
    if not text:
        raise MalformedRecord("empty", "message value is only a line break")
    return [Record(stream_key, _text_symbol(text, fmt), timestamp)]

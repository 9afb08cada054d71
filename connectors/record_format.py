"""What every connector source produces: :class:`Record`, :class:`MalformedRecord`, :class:`RecordFormat`.

How raw input maps to records is described by one :class:`RecordFormat` (see
:mod:`connectors.records` for the encodings and the parsers);
:func:`format_from_options` builds one from command-line style options.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "DEFAULT_MAX_BYTES", "ENCODINGS", "FALSE_WORDS", "REASONS", "TRUE_WORDS", "VALUE_FORMATS",
    "Field", "MalformedRecord", "Record", "RecordFormat", "format_from_options",
]

ENCODINGS = ("chars", "tokens", "words", "csv", "jsonl")
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

TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y", "on"})
FALSE_WORDS = frozenset({"", "0", "false", "f", "no", "n", "off"})


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
        ``tokens``/``words`` record; CSV/JSON rows without a key; Kafka messages without one).
    lowercase
        Lower-case every text symbol.
    keep
        ``chars`` only: the characters allowed as symbols (a string or a set of
        one-character strings); other characters are dropped. Applied after
        ``lowercase``.
    end_each_line
        ``chars``, ``tokens`` and ``words``: follow the symbols of every non-blank line by an
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
    >>> from connectors.records import parse_line
    >>> fmt = RecordFormat("chars", lowercase=True, keep="abcdefghijklmnopqrstuvwxyz")
    >>> [r.symbol for r in parse_line("Hi, Bob!", fmt)]
    ['h', 'i', 'b', 'o', 'b']
    >>> RecordFormat("xml")
    Traceback (most recent call last):
    ...
    ValueError: unknown encoding 'xml'; expected one of chars, tokens, words, csv, jsonl

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
        for name, spec in self.field_specs():
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

    def field_specs(self) -> tuple[tuple[str, Field], ...]:
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
    if low in TRUE_WORDS and low:
        return True
    if low in FALSE_WORDS and low:
        return False
    raise ValueError(f"{name} must be true or false, got {text!r}")


# ----------------------------------------------------------------------------- lines

"""Field values of records: a symbol from text, a timestamp, an end-of-sequence flag.

Shared by the CSV, JSON and text parsers; every bad value raises
:class:`~connectors.record_format.MalformedRecord` (``bad-field``).

Examples
--------
>>> from connectors.record_format import RecordFormat
>>> text_symbol("A", RecordFormat(lowercase=True)), parse_timestamp("1970-01-01T00:00:02")
('a', 2.0)
>>> parse_flag("yes", "end")
True
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from connectors.record_format import FALSE_WORDS, TRUE_WORDS, MalformedRecord, RecordFormat

__all__ = ["parse_flag", "parse_timestamp", "text_symbol"]


def text_symbol(text: str, fmt: RecordFormat, lower: bool = True, field: str = "symbol"):
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


def parse_timestamp(value: Any) -> float:
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


def parse_flag(value: Any, field: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in TRUE_WORDS:
            return True
        if low in FALSE_WORDS:
            return False
    raise MalformedRecord("bad-field", f"{field} flag {value!r} is not true/false/1/0")

"""JSON values as records: an object with the format's field names, or a bare scalar symbol."""

from __future__ import annotations

import json
import math
from collections.abc import Hashable
from typing import Any

from connectors.record_fields import parse_flag, parse_timestamp, text_symbol
from connectors.record_format import Field, MalformedRecord, Record, RecordFormat

__all__ = ["loads_json", "records_from_json"]


def loads_json(text: str) -> Any:
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


def records_from_json(
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
    end = parse_flag(_get(obj, fmt.end_field), "end")
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
    ts = default_ts if raw_ts is None or raw_ts == "" else parse_timestamp(raw_ts)
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
        return text_symbol(value, fmt)
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

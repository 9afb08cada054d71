"""CSV rows as records: header detection, column lookup, one record per row."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from functools import lru_cache

from connectors.record_fields import parse_flag, parse_timestamp, text_symbol
from connectors.record_format import MalformedRecord, Record, RecordFormat

__all__ = ["csv_columns", "csv_row", "header_key", "looks_like_header", "record_from_row"]


def looks_like_header(cells: Sequence[str], fmt: RecordFormat) -> bool:
    if isinstance(fmt.symbol_field, str):
        return fmt.symbol_field in cells
    names = [s for _, s in fmt.field_specs() if isinstance(s, str)]
    return any(n in cells for n in names)


def csv_row(text: str, delimiter: str) -> list[str]:
    try:
        rows = list(csv.reader([text], delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise MalformedRecord("bad-csv", f"invalid CSV row: {exc}") from None
    return rows[0] if rows else []


def header_key(header: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if header is None else tuple(h.strip() for h in header)


@lru_cache(maxsize=128)
def csv_columns(
    fmt: RecordFormat, header: tuple[str, ...] | None
) -> tuple[int | None, int | None, int | None, int | None]:
    """Column index of the key, symbol, time and end fields (None: not in the input)."""
    specs = [spec for _, spec in fmt.field_specs()]
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


def record_from_row(
    row: list[str], columns: tuple[int | None, ...], fmt: RecordFormat
) -> Record:
    def cell(i: int | None) -> str:
        return row[i].strip() if i is not None and i < len(row) else ""

    ki, si, ti, ei = columns
    end = parse_flag(cell(ei), "end") if ei is not None else False
    raw_symbol = cell(si)
    if si is None and not end:
        raise MalformedRecord(
            "missing-field", f"no column {fmt.symbol_field!r} for the symbol in this CSV input"
        )
    if raw_symbol:
        symbol = text_symbol(raw_symbol, fmt)
    elif end:
        symbol = None
    else:
        raise MalformedRecord("missing-field", f"CSV row has no symbol in column {si}")
    key = cell(ki) or fmt.key
    ts = parse_timestamp(cell(ti)) if cell(ti) else None
    return Record(key, symbol, ts, end)

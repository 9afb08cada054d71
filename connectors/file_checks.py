"""Checks of input files before anything is counted: no directory, no binary, named fields present.

:func:`check_files` raises :class:`InputError` for input that cannot be what the
record format says; :func:`looks_like` names a known binary format by its first bytes.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Mapping

from connectors.file_reader import is_gzip, normalise_paths
from connectors.records import MalformedRecord, RecordFormat, RecordParser, parse_line

__all__ = ["InputError", "check_files", "looks_like"]

# bytes of a file's beginning that check_files looks at
_SNIFF = 64 << 10


class InputError(ValueError):
    """A file that is not text input of the given record format (see :func:`check_files`)."""


_SIGNATURES = (  # what a refused file most likely is, by its first bytes
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"%PDF", "a PDF document"), (b"\x7fELF", "an executable (ELF)"),
    (b"PK\x03\x04", "a zip archive (a streamspec checkpoint?)"),
    (b"\xff\xfe", "UTF-16 text"), (b"\xfe\xff", "UTF-16 text"),
)


def looks_like(head: bytes) -> str:
    """``", it looks like <kind>"`` for the first bytes of a known binary format, else ``""``.

    >>> looks_like(b"\\x89PNG\\r\\n")
    ', it looks like a PNG image'
    """
    for magic, what in _SIGNATURES:
        if head.startswith(magic):
            return f", it looks like {what}"
    return ""


def check_files(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    fmt: RecordFormat,
    given_fields: Mapping[str, str | int] | None = None,
    *,
    missing_ok: bool = False,
) -> None:
    """Refuse files that cannot be input of ``fmt``, before anything is read from them.

    Looks at the first 64 KiB of every file (decompressed for ``.gz``):

    * a directory, or (unless ``missing_ok``) a path that does not exist;
    * a binary file: a NUL byte, or half the lines looked at not UTF-8 (fewer are
      skipped as malformed lines when read, with a warning);
    * ``csv``: a header row (see ``RecordFormat.csv_header``) without the symbol
      field or one of ``fields``; a first row that holds another field's name but
      not the symbol field's (a header lacking it); a first row that is no header
      while ``fields`` names a column (names need a header);
    * ``jsonl``: a first JSON object without the symbol field (and not an end
      marker) or without one of ``fields``.

    Later malformed lines are not looked for: a source skips and counts them.

    Parameters
    ----------
    paths
        The files.
    fmt
        Their record format.
    given_fields
        Fields the user named explicitly, by option name (e.g.
        ``{"--key-field": "user"}``); only names (``str``) are checked.
    missing_ok
        Accept paths that do not exist (yet), e.g. files to follow.

    Raises
    ------
    InputError
        A ``ValueError`` naming the file and the problem (and, for a missing
        field, the fields the file has).
    FileNotFoundError
        For a missing file, unless ``missing_ok``.

    Notes
    -----
    Cost: O(64 KiB) read per file.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.csv").write_text("user,page\\nu1,home\\n")
    >>> fmt = RecordFormat("csv", symbol_field="item")
    >>> check_files([folder / "a.csv"], fmt, {"--symbol-field": "item"})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    connectors.file_checks.InputError: ...has no field 'item' (--symbol-field); its fields are: user, page...
    >>> _ = (folder / "b.bin").write_bytes(b"\\x00\\x01\\x02")
    >>> check_files([folder / "b.bin"], RecordFormat("chars"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    connectors.file_checks.InputError: ...b.bin: not a text file (a NUL byte at offset 0)
    >>> import shutil; shutil.rmtree(folder)

    """
    named = {opt: f for opt, f in (given_fields or {}).items() if isinstance(f, str)}
    for path in normalise_paths(paths):
        if os.path.isdir(path):
            raise InputError(f"{path}: is a directory, not a file (give the files in it, "
                             f"e.g. {os.path.join(path, '*')})")
        if not os.path.exists(path):
            if missing_ok:
                continue
            raise FileNotFoundError(f"no such file: {path}")
        try:
            with (gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")) as fh:
                head = fh.read(_SNIFF)
                complete = not fh.read(1)
        except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
            raise InputError(f"{path}: cannot be read ({exc})") from None
        _check_text(path, head, complete)
        if fmt.encoding == "csv":
            _check_csv_header(path, head, fmt, named)
        elif fmt.encoding == "jsonl":
            _check_json_fields(path, head, fmt, named)


def _check_text(path: str, head: bytes, complete: bool) -> None:
    """Refuse a file that is no UTF-8 text: a NUL byte, or half its first lines not UTF-8.

    A few lines that are not UTF-8 among text are no reason to refuse the file: they
    are skipped and reported as any malformed line is, wherever they are
    (:mod:`connectors.malformed`).
    """
    nul = head.find(b"\x00")
    if nul >= 0:
        raise InputError(f"{path}: not a text file (a NUL byte at offset {nul}"
                         f"{looks_like(head)})")
    if not complete:  # a character cut by the end of the block is no error: drop that line
        cut = head.rfind(b"\n")
        head = head[:cut + 1] if cut >= 0 else head[:max(0, len(head) - 3)]
    lines = head.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    bad, first = 0, None
    offset = 0
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad += 1
            if first is None:
                first = (line[exc.start:exc.start + 1].hex(), offset + exc.start)
        offset += len(line) + 1
    if first is not None and (2 * bad >= len(lines) or looks_like(head)):
        raise InputError(
            f"{path}: not UTF-8 text (byte 0x{first[0]} at offset {first[1]}, {bad} of the "
            f"first {len(lines)} lines{looks_like(head)}); convert it, e.g. "
            f"iconv -f latin1 -t utf-8")


def _first_line(head: bytes) -> bytes:
    return head.split(b"\n", 1)[0]


def _options_of(fmt: RecordFormat, named: Mapping[str, str]) -> dict[str, str]:
    """Field name -> the option that names it (explicit options first, then the symbol's)."""
    out = {f: opt for opt, f in named.items()}
    if isinstance(fmt.symbol_field, str):
        out.setdefault(fmt.symbol_field, "--symbol-field")
    return out


def _check_csv_header(path: str, head: bytes, fmt: RecordFormat, named: Mapping[str, str]) -> None:
    if fmt.csv_header is False or not head:
        return
    parser = RecordParser(fmt)
    parser.prime(_first_line(head))  # takes the header as a source would, if it is one
    if parser.header is not None:
        cells = parser.header
        missing = [(f, opt) for f, opt in _options_of(fmt, named).items() if f not in cells]
        if missing:
            f, opt = missing[0]
            raise InputError(f"{path}: the CSV header has no field {f!r} ({opt}); its fields "
                             f"are: {', '.join(cells)}")
        return
    cells = tuple(c.strip() for c in _first_line(head).decode("utf-8", "replace")
                  .rstrip("\r").split(fmt.delimiter))
    others = [s for _, s in fmt.field_specs() if isinstance(s, str) and s != fmt.symbol_field]
    if any(s in cells for s in others) or named:
        # a first row naming other fields is a header lacking the symbol field; and a field
        # given by name can only be found through a header
        if "--symbol-field" in named or isinstance(fmt.symbol_field, str):
            f, opt = named.get("--symbol-field", fmt.symbol_field), "--symbol-field"
        else:  # the symbol by position: one of the named fields is what is missing
            opt = next(iter(named))
            f = named[opt]
        raise InputError(
            f"{path}: the CSV header has no field {f!r} ({opt}); its fields are: "
            f"{', '.join(cells)} (without a header row, give columns by position, "
            f"e.g. --symbol-field 1)")


def _check_json_fields(path: str, head: bytes, fmt: RecordFormat, named: Mapping[str, str]) -> None:
    import json

    for number, line in enumerate(head.split(b"\n")[:-1] or [head], start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            return  # a malformed first line: skipped and counted like any other
        if not isinstance(obj, dict):
            return  # a scalar symbol of the default stream
        try:
            ends = any(r.end for r in parse_line(line, fmt))
        except MalformedRecord:
            ends = False
        wanted = _options_of(fmt, named)
        if ends:  # a pure end marker need not carry the symbol
            wanted = {f: opt for f, opt in wanted.items() if opt != "--symbol-field"}
        missing = [(f, opt) for f, opt in wanted.items() if f not in obj]
        if missing:
            f, opt = missing[0]
            raise InputError(f"{path}, line {number}: the JSON object has no field {f!r} "
                             f"({opt}); its fields are: {', '.join(map(str, obj))}")
        return

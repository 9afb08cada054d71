"""Loaders for the real data sets (Alice, Splice, Bach chorales, Dodgers).

The data live outside the package, by default in a folder ``shared/data`` beside the
repository (see :func:`default_data_path`), one sub-folder per data set, each with a
``SOURCE.md`` describing origin and format. Every loader accepts ``path=`` pointing either
at the data set's own folder or at the data root.

Parsing is done by small pure functions that take the file's text and return sequences
(``strip_gutenberg``, ``parse_splice``, ``parse_chorales``, ``parse_dodgers`` ...); the
``load_*`` functions only find and read the files and call them.

Examples
--------
>>> letters_only(strip_gutenberg("\\ufeffhead\\r\\n*** START OF X ***\\r\\nAb, c!\\r\\n"
...                              "*** END OF X ***\\r\\nfoot"))
'abc'
>>> parse_splice("EI, A-1,  ACGTN\\nN,  B-2,  acgta\\n")
['ACGTA']
>>> parse_chorales("(1 ((st 8) (pitch 67)) ((st 12) (pitch 69)))")
[[67, 69]]
>>> parse_dodgers("4/10/2005 0:00,-1\\n4/10/2005 0:05,3\\n4/10/2005 0:10,9\\n"
...               "4/10/2005 0:15,5\\n", n_bins=2)
[[0, 1, 1]]
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

__all__ = [
    "default_data_path",
    "strip_gutenberg",
    "letters_only",
    "load_alice",
    "load_alice_letters",
    "parse_splice_records",
    "parse_splice",
    "load_splice",
    "tokenize_sexpr",
    "parse_sexpr",
    "parse_chorale_events",
    "parse_chorales",
    "load_chorales",
    "parse_dodgers_rows",
    "parse_dodgers_counts",
    "quantile_edges",
    "discretise_counts",
    "split_at_missing",
    "parse_dodgers",
    "load_dodgers_counts",
    "load_dodgers",
    "parse_dodgers_events",
    "load_dodgers_events",
]

ENV_VAR = "STREAMSPEC_DATA"

ALICE_DIR = "alice"
ALICE_FILES = ("11-0.txt", "pg11.txt")
SPLICE_DIR = "splice"
SPLICE_FILE = "splice.data"
CHORALES_DIR = "bach-chorales"
CHORALES_FILE = "chorales.lisp"
DODGERS_DIR = "dodgers"
DODGERS_FILE = "Dodgers.data"
DODGERS_EVENTS_FILE = "Dodgers.events"

DNA = frozenset("ACGT")


# ---------------------------------------------------------------------------
# Locating files
# ---------------------------------------------------------------------------


def default_data_path() -> Path | None:
    """Return the default data root, or ``None`` if none is found.

    The environment variable ``STREAMSPEC_DATA`` wins if it is set (and non-empty); it is
    returned as given, even if the folder does not exist, so that a wrong setting gives a
    clear "file not found" error instead of silently using another copy. Otherwise the
    folders ``<ancestor>/shared/data`` and ``<ancestor>/../shared/data`` are tried for each
    ancestor of the current working directory, then for each ancestor of this module's
    folder (for a checkout at ``/work/main`` this finds ``/work/shared/data``).

    Returns
    -------
    pathlib.Path or None
        The data root, or ``None`` if the variable is unset and no folder was found.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    starts = [Path.cwd(), Path(__file__).resolve().parent]
    for start in starts:
        for ancestor in (start, *start.parents):
            for candidate in (ancestor / "shared" / "data", ancestor.parent / "shared" / "data"):
                if candidate.is_dir():
                    return candidate
    return None


def _missing(expected: str, where: Path | None) -> FileNotFoundError:
    where_text = "no data folder was found" if where is None else f"in {where}"
    return FileNotFoundError(
        f"expected the data file {expected} {where_text}; put the data there, or point to "
        f"its folder with path=... or the {ENV_VAR} environment variable"
    )


def _dataset_dir(path: str | os.PathLike[str] | None, folder: str) -> Path | None:
    """Resolve ``path`` (data root or data-set folder, default: the data root)."""
    root = default_data_path() if path is None else Path(path)
    if root is None:
        return None
    sub = root / folder
    return sub if sub.is_dir() else root


def _find_file(path: str | os.PathLike[str] | None, folder: str, names: Sequence[str]) -> Path:
    """Return the first of ``names`` existing in the data-set folder, else raise."""
    directory = _dataset_dir(path, folder)
    if directory is not None:
        for name in names:
            candidate = directory / name
            if candidate.is_file():
                return candidate
    expected = " or ".join(f"{folder}/{name}" if directory is None else name for name in names)
    raise _missing(expected, directory)


# ---------------------------------------------------------------------------
# Alice
# ---------------------------------------------------------------------------


def strip_gutenberg(text: str) -> str:
    """Return the body of a Project Gutenberg text.

    A leading byte-order mark is removed and CRLF / CR line ends become LF. The body is the
    text after the line starting with ``*** START OF`` and before the line starting with
    ``*** END OF``, its lines joined with LF (no newline after the last one). A missing
    START marker means the text starts at the top, a missing END marker that it runs to
    the end (so a file with no header, such as the current ``11-0.txt``, is returned whole).

    Parameters
    ----------
    text
        The file's text.

    Returns
    -------
    str
        The body, with LF line ends.

    Examples
    --------
    >>> strip_gutenberg("\\ufeffTitle\\r\\n*** START OF THE BOOK ***\\r\\nHello.\\r\\n"
    ...                 "*** END OF THE BOOK ***\\r\\nLicence")
    'Hello.'
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    start = 0
    end = len(lines)
    for i, line in enumerate(lines):
        if line.lstrip().upper().startswith("*** START OF"):
            start = i + 1
            break
    for i in range(start, len(lines)):
        if lines[i].lstrip().upper().startswith("*** END OF"):
            end = i
            break
    return "\n".join(lines[start:end])


def letters_only(text: str) -> str:
    """Lower-case ``text`` and keep only the 26 ASCII letters ``a``-``z``.

    Everything else (spaces, punctuation, digits, accented letters such as ``ù``) is dropped.

    Examples
    --------
    >>> letters_only("Alice’s 1st Tea-Party, où?")
    'alicesstteapartyo'
    """
    return "".join(c for c in text.lower() if "a" <= c <= "z")


def load_alice_letters(
    path: str | os.PathLike[str] | None = None, *, filename: str | None = None
) -> str:
    """Return Alice in Wonderland as one string of the letters ``a``-``z``.

    Parameters
    ----------
    path
        The ``alice`` folder or the data root; default :func:`default_data_path`.
    filename
        The file to read. By default ``11-0.txt`` is used if present, else ``pg11.txt``.
        Note that ``pg11.txt`` (the 2011 edition) is the one SOURCE.md describes as the
        edition current when the paper was written; the two editions differ slightly.

    Returns
    -------
    str
        The header-stripped body, lower-cased, letters only (108,083 letters for
        ``11-0.txt``, 107,785 for ``pg11.txt``).

    Raises
    ------
    FileNotFoundError
        If the file is not found.
    """
    names = ALICE_FILES if filename is None else (filename,)
    file = _find_file(path, ALICE_DIR, names)
    text = file.read_bytes().decode("utf-8-sig")
    return letters_only(strip_gutenberg(text))


def load_alice(
    path: str | os.PathLike[str] | None = None, *, filename: str | None = None
) -> list[str]:
    """Return Alice in Wonderland as a list holding one sequence: a string of letters.

    Same as ``[load_alice_letters(path, filename=filename)]``, so that, like the other
    loaders, it returns a list of sequences (here the symbols are the characters
    ``a``-``z``, 26 in all).
    """
    return [load_alice_letters(path, filename=filename)]


# ---------------------------------------------------------------------------
# Splice
# ---------------------------------------------------------------------------


def parse_splice_records(text: str) -> list[tuple[str, str, str]]:
    """Parse ``splice.data`` into ``(class, name, sequence)`` records.

    Each non-blank line holds three comma-separated fields padded with spaces; all
    whitespace is removed from the fields and the sequence is upper-cased.

    Raises
    ------
    ValueError
        If a non-blank line does not have exactly three fields.

    Examples
    --------
    >>> parse_splice_records("EI,   ATRINS-DONOR-521,    CCAG\\n")
    [('EI', 'ATRINS-DONOR-521', 'CCAG')]
    """
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split(",")
        if len(fields) != 3:
            raise ValueError(
                f"splice line {lineno}: expected 3 comma-separated fields, got {len(fields)}"
            )
        label, name, seq = ("".join(f.split()) for f in fields)
        records.append((label, name, seq.upper()))
    return records


def parse_splice(text: str, ambiguous: Literal["drop", "keep"] = "drop") -> list[str]:
    """Return the DNA sequences of ``splice.data`` text, one string per record.

    Parameters
    ----------
    text
        The file's text.
    ambiguous
        ``"drop"`` (default) drops every sequence holding a letter other than A, C, G, T
        (ambiguity codes such as D, N, S, R); ``"keep"`` keeps them unchanged.

    Returns
    -------
    list of str
        Upper-case sequences in file order.

    Examples
    --------
    >>> text = "EI, X, ACGT\\nN, Y, ACNT\\n"
    >>> parse_splice(text), parse_splice(text, ambiguous="keep")
    (['ACGT'], ['ACGT', 'ACNT'])
    """
    if ambiguous not in ("drop", "keep"):
        raise ValueError(f"ambiguous must be 'drop' or 'keep', got {ambiguous!r}")
    seqs = [seq for _, _, seq in parse_splice_records(text)]
    if ambiguous == "drop":
        seqs = [s for s in seqs if set(s) <= DNA]
    return seqs


def load_splice(
    path: str | os.PathLike[str] | None = None,
    ambiguous: Literal["drop", "keep"] = "drop",
) -> list[str]:
    """Load the UCI splice-junction sequences.

    Parameters
    ----------
    path
        The ``splice`` folder or the data root; default :func:`default_data_path`.
    ambiguous
        See :func:`parse_splice`.

    Returns
    -------
    list of str
        3,190 sequences of length 60 with ``ambiguous="keep"``; 3,175 with the default
        ``"drop"`` (15 sequences contain N, D, S or R).
    """
    file = _find_file(path, SPLICE_DIR, (SPLICE_FILE,))
    return parse_splice(file.read_text(encoding="ascii"), ambiguous=ambiguous)


# ---------------------------------------------------------------------------
# Bach chorales (Lisp s-expressions)
# ---------------------------------------------------------------------------

Atom = int | float | str
SExpr = Atom | list["SExpr"]


def tokenize_sexpr(text: str) -> list[str]:
    """Split Lisp text into the tokens ``(``, ``)`` and atoms.

    Whitespace separates atoms; ``;`` starts a comment running to the end of the line.

    Examples
    --------
    >>> tokenize_sexpr("(a (b 12)) ; note\\n(c)")
    ['(', 'a', '(', 'b', '12', ')', ')', '(', 'c', ')']
    """
    tokens: list[str] = []
    atom: list[str] = []
    in_comment = False
    for ch in text:
        if in_comment:
            if ch == "\n":
                in_comment = False
            continue
        if ch in "();" or ch.isspace():
            if atom:
                tokens.append("".join(atom))
                atom = []
            if ch == ";":
                in_comment = True
            elif ch in "()":
                tokens.append(ch)
        else:
            atom.append(ch)
    if atom:
        tokens.append("".join(atom))
    return tokens


def _atom(token: str) -> Atom:
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return token


def parse_sexpr(text: str) -> list[SExpr]:
    """Parse Lisp text into nested Python lists, one item per top-level expression.

    Integers and floats become numbers; other atoms stay strings.

    Raises
    ------
    ValueError
        On an unmatched ``(`` or ``)``.

    Examples
    --------
    >>> parse_sexpr("(1 ((st 8) (pitch 67))) x")
    [[1, [['st', 8], ['pitch', 67]]], 'x']
    >>> parse_sexpr("(a (b)")
    Traceback (most recent call last):
    ...
    ValueError: unbalanced s-expression: 1 unclosed '('
    """
    stack: list[list[SExpr]] = [[]]
    for token in tokenize_sexpr(text):
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced s-expression: unexpected ')'")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(_atom(token))
    if len(stack) != 1:
        raise ValueError(f"unbalanced s-expression: {len(stack) - 1} unclosed '('")
    return stack[0]


def _event_dict(event: SExpr, where: str) -> dict[str, Atom]:
    if not isinstance(event, list):
        raise ValueError(f"{where}: expected an event list, got {event!r}")
    fields: dict[str, Atom] = {}
    for pair in event:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"{where}: expected a (name value) pair, got {pair!r}")
        value = pair[1]
        if isinstance(value, list):
            raise ValueError(f"{where}: expected an atom as the value of {pair[0]}")
        fields[pair[0]] = value
    return fields


def parse_chorale_events(text: str) -> list[tuple[Atom, list[dict[str, Atom]]]]:
    """Parse ``chorales.lisp`` text into ``(id, events)`` per chorale.

    Each top-level expression is ``(ID EVENT EVENT ...)`` and each event a list of
    ``(name value)`` pairs such as ``(pitch 67)``; each event becomes a dict.

    Examples
    --------
    >>> parse_chorale_events("(7 ((st 8) (pitch 67) (fermata 0)))")
    [(7, [{'st': 8, 'pitch': 67, 'fermata': 0}])]
    """
    chorales = []
    for n, expr in enumerate(parse_sexpr(text), start=1):
        if not isinstance(expr, list) or not expr or isinstance(expr[0], list):
            raise ValueError(f"chorale {n}: expected (ID event ...), got {expr!r:.60}")
        ident, *events = expr
        where = f"chorale {ident}"
        chorales.append((ident, [_event_dict(e, where) for e in events]))
    return chorales


def parse_chorales(text: str, field: str = "pitch") -> list[list[int]]:
    """Return, per chorale, the values of ``field`` of its events.

    Parameters
    ----------
    text
        ``chorales.lisp`` text.
    field
        One of ``st``, ``pitch``, ``dur``, ``keysig``, ``timesig``, ``fermata``.

    Raises
    ------
    KeyError
        If an event lacks ``field``.

    Examples
    --------
    >>> parse_chorales("(1 ((pitch 60) (dur 4)) ((pitch 62) (dur 2)))", field="dur")
    [[4, 2]]
    """
    result = []
    for ident, events in parse_chorale_events(text):
        values = []
        for i, event in enumerate(events):
            if field not in event:
                raise KeyError(f"chorale {ident}, event {i}: no field {field!r}")
            values.append(event[field])
        result.append(values)
    return result


def load_chorales(
    path: str | os.PathLike[str] | None = None, field: str = "pitch"
) -> list[list[int]]:
    """Load the UCI Bach chorales, one list of ``field`` values per chorale.

    Parameters
    ----------
    path
        The ``bach-chorales`` folder or the data root; default :func:`default_data_path`.
    field
        See :func:`parse_chorales`.

    Returns
    -------
    list of list of int
        100 chorales, 4,693 events in all (26 to 86 per chorale); for ``pitch``,
        20 distinct MIDI values 60-79 (not remapped to 0..19).
    """
    file = _find_file(path, CHORALES_DIR, (CHORALES_FILE,))
    return parse_chorales(file.read_text(encoding="ascii"), field=field)


# ---------------------------------------------------------------------------
# Dodgers
# ---------------------------------------------------------------------------


def parse_dodgers_rows(text: str) -> list[tuple[_dt.datetime, int]]:
    """Parse ``Dodgers.data`` rows ``M/D/YYYY H:MM,count`` into ``(datetime, count)``.

    A count of ``-1`` means missing and is kept as ``-1``.

    Examples
    --------
    >>> parse_dodgers_rows("4/10/2005 0:05,-1\\n")
    [(datetime.datetime(2005, 4, 10, 0, 5), -1)]
    """
    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            stamp, count = line.rsplit(",", 1)
            rows.append((_dt.datetime.strptime(stamp.strip(), "%m/%d/%Y %H:%M"), int(count)))
        except ValueError as exc:
            raise ValueError(f"Dodgers.data line {lineno}: cannot parse {line!r}") from exc
    return rows


def parse_dodgers_counts(text: str) -> list[int]:
    """Return the counts of ``Dodgers.data`` text, ``-1`` for missing.

    Examples
    --------
    >>> parse_dodgers_counts("4/10/2005 0:00,-1\\n4/10/2005 0:05,7")
    [-1, 7]
    """
    return [count for _, count in parse_dodgers_rows(text)]


def quantile_edges(counts: Sequence[int], n_bins: int = 10) -> np.ndarray:
    """Return the ``n_bins - 1`` inner bin edges: quantiles ``k / n_bins`` of the counts.

    Missing values (negative counts) are ignored. Quantiles use numpy's default linear
    interpolation. On the Dodgers data with 10 bins the edges are the deciles
    3, 6, 11, 17, 22, 26, 29, 33, 38.

    Examples
    --------
    >>> quantile_edges([-1, 0, 1, 2, 3], n_bins=2)
    array([1.5])
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    values = np.asarray(counts, dtype=float)
    values = values[values >= 0]
    if values.size == 0:
        raise ValueError("no non-missing counts to compute quantile bins from")
    return np.quantile(values, np.arange(1, n_bins) / n_bins)


def discretise_counts(counts: Sequence[int], edges: np.ndarray) -> list[int]:
    """Map counts to bins ``0 .. len(edges)``, ``-1`` staying ``-1`` (missing).

    Bin ``k`` holds counts ``c`` with ``edges[k-1] <= c < edges[k]`` (a count equal to an
    edge goes to the upper bin). With heavily tied data, equal edges leave bins empty.

    Examples
    --------
    >>> discretise_counts([-1, 0, 3, 5, 9], np.array([3.0, 6.0]))
    [-1, 0, 1, 1, 2]
    """
    arr = np.asarray(counts)
    labels = np.searchsorted(np.asarray(edges), arr, side="right")
    return [int(b) if c >= 0 else -1 for c, b in zip(arr.tolist(), labels.tolist(), strict=True)]


def split_at_missing(symbols: Sequence[int], min_length: int = 3) -> list[list[int]]:
    """Split at missing values (negative) into maximal runs; drop runs shorter than ``min_length``.

    Examples
    --------
    >>> split_at_missing([-1, 1, 2, 3, -1, 4, 5, -1, 6, 7, 8, 9])
    [[1, 2, 3], [6, 7, 8, 9]]
    """
    runs = []
    for present, group in itertools.groupby(symbols, key=lambda s: s >= 0):
        if present:
            run = list(group)
            if len(run) >= min_length:
                runs.append(run)
    return runs


def parse_dodgers(text: str, n_bins: int = 10, min_length: int = 3) -> list[list[int]]:
    """Return binned Dodgers counts, split into sequences at missing values.

    The counts are cut into ``n_bins`` quantile bins computed from the non-missing counts of
    ``text`` (:func:`quantile_edges`, :func:`discretise_counts`), then split into the maximal
    runs of non-missing values, dropping runs shorter than ``min_length``
    (:func:`split_at_missing`).

    Examples
    --------
    >>> parse_dodgers("1/1/2005 0:00,1\\n1/1/2005 0:05,8\\n1/1/2005 0:10,-1\\n"
    ...               "1/1/2005 0:15,2\\n1/1/2005 0:20,9\\n1/1/2005 0:25,4", n_bins=2,
    ...               min_length=2)
    [[0, 1], [0, 1, 1]]
    """
    counts = parse_dodgers_counts(text)
    labels = discretise_counts(counts, quantile_edges(counts, n_bins))
    return split_at_missing(labels, min_length=min_length)


def load_dodgers_counts(path: str | os.PathLike[str] | None = None) -> list[int]:
    """Load the raw Dodgers counts (50,400 values, 2,903 of them ``-1`` = missing)."""
    file = _find_file(path, DODGERS_DIR, (DODGERS_FILE,))
    return parse_dodgers_counts(file.read_text(encoding="ascii"))


def load_dodgers(path: str | os.PathLike[str] | None = None, n_bins: int = 10) -> list[list[int]]:
    """Load the Dodgers loop-sensor counts as binned sequences.

    Parameters
    ----------
    path
        The ``dodgers`` folder or the data root; default :func:`default_data_path`.
    n_bins
        Number of quantile bins, computed from all non-missing counts of the file
        (see :func:`parse_dodgers`); symbols are ``0 .. n_bins-1``.

    Returns
    -------
    list of list of int
        With 10 bins: 34 sequences (of the 54 runs between missing values, 20 are
        shorter than 3), 47,472 symbols in all.
    """
    file = _find_file(path, DODGERS_DIR, (DODGERS_FILE,))
    return parse_dodgers(file.read_text(encoding="ascii"), n_bins=n_bins)


def parse_dodgers_events(text: str) -> list[dict[str, object]]:
    """Parse ``Dodgers.events`` text (already decoded) into one dict per game.

    Each line is ``MM/DD/YY,HH:MM:SS,HH:MM:SS,attendance,away team,W/L score``; trailing
    whitespace, including the no-break space (U+00A0) ending each line, is stripped.

    Returns
    -------
    list of dict
        Keys ``date`` (:class:`datetime.date`), ``begin`` and ``end``
        (:class:`datetime.time`), ``attendance`` (int), ``away_team`` (str),
        ``result`` (``"W"`` or ``"L"``, for the Dodgers) and ``score`` (str such as
        ``"9-8"``, winner's runs first).

    Examples
    --------
    >>> e = parse_dodgers_events("04/12/05,13:10:00,16:23:00,55892,San Francisco,W 9-8\\xa0")
    >>> e[0]["date"], e[0]["away_team"], e[0]["result"], e[0]["score"]
    (datetime.date(2005, 4, 12), 'San Francisco', 'W', '9-8')
    """
    events = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6:
            raise ValueError(
                f"Dodgers.events line {lineno}: expected 6 comma-separated fields, "
                f"got {len(fields)}"
            )
        date, begin, end, attendance, team, outcome = fields
        result, _, score = outcome.partition(" ")
        try:
            events.append(
                {
                    "date": _dt.datetime.strptime(date, "%m/%d/%y").date(),
                    "begin": _dt.time.fromisoformat(begin),
                    "end": _dt.time.fromisoformat(end),
                    "attendance": int(attendance),
                    "away_team": team,
                    "result": result,
                    "score": score.strip(),
                }
            )
        except ValueError as exc:
            raise ValueError(f"Dodgers.events line {lineno}: cannot parse {line!r}") from exc
    return events


def load_dodgers_events(path: str | os.PathLike[str] | None = None) -> list[dict[str, object]]:
    """Load ``Dodgers.events``, read as Latin-1: 81 games, see :func:`parse_dodgers_events`."""
    file = _find_file(path, DODGERS_DIR, (DODGERS_EVENTS_FILE,))
    return parse_dodgers_events(file.read_text(encoding="latin-1"))

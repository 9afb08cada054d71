"""Where the real data sets are, and the loaders of the text ones (Alice, Splice).

The loaders of the other data sets use :func:`find_data_file` from here:
:mod:`streamspec.experiments.datasets_chorales` (Bach chorales) and
:mod:`streamspec.experiments.datasets_dodgers` (Dodgers loop sensor).

The data live outside the package, by default in a folder ``shared/data`` beside the
repository (see :func:`default_data_path`), one sub-folder per data set, each with a
``SOURCE.md`` describing origin and format. Every loader accepts ``path=`` pointing either
at the data set's own folder or at the data root.

Parsing is done by small pure functions that take the file's text and return sequences
(``strip_gutenberg``, ``parse_splice`` here, ``parse_chorales``, ``parse_dodgers`` in the
sibling modules); the ``load_*`` functions only find and read the files and call them.

Examples
--------
>>> letters_only(strip_gutenberg("\\ufeffhead\\r\\n*** START OF X ***\\r\\nAb, c!\\r\\n"
...                              "*** END OF X ***\\r\\nfoot"))
'abc'
>>> parse_splice("EI, A-1,  ACGTN\\nN,  B-2,  acgta\\n")
['ACGTA']
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "ENV_VAR",
    "default_data_path",
    "find_data_file",
    "strip_gutenberg",
    "letters_only",
    "load_alice",
    "load_alice_letters",
    "parse_splice_records",
    "parse_splice",
    "load_splice",
]

ENV_VAR = "STREAMSPEC_DATA"

ALICE_DIR = "alice"
ALICE_FILES = ("11-0.txt", "pg11.txt")
SPLICE_DIR = "splice"
SPLICE_FILE = "splice.data"

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
    """The error of a data file not found: one sentence, where it was looked for and what to do.

    >>> print(_missing("x.txt", None))  # doctest: +NORMALIZE_WHITESPACE
    the data file x.txt is needed, but no data folder was found: set the STREAMSPEC_DATA
    environment variable to the folder holding it (or pass path=...)
    >>> print(_missing("x.txt", Path("/data")))  # doctest: +NORMALIZE_WHITESPACE
    the data file x.txt is needed, but it is not in /data: put it there, or point to its
    folder with path=... or the STREAMSPEC_DATA environment variable
    """
    if where is None:
        return FileNotFoundError(
            f"the data file {expected} is needed, but no data folder was found: set the "
            f"{ENV_VAR} environment variable to the folder holding it (or pass path=...)")
    return FileNotFoundError(
        f"the data file {expected} is needed, but it is not in {where}: put it there, or point "
        f"to its folder with path=... or the {ENV_VAR} environment variable")


def _dataset_dir(path: str | os.PathLike[str] | None, folder: str) -> Path | None:
    """Resolve ``path`` (data root or data-set folder, default: the data root)."""
    root = default_data_path() if path is None else Path(path)
    if root is None:
        return None
    sub = root / folder
    return sub if sub.is_dir() else root


def find_data_file(path: str | os.PathLike[str] | None, folder: str, names: Sequence[str]) -> Path:
    """Return the first of ``names`` existing in the data-set folder, else raise.

    Parameters
    ----------
    path
        The data set's folder or the data root; ``None`` for :func:`default_data_path`.
    folder
        The data set's sub-folder of the data root (``"splice"``...).
    names
        Candidate file names, the preferred first.

    Returns
    -------
    pathlib.Path
        The file found.

    Raises
    ------
    FileNotFoundError
        Naming the file(s) expected and where they were looked for.
    """
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
    file = find_data_file(path, ALICE_DIR, names)
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
    file = find_data_file(path, SPLICE_DIR, (SPLICE_FILE,))
    return parse_splice(file.read_text(encoding="ascii"), ambiguous=ambiguous)

"""Loader of the Dodgers loop-sensor data: car counts binned into symbols, and game events.

``Dodgers.data`` holds one count per five minutes (``-1`` when missing); the
counts become symbols through quantile bins and sequences through the runs between
missing values. ``Dodgers.events`` lists the games.

Examples
--------
>>> parse_dodgers("4/10/2005 0:00,-1\\n4/10/2005 0:05,3\\n4/10/2005 0:10,9\\n"
...               "4/10/2005 0:15,5\\n", n_bins=2)
[[0, 1, 1]]
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os
from collections.abc import Sequence

import numpy as np

from streamspec.experiments.datasets import find_data_file

__all__ = [
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

DODGERS_DIR = "dodgers"
DODGERS_FILE = "Dodgers.data"
DODGERS_EVENTS_FILE = "Dodgers.events"



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
    file = find_data_file(path, DODGERS_DIR, (DODGERS_FILE,))
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
    file = find_data_file(path, DODGERS_DIR, (DODGERS_FILE,))
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
    file = find_data_file(path, DODGERS_DIR, (DODGERS_EVENTS_FILE,))
    return parse_dodgers_events(file.read_text(encoding="latin-1"))

"""Loader of the UCI Bach chorales: a small reader of Lisp s-expressions and its parsers.

``chorales.lisp`` holds one s-expression per chorale, ``(ID EVENT EVENT ...)``, each
event a list of ``(name value)`` pairs. :func:`parse_sexpr` reads the Lisp,
:func:`parse_chorale_events` the events, :func:`parse_chorales` one field of them;
:func:`load_chorales` finds and reads the file.

Examples
--------
>>> parse_chorales("(1 ((st 8) (pitch 67)) ((st 12) (pitch 69)))")
[[67, 69]]
"""

from __future__ import annotations

import os

from streamspec.experiments.datasets import find_data_file

__all__ = [
    "tokenize_sexpr",
    "parse_sexpr",
    "parse_chorale_events",
    "parse_chorales",
    "load_chorales",
]

CHORALES_DIR = "bach-chorales"
CHORALES_FILE = "chorales.lisp"


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
    file = find_data_file(path, CHORALES_DIR, (CHORALES_FILE,))
    return parse_chorales(file.read_text(encoding="ascii"), field=field)

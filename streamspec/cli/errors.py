"""The one format of every command's errors: ``streamspec COMMAND: error: MESSAGE``.

A command raises :class:`CommandError` (or lets a ``ValueError``/``OSError`` through);
:func:`streamspec.cli.main` prints it as one line on stderr and returns its exit
status. Nothing else in the CLI writes an error line itself, so that every error
reads alike (``tests/cli/test_errors.py`` checks it, and that no module prints to
stderr by itself).
"""

from __future__ import annotations

import re

__all__ = ["CommandError", "cli_spelling", "error_line"]


class CommandError(Exception):
    """An error of a command: its one-line message and exit status (1, 2 for bad usage).

    Examples
    --------
    >>> err = CommandError("no such file: x.txt", status=2)
    >>> str(err), err.status
    ('no such file: x.txt', 2)
    """

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def error_line(command: str | None, message: str) -> str:
    """The error line of ``command`` (``None``: the bare ``streamspec``), first line only.

    >>> error_line("learn", "no triple counted\\nmore")
    'streamspec learn: error: no triple counted'
    """
    name = f"streamspec {command}" if command else "streamspec"
    text = message.strip().splitlines()[0] if message.strip() else "failed"
    return f"{name}: error: {text}"


_SETTING = re.compile(r"\b(formulation|weighting|penalty|rank|max_sweeps|max_symbols|"
                      r"n_states)=('?)([^',;)\s]*)\2")
_FLAGS = {"max_sweeps": "sweeps", "n_states": "states"}


def cli_spelling(message: str) -> str:
    """An estimator's message with its settings spelled as the CLI's flags.

    >>> cli_spelling("use formulation='projected' (linear in n)")
    'use --formulation projected (linear in n)'
    >>> cli_spelling("weighting='exact' couples all symbols, max_sweeps=3")
    '--weighting exact couples all symbols, --sweeps 3'
    """
    def flag(m: re.Match) -> str:
        name = _FLAGS.get(m.group(1), m.group(1)).replace("_", "-")
        return f"--{name} {m.group(3)}"

    return _SETTING.sub(flag, message)

"""The ``streamspec`` command line.

Each subcommand lives in its own module and contributes a ``register(subparsers)``
function that adds its parser and sets ``func``; this file only lists them.
This is the only place where ``streamspec`` reaches into ``connectors``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable

# (module, attribute): each is a function register(subparsers) -> None
_COMMANDS = [
    ("streamspec.experiments.paper", "register"),
    ("streamspec.experiments.demo", "register"),
    ("streamspec.cli.commands", "register"),
]


_DESCRIPTION = "Learn hidden Markov models from streams with spectral M-estimation."


def build_parser(registers: Iterable[Callable] | None = None,
                 description: str | None = _DESCRIPTION) -> argparse.ArgumentParser:
    """The ``streamspec`` parser with the subcommands of ``registers`` (default: all of them).

    ``registers`` are ``register(subparsers)`` functions; by default those named in
    ``_COMMANDS``, imported here.
    """
    parser = argparse.ArgumentParser(prog="streamspec", description=description)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if registers is None:
        registers = [getattr(importlib.import_module(module), attr) for module, attr in _COMMANDS]
    for register in registers:
        register(sub)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand (with ``parser``, default the whole CLI).

    Without a subcommand, prints the help and returns 2.
    """
    if parser is None:
        parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

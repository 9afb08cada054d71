"""The ``streamspec`` command line.

Each subcommand lives in its own module and contributes a ``register(subparsers)``
function that adds its parser and sets ``func``; this file only lists them.
This is the only place where ``streamspec`` reaches into ``connectors``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (module, attribute): each is a function register(subparsers) -> None
_COMMANDS = [
    ("streamspec.paper", "register"),
    ("streamspec.demo", "register"),
    ("streamspec.daemon_cli", "register"),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamspec",
        description="Learn hidden Markov models from streams with spectral M-estimation.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module, attr in _COMMANDS:
        getattr(importlib.import_module(module), attr)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

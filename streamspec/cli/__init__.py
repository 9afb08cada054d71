"""The ``streamspec`` command line.

Each subcommand lives in its own module and contributes a ``register(subparsers)``
function that adds its parser and sets ``func``; this file only lists them, adds
the options every subcommand shares (``--log-level``, ``-q/--quiet``) and turns
errors into one line on stderr and a non-zero exit status (never a traceback,
unless ``--log-level DEBUG`` asks for it).
This package is the only place where ``streamspec`` reaches into ``connectors``, and
only when a command runs: building the parser (``streamspec --help``) imports
neither ``connectors`` nor kafka-python.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterable

from streamspec.cli.errors import CommandError, error_line

# (module, attribute): each is a function register(subparsers) -> None
_COMMANDS = [
    ("streamspec.experiments.paper", "register"),
    ("streamspec.cli.demo", "register"),
    ("streamspec.cli.broker", "register"),
    ("streamspec.cli.consume", "register"),
    ("streamspec.cli.learn", "register"),
    ("streamspec.cli.predict", "register"),
    ("streamspec.cli.inspect", "register"),
    ("streamspec.cli.decode", "register"),
]


_DESCRIPTION = "Learn hidden Markov models from streams with spectral M-estimation."
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def version() -> str:
    """The installed streamspec version (package metadata, else ``streamspec.__version__``)."""
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        return dist_version("streamspec")
    except (ImportError, PackageNotFoundError):
        from streamspec import __version__

        return __version__


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; expected one of {', '.join(LOG_LEVELS)}")
    return level


def _add_common_options(p: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``-q/--quiet`` on a subcommand that does not define them itself."""
    have = p._option_string_actions
    g = p.add_argument_group("logging")
    if "--log-level" not in have:
        g.add_argument("--log-level", type=_log_level, default="INFO", metavar="LEVEL",
                       help="log messages from this level up: DEBUG (also the traceback of "
                            "an error), INFO (default), WARNING, ERROR")
    if "-q" not in have and "--quiet" not in have:
        g.add_argument("-q", "--quiet", action="store_true",
                       help="only warnings and errors (as --log-level WARNING; no progress bar)")


def build_parser(registers: Iterable[Callable] | None = None,
                 description: str | None = _DESCRIPTION) -> argparse.ArgumentParser:
    """The ``streamspec`` parser with the subcommands of ``registers`` (default: all of them).

    ``registers`` are ``register(subparsers)`` functions; by default those named in
    ``_COMMANDS``, imported here. Every subcommand gets ``--log-level`` and
    ``-q/--quiet``; the parser itself ``--version``.
    """
    parser = argparse.ArgumentParser(prog="streamspec", description=description)
    parser.add_argument("--version", action="version", version=f"streamspec {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if registers is None:
        registers = [getattr(importlib.import_module(module), attr) for module, attr in _COMMANDS]
    for register in registers:
        register(sub)
    for p in sub.choices.values():
        _add_common_options(p)
    return parser


def configure_logging(level: str = "INFO") -> None:
    """Log to stderr from ``level`` up (the root logger's level is set on every call).

    kafka-python logs every failed reconnection: its own logger stays quiet below
    DEBUG, the daemon logs one line per event itself.
    """
    value = getattr(logging, str(level).upper(), logging.INFO)
    logging.basicConfig(stream=sys.stderr, level=value, format=_LOG_FORMAT)
    logging.getLogger().setLevel(value)
    # the handlers too: libraries that set their own loggers' levels (distributed sets
    # INFO) must not print below the level asked for (-q: warnings and errors only)
    for handler in logging.getLogger().handlers:
        handler.setLevel(value)
    logging.getLogger("kafka").setLevel(logging.DEBUG if value <= logging.DEBUG
                                        else logging.CRITICAL)


def _level_of(args: argparse.Namespace) -> str:
    if getattr(args, "quiet", False):
        return "WARNING"
    return str(getattr(args, "log_level", None) or "INFO").upper()


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand (with ``parser``, default the whole CLI).

    Without a subcommand, prints the help and returns 2. An error the command did
    not handle itself becomes one line ``streamspec COMMAND: error: ...`` on stderr
    and exit status 1 (130 on Ctrl-C, also while the commands are still being
    imported); its traceback is logged at DEBUG level only.
    """
    try:
        if parser is None:
            parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C during start-up (imports): nothing was done yet
        print("streamspec: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    level = _level_of(args)
    configure_logging(level)
    if getattr(args, "quiet", False):
        args.log_level = level  # for commands that set up their own logging from it
        if getattr(args, "progress", None) == "auto":
            args.progress = "never"
    command = getattr(args, "command", None)
    name = f"streamspec {command}" if command else "streamspec"
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        if level == "DEBUG":
            traceback.print_exc()
        print(error_line(command, str(exc)), file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. | head: the reader has what it wanted
        return 0
    except (ValueError, OSError, MemoryError) as exc:  # CheckpointError is a ValueError
        if level == "DEBUG":
            traceback.print_exc()
        print(error_line(command, _message(exc)), file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: still one line, the traceback on request
        if level == "DEBUG":
            traceback.print_exc()
            hint = ""
        else:
            hint = " (rerun with --log-level DEBUG for the traceback)"
        print(error_line(command, f"unexpected {type(exc).__name__}: {exc}{hint}"),
              file=sys.stderr)
        return 1


def _message(exc: BaseException) -> str:
    """The one-line text of an expected error (OSError: its strerror and file name)."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0] if text.strip() else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())

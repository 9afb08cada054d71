"""The ``consume``, ``learn``, ``predict``, ``inspect`` and ``decode`` commands together.

Each command lives in its own module (:mod:`streamspec.cli.consume`,
:mod:`~streamspec.cli.learn`, :mod:`~streamspec.cli.predict`,
:mod:`~streamspec.cli.inspect`, :mod:`~streamspec.cli.decode`); this module keeps
``python -m streamspec.cli.commands COMMAND ...`` working (these commands without
the rest of the CLI, as the daemon's tests and demos run them) and the names other
code imports from here.
"""

from __future__ import annotations

import sys

from streamspec.cli import consume, decode, inspect, learn, predict
from streamspec.cli.checkpoint_files import HMM_SUFFIX, hmm_path, load_checkpoint_file, model_rank
from streamspec.cli.consume import config_from_args
from streamspec.cli.inspect import describe_checkpoint
from streamspec.cli.options import apply_toml, check_input_files, estimator_default
from streamspec.cli.predict import split_history

__all__ = [
    "HMM_SUFFIX", "apply_toml", "check_input_files", "config_from_args", "describe_checkpoint",
    "estimator_default", "hmm_path", "load_checkpoint_file", "main", "model_rank", "register",
    "split_history",
]

MODULES = (consume, learn, predict, inspect, decode)  # in the order of the CLI's help


def register(subparsers) -> None:
    """Add ``consume``, ``learn``, ``predict``, ``inspect`` and ``decode`` to the CLI's subparsers."""
    for module in MODULES:
        module.register(subparsers)


def main(argv: list[str] | None = None) -> int:
    """Run one of these commands without the rest of the CLI."""
    from streamspec import cli  # no cycle: cli imports the commands only when building its parser

    return cli.main(argv, cli.build_parser([register], description=None))


if __name__ == "__main__":
    sys.exit(main())

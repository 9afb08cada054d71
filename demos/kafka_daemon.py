"""Live demo: the embedded broker, the consumer daemon and a producer replaying keyed streams.

The same as ``streamspec demo --kafka`` (:mod:`streamspec.cli.kafka_demo`): starts the
embedded Tansu broker in a temporary folder, ``streamspec consume`` as a process, a
producer replaying a data set as keyed streams, prints live predictions, refits and
the prequential log loss once a second, then stops the producer, the daemon (SIGTERM:
final checkpoint and commit) and the broker, leaving nothing behind.

Usage::

    python demos/kafka_daemon.py [--data sessions|alice|splice] [--seconds 30] [--rate 2000]
    python demos/kafka_daemon.py --quick      # 8 seconds

``sessions`` (the default) is embedded (web sessions of a known 4-state HMM, whose
own log loss is printed as the reference); ``alice`` and ``splice`` need
STREAMSPEC_DATA.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse  # noqa: E402

from streamspec.cli import main  # noqa: E402


def run(argv: list[str] | None = None) -> int:
    """Parse this script's options and run ``streamspec demo --kafka`` with them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["sessions", "alice", "splice"], default="sessions")
    parser.add_argument("--seconds", default="30", help="how long to replay (default 30)")
    parser.add_argument("--rate", default="2000", help="messages per second (default 2000)")
    parser.add_argument("--users", default="16", help="streams replayed (default 16)")
    parser.add_argument("--rank", help="rank of the refits (default: the estimator's)")
    parser.add_argument("--quick", action="store_true", help="8 seconds")
    args = parser.parse_args(argv)
    cmd = ["demo", "--kafka", "--data", args.data, "--seconds", "8" if args.quick else args.seconds,
           "--rate", args.rate, "--users", args.users]
    return main(cmd + (["--rank", args.rank] if args.rank else []))


if __name__ == "__main__":
    sys.exit(run())

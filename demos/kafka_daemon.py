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

from streamspec.cli import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--quick" in args:
        args = [a for a in args if a != "--quick"] + ["--seconds", "8"]
    sys.exit(main(["demo", "--kafka", *args]))

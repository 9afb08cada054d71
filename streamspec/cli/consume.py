"""``streamspec consume``: run the Kafka consumer daemon (:mod:`connectors.kafka`).

The daemon's settings come from :mod:`connectors.config` (defaults, then a TOML
file, then the flags); both are imported only when the command runs.
"""

from __future__ import annotations

from typing import Any

from streamspec.cli.errors import CommandError
from streamspec.cli.options import (
    KAFKA_FORMAT,
    add_estimator_options,
    add_format_options,
    format_from_args,
    positive_int,
)

__all__ = ["config_from_args", "register"]


def _setup_logging(level: str = "INFO") -> None:
    from streamspec.cli import configure_logging

    configure_logging(level)



def register(subparsers) -> None:
    """Add ``consume`` to the CLI's subparsers (connectors is imported only when it runs)."""
    p = subparsers.add_parser(
        "consume",
        help="run the Kafka consumer daemon (learn continuously, exactly once)",
        description=(
            "Consume symbols from a Kafka topic in a consumer group, learn the counts of "
            "every partition, refit the model in the background and checkpoint each "
            "partition's counts together with its offset (offsets are committed to Kafka "
            "only after the checkpoint is on disk). SIGTERM/SIGINT: checkpoint, commit, "
            "exit 0. Settings come from the defaults, then --config FILE (TOML), then "
            "the flags."
        ),
        epilog=(
            "example: streamspec consume --bootstrap 127.0.0.1:9092 --topic clicks "
            "--group g1 --state-dir state --rank 3 --refit-every 20000"
        ),
    )
    p.add_argument("--config", metavar="FILE", help="TOML settings file (see connectors.config)")
    _add_kafka_options(p)
    add_format_options(p, kafka=True).add_argument(
        "--alphabet", metavar="A,B,...",
        help="fixed alphabet: other symbols go to the dead-letter topic")
    add_estimator_options(p, defaults=False)
    _add_schedule_options(p)
    p.set_defaults(func=_consume)


def _add_kafka_options(p) -> None:
    """The broker, topics, group and consumer settings of ``consume``."""
    g = p.add_argument_group("kafka")
    g.add_argument("--bootstrap", metavar="HOST:PORT", help="broker address")
    g.add_argument("--topic", metavar="T", help="topic to consume")
    g.add_argument("--group", metavar="G", help="consumer group id (default streamspec)")
    g.add_argument("--state-dir", metavar="DIR", help="checkpoint folder (shared by daemons)")
    g.add_argument("--client-id", help="Kafka client id (default streamspec-HOST-PID)")
    g.add_argument("--dead-letter-topic", metavar="T",
                   help="topic of poison messages (default T.dead-letters; '' for none)")
    g.add_argument("--predictions-topic", metavar="T",
                   help="publish one next-symbol prediction per record here")
    g.add_argument("--models-topic", metavar="T",
                   help="publish every refitted model here (kafka backend: the shared model "
                        "topic, default T.models)")
    g.add_argument("--states", dest="hmm_states", type=positive_int, metavar="K",
                   help="with every refit also fit a K-state hidden Markov model on the same "
                        "counts: saved as DIR/T/model.ckpt.hmm and published after each model on "
                        "the models topic")
    g.add_argument("--state-backend", choices=["local", "kafka"],
                   help="where partition state lives: checkpoint files in --state-dir (local, "
                        "default) or snapshots in a state topic, restored on assignment, with "
                        "one refitter (the owner of partition 0) publishing the shared model "
                        "(kafka)")
    g.add_argument("--state-topic", metavar="T",
                   help="state topic of the kafka backend (default T.state)")
    g.add_argument("--on-offset-out-of-range", choices=["fail", "reset"],
                   help="a log that is not the one a checkpoint was read from (topic "
                        "re-created, broker that lost its log, truncation: its last record "
                        "counted is re-read and compared), or records deleted before they "
                        "were read: fail (default: that partition is not read, an error "
                        "names it, exit status 4) or reset (keep the counts, read on from "
                        "the new log's start or after the deleted records, log how many "
                        "records cannot be vouched for)")
    g.add_argument("--session-timeout-ms", type=int, metavar="MS",
                   help="group session timeout (default 6000; a dead member is evicted after it)")
    g.add_argument("--heartbeat-interval-ms", type=int, metavar="MS",
                   help="group heartbeat interval (default 1000)")
    g.add_argument("--max-poll-interval-ms", type=int, metavar="MS",
                   help="longest gap between polls before the group evicts (default 60000)")
    g.add_argument("--poll-timeout-ms", type=int, metavar="MS",
                   help="longest wait of one poll (default 200)")
    g.add_argument("--max-poll-records", type=int, metavar="N",
                   help="messages per poll at most (default 2000)")
    g.add_argument("--fetch-max-bytes", type=int, metavar="BYTES",
                   help="most bytes of one fetch response (default 1048576): small enough that "
                        "a backlog is read from every partition in turn")


def _add_schedule_options(p) -> None:
    """When ``consume`` refits and checkpoints, and how it reports."""
    g = p.add_argument_group("schedule")
    g.add_argument("--refit-every", type=int, metavar="N", help="refit after N new symbols")
    g.add_argument("--refit-interval", type=float, metavar="S", help="also refit every S seconds")
    g.add_argument("--min-triples", type=int, metavar="N",
                   help="no refit before the counts hold N triples (default 100)")
    g.add_argument("--refit-duty", type=float, metavar="F",
                   help="fraction of the time refits may take, in (0, 1] (default 0.5)")
    g.add_argument("--refit-nice", type=int, metavar="N",
                   help="niceness increment of the refit worker process, 0-19 (default 0)")
    g.add_argument("--refit-in-thread", dest="refit_process", action="store_const",
                   const=False, help="refit in a thread instead of a worker process")
    g.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="checkpoint after N messages")
    g.add_argument("--checkpoint-interval", type=float, metavar="S",
                   help="checkpoint every S seconds (default 1)")
    g = p.add_argument_group("monitoring")
    g.add_argument("--score-every", type=int, metavar="N",
                   help="predict each partition's symbols 0, N, 2N, ... before learning them: "
                        "their prequential log loss (status loss=, metrics) and the mixing "
                        "weights learned from them (1: every symbol; 0: none; default 16)")
    g.add_argument("--status-interval", type=float, metavar="S",
                   help="seconds between status lines (default 10; 0: none)")
    g.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any port)")
    g.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")


_CONSUME_SETTINGS = (
    "bootstrap", "topic", "group", "state_dir", "client_id", "dead_letter_topic",
    "predictions_topic", "models_topic", "session_timeout_ms", "heartbeat_interval_ms",
    "max_poll_interval_ms", "poll_timeout_ms", "max_poll_records", "fetch_max_bytes", "rank",
    "penalty",
    "weighting", "formulation", "sweeps", "mode", "max_symbols", "window", "hmm_states",
    "refit_every", "refit_interval", "min_triples",
    "refit_duty", "refit_nice", "refit_process",
    "checkpoint_every", "checkpoint_interval", "score_every", "status_interval", "metrics_port",
    "state_backend", "state_topic", "on_offset_out_of_range", "max_malformed",
)


def config_from_args(args) -> Any:
    """The daemon settings of parsed ``consume`` arguments (TOML file, then flags)."""
    from connectors.config import DaemonConfig, load_toml

    data = load_toml(args.config) if args.config else {}
    overrides = {n: getattr(args, n) for n in _CONSUME_SETTINGS}
    fmt = format_from_args(args, KAFKA_FORMAT)
    overrides["format"] = fmt or None
    if args.alphabet is not None:
        overrides["alphabet"] = [s for s in args.alphabet.split(",") if s]
    return DaemonConfig.from_mapping(data, **overrides)


def _consume(args) -> int:
    import signal

    # why: a SIGTERM before the daemon's own handlers exist must still stop it cleanly
    # (exit 0), not kill it by the default action; a SIGINT while it is still being
    # built (imports, the saved model) ends at once, quietly, with 130 (main() says so)
    early: list = []
    daemon: list = []

    def latch(signum, frame) -> None:
        if daemon:
            daemon[0].stop()
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt
        else:
            early.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, latch)
    _setup_logging(args.log_level)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None
    from connectors.kafka import ConsumerDaemon

    daemon.append(ConsumerDaemon(config))
    if early:
        daemon[0].stop()
    return daemon[0].run(install_signals=True)

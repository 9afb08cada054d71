"""Subcommands ``consume``, ``learn``, ``predict``, ``inspect`` and ``decode`` of the ``streamspec`` CLI.

``consume`` runs the Kafka daemon (:mod:`connectors.kafka`), ``learn`` learns
from files in one pass or following them (:mod:`connectors.files`; with
``--states K`` also a K-state hidden Markov model, saved as ``MODEL.hmm``),
``predict`` prints next-symbol distributions of a saved model, ``inspect``
describes any streamspec checkpoint or state folder, and ``decode`` labels the
symbols of a file with the hidden states of a saved HMM. The ``connectors`` package (and with it
kafka-python) is imported only when a command runs, so that ``streamspec``
imports without it.

Run as ``python -m streamspec.cli.commands COMMAND ...`` these commands work
without the rest of the CLI.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import signal
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["register", "main"]


def register(subparsers) -> None:
    """Add ``consume``, ``learn``, ``predict``, ``inspect`` and ``decode`` to the CLI's subparsers."""
    _register_consume(subparsers)
    _register_learn(subparsers)
    _register_predict(subparsers)
    _register_inspect(subparsers)
    _register_decode(subparsers)


# ---------------------------------------------------------------------------- shared options


def _format_options(p: argparse.ArgumentParser, kafka: bool) -> None:
    g = p.add_argument_group("record format")
    if not kafka:
        g.add_argument("--encoding", choices=["chars", "tokens", "csv", "jsonl"],
                       help="how lines hold symbols (default chars: every character)")
        g.add_argument("--keep", metavar="CHARS",
                       help="chars only: keep these characters, drop the others")
        g.add_argument("--end-each-line", action="store_const", const=True,
                       help="every line is a sequence of its own")
        g.add_argument("--delimiter", help="CSV delimiter (tab: 'tab')")
    else:
        g.add_argument("--value-format", choices=["text", "json"],
                       help="message value: one symbol (text, default) or JSON")
    g.add_argument("--key-field", help="name of the stream-key field (JSON/CSV)")
    g.add_argument("--symbol-field", help="name of the symbol field (JSON/CSV)")
    g.add_argument("--time-field", help="name of the timestamp field (JSON/CSV)")
    g.add_argument("--end-field", help="name of the end-of-sequence field (JSON/CSV)")
    g.add_argument("--lowercase", action="store_const", const=True, help="lower-case symbols")
    g.add_argument("--int-symbols", action="store_const", const=True,
                   help="symbols are integers")
    g.add_argument("--max-bytes", type=int, help="longest accepted line/value (default 1 MiB)")


def _format_from_args(args, names) -> dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


_KAFKA_FORMAT = ("value_format", "key_field", "symbol_field", "time_field", "end_field",
                 "lowercase", "int_symbols", "max_bytes")
_FILE_FORMAT = ("encoding", "keep", "end_each_line", "delimiter", "key_field", "symbol_field",
                "time_field", "end_field", "lowercase", "int_symbols", "max_bytes")


def estimator_default(name: str) -> Any:
    """The default of MEstimator's parameter ``name`` (the single source of every default)."""
    import inspect

    from streamspec.core.mestimator import MEstimator

    param = inspect.signature(MEstimator.__init__).parameters.get(name)
    return None if param is None else param.default


def _estimator_options(p: argparse.ArgumentParser, defaults: bool) -> None:
    # every estimator setting defaults to None: MEstimator's own default (connectors.config
    # .mestimator_params), so that the CLI and the daemon follow the estimator, in one place
    g = p.add_argument_group("estimator (unset: MEstimator's own defaults)")
    g.add_argument("--rank", type=_rank,
                   help="rank k of the model, or 'auto' (default: MEstimator's)")
    g.add_argument("--penalty", type=float, help="L1 penalty λ (default: MEstimator's)")
    g.add_argument("--weighting", metavar="W",
                   help="moment weighting: exact, per_symbol, diagonal, identity, ... "
                        "(default: MEstimator's)")
    g.add_argument("--formulation", metavar="F",
                   help="MEstimator formulation, e.g. projected (linear in the alphabet) or "
                        "dense (default: MEstimator's)")
    g.add_argument("--sweeps", type=int,
                   help="alternating sweeps per fit (default: MEstimator's max_sweeps)")
    g.add_argument("--mode", choices=["sliding", "sequences"],
                   default="sliding" if defaults else None,
                   help="count every triple (sliding, default) or each sequence's first")
    g.add_argument("--max-symbols", type=_positive_int, metavar="N",
                   help="cap the alphabet at N symbols: later new symbols are counted as "
                        "'<other>' (bounds memory on open vocabularies; default: no cap)")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {v}")
    return v


def _rank(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"rank must be a positive integer or 'auto', "
                                         f"not {text!r}") from None
    if k < 1:
        raise argparse.ArgumentTypeError("rank must be >= 1")
    return k


def _setup_logging(level: str = "INFO") -> None:
    from streamspec.cli import configure_logging

    configure_logging(level)


# ---------------------------------------------------------------------------- consume


def _register_consume(subparsers) -> None:
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
    g.add_argument("--states", dest="hmm_states", type=_positive_int, metavar="K",
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
                   help="a checkpoint offset beyond the log's end or before its start (topic "
                        "re-created, records removed unread): fail (default: that partition "
                        "is not read, an error names it, exit status 4) or reset (keep the "
                        "counts, read from the log start, log what was skipped)")
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
    _format_options(p, kafka=True)
    p.add_argument_group("record format").add_argument(
        "--alphabet", metavar="A,B,...",
        help="fixed alphabet: other symbols go to the dead-letter topic")
    _estimator_options(p, defaults=False)
    g = p.add_argument_group("schedule")
    g.add_argument("--refit-every", type=int, metavar="N", help="refit after N new symbols")
    g.add_argument("--refit-interval", type=float, metavar="S", help="also refit every S seconds")
    g.add_argument("--min-triples", type=int, metavar="N",
                   help="no refit before the counts hold N triples (default 100)")
    g.add_argument("--refit-duty", type=float, metavar="F",
                   help="fraction of the time refits may take, in (0, 1] (default 0.5)")
    g.add_argument("--refit-in-thread", dest="refit_process", action="store_const",
                   const=False, help="refit in a thread instead of a worker process")
    g.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="checkpoint after N messages")
    g.add_argument("--checkpoint-interval", type=float, metavar="S",
                   help="checkpoint every S seconds (default 1)")
    g = p.add_argument_group("monitoring")
    g.add_argument("--status-interval", type=float, metavar="S",
                   help="seconds between status lines (default 10; 0: none)")
    g.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any port)")
    g.add_argument("--log-level", default="INFO", help="DEBUG, INFO (default), WARNING")
    p.set_defaults(func=_consume)


_CONSUME_SETTINGS = (
    "bootstrap", "topic", "group", "state_dir", "client_id", "dead_letter_topic",
    "predictions_topic", "models_topic", "session_timeout_ms", "heartbeat_interval_ms",
    "max_poll_interval_ms", "poll_timeout_ms", "max_poll_records", "rank", "penalty",
    "weighting", "formulation", "sweeps", "mode", "max_symbols", "hmm_states",
    "refit_every", "refit_interval", "min_triples",
    "refit_duty", "refit_process",
    "checkpoint_every", "checkpoint_interval", "status_interval", "metrics_port",
    "state_backend", "state_topic", "on_offset_out_of_range",
)


def config_from_args(args) -> Any:
    """The daemon settings of parsed ``consume`` arguments (TOML file, then flags)."""
    from connectors.config import DaemonConfig, load_toml

    data = load_toml(args.config) if args.config else {}
    overrides = {n: getattr(args, n) for n in _CONSUME_SETTINGS}
    fmt = _format_from_args(args, _KAFKA_FORMAT)
    overrides["format"] = fmt or None
    if args.alphabet is not None:
        overrides["alphabet"] = [s for s in args.alphabet.split(",") if s]
    return DaemonConfig.from_mapping(data, **overrides)


def _consume(args) -> int:
    import signal

    # why: a SIGTERM/SIGINT before the daemon's own handlers exist must still stop it
    # cleanly (exit 0), not kill it by the default action
    early: list = []
    daemon: list = []

    def latch(signum, frame) -> None:
        if daemon:
            daemon[0].stop()
        else:
            early.append(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, latch)
    _setup_logging(args.log_level)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"streamspec consume: {exc}", file=sys.stderr)
        return 2
    from connectors.kafka import ConsumerDaemon

    daemon.append(ConsumerDaemon(config))
    if early:
        daemon[0].stop()
    return daemon[0].run(install_signals=True)


# ---------------------------------------------------------------------------- learn


def _register_learn(subparsers) -> None:
    p = subparsers.add_parser(
        "learn",
        help="learn a model from files (batch, or following them as they grow)",
        description=(
            "Count the symbol triples of text files and fit a model. A one-pass read "
            "counts the files in chunks (see --workers). With --state FILE the "
            "counts and the position in every file are checkpointed atomically, so that a "
            "run stopped at any moment (SIGTERM, SIGKILL) resumes where it stopped without "
            "losing or counting a symbol twice. --follow keeps reading as the files grow "
            "(and survives log rotation); it saves the model every --save-interval seconds "
            "and when stopped (SIGTERM, SIGINT: the counts so far are fitted and saved "
            "before exit). Files must be UTF-8 text: a directory, a binary file, or a "
            "CSV/JSONL file lacking a named field is refused before anything is counted."
        ),
        epilog="example: streamspec learn alice.txt --lowercase --keep abcdefghijklmnopqrstuvwxyz"
               " --rank 3 --out alice.model",
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="UTF-8 text files (.gz: one pass only; a directory is refused: give "
                        "the files in it, e.g. logs/*)")
    p.add_argument("--config", metavar="FILE",
                   help="TOML settings: these options' names (under [learn] or at the top) "
                        "and [format]; flags given on the command line win")
    _format_options(p, kafka=False)
    _estimator_options(p, defaults=True)
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="MODEL", help="save the fitted model here")
    g.add_argument("--states", type=_positive_int, metavar="K",
                   help="also fit a hidden Markov model with K hidden states on the same counts "
                        "(method of moments + EM) and save it as MODEL.hmm next to --out "
                        "(read it with inspect and decode)")
    g.add_argument("--counts", metavar="FILE", help="save the accumulator here")
    g.add_argument("--no-fit", action="store_true", help="only count, do not fit")
    g = p.add_argument_group("resuming and following")
    g.add_argument("--state", metavar="FILE", help="resumable state: counts + file positions")
    g.add_argument("--checkpoint-every", type=int, default=100_000, metavar="N",
                   help="with --state: checkpoint after N records (default 100000)")
    g.add_argument("--checkpoint-interval", type=float, default=1.0, metavar="S",
                   help="with --state: checkpoint every S seconds (default 1)")
    g.add_argument("--follow", action="store_true", help="keep reading as the files grow")
    g.add_argument("--idle-timeout", type=float, metavar="S",
                   help="--follow: stop after S seconds without new data")
    g.add_argument("--poll-interval", type=float, default=0.2, metavar="S",
                   help="--follow: seconds between polls (default 0.2)")
    g.add_argument("--save-interval", type=_positive_float, default=_SAVE_INTERVAL, metavar="S",
                   help=f"--follow with --out: fit and save the model every S seconds while new "
                        f"records come (default {_SAVE_INTERVAL:g}); it is also saved on SIGTERM, "
                        f"SIGINT and --idle-timeout")
    g.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    from connectors.backfill import add_backfill_arguments

    add_backfill_arguments(p)  # --dask SCHEDULER|local, --workers N, --chunk-mb MB
    p.set_defaults(func=_learn, _parser=p)


_SAVE_INTERVAL = 60.0  # learn --follow --out: seconds between periodic model saves


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text}")
    return v


def _given_fields(args) -> dict[str, Any]:
    """The CSV/JSON fields named on the command line, by option (checked against the files)."""
    return {f"--{name.replace('_', '-')}": value
            for name in ("symbol_field", "key_field", "time_field", "end_field")
            if isinstance(value := getattr(args, name, None), str) and not value.isdigit()}


def check_input_files(args, fmt) -> None:
    """Refuse directories, binary files and CSV/JSONL files lacking a named field (InputError)."""
    from connectors.files import check_files

    check_files(args.files, fmt, _given_fields(args), missing_ok=bool(getattr(args, "follow", False)))


def _one_pass(args) -> bool:
    """Whether ``learn`` reads its files once with nothing to resume or cap (chunked counting)."""
    return (not args.follow and not args.state and (args.mode or "sliding") == "sliding"
            and args.max_symbols is None)


def _check_outputs(args) -> None:
    """Refuse output paths that cannot be written, before hours of counting are lost."""
    for flag in ("out", "counts", "state"):
        path = getattr(args, flag, None)
        if path and os.path.isdir(path):
            raise IsADirectoryError(f"--{flag} {path}: is a directory; give a file name, "
                                    f"e.g. {os.path.join(path, 'model.ckpt')}")


class _Progress:
    """A one-line progress bar on stderr: bytes read of the files, records, rate."""

    def __init__(self, paths: list[str], enabled: bool, follow: bool):
        self.enabled = enabled
        self.follow = follow
        self.total = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, records: int, positions: dict, final: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not final and now - self.last < 0.2):
            return
        self.last = now
        rate = records / max(now - self.start, 1e-9)
        if self.follow or not self.total:
            line = f"\r{records:,} records  {rate:,.0f}/s"
        else:
            done = sum(int(pos.get("offset", 0)) for pos in positions.values())
            frac = min(1.0, done / self.total)
            bar = "#" * int(30 * frac)
            line = f"\r[{bar:<30}] {100 * frac:5.1f}%  {records:,} records  {rate:,.0f}/s"
        sys.stderr.write(line + ("\n" if final else ""))
        sys.stderr.flush()

    def bytes_done(self, done: int, total: int) -> None:
        """The bar of a backfill: ``done`` of ``total`` bytes counted (chunk by chunk)."""
        now = time.monotonic()
        final = done >= total
        if not self.enabled or (not final and now - self.last < 0.2):
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self.start, 1e-9) / 2**20
        sys.stderr.write(f"\r[{'#' * int(30 * frac):<30}] {100 * frac:5.1f}%  "
                         f"{done / 2**20:,.1f} MiB  {rate:,.1f} MiB/s" + ("\n" if final else ""))
        sys.stderr.flush()


def apply_toml(args, parser: argparse.ArgumentParser, section: str) -> None:
    """Fill the options of ``args`` left at their defaults from the ``--config`` TOML file.

    The file may hold the options (dashes or underscores) at its top level or
    under ``[section]``, and record format options under ``[format]``.
    """
    from connectors.config import load_toml

    data = load_toml(args.config)
    table = data.pop(section, {})
    fmt = data.pop("format", {})
    if not isinstance(table, dict) or not isinstance(fmt, dict):
        raise ValueError(f"{args.config}: [{section}] and [format] must be tables")
    settings = {**data, **table, **fmt}
    known = {a.dest for a in parser._actions if a.dest not in ("help", "config", "files")}
    for raw, value in settings.items():
        name = raw.replace("-", "_")
        if name not in known:
            raise ValueError(f"{args.config}: unknown setting {raw!r} for {section}")
        if getattr(args, name) == parser.get_default(name):
            setattr(args, name, value)


def _learn(args) -> int:
    if args.config:
        try:
            apply_toml(args, args._parser, "learn")
        except (OSError, ValueError) as exc:
            print(f"streamspec learn: {exc}", file=sys.stderr)
            return 2
    from connectors.files import FileSource
    from connectors.records import format_from_options
    from connectors.state import SourceState
    from streamspec.core.checkpoint import CheckpointError

    try:
        fmt = format_from_options(**_format_from_args(args, _FILE_FORMAT))
    except ValueError as exc:
        print(f"streamspec learn: {exc}", file=sys.stderr)
        return 2
    from connectors.backfill import backfill_result_from_args, wants_backfill

    # refuse bad input before anything is counted (or a state or model overwritten)
    check_input_files(args, fmt)
    _check_outputs(args)
    if not wants_backfill(args) and _one_pass(args):
        # nothing to follow or resume: counting by chunks gives the same counts as reading
        # record by record, 10 to 50 times faster (docs/benchmarks.md, "learn --workers")
        args.workers = 1
    if wants_backfill(args):  # chunks counted in this process, parallel processes or on Dask
        show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
        bar = _Progress(list(args.files), show, follow=False)
        try:
            result = backfill_result_from_args(args, fmt, progress=bar.bytes_done)
        except (ValueError, ImportError, OSError) as exc:
            print(f"streamspec learn: {exc}", file=sys.stderr)
            return 2
        acc = result.acc
        log = logging.getLogger("streamspec.learn")
        # (which path counted, processes or this one, is in the event=backfilled line)
        log.info("event=counted records=%d triples=%d symbols=%d malformed=%d counts_mb=%.1f",
                 result.records, int(acc.n_triples), acc.n, sum(result.errors.values()),
                 acc.memory_bytes() / 1e6)
        if args.counts:
            acc.save(args.counts)
        return 0 if args.no_fit else _fit_and_save(args, acc, log)
    state = SourceState(acc=_new_accumulator(args))
    if args.state and os.path.exists(args.state):
        try:
            state = load_checkpoint_file(args.state, SourceState.load,
                                         what="learn state checkpoint (--state)")
        except CheckpointError as exc:
            print(f"streamspec learn: {exc}", file=sys.stderr)
            return 1
        logging.getLogger("streamspec.learn").info(
            "event=resume state=%s records=%d", args.state, state.records)
        if getattr(state.acc, "max_symbols", None) != args.max_symbols:
            logging.getLogger("streamspec.learn").warning(
                "event=max-symbols-ignored state_max_symbols=%s flag=%s (the state's cap stays)",
                getattr(state.acc, "max_symbols", None), args.max_symbols)
    try:
        source = FileSource(
            args.files, fmt, follow=args.follow, poll_interval=args.poll_interval,
            start=state.positions or None, idle_timeout=args.idle_timeout,
        )
    except (OSError, ValueError) as exc:
        print(f"streamspec learn: {exc}", file=sys.stderr)
        return 1
    from connectors.ingest_loop import IngestLoop

    log = logging.getLogger("streamspec.learn")
    log.info("event=%s files=%s", "following" if args.follow else "reading", ",".join(args.files))
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    progress = _Progress(list(args.files), show, args.follow)
    acc = state.acc

    def checkpoint(final_positions: dict | None = None) -> None:
        state.records = loop.records
        state.positions = final_positions if final_positions is not None else dict(loop.positions)
        state.errors.clear()
        state.errors.update(loop.errors())
        if args.state:
            state.save(args.state)

    # --follow --out: the model is saved every --save-interval seconds while records come
    periodic = bool(args.follow and args.out and not args.no_fit)
    loop = IngestLoop(
        source, acc, records=state.records, positions=state.positions, errors=state.errors,
        checkpoint=checkpoint if args.state else None, checkpoint_every=args.checkpoint_every,
        checkpoint_interval=args.checkpoint_interval,
        save=(lambda: _fit_and_save(args, acc, log, final=False)) if periodic else None,
        save_interval=args.save_interval, progress=progress.update)
    stop: dict[str, Any] = {"signal": None}

    def on_signal(signum, frame):
        stop["signal"] = signum
        loop.stop()
        # a second Ctrl-C or SIGTERM (e.g. while the model is being saved) ends at once
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    finished = loop.run()
    # at the natural end everything read was learned: the source's own position is exact
    # (it also covers trailing blank or malformed lines)
    checkpoint(source.position() if finished else None)
    progress.update(state.records, state.positions, final=True)
    log.info("event=counted records=%d triples=%d symbols=%d malformed=%d counts_mb=%.1f",
             state.records, int(acc.n_triples), acc.n, source.errors, acc.memory_bytes() / 1e6)
    if args.counts:
        acc.save(args.counts)
    if stop["signal"] is not None:
        log.info("event=stopped signal=%s", signal.Signals(stop["signal"]).name)
        if not args.follow or args.no_fit or not args.out:
            # a one-pass read stopped early resumes from --state: no model of part of the files
            return 0
        # following has no end: stopping is how it ends, so the model of everything is saved
    if args.no_fit:
        return 0
    return _fit_and_save(args, acc, log)


def _new_accumulator(args):
    from streamspec.streaming.accumulator import MomentAccumulator

    if getattr(args, "max_symbols", None) is None:
        return MomentAccumulator(mode=args.mode)
    return MomentAccumulator(mode=args.mode, max_symbols=args.max_symbols)


def _fit_and_save(args, acc, log: logging.Logger, final: bool = True) -> int:
    """Fit θ_M on the counts with the command's settings and save it if asked.

    Unset settings take MEstimator's own defaults (:func:`connectors.config.mestimator_params`);
    an integer rank is clamped to the alphabet size (below it for large alphabets,
    where the sparse SVD needs k < n). The log line gives the rank actually used.
    ``final=False`` (a periodic save of ``learn --follow``): problems are logged as
    warnings, and counts that cannot be fitted yet are skipped silently.
    """
    def fail(message: str) -> int:
        if final:
            print(f"streamspec learn: {message}", file=sys.stderr)
        else:
            log.warning("event=save-skipped reason=%r", message)
        return 1

    if not acc.n_triples:
        if not final:
            return 1
        return fail("no triple counted (every stream needs 3 symbols)")
    states = getattr(args, "states", None)
    if states is not None and states > acc.n:
        if not final:
            return 1
        return fail(f"--states {states} is more than the {acc.n} symbols counted: "
                    "the hidden states of a discrete HMM cannot be told apart from fewer symbols")
    from connectors.config import mestimator_params
    from streamspec.core.mestimator import MEstimator
    from streamspec.core.subspace import DENSE_SVD_MAX

    rank = args.rank if args.rank is not None else estimator_default("rank")
    if isinstance(rank, int):
        rank = max(1, min(rank, acc.n if acc.n <= DENSE_SVD_MAX else acc.n - 1))
    params = mestimator_params(rank=rank, penalty=args.penalty, weighting=args.weighting,
                               sweeps=args.sweeps, formulation=getattr(args, "formulation", None))
    t0 = time.perf_counter()
    try:
        model = MEstimator(**params).fit(acc)
    except (ValueError, MemoryError) as exc:  # bad settings, or counts too large to fit
        return fail(f"cannot fit: {type(exc).__name__}: {exc}")
    loss = getattr(getattr(model, "factors", None), "loss", math.nan)
    log.info("event=fitted rank=%d requested_rank=%s symbols=%d seconds=%.2f loss=%.6g",
             model_rank(model), rank, model.n_symbols, time.perf_counter() - t0, loss)
    if args.out:
        model.save(args.out)
        log.info("event=saved model=%s triples=%d", args.out, int(acc.n_triples))
    if getattr(args, "states", None):
        return _fit_and_save_hmm(args, acc, log)
    return 0


def model_rank(model) -> int:
    """The rank a fitted model uses: its ``rank`` when it records one, else its dimension."""
    rank = getattr(model, "rank", None)
    if isinstance(rank, int | np.integer) and not isinstance(rank, bool):
        return int(rank)
    return int(model.dim)


HMM_SUFFIX = ".hmm"  # learn --states K --out M: the HMM is saved as M.hmm


def hmm_path(model_path: str | os.PathLike) -> str:
    """Where ``learn --states K --out MODEL`` saves the HMM: ``MODEL.hmm``."""
    return os.fspath(model_path) + HMM_SUFFIX


def _fit_and_save_hmm(args, acc, log: logging.Logger) -> int:
    """``learn --states K``: fit an :class:`~streamspec.HMMEstimator` on the counts, save ``MODEL.hmm``.

    Cost: the top-K SVD of the sparse P31 plus O(nnz · K²) per EM iteration (50 at
    most) for nnz distinct triples; nothing depends on the length of the files.
    """
    from streamspec.core.hmm_estimator import HMMEstimator

    t0 = time.perf_counter()
    try:
        est = HMMEstimator(n_states=args.states, random_state=0)
        hmm = est.fit(acc)
    except (ValueError, np.linalg.LinAlgError, MemoryError) as exc:
        print(f"streamspec learn: cannot fit a {args.states}-state HMM: {exc}", file=sys.stderr)
        return 1
    log.info("event=fitted-hmm states=%d symbols=%d seconds=%.2f iterations=%d "
             "triple_loglik=%.6g", hmm.n_states, hmm.n_symbols, time.perf_counter() - t0,
             est.n_iter_, est.log_likelihood_history_[-1])
    if args.out:
        path = hmm_path(args.out)
        hmm.save(path)
        log.info("event=saved hmm=%s", path)
    return 0


# ---------------------------------------------------------------------------- predict


def _register_predict(subparsers) -> None:
    p = subparsers.add_parser(
        "predict",
        help="print next-symbol distributions of a saved model",
        description=(
            "Print one JSON line with the distribution of the next symbol after a history. "
            "The positional arguments form ONE history (joined by spaces, as typed); "
            "without them every line of standard input is a history. A history is split "
            "into symbols by --encoding: auto (the default) splits it the way the model's "
            "symbols were read by learn: into characters when every symbol of the model "
            "is one character (learn's default encoding, chars), else at whitespace "
            "(tokens). Symbols the model does not know are skipped and listed."
        ),
        epilog="example: streamspec learn alice.txt --out m.ckpt && "
               "streamspec predict --model m.ckpt 'Alic'",
    )
    p.add_argument("--model", required=True, metavar="CKPT",
                   help="a model checkpoint (learn --out, or <state-dir>/<topic>/model.ckpt)")
    p.add_argument("histories", nargs="*", metavar="HISTORY",
                   help="the history, one or more words forming one sequence (default: "
                        "every line of standard input is a history)")
    p.add_argument("--encoding", choices=["auto", "chars", "tokens"], default="auto",
                   help="how a history is split into symbols: auto (default: chars for a "
                        "model of single characters, else tokens), chars (every character), "
                        "tokens (whitespace-separated)")
    p.add_argument("--top", type=int, default=None, metavar="K",
                   help=f"list only the K most probable symbols (0: all; default: all for up "
                        f"to {_LIST_ALL_MAX} symbols, else the {_TOP_DEFAULT} most probable)")
    p.set_defaults(func=_predict)


_LIST_ALL_MAX = 100  # predict: alphabets up to this size are listed whole by default
_TOP_DEFAULT = 20  # predict: symbols listed by default for larger alphabets
_LISTED_SYMBOLS = 50  # inspect: symbols listed (the count is always given)
_ZIP_MAGIC = b"PK\x03\x04"  # every checkpoint is an npz, that is a zip archive


def load_checkpoint_file(path: str | os.PathLike, load, what: str = "model checkpoint"):
    """``load(path)`` for a checkpoint file, with one clear error for anything else.

    Raises :class:`~streamspec.core.checkpoint.CheckpointError` "not a streamspec
    model checkpoint: PATH (why)" (``what``: the noun) for a directory, a missing file, or a file that
    is no checkpoint (an image, random bytes, ...), and passes on the loader's own
    errors for a damaged or foreign checkpoint. O(size of the file).
    """
    from connectors.files import looks_like
    from streamspec.core.checkpoint import CheckpointError

    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"not a streamspec {what}: {path} (a directory)")
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        raise CheckpointError(f"not a streamspec {what}: {path} (no such file)") from None
    if not head.startswith(_ZIP_MAGIC):
        why = looks_like(head).removeprefix(", ") or (
            "a text file" if _is_text(head) else "its first bytes are not a checkpoint's")
        raise CheckpointError(f"not a streamspec {what}: {path} ({why})")
    try:
        return load(path)
    except CheckpointError as exc:
        if "pickle" in str(exc):  # numpy's wording for a zip that holds no arrays
            raise CheckpointError(f"not a streamspec {what}: {path} (a zip archive "
                                  f"that holds no checkpoint)") from None
        raise


def _is_text(head: bytes) -> bool:
    """Whether the first bytes of a file look like text (UTF-8, no NUL)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head


def split_history(text: str, encoding: str, symbols) -> list[str]:
    """The symbols of one history: characters or whitespace-separated tokens.

    ``encoding="auto"`` picks characters when every label of ``symbols`` (the
    model's alphabet) is a one-character string, else tokens.

    Examples
    --------
    >>> split_history("Alic", "auto", ["A", "l", "i", "c", "e", " "])
    ['A', 'l', 'i', 'c']
    >>> split_history("red green", "auto", ["red", "green"])
    ['red', 'green']
    >>> split_history("a b", "tokens", ["a", "b"])
    ['a', 'b']
    """
    if encoding == "auto":
        chars = symbols is not None and all(isinstance(s, str) and len(s) == 1 for s in symbols)
        encoding = "chars" if chars else "tokens"
    return list(text) if encoding == "chars" else text.split()


def _predict(args) -> int:
    """One JSON line per history. O(window·k² + n·k + n log n) per history for n symbols, rank k."""
    from streamspec.core.model import ObservableOperatorModel

    model = load_checkpoint_file(args.model, ObservableOperatorModel.load)
    labels = model.symbols if model.symbols is not None else list(range(model.n_symbols))
    index = {str(s): i for i, s in enumerate(labels)}
    # the arguments are one history, as typed: predict --model m the cat == predict 'the cat'
    lines = [" ".join(args.histories)] if args.histories else (
        ln.rstrip("\r\n") for ln in sys.stdin)
    top = args.top if args.top is not None else (
        0 if len(labels) <= _LIST_ALL_MAX else _TOP_DEFAULT)
    for line in lines:
        symbols = split_history(line, args.encoding, model.symbols)
        known = [index[s] for s in symbols if s in index]
        unknown = [s for s in symbols if s not in index]
        p = model.predict_proba_next(np.asarray(known, dtype=np.int64))
        order = np.argsort(-p, kind="stable")
        if top > 0:
            order = order[:top]
        out = {
            "history": symbols,
            "next": {str(labels[i]): round(float(p[i]), 6) for i in order},
            "top": str(labels[int(order[0])]),
        }
        if unknown:
            out["unknown"] = unknown
        print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------- inspect


def _register_inspect(subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="describe a checkpoint (model, counts, partition state) or a state folder",
        description=(
            "Print what a streamspec checkpoint holds: its format and version, and for a "
            "model its symbols and dimension, for counts the number of triples and streams, "
            "for a daemon's partition checkpoint its offset and dead letters. Given a "
            "state folder, describe every checkpoint in it and the merged counts."
        ),
        epilog="example: streamspec inspect state/clicks/partition-00000.ckpt",
    )
    p.add_argument("path", metavar="CKPT", help="a checkpoint file or a state folder")
    p.add_argument("--json", action="store_true", help="print one JSON object per checkpoint")
    p.add_argument("--top", type=_positive_int, default=_TOP_EMISSIONS, metavar="K",
                   help=f"HMM (learn --states ... --out MODEL: MODEL.hmm): the K most probable "
                        f"symbols of each hidden state (default {_TOP_EMISSIONS})")
    p.set_defaults(func=_inspect)


_TOP_EMISSIONS = 5  # inspect: symbols listed per hidden state of an HMM by default


def describe_checkpoint(path: str | os.PathLike, top: int = _TOP_EMISSIONS) -> dict[str, Any]:
    """A summary of any streamspec checkpoint file (``CheckpointError`` if it is none).

    For a :class:`~streamspec.HiddenMarkovModel`: its sizes, ``startprob``, ``transmat``
    (rows: from-state) and, per state, its ``top`` most probable symbols
    (``emissions``: a list per state of ``[symbol, probability]``), O(m² + m·n).
    """
    from streamspec.core.checkpoint import CheckpointError

    def read(p: Path) -> tuple[bytes, dict]:
        data = p.read_bytes()
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                return data, json.loads(str(z["__header__"]))
        except KeyError:
            raise CheckpointError(f"not a streamspec checkpoint: {p} (a zip archive without "
                                  f"a checkpoint header)") from None
        except (ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise CheckpointError(f"{p}: corrupt or unreadable checkpoint "
                                  f"({type(exc).__name__}: {exc})") from None

    path = Path(path)
    data, header = load_checkpoint_file(path, read, what="checkpoint")
    kind = header.get("format")
    out: dict[str, Any] = {"path": str(path), "format": kind, "version": header.get("version"),
                           "bytes": len(data)}
    if kind == "streamspec.ObservableOperatorModel":
        from streamspec.core.model import ObservableOperatorModel

        m = ObservableOperatorModel.from_bytes(data, source=str(path))
        out.update(symbols=_listed(m.symbols), n_symbols=m.n_symbols, rank=model_rank(m), dim=m.dim,
                   filter=m.filter, window=m.window,
                   model_mb=round(sum(a.nbytes for a in (m.b1, m.binf, m.B)) / 1e6, 3),
                   backoff=getattr(m, "backoff", None) is not None)
    elif kind == "streamspec.HiddenMarkovModel":
        out.update(_describe_hmm(path, top))
    elif kind == "streamspec.MomentAccumulator":
        from streamspec.streaming.accumulator import MomentAccumulator

        out.update(_describe_acc(MomentAccumulator.load(path)))
    elif kind == "streamspec.PartitionState":
        from connectors.state import PartitionState

        st = PartitionState.load(path)
        out.update(topic=st.topic, partition=st.partition, offset=st.offset, records=st.records,
                   dead_letters=dict(st.dead_letters), owner=st.owner,
                   written_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.written_at)),
                   **_describe_acc(st.acc))
    elif kind == "streamspec.SourceState":
        from connectors.state import SourceState

        st = SourceState.load(path)
        out.update(records=st.records, errors=dict(st.errors), positions=st.positions,
                   **_describe_acc(st.acc))
    else:
        raise CheckpointError(f"{path}: unknown checkpoint format {kind!r}")
    return out


def _describe_hmm(path: Path, top: int) -> dict[str, Any]:
    """Sizes, start probabilities, transitions and top emissions of a saved HMM. O(m² + m·n)."""
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    hmm = HiddenMarkovModel.load(path)
    labels = hmm.symbols if hmm.symbols is not None else list(range(hmm.n_symbols))
    k = min(top, hmm.n_symbols)
    emissions = []
    for row in hmm.emissionprob_:
        best = np.argpartition(-row, k - 1)[:k] if k < len(row) else np.arange(len(row))
        best = best[np.argsort(-row[best], kind="stable")]
        emissions.append([[labels[i], round(float(row[i]), 6)] for i in best.tolist()])
    return {"n_states": hmm.n_states, "n_symbols": hmm.n_symbols, "symbols": _listed(hmm.symbols),
            "startprob": [round(float(v), 6) for v in hmm.startprob_],
            "transmat": [[round(float(v), 6) for v in row] for row in hmm.transmat_],
            "emissions": emissions}


def _print_hmm(info: dict[str, Any]) -> None:
    """The text form of an HMM's summary: matrices as aligned rows, one line per state."""
    for key in ("bytes", "n_states", "n_symbols", "symbols"):
        print(f"  {key}: {info[key]}")
    m = info["n_states"]
    print("  startprob: " + "  ".join(f"{v:.4f}" for v in info["startprob"]))
    print(f"  transmat ({m}x{m}, row: from state, column: to state):")
    print("    from\\to " + "".join(f"{j:>9d}" for j in range(m)))
    for i, row in enumerate(info["transmat"]):
        print(f"    {i:>7d} " + "".join(f"{v:9.4f}" for v in row))
    print("  emissions (most probable symbols of each state):")
    for i, pairs in enumerate(info["emissions"]):
        print(f"    state {i}: " + ", ".join(f"{s!s} {p:.4f}" for s, p in pairs))


def _listed(symbols):
    """The first symbols of a (possibly huge) alphabet, for display; ``None`` stays ``None``."""
    if symbols is None or len(symbols) <= _LISTED_SYMBOLS:
        return symbols
    return [*symbols[:_LISTED_SYMBOLS], f"... ({len(symbols) - _LISTED_SYMBOLS:,} more)"]


def _describe_acc(acc) -> dict[str, Any]:
    """Summary of an accumulator: sizes and the memory its counts take. O(n + distinct triples)."""
    triples = acc.triples()
    return {"mode": acc.mode, "n_triples": acc.n_triples, "n_symbols": acc.n,
            "max_symbols": getattr(acc, "max_symbols", None),
            "distinct_triples": triples.nnz,
            "counts_mb": round(acc.memory_bytes() / 1e6, 3),
            "symbols": _listed(acc.symbols), "streams": len(acc.keys)}


def _inspect(args) -> int:
    from streamspec.core.checkpoint import CheckpointError

    path = Path(args.path)
    files = sorted([*path.rglob("*.ckpt"), *path.rglob("*" + HMM_SUFFIX)]) if path.is_dir() else [path]
    if not files:
        print(f"streamspec inspect: no checkpoint under {path}", file=sys.stderr)
        return 1
    status = 0
    for f in files:
        try:
            info = describe_checkpoint(f, top=args.top)
        except CheckpointError as exc:
            print(f"streamspec inspect: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.json:
            print(json.dumps(info, default=str))
        elif info["format"] == "streamspec.HiddenMarkovModel":
            print(f"{info['path']}: {info['format']} v{info['version']}")
            _print_hmm(info)
        else:
            print(f"{info['path']}: {info['format']} v{info['version']}")
            for key, value in info.items():
                if key not in ("path", "format", "version"):
                    print(f"  {key}: {value}")
    return status


# ---------------------------------------------------------------------------- decode


def _register_decode(subparsers) -> None:
    p = subparsers.add_parser(
        "decode",
        help="label every symbol of a file with its most likely hidden state (saved HMM)",
        description=(
            "Read the symbols of text files (the same record format options as learn) and "
            "print one line per symbol, tab-separated: the symbol and the hidden state of the "
            "most likely state path (Viterbi) of its sequence; with --posterior, instead of "
            "the state, the smoothed posterior Pr(state | whole sequence) of every state. A "
            "sequence is a stream key's symbols up to its end marker (--end-each-line: a "
            "line); with --key-field the key is printed first. Lines are printed in file "
            "order. The model is an HMM checkpoint: learn --states K --out MODEL saves it "
            "as MODEL.hmm."
        ),
        epilog="example: streamspec learn log.txt --encoding tokens --states 3 --out m.ckpt && "
               "streamspec decode --model m.ckpt.hmm log.txt --encoding tokens",
    )
    p.add_argument("--model", required=True, metavar="HMM",
                   help="an HMM checkpoint (learn --states K --out MODEL writes MODEL.hmm)")
    p.add_argument("files", nargs="+", metavar="FILE", help="text files (.gz allowed)")
    p.add_argument("--posterior", action="store_true",
                   help="print the smoothed posterior of every state instead of the Viterbi state")
    _format_options(p, kafka=False)
    p.set_defaults(func=_decode)


def _cell(value: Any) -> str:
    """A symbol or key as one tab-separated cell (tabs and line breaks escaped)."""
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace(
        "\r", "\\r")


def _decode(args) -> int:
    """Print the Viterbi state (or the smoothed posteriors) of every symbol of the files.

    Cost: O(T · m²) time and O(T · m) memory for T symbols and m states (every
    sequence is kept in memory until it is decoded), plus one lookup per symbol.
    Exit status 1, with a message on stderr, for a missing or invalid model or file,
    a symbol the model does not know, or no symbol at all; 2 for bad format options.
    """
    from connectors.files import FileSource
    from connectors.records import format_from_options
    from streamspec.core.checkpoint import CheckpointError
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    name = "streamspec decode"
    try:
        fmt = format_from_options(**_format_from_args(args, _FILE_FORMAT))
    except ValueError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    try:
        hmm = load_checkpoint_file(args.model, HiddenMarkovModel.load, what="HMM checkpoint")
    except (CheckpointError, OSError) as exc:
        print(f"{name}: {exc} (an HMM checkpoint is written by learn --states K --out MODEL "
              f"as MODEL{HMM_SUFFIX})", file=sys.stderr)
        return 1
    labels = hmm.symbols if hmm.symbols is not None else list(range(hmm.n_symbols))
    index = {s: i for i, s in enumerate(labels)}
    symbols: list = []  # every symbol record, in file order
    keys: list = []
    open_seq: dict[Any, list[int]] = {}  # key -> positions (in symbols) of its open sequence
    sequences: list[list[int]] = []
    try:
        check_input_files(args, fmt)
        source = FileSource(args.files, fmt)
        for rec, pos in source:
            if rec.symbol is not None:
                if rec.symbol not in index:
                    print(f"{name}: {pos.path}, line {pos.line}: symbol {rec.symbol!r} is not one of "
                          f"the model's {hmm.n_symbols} symbols (is --encoding the one used by "
                          f"learn?)", file=sys.stderr)
                    return 1
                open_seq.setdefault(rec.key, []).append(len(symbols))
                symbols.append(index[rec.symbol])
                keys.append(rec.key)
            if rec.end and rec.key in open_seq:
                sequences.append(open_seq.pop(rec.key))
    except (OSError, ValueError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    sequences.extend(open_seq.values())
    if source.errors:
        print(f"{name}: skipped {source.errors} malformed line(s): "
              f"{dict(source.errors_by_reason)}", file=sys.stderr)
    if not symbols:
        print(f"{name}: no symbol read from {', '.join(args.files)}", file=sys.stderr)
        return 1
    x = np.asarray(symbols, dtype=np.int64)
    m = hmm.n_states
    out = np.empty((len(x), m)) if args.posterior else np.empty(len(x), dtype=np.int64)
    raw = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)  # indices in
    for seq in sequences:
        at = np.asarray(seq, dtype=np.int64)
        try:
            out[at] = raw.predict_proba(x[at]) if args.posterior else raw.decode(x[at])[1]
        except ValueError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            return 1
    with_key = args.key_field is not None
    lines = []
    try:
        for t, i in enumerate(symbols):
            cells = [_cell(keys[t])] if with_key else []
            cells.append(_cell(labels[i]))
            if args.posterior:
                cells.extend(f"{v:.6f}" for v in out[t])
            else:
                cells.append(str(int(out[t])))
            lines.append("\t".join(cells))
            if len(lines) >= 10_000:
                sys.stdout.write("\n".join(lines) + "\n")
                lines.clear()
        if lines:
            sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. | head: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        os.close(devnull)
    return 0


# ---------------------------------------------------------------------------- standalone


def main(argv: list[str] | None = None) -> int:
    """Run one of these commands without the rest of the CLI."""
    from streamspec import cli  # no cycle: cli imports this module only when building its parser

    return cli.main(argv, cli.build_parser([register], description=None))


if __name__ == "__main__":
    sys.exit(main())

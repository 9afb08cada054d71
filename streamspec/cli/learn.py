"""``streamspec learn``: count the symbol triples of files and fit a model (and an HMM).

A one-pass read counts the files in chunks (:mod:`connectors.backfill`); with
``--state``, ``--follow``, ``--mode sequences`` or ``--max-symbols`` the files are
read record by record (:mod:`connectors.files`) by the ingest loop of
:mod:`connectors.ingest_loop`, which checkpoints the counts and file positions.
"""

from __future__ import annotations

import logging
import os
import signal
from collections import Counter
from typing import Any

from streamspec.cli.checkpoint_files import HMM_SUFFIX, load_checkpoint_file
from streamspec.cli.errors import CommandError, cli_spelling
from streamspec.cli.fitting import FollowedFits, check_estimator_settings, fit_and_save, show_progress
from streamspec.cli.options import (
    FILE_FORMAT,
    add_backfill_options,
    add_estimator_options,
    add_format_options,
    apply_toml,
    backfill_result_from_args,
    check_input_files,
    format_from_args,
    positive_float,
    positive_int,
    wants_backfill,
)
from streamspec.cli.progress_bar import CountingBar
from streamspec.core import defaults

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``learn`` to the CLI's subparsers (connectors is imported only when it runs)."""
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
    add_format_options(p, kafka=False)
    add_estimator_options(p, defaults=True)
    g = p.add_argument_group("output")
    g.add_argument("--out", metavar="MODEL",
                   help="save the fitted model here (without it, learn only counts into "
                        "--counts/--state, and refuses to run when nothing would be saved)")
    g.add_argument("--states", type=positive_int, metavar="K",
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
    g.add_argument("--save-interval", type=positive_float, default=_SAVE_INTERVAL, metavar="S",
                   help=f"--follow with --out: fit and save the model every S seconds while new "
                        f"records come (default {_SAVE_INTERVAL:g}); it is also saved on SIGTERM, "
                        f"SIGINT and --idle-timeout")
    g.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                   help="progress bar on stderr (auto: when stderr is a terminal)")
    add_backfill_options(p)  # --dask SCHEDULER|local, --workers N, --chunk-mb MB
    p.set_defaults(func=_learn, _parser=p)


_SAVE_INTERVAL = 60.0  # learn --follow --out: seconds between periodic model saves


def _one_pass(args) -> bool:
    """Whether ``learn`` reads its files once with nothing to resume or cap (chunked counting)."""
    return (not args.follow and not args.state and (args.mode or "sliding") == "sliding"
            and args.max_symbols is None)


def _check_outputs(args) -> None:
    """Refuse a run whose work would be thrown away, or outputs that cannot be written.

    Without ``--out`` no fitted model could be kept: with ``--counts`` or ``--state``
    ``learn`` only counts (as ``--no-fit``), else it refuses before counting, as it
    does ``--states`` without ``--out``. ``--no-fit`` alone counts and reports.
    """
    if not args.out and not args.no_fit:
        if args.states:
            raise CommandError(f"--states {args.states} fits an HMM saved beside the model: give "
                               f"--out MODEL (the HMM goes to MODEL{HMM_SUFFIX})", status=2)
        if not (args.counts or args.state):
            raise CommandError("nothing would be saved: give --out MODEL to keep the fitted "
                               "model (e.g. --out model.ckpt), or --counts FILE, --state FILE "
                               "or --no-fit to only count", status=2)
        logging.getLogger("streamspec.learn").info(
            "event=count-only reason=no --out (the counts go to --counts/--state, nothing is "
            "fitted)")
        args.no_fit = True
    for flag in ("out", "counts", "state"):
        path = getattr(args, flag, None)
        if path and os.path.isdir(path):
            raise IsADirectoryError(f"--{flag} {path}: is a directory; give a file name, "
                                    f"e.g. {os.path.join(path, 'model.ckpt')}")


_NAME = "streamspec learn"


def _learn(args) -> int:
    """Count the files' records (chunked, or record by record with resume/follow) and fit."""
    fmt = _record_format(args)
    # refuse what would be thrown away, contradictions and bad input before anything is
    # counted (or a state or model overwritten)
    _check_outputs(args)
    if not args.no_fit:
        check_estimator_settings(args)
    _new_accumulator(args)  # a bad --window (for --mode, --max-symbols) before anything is read
    check_input_files(args, fmt)
    if not wants_backfill(args) and _one_pass(args):
        # nothing to follow or resume: counting by chunks gives the same counts as reading
        # record by record, 10 to 50 times faster (docs/benchmarks.md, "learn --workers")
        args.workers = 1
    report = _malformed_report(args)
    if wants_backfill(args):  # chunks counted in this process, parallel processes or on Dask
        return _learn_by_chunks(args, fmt, report)
    return _learn_by_records(args, fmt, report)


def _count_windows(args, fmt, labels: list, L: int) -> Any:
    """The second pass of ``--window auto`` (or ``L >= 2``) by chunks: the files' windows of
    ``L`` symbols, the alphabet ``labels`` (of the first pass) given, so that every chunk has
    it whole and the chunks join exactly (``concat``). Its malformed lines were reported by the first pass.
    Time of the first pass, times about L for the grams. O(distinct grams) memory."""
    log = logging.getLogger("streamspec.learn")
    log.info("event=window-pass symbols=%d window=%d (the chunks counted triples to learn the "
             "alphabet; they are counted again with windows; --window 1 keeps the triples)",
             len(labels), L)
    try:
        return backfill_result_from_args(args, fmt, alphabet=labels, window=L).acc
    except (ValueError, ImportError) as exc:
        raise CommandError(str(exc), status=2) from None


def _malformed_report(args) -> Any:
    from connectors.malformed import MalformedReport

    try:
        return MalformedReport(args.max_malformed, what="lines")
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None


def _record_format(args) -> Any:
    """The record format of the TOML file and flags (:class:`CommandError`, status 2, if bad)."""
    if args.config:
        try:
            apply_toml(args, args._parser, "learn")
        except (OSError, ValueError) as exc:
            raise CommandError(str(exc), status=2) from None
    from connectors.records import format_from_options

    try:
        return format_from_options(**format_from_args(args, FILE_FORMAT))
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None


def _learn_by_chunks(args, fmt, report) -> int:
    """Count the files in chunks (here, in processes or on Dask), save the counts, fit."""
    from connectors.malformed import TooManyMalformed

    bar = CountingBar(list(args.files), show_progress(args), follow=False)
    lines_before: Counter = Counter()  # lines of each file in the chunks reported so far

    def on_chunk(res) -> None:  # the chunks' malformed lines, in file order
        samples = [(f"{p}, line {n + lines_before[p]}", r, d) for p, n, r, d in res.samples]
        lines_before.update(res.lines_by_path)
        report.add_counts(res.errors, res.lines, samples)

    try:
        result = backfill_result_from_args(args, fmt, progress=bar.bytes_done, on_chunk=on_chunk)
    except TooManyMalformed as exc:
        bar.bytes_done(1, 1)
        raise CommandError(str(exc)) from None
    except (ValueError, ImportError) as exc:
        raise CommandError(str(exc), status=2) from None
    acc = result.acc
    window = args.window if args.window is not None else defaults.COUNT_WINDOW
    if window == "auto":
        from streamspec.core.windows import auto_window

        L = auto_window(acc.n)
        if L > 1:  # the chunks counted triples, this alphabet needs windows: count them now
            acc = _count_windows(args, fmt, acc.symbols, L)
        # the counts are those "auto" keeps for this alphabet (exact reductions end at L):
        # the setting says so, so that merges and a resumed state go on as under "auto"
        acc.window = "auto"
        acc._set_level(acc.current_window)
    elif window > 1:
        # why two passes: a chunk's window labels must be the whole file's alphabet so that the
        # chunks join exactly (concat); the first pass (triples) gave that alphabet
        acc = _count_windows(args, fmt, acc.symbols, window)
    return _counted(args, acc, result.records, report)


def _counted(args, acc, records: int, report, fit: bool = True,
             followed: FollowedFits | None = None) -> int:
    """After counting: the log line, the malformed summary and limit, the counts, the fit.

    ``fit=False``: a read stopped before its end (it resumes from ``--state``): the
    counts are saved, nothing is fitted or judged. ``followed``: ``--follow``'s (the fit
    starts from the last one's state and the weights its records taught).
    """
    from connectors.malformed import TooManyMalformed

    log = logging.getLogger("streamspec.learn")
    log.info("event=counted records=%d triples=%d symbols=%d malformed=%d counts_mb=%.1f",
             records, int(acc.n_triples), acc.n, report.total, acc.memory_bytes() / 1e6)
    report.log_summary()
    if fit:
        try:
            report.check(final=True)
        except TooManyMalformed as exc:
            raise CommandError(str(exc)) from None
    if args.counts:
        acc.save(args.counts)
    return 0 if args.no_fit or not fit else fit_and_save(args, acc, log, followed=followed)


def _load_state(args) -> Any:
    """The ``--state`` to resume (a new one if there is none); :class:`CommandError` if unreadable."""
    from connectors.state import SourceState
    from streamspec.core.checkpoint import CheckpointError

    if not (args.state and os.path.exists(args.state)):
        return SourceState(acc=_new_accumulator(args))
    try:
        state = load_checkpoint_file(args.state, SourceState.load,
                                     what="learn state checkpoint (--state)")
    except CheckpointError as exc:
        raise CommandError(str(exc)) from None
    log = logging.getLogger("streamspec.learn")
    log.info("event=resume state=%s records=%d", args.state, state.records)
    if getattr(state.acc, "max_symbols", None) != args.max_symbols:
        log.warning("event=max-symbols-ignored state_max_symbols=%s flag=%s (the state's cap stays)",
                    getattr(state.acc, "max_symbols", None), args.max_symbols)
    if args.window is not None and state.acc.window != args.window:
        log.warning("event=window-ignored state_window=%s flag=%s (the state's window stays: its "
                    "counts are of that window)", state.acc.window, args.window)
    return state


def _learn_by_records(args, fmt, report) -> int:
    """Read the files record by record (resuming ``--state``, following), save the counts, fit."""
    from connectors.files import FileSource
    from connectors.malformed import TooManyMalformed

    state = _load_state(args)
    sources: list = []

    def on_error(info, exc) -> None:  # in the reader thread: raising stops the reading
        report.skipped(f"{info.path}, line {info.line}", exc, seen=sources[0].lines)

    try:
        source = FileSource(
            args.files, fmt, follow=args.follow, poll_interval=args.poll_interval,
            start=state.positions or None, idle_timeout=args.idle_timeout, on_error=on_error,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    sources.append(source)
    log = logging.getLogger("streamspec.learn")
    log.info("event=%s files=%s", "following" if args.follow else "reading", ",".join(args.files))
    followed = None
    if args.follow and args.out and not args.no_fit:  # saves periodically: weights learned online
        from connectors.record_scoring import RecordScorer

        followed = FollowedFits(RecordScorer(state.acc))
    try:
        signum = _ingest(args, state, source, log, followed)
    except TooManyMalformed as exc:
        raise CommandError(str(exc)) from None
    report.seen = max(report.seen, source.lines)
    if signum is not None:
        log.info("event=stopped signal=%s", signal.Signals(signum).name)
        if not args.follow or args.no_fit or not args.out:
            # a one-pass read stopped early resumes from --state: no model of part of the files
            return _counted(args, state.acc, state.records, report, fit=False)
        # following has no end: stopping is how it ends, so the model of everything is saved
    return _counted(args, state.acc, state.records, report, followed=followed)


def _ingest(args, state, source, log: logging.Logger,
            followed: FollowedFits | None = None) -> int | None:
    """Learn ``source`` into ``state`` until its end or SIGTERM/SIGINT; the signal, if any.

    ``state`` is checkpointed to ``--state`` on the way (and at the end); with
    ``--follow --out`` the model is also saved every ``--save-interval`` seconds, and
    from the first save on every record is predicted by the model saved before it is
    learned (``followed``'s scorer): the weights the next save starts from are the ones they
    taught, and the save refits from the last fit's state.
    """
    from connectors.ingest_loop import IngestLoop

    progress = CountingBar(list(args.files), show_progress(args), args.follow)

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
        source, state.acc, records=state.records, positions=state.positions, errors=state.errors,
        checkpoint=checkpoint if args.state else None, checkpoint_every=args.checkpoint_every,
        checkpoint_interval=args.checkpoint_interval,
        save=(lambda: fit_and_save(args, state.acc, log, final=False, followed=followed))
        if periodic else None,
        save_interval=args.save_interval, progress=progress.update,
        learned=followed.scorer.add if followed is not None else None)
    stop: list[int] = []

    def on_signal(signum, frame):
        stop.append(signum)
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
    return stop[0] if stop else None


def _new_accumulator(args):
    """The empty counts of the settings (:class:`CommandError`, status 2, for a bad ``--window``)."""
    from streamspec.streaming.accumulator import MomentAccumulator

    kwargs = {"window": args.window} if getattr(args, "window", None) is not None else {}
    if getattr(args, "max_symbols", None) is not None:
        kwargs["max_symbols"] = args.max_symbols
    try:
        return MomentAccumulator(mode=args.mode, **kwargs)
    except ValueError as exc:
        raise CommandError(f"--window {args.window}: {cli_spelling(str(exc))}", status=2) from None

"""``streamspec learn``: count the symbol triples of files and fit a model (and an HMM).

A one-pass read counts the files in chunks (:mod:`connectors.backfill`); with
``--state``, ``--follow``, ``--mode sequences`` or ``--max-symbols`` the files are
read record by record (:mod:`connectors.files`) by the ingest loop of
:mod:`connectors.ingest_loop`, which checkpoints the counts and file positions.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from typing import Any

import numpy as np

from streamspec.cli.checkpoint_files import hmm_path, load_checkpoint_file, model_rank
from streamspec.cli.options import (
    FILE_FORMAT,
    add_backfill_options,
    add_estimator_options,
    add_format_options,
    apply_toml,
    backfill_result_from_args,
    check_input_files,
    estimator_default,
    format_from_args,
    positive_float,
    positive_int,
    wants_backfill,
)

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
    g.add_argument("--out", metavar="MODEL", help="save the fitted model here")
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



_NAME = "streamspec learn"


def _learn(args) -> int:
    """Count the files' records (chunked, or record by record with resume/follow) and fit."""
    fmt, status = _record_format(args)
    if fmt is None:
        return status
    # refuse bad input before anything is counted (or a state or model overwritten)
    check_input_files(args, fmt)
    _check_outputs(args)
    if not wants_backfill(args) and _one_pass(args):
        # nothing to follow or resume: counting by chunks gives the same counts as reading
        # record by record, 10 to 50 times faster (docs/benchmarks.md, "learn --workers")
        args.workers = 1
    if wants_backfill(args):  # chunks counted in this process, parallel processes or on Dask
        return _learn_by_chunks(args, fmt)
    return _learn_by_records(args, fmt)


def _record_format(args) -> tuple[Any, int]:
    """The record format of the TOML file and flags, or ``(None, exit status)`` after a message."""
    if args.config:
        try:
            apply_toml(args, args._parser, "learn")
        except (OSError, ValueError) as exc:
            print(f"{_NAME}: {exc}", file=sys.stderr)
            return None, 2
    from connectors.records import format_from_options

    try:
        return format_from_options(**format_from_args(args, FILE_FORMAT)), 0
    except ValueError as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return None, 2


def _show_progress(args) -> bool:
    return args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())


def _learn_by_chunks(args, fmt) -> int:
    """Count the files in chunks (here, in processes or on Dask), save the counts, fit."""
    bar = _Progress(list(args.files), _show_progress(args), follow=False)
    try:
        result = backfill_result_from_args(args, fmt, progress=bar.bytes_done)
    except (ValueError, ImportError, OSError) as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
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


def _load_state(args) -> Any:
    """The ``--state`` to resume (a new one if there is none), or ``None`` after a message."""
    from connectors.state import SourceState
    from streamspec.core.checkpoint import CheckpointError

    if not (args.state and os.path.exists(args.state)):
        return SourceState(acc=_new_accumulator(args))
    try:
        state = load_checkpoint_file(args.state, SourceState.load,
                                     what="learn state checkpoint (--state)")
    except CheckpointError as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return None
    log = logging.getLogger("streamspec.learn")
    log.info("event=resume state=%s records=%d", args.state, state.records)
    if getattr(state.acc, "max_symbols", None) != args.max_symbols:
        log.warning("event=max-symbols-ignored state_max_symbols=%s flag=%s (the state's cap stays)",
                    getattr(state.acc, "max_symbols", None), args.max_symbols)
    return state


def _learn_by_records(args, fmt) -> int:
    """Read the files record by record (resuming ``--state``, following), save the counts, fit."""
    from connectors.files import FileSource

    state = _load_state(args)
    if state is None:
        return 1
    try:
        source = FileSource(
            args.files, fmt, follow=args.follow, poll_interval=args.poll_interval,
            start=state.positions or None, idle_timeout=args.idle_timeout,
        )
    except (OSError, ValueError) as exc:
        print(f"{_NAME}: {exc}", file=sys.stderr)
        return 1
    log = logging.getLogger("streamspec.learn")
    log.info("event=%s files=%s", "following" if args.follow else "reading", ",".join(args.files))
    signum = _ingest(args, state, source, log)
    acc = state.acc
    log.info("event=counted records=%d triples=%d symbols=%d malformed=%d counts_mb=%.1f",
             state.records, int(acc.n_triples), acc.n, source.errors, acc.memory_bytes() / 1e6)
    if args.counts:
        acc.save(args.counts)
    if signum is not None:
        log.info("event=stopped signal=%s", signal.Signals(signum).name)
        if not args.follow or args.no_fit or not args.out:
            # a one-pass read stopped early resumes from --state: no model of part of the files
            return 0
        # following has no end: stopping is how it ends, so the model of everything is saved
    if args.no_fit:
        return 0
    return _fit_and_save(args, acc, log)


def _ingest(args, state, source, log: logging.Logger) -> int | None:
    """Learn ``source`` into ``state`` until its end or SIGTERM/SIGINT; the signal, if any.

    ``state`` is checkpointed to ``--state`` on the way (and at the end); with
    ``--follow --out`` the model is also saved every ``--save-interval`` seconds.
    """
    from connectors.ingest_loop import IngestLoop

    progress = _Progress(list(args.files), _show_progress(args), args.follow)

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
        save=(lambda: _fit_and_save(args, state.acc, log, final=False)) if periodic else None,
        save_interval=args.save_interval, progress=progress.update)
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
        model = model.replace(metadata=reading_metadata(args))
        model.save(args.out)
        log.info("event=saved model=%s triples=%d", args.out, int(acc.n_triples))
    if getattr(args, "states", None):
        return _fit_and_save_hmm(args, acc, log)
    return 0



def reading_metadata(args) -> dict[str, str]:
    """How the files' symbols were read, saved with the model so that ``predict`` reads alike.

    >>> import argparse
    >>> reading_metadata(argparse.Namespace(encoding=None, lowercase=True))
    {'encoding': 'chars', 'lowercase': 'true'}
    """
    meta = {"encoding": getattr(args, "encoding", None) or "chars"}
    if getattr(args, "lowercase", None):
        meta["lowercase"] = "true"
    return meta


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

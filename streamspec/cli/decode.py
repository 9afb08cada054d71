"""``streamspec decode``: label every symbol of files with a hidden state of a saved HMM."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import numpy as np

from streamspec.cli.checkpoint_files import HMM_SUFFIX, load_checkpoint_file
from streamspec.cli.errors import CommandError
from streamspec.cli.options import FILE_FORMAT, add_format_options, check_input_files, format_from_args

__all__ = ["register"]


def register(subparsers) -> None:
    """Add ``decode`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "decode",
        help="label every symbol of a file with its most likely hidden state (saved HMM)",
        description=(
            "Read the symbols of text files (the same record format options as learn) and "
            "print one line per symbol, tab-separated: the symbol and the hidden state of the "
            "most likely state path (Viterbi) of its sequence; with --posterior, instead of "
            "the state, the smoothed posterior Pr(state | whole sequence) of every state. A "
            "symbol the model does not know (a word of another text) is decoded without "
            "evidence at its position: its state comes from its neighbours (one WARNING line "
            "says how many). A "
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
    add_format_options(p, kafka=False)
    p.set_defaults(func=_decode)


def _cell(value: Any) -> str:
    """A symbol or key as one tab-separated cell (tabs and line breaks escaped)."""
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace(
        "\r", "\\r")


log = logging.getLogger("streamspec.decode")


def _decode(args) -> int:
    """Print the Viterbi state (or the smoothed posteriors) of every symbol of the files.

    Cost: O(T · m²) time and O(T · m) memory for T symbols and m states (every
    sequence is kept in memory until it is decoded), plus one lookup per symbol.
    A symbol the model does not know is decoded with no evidence at its position
    (its state comes from its neighbours; ``"<other>"`` if the model has it), and
    one WARNING line says how many and which. Exit status 1, with one error line,
    for a missing or invalid model or file, too many malformed lines, or no symbol
    at all; 2 for bad format options.
    """
    from connectors.records import format_from_options
    from streamspec.core.checkpoint import CheckpointError
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    try:
        fmt = format_from_options(**format_from_args(args, FILE_FORMAT))
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None
    try:
        hmm = load_checkpoint_file(args.model, HiddenMarkovModel.load, what="HMM checkpoint")
    except (CheckpointError, OSError) as exc:
        raise CommandError(f"{exc} (an HMM checkpoint is written by learn --states K --out MODEL "
                           f"as MODEL{HMM_SUFFIX})") from None
    labels = hmm.symbols if hmm.symbols is not None else list(range(hmm.n_symbols))
    symbols, keys, sequences, names = _read_sequences(args, fmt, hmm, labels)
    out = _states(args, hmm, symbols, sequences)
    _print_lines(args, names, symbols, keys, out)
    return 0


def _read_sequences(args, fmt, hmm, labels) -> tuple[list[int], list, list[list[int]], list]:
    """Every symbol (an index of ``labels``, -1 if unknown) and key in file order, the
    sequences, and every symbol as read (to print).

    A sequence is the positions (in the symbol list) of one key's symbols up to its end.
    """
    from connectors.files import FileSource
    from connectors.malformed import MalformedReport, TooManyMalformed
    from streamspec.core.symbol_input import OTHER, UnknownSymbols

    index = {s: i for i, s in enumerate(labels)}
    other = index.get(OTHER, -1)
    unknown: list = []
    symbols: list[int] = []  # every symbol record, in file order
    names: list = []
    keys: list = []
    open_seq: dict[Any, list[int]] = {}  # key -> positions (in symbols) of its open sequence
    sequences: list[list[int]] = []
    report = _report(args, MalformedReport)
    check_input_files(args, fmt)
    source = FileSource(args.files, fmt, on_error=lambda info, exc: report.skipped(
        f"{info.path}, line {info.line}", exc, seen=source.lines))
    try:
        for rec, _ in source:
            if rec.symbol is not None:
                i = index.get(rec.symbol)
                if i is None:
                    unknown.append(rec.symbol)
                    i = other
                open_seq.setdefault(rec.key, []).append(len(symbols))
                symbols.append(i)
                names.append(rec.symbol)
                keys.append(rec.key)
            if rec.end and rec.key in open_seq:
                sequences.append(open_seq.pop(rec.key))
        report.seen = max(report.seen, source.lines)
        report.log_summary()
        report.check(final=bool(report.total))
    except TooManyMalformed as exc:
        raise CommandError(str(exc)) from None
    sequences.extend(open_seq.values())
    if unknown:
        tally = UnknownSymbols()
        tally.add(unknown, f"read as {OTHER!r}" if other >= 0 else
                  "decoded without evidence at their positions", hmm.n_symbols)
        log.warning("event=unknown-symbols %s (is --encoding the one used by learn?)",
                    tally.message())
    if not symbols:
        raise CommandError(f"no symbol read from {', '.join(args.files)}")
    return symbols, keys, sequences, names


def _report(args, cls) -> Any:
    try:
        return cls(args.max_malformed, what="lines")
    except ValueError as exc:
        raise CommandError(str(exc), status=2) from None


def _states(args, hmm, symbols: list[int], sequences: list[list[int]]) -> np.ndarray:
    """The Viterbi state (or, with ``--posterior``, the posteriors) of every symbol (-1: unknown)."""
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    x = np.asarray(symbols, dtype=np.int64)
    m = hmm.n_states
    out = np.empty((len(x), m)) if args.posterior else np.empty(len(x), dtype=np.int64)
    raw = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)  # indices in
    for seq in sequences:
        at = np.asarray(seq, dtype=np.int64)
        try:
            out[at] = raw.predict_proba(x[at]) if args.posterior else raw.decode(x[at])[1]
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    return out


def _print_lines(args, names: list, symbols: list[int], keys: list, out: np.ndarray) -> None:
    """One tab-separated line per symbol (as read), in blocks; a closed pipe ends quietly."""
    with_key = args.key_field is not None
    lines = []
    try:
        for t in range(len(symbols)):
            cells = [_cell(keys[t])] if with_key else []
            cells.append(_cell(names[t]))
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

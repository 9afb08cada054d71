"""``streamspec decode``: label every symbol of files with a hidden state of a saved HMM."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from streamspec.cli.checkpoint_files import HMM_SUFFIX, load_checkpoint_file
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


_NAME = "streamspec decode"


class _Stop(Exception):
    """A step of decode failed: its message is printed, the command exits with ``status``."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def _decode(args) -> int:
    """Print the Viterbi state (or the smoothed posteriors) of every symbol of the files.

    Cost: O(T · m²) time and O(T · m) memory for T symbols and m states (every
    sequence is kept in memory until it is decoded), plus one lookup per symbol.
    Exit status 1, with a message on stderr, for a missing or invalid model or file,
    a symbol the model does not know, or no symbol at all; 2 for bad format options.
    """
    from connectors.records import format_from_options
    from streamspec.core.checkpoint import CheckpointError
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    try:
        try:
            fmt = format_from_options(**format_from_args(args, FILE_FORMAT))
        except ValueError as exc:
            raise _Stop(str(exc), 2) from None
        try:
            hmm = load_checkpoint_file(args.model, HiddenMarkovModel.load, what="HMM checkpoint")
        except (CheckpointError, OSError) as exc:
            raise _Stop(f"{exc} (an HMM checkpoint is written by learn --states K --out MODEL "
                        f"as MODEL{HMM_SUFFIX})") from None
        labels = hmm.symbols if hmm.symbols is not None else list(range(hmm.n_symbols))
        symbols, keys, sequences = _read_sequences(args, fmt, hmm, labels)
        out = _states(args, hmm, symbols, sequences)
    except _Stop as stop:
        print(f"{_NAME}: {stop}", file=sys.stderr)
        return stop.status
    _print_lines(args, labels, symbols, keys, out)
    return 0


def _read_sequences(args, fmt, hmm, labels) -> tuple[list[int], list, list[list[int]]]:
    """Every symbol (as an index of ``labels``) and key in file order, and the sequences.

    A sequence is the positions (in the symbol list) of one key's symbols up to its end.
    """
    from connectors.files import FileSource

    index = {s: i for i, s in enumerate(labels)}
    symbols: list[int] = []  # every symbol record, in file order
    keys: list = []
    open_seq: dict[Any, list[int]] = {}  # key -> positions (in symbols) of its open sequence
    sequences: list[list[int]] = []
    try:
        check_input_files(args, fmt)
        source = FileSource(args.files, fmt)
        for rec, pos in source:
            if rec.symbol is not None:
                if rec.symbol not in index:
                    raise _Stop(f"{pos.path}, line {pos.line}: symbol {rec.symbol!r} is not one "
                                f"of the model's {hmm.n_symbols} symbols (is --encoding the one "
                                f"used by learn?)")
                open_seq.setdefault(rec.key, []).append(len(symbols))
                symbols.append(index[rec.symbol])
                keys.append(rec.key)
            if rec.end and rec.key in open_seq:
                sequences.append(open_seq.pop(rec.key))
    except (OSError, ValueError) as exc:
        raise _Stop(str(exc)) from None
    sequences.extend(open_seq.values())
    if source.errors:
        print(f"{_NAME}: skipped {source.errors} malformed line(s): "
              f"{dict(source.errors_by_reason)}", file=sys.stderr)
    if not symbols:
        raise _Stop(f"no symbol read from {', '.join(args.files)}")
    return symbols, keys, sequences


def _states(args, hmm, symbols: list[int], sequences: list[list[int]]) -> np.ndarray:
    """The Viterbi state (or, with ``--posterior``, the posteriors) of every symbol."""
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
            raise _Stop(str(exc)) from None
    return out


def _print_lines(args, labels, symbols: list[int], keys: list, out: np.ndarray) -> None:
    """One tab-separated line per symbol, in blocks; a closed pipe ends the output quietly."""
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

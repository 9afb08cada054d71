"""``streamspec predict``: next-symbol distributions of a saved model, one JSON line per history."""

from __future__ import annotations

import json
import logging
import sys

import numpy as np

from streamspec.cli.checkpoint_files import load_checkpoint_file

__all__ = ["register", "split_history"]


def register(subparsers) -> None:
    """Add ``predict`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "predict",
        help="print next-symbol distributions of a saved model",
        description=(
            "Print one JSON line with the distribution of the next symbol after a history. "
            "The positional arguments form ONE history (joined by spaces, as typed); "
            "without them every line of standard input is a history. A history is split "
            "into symbols by --encoding: auto (the default) splits it the way learn read the "
            "model's symbols (recorded in the model: characters for --encoding chars, "
            "learn's default, else at whitespace; lower-cased if learned with "
            "--lowercase); for a model without that record, characters when every symbol "
            "is one character, else at whitespace. Symbols the model does not know are "
            "read as '<other>' when the model has it, else skipped; they are listed "
            "(\"unknown\") and one WARNING line says how many. Output is UTF-8 JSON."
        ),
        epilog="example: streamspec learn alice.txt --out m.ckpt && "
               "streamspec predict --model m.ckpt 'Alic'",
    )
    p.add_argument("--model", required=True, metavar="CKPT",
                   help="a model checkpoint (learn --out, or <state-dir>/<topic>/model.ckpt)")
    p.add_argument("histories", nargs="*", metavar="HISTORY",
                   help="the history, one or more words forming one sequence (default: "
                        "every line of standard input is a history)")
    p.add_argument("--encoding", choices=["auto", "chars", "tokens", "words"], default="auto",
                   help="how a history is split into symbols: auto (default: as learn read the "
                        "model's symbols), chars (every character), "
                        "tokens (whitespace-separated), words (words and punctuation marks)")
    p.add_argument("--top", type=int, default=None, metavar="K",
                   help=f"list only the K most probable symbols (0: all; default: all for up "
                        f"to {_LIST_ALL_MAX} symbols, else the {_TOP_DEFAULT} most probable)")
    p.set_defaults(func=_predict)


_LIST_ALL_MAX = 100  # predict: alphabets up to this size are listed whole by default
_TOP_DEFAULT = 20  # predict: symbols listed by default for larger alphabets


def split_history(text: str, encoding: str, symbols, metadata=None) -> list[str]:
    """The symbols of one history: characters or whitespace-separated tokens.

    ``encoding="auto"`` reads the history as the model's symbols were read by
    ``learn`` (its ``metadata``: ``encoding`` chars → characters, words → words and
    punctuation marks, any other → whitespace-separated tokens; ``lowercase``); for
    a model without that record,
    characters when every label of ``symbols`` (the model's alphabet) is a
    one-character string, else tokens.

    Examples
    --------
    >>> split_history("Alic", "auto", ["A", "l", "i", "c", "e", " "])
    ['A', 'l', 'i', 'c']
    >>> split_history("red green", "auto", ["red", "green"])
    ['red', 'green']
    >>> split_history("a b", "tokens", ["a", "b"])
    ['a', 'b']
    >>> split_history("The Cat", "auto", ["the", "cat"], {"encoding": "tokens", "lowercase": "true"})
    ['the', 'cat']
    >>> split_history("ab", "auto", ["ab", "a"], {"encoding": "chars"})
    ['a', 'b']
    >>> split_history("Alice, don't", "auto", [], {"encoding": "words"})
    ['Alice', ',', "don't"]
    """
    metadata = metadata or {}
    if encoding == "auto":
        if metadata.get("lowercase") == "true":
            text = text.lower()
        if "encoding" in metadata:
            encoding = metadata["encoding"] if metadata["encoding"] in ("chars", "words") else "tokens"
        else:
            chars = symbols is not None and all(isinstance(s, str) and len(s) == 1
                                                for s in symbols)
            encoding = "chars" if chars else "tokens"
    if encoding == "words":
        from connectors.records import WORD_PATTERN

        return WORD_PATTERN.findall(text)
    return list(text) if encoding == "chars" else text.split()


def _predict(args) -> int:
    """One JSON line per history. O(window·k² + n·k + n log n) per history for n symbols, rank k."""
    from streamspec.core.model import ObservableOperatorModel
    from streamspec.core.symbol_input import OTHER, UnknownSymbols

    model = load_checkpoint_file(args.model, ObservableOperatorModel.load)
    labels = model.symbols if model.symbols is not None else list(range(model.n_symbols))
    index = {str(s): i for i, s in enumerate(labels)}
    # the arguments are one history, as typed: predict --model m the cat == predict 'the cat'
    lines = [" ".join(args.histories)] if args.histories else (
        ln.rstrip("\r\n") for ln in sys.stdin)
    top = args.top if args.top is not None else (
        0 if len(labels) <= _LIST_ALL_MAX else _TOP_DEFAULT)
    tally = UnknownSymbols()
    other = index.get(OTHER)
    for line in lines:
        symbols = split_history(line, args.encoding, model.symbols, model.metadata)
        unknown = [s for s in symbols if s not in index]
        if unknown:  # as the model's own input check: read as "<other>", else skipped
            tally.add(unknown, "skipped" if other is None else f"read as {OTHER!r}",
                      model.n_symbols)
        known = [index[s] if s in index else other for s in symbols
                 if s in index or other is not None]
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
        # labels as they are (UTF-8 output): "Dantès", not "Dant\u00e8s"
        print(json.dumps(out, ensure_ascii=False))
    if tally.count:
        logging.getLogger("streamspec.predict").warning("event=unknown-symbols %s",
                                                        tally.message())
    return 0

"""Options shared by the subcommands: record format, estimator settings, validators, TOML.

Nothing here imports :mod:`connectors` when a parser is built (``streamspec --help``
must not load it, nor kafka-python): the functions that need it import it when a
command runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

__all__ = [
    "CHUNK_MB", "FILE_FORMAT", "KAFKA_FORMAT", "PARALLEL_MIN_MB", "add_backfill_options",
    "add_estimator_options", "add_format_options", "apply_toml", "check_input_files",
    "malformed_limit",
    "backfill_result_from_args", "estimator_default", "format_from_args", "parse_rank",
    "parse_window", "positive_float", "positive_int", "wants_backfill",
]


def add_format_options(p: argparse.ArgumentParser, kafka: bool) -> argparse._ArgumentGroup:
    """Add the record format group: file encodings (``kafka=False``) or message values.

    Returns the group, for a command's own format options (one "record format" group).
    """
    g = p.add_argument_group("record format")
    if not kafka:
        g.add_argument("--encoding", choices=["chars", "tokens", "words", "csv", "jsonl"],
                       help="how lines hold symbols: chars (default: every character; a line "
                            "break is read as a space, so that wrapped prose keeps its words "
                            "apart, a blank line as nothing), tokens (whitespace-separated), "
                            "words (words and punctuation marks, each a symbol: 'Alice, "
                            "don't!' is Alice , don't !), csv, jsonl (one record a line)")
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
    what = "message" if kafka else "line"
    g.add_argument("--max-malformed", type=malformed_limit, metavar="LIMIT",
                   help=f"a {what} that cannot be read (not UTF-8, too long, not JSON, ...) is "
                        f"skipped with a WARNING naming where and why; more than LIMIT of them "
                        f"is an error: a count N, or a share P%% of the {what}s read (counted "
                        f"over at least 100), or none. Default: "
                        + ("none (they go to the dead-letter topic); past the limit the daemon "
                           "checkpoints, commits and exits with status 3" if kafka else
                           "1%%; a file whose every line is malformed fails too"))
    return g


def malformed_limit(text: str) -> str:
    """An argparse type: a ``--max-malformed`` value (a count, a share ``P%`` or ``none``).

    >>> malformed_limit("5%")
    '5%'
    """
    from connectors.malformed import parse_limit  # when parsing only: --help imports nothing

    try:
        parse_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def format_from_args(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The record format options among ``names`` that were given (for ``format_from_options``)."""
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


KAFKA_FORMAT = ("value_format", "key_field", "symbol_field", "time_field", "end_field",
                 "lowercase", "int_symbols", "max_bytes")
FILE_FORMAT = ("encoding", "keep", "end_each_line", "delimiter", "key_field", "symbol_field",
                "time_field", "end_field", "lowercase", "int_symbols", "max_bytes")


def estimator_default(name: str) -> Any:
    """The default of MEstimator's parameter ``name`` (the single source of every default)."""
    import inspect

    from streamspec.core.mestimator import MEstimator

    param = inspect.signature(MEstimator.__init__).parameters.get(name)
    return None if param is None else param.default


def add_estimator_options(p: argparse.ArgumentParser, defaults: bool) -> None:
    """Add the estimator group (``defaults``: ``--mode`` defaults to sliding, else unset)."""
    # every estimator setting defaults to None: MEstimator's own default (connectors.config
    # .mestimator_params), so that the CLI and the daemon follow the estimator, in one place
    g = p.add_argument_group("estimator (unset: MEstimator's own defaults)")
    g.add_argument("--rank", type=parse_rank,
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
    g.add_argument("--max-symbols", type=positive_int, metavar="N",
                   help="cap the alphabet at N symbols: later new symbols are counted as "
                        "'<other>' (bounds memory on open vocabularies; default: no cap)")
    g.add_argument("--window", type=parse_window, metavar="L",
                   help="count windows of L symbols before and after every symbol, not only "
                        "triples (L = 1), so that the HMM of the predictor (and --states) can "
                        "have more hidden states than the alphabet has symbols; 'auto' (the "
                        "default): the smallest L with n^L >= 128 for n symbols (1, triples, "
                        "from 128 symbols on). Read by chunks (--workers/--dask, or a plain "
                        "one-pass learn) the files are counted as triples, then, for L >= 2, "
                        "as windows in a second pass with the alphabet of the first; at most "
                        "4,095 symbols at L = 2, 511 at L = 3")


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1.

    Examples
    --------
    >>> positive_int("3")
    3
    """
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {v}")
    return v


def parse_rank(text: str) -> int | str:
    """An argparse type: a rank >= 1 or ``'auto'``.

    Examples
    --------
    >>> parse_rank("auto"), parse_rank("2")
    ('auto', 2)
    """
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


def parse_window(text: str) -> int | str:
    """An argparse type: a count window L (an integer in 1..10) or ``'auto'``.

    Examples
    --------
    >>> parse_window("auto"), parse_window("3")
    ('auto', 3)
    """
    from streamspec.core.windows import MAX_WINDOW

    if text == "auto":
        return text
    try:
        L = int(text)
    except ValueError:
        L = 0
    if not 1 <= L <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"window must be an integer in 1..{MAX_WINDOW} or 'auto', "
                                         f"not {text!r}")
    return L


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
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


def check_input_files(args: argparse.Namespace, fmt: Any) -> None:
    """Refuse directories, binary files and CSV/JSONL files lacking a named field (InputError)."""
    from connectors.files import check_files

    check_files(args.files, fmt, _given_fields(args), missing_ok=bool(getattr(args, "follow", False)))



def apply_toml(args: argparse.Namespace, parser: argparse.ArgumentParser, section: str) -> None:
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



# why literals: the defaults of connectors.backfill (DEFAULT_CHUNK_BYTES, PARALLEL_MIN_BYTES),
# which cannot be imported while the parser is built; tests/cli checks that they agree
CHUNK_MB = 64  # learn --chunk-mb: MiB per backfill task
PARALLEL_MIN_MB = 32  # learn --workers: processes are started from this much input on


def add_backfill_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--dask ADDRESS``, ``--workers N`` and ``--chunk-mb MB`` to a ``learn`` parser.

    Their defaults are literals, so that building the parser imports nothing from
    :mod:`connectors` (a test checks them against :mod:`connectors.backfill`).

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> add_backfill_options(p)
    >>> args = p.parse_args(["--dask", "tcp://127.0.0.1:8786", "--chunk-mb", "16"])
    >>> args.dask, args.workers, args.chunk_mb
    ('tcp://127.0.0.1:8786', None, 16)
    """
    g = parser.add_argument_group("parallel backfill (files read once, counted in chunks)")
    g.add_argument("--dask", metavar="SCHEDULER_ADDRESS",
                   help="count on this Dask cluster ('local': start one with --workers "
                        "processes); needs pip install 'streamspec[dask]'")
    g.add_argument("--workers", type=int, metavar="N",
                   help="without --dask: count in up to N local processes (1: in this one, "
                        "the default of a one-pass learn). Processes are started only when "
                        f"they can be faster: {PARALLEL_MIN_MB} MiB of input or more, "
                        "in 2 chunks or more, with 2 CPUs or more not busy with other jobs "
                        "(load average); the log line event=backfilled says which path was "
                        "taken")
    g.add_argument("--chunk-mb", type=int, default=CHUNK_MB, metavar="MB",
                   help=f"bytes per task, in MiB (default {CHUNK_MB})")


def wants_backfill(args: argparse.Namespace) -> bool:
    """Whether the parsed arguments ask for a backfill by chunks (``--dask`` or ``--workers``)."""
    return getattr(args, "dask", None) is not None or getattr(args, "workers", None) is not None


def backfill_result_from_args(args: argparse.Namespace, fmt: Any,
                              progress: Callable[[int, int], Any] | None = None,
                              on_chunk: Callable[[Any], Any] | None = None,
                              alphabet: Any = None, window: int = 1) -> Any:
    """Run :func:`connectors.backfill.backfill_result` for parsed ``learn`` arguments.

    ``fmt`` is the record format; ``progress(done, total)`` gets the bytes counted so
    far, ``on_chunk(result)`` the chunk results in file order; ``alphabet`` and ``window``:
    a second pass over windows of L symbols once the first (triples) gave the alphabet.
    Returns the backfill's ``ChunkResult`` (counts, records, errors).

    Raises
    ------
    ValueError
        For options a backfill cannot honour: ``--follow``, ``--state``, a mode other
        than ``sliding``, ``--max-symbols``, a bad ``--workers`` or ``--chunk-mb``.

    Examples
    --------
    >>> p = argparse.ArgumentParser()
    >>> add_backfill_options(p)
    >>> args = p.parse_args(["--workers", "2"])
    >>> args.files, args.follow = ["x.txt"], True
    >>> backfill_result_from_args(args, None)
    Traceback (most recent call last):
    ...
    ValueError: --dask/--workers read the files once: they cannot be combined with --follow
    """
    for flag in ("follow", "state"):
        if getattr(args, flag, None):
            raise ValueError(f"--dask/--workers read the files once: they cannot be combined "
                             f"with --{flag}")
    mode = getattr(args, "mode", None) or "sliding"
    if mode != "sliding":
        raise ValueError(f"--dask/--workers count in sliding mode only, not --mode {mode}")
    if getattr(args, "max_symbols", None) is not None:
        raise ValueError("--dask/--workers count chunks independently: they cannot be combined "
                         "with --max-symbols (which symbols fit the cap depends on the order); "
                         "count serially")
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    chunk_mb = getattr(args, "chunk_mb", CHUNK_MB)
    if chunk_mb < 1:
        raise ValueError(f"--chunk-mb must be at least 1, got {chunk_mb}")
    from connectors.backfill import backfill_result  # lazily: the CLI's parser needs no connectors

    return backfill_result(args.files, fmt, scheduler=getattr(args, "dask", None),
                           n_workers=workers, chunk_bytes=chunk_mb << 20, progress=progress,
                           on_chunk=on_chunk, alphabet=alphabet, window=window)

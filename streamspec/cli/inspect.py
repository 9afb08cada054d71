"""``streamspec inspect``: describe any streamspec checkpoint, or every one in a state folder."""

from __future__ import annotations

import io
import json
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from streamspec.cli.checkpoint_files import HMM_SUFFIX, load_checkpoint_file, model_rank
from streamspec.cli.errors import CommandError, error_line
from streamspec.cli.options import positive_int
from streamspec.cli.quality import quality_fields, quality_lines

__all__ = ["describe_checkpoint", "register"]


def register(subparsers) -> None:
    """Add ``inspect`` to the CLI's subparsers."""
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
    p.add_argument("--top", type=positive_int, default=_TOP_EMISSIONS, metavar="K",
                   help=f"HMM (learn --states ... --out MODEL: MODEL.hmm): the K most probable "
                        f"symbols of each hidden state (default {_TOP_EMISSIONS})")
    p.set_defaults(func=_inspect)


_TOP_EMISSIONS = 5  # inspect: symbols listed per hidden state of an HMM by default
_LISTED_SYMBOLS = 50  # inspect: symbols listed (the count is always given)


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
                   count_window=int(m.metadata.get("count_window", 1)),
                   model_mb=round(sum(a.nbytes for a in (m.b1, m.binf, *m.operator_factors)
                                        if a is not None) / 1e6, 3),
                   predictor="+".join(m.backoff.components) if m.backoff is not None else "model",
                   hmm_states=None if m.backoff is None or m.backoff.hmm is None else m.backoff.hmm.n_states,
                   held_out=quality_fields(m), quality=quality_lines(m))
    elif kind == "streamspec.HiddenMarkovModel":
        out.update(_describe_hmm(path, top))
    elif kind == "streamspec.MomentAccumulator":
        from streamspec.streaming.accumulator import MomentAccumulator

        out.update(_describe_acc(MomentAccumulator.load(path)))
    elif kind == "streamspec.PartitionState":
        from connectors.state import PartitionState

        st = PartitionState.load(path)
        mark = st.log.mark
        out.update(topic=st.topic, partition=st.partition, offset=st.offset, records=st.records,
                   dead_letters=dict(st.dead_letters), owner=st.owner,
                   written_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(st.written_at)),
                   last_record=(mark.describe() if mark is not None else
                                None if st.log.recorded else "not recorded (older checkpoint)"),
                   deleted_unread=st.log.deleted_unread, log_resets=st.log.resets,
                   **_describe_learned(st.weights), **_describe_acc(st.acc))
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


def _describe_learned(weights) -> dict:
    """A partition's prequential loss and the weights its records taught (docs/kafka-daemon.md)."""
    if weights is None:
        return {"prequential": "not recorded (older checkpoint, or nothing scored yet)"}
    out = {"prequential_log_loss": round(weights.log_loss, 4) if weights.scored else None,
           "scored_symbols": weights.scored, "weights_of": "+".join(weights.components)}
    if weights.mixture is not None:  # the mean blend of each bucket of context counts
        out["learned_blends"] = np.round(weights.mixture.blends(range(6)), 3).tolist()
    return out


def _describe_acc(acc) -> dict[str, Any]:
    """Summary of an accumulator: sizes, the memory its counts take, its window L and the rank
    the counts support (:func:`_window_fields`). O(n + distinct grams · L) plus the SVDs."""
    triples = acc.triples()
    return {"mode": acc.mode, "n_triples": acc.n_triples, "n_symbols": acc.n,
            "max_symbols": getattr(acc, "max_symbols", None),
            "distinct_triples": triples.nnz,
            "counts_mb": round(acc.memory_bytes() / 1e6, 3),
            **_window_fields(acc),
            "symbols": _listed(acc.symbols), "streams": len(acc.keys)}


_RANK_MAX_WINDOWS = 1_000  # inspect: supported ranks computed up to this many distinct windows


def _window_fields(acc) -> dict[str, Any]:
    """The counts' ``window`` setting, the window L they are kept at (``count_window``), their
    distinct grams, and ``supported_ranks``: for each l ≤ L the singular values of the window
    Hankel matrix above the sampling noise (:func:`~streamspec.core.window_rank.window_ranks`),
    the largest as ``rank`` (how many hidden states the counts can tell apart, at most 129).
    Skipped (``None``) for more than 1,000 symbols: a sparse SVD per window. Dense SVDs of at
    most 1,000 windows, O(W³) each."""
    from streamspec.core.window_rank import window_ranks

    L = int(getattr(acc, "current_window", 1))
    out: dict[str, Any] = {"window": getattr(acc, "window", 1), "count_window": L}
    grams = acc.windows() if L > 1 else None
    if grams is not None:
        out["distinct_grams"] = grams.nnz
    if acc.n_triples <= 0 or acc.n > _RANK_MAX_WINDOWS:
        return {**out, "rank": None, "supported_ranks": None}
    ranks = window_ranks(grams if grams is not None else _as_windows(acc))
    return {**out, "rank": max(ranks), "supported_ranks": ranks}


def _as_windows(acc):
    """The triples of ``acc`` as window counts of L = 1 (the same codes). O(nnz)."""
    from streamspec.core.windows import WindowCounts

    t = acc.triples()
    return WindowCounts(t.n, 1, t.codes, t.weights)


def _inspect(args) -> int:
    from streamspec.core.checkpoint import CheckpointError

    path = Path(args.path)
    files = sorted([*path.rglob("*.ckpt"), *path.rglob("*" + HMM_SUFFIX)]) if path.is_dir() else [path]
    if not files:
        raise CommandError(f"no checkpoint under {path}")
    status = 0
    partitions: dict[Path, list[Path]] = {}  # folder -> its partition checkpoints
    for f in files:
        try:
            info = describe_checkpoint(f, top=args.top)
        except CheckpointError as exc:
            print(error_line("inspect", str(exc)), file=sys.stderr)  # and go on with the others
            status = 1
            continue
        if info["format"] == "streamspec.PartitionState":
            partitions.setdefault(f.parent, []).append(f)
        _print_info(info, args.json)
    if path.is_dir():
        for folder, paths in sorted(partitions.items()):
            _print_info(_merged(folder, paths), args.json)
    return status


def _merged(folder: Path, paths: list[Path]) -> dict[str, Any]:
    """The merged counts of a state folder's partition checkpoints (what the daemon refits on).

    O(size of the checkpoints): merged by symbol label, as the daemon merges them.
    """
    from connectors.state import PartitionState, merge_accumulators

    states = sorted((PartitionState.load(p) for p in paths), key=lambda st: st.partition)
    merged = merge_accumulators(st.acc for st in states)
    out = {"path": str(folder), "format": "merged partition counts", "version": None,
           "partitions": [st.partition for st in states],
           "offsets": {st.partition: st.offset for st in states},
           "records": sum(st.records for st in states),
           "deleted_unread": sum(st.log.deleted_unread for st in states)}
    out.update(_describe_acc(merged))
    return out


def _print_info(info: dict[str, Any], as_json: bool) -> None:
    """One checkpoint's summary: a JSON line, or a header line and one line per field."""
    if as_json:
        print(json.dumps(info, default=str))
        return
    version = f" v{info['version']}" if info["version"] is not None else ""
    print(f"{info['path']}: {info['format']}{version}")
    if info["format"] == "streamspec.HiddenMarkovModel":
        _print_hmm(info)
        return
    for key, value in info.items():
        if key not in ("path", "format", "version", "held_out", "quality"):
            print(f"  {key}: {value}")
    for line in info.get("quality", []):
        print(f"  {line}")

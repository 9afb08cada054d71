"""Checkpoints of a :class:`~streamspec.streaming.accumulator.MomentAccumulator`: writing,
reading and validating them (:class:`AccumulatorIO`, a mixin of the accumulator)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Self

import numpy as np

from streamspec.core.checkpoint import (
    CheckpointError,
    decode_value,
    encode_value,
    read_checkpoint,
    write_checkpoint,
)
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import Triples
from streamspec.core.windows import unpack_grams
from streamspec.streaming.stream_tails import DONE_DIGIT, tail_of_row, tails_to_array

__all__ = ["AccumulatorIO", "checkpoint_counts", "checkpoint_heads", "checkpoint_tails"]


class AccumulatorIO:
    """Persistence of :class:`~streamspec.streaming.accumulator.MomentAccumulator`."""

    _FORMAT = "streamspec.MomentAccumulator"
    _VERSION = 4  # 1: dense c3; 2: sparse codes + weights; 3: and the stream starts; 4: windows

    def save(self, path: str | os.PathLike) -> None:
        """Write a checksummed npz+JSON checkpoint, atomically. O(nnz + n + streams)."""
        write_checkpoint(path, *self.to_checkpoint())

    def to_checkpoint(self) -> tuple[str, int, dict, dict[str, np.ndarray]]:
        """(format, version, header, arrays) of this accumulator, for any checkpoint sink.

        Version 4: arrays ``codes`` (sorted packed grams of the current window L: triples at
        L = 1), ``weights``, ``n_triples``, ``tails`` (one row of 2L digits per stream:
        symbols right-aligned, -1 before them, -2 for a pad, a row of -3 when done) and
        the stream starts (``start_first``, ``start_first_w``, ``start_pair``,
        ``start_pair_w``); labels, keys, heads, ``window`` and its current ``level`` in
        the header. (Version 3 had ``tail_a``, ``tail_b`` and no window.) Raises
        ``CheckpointError`` (before anything is written) if a label or key cannot
        be stored, or if the labels would not read back as distinct symbols.
        O(nnz + n + streams).
        """
        self._flush()
        keys = list(self._tails)
        tails = tails_to_array([self._tails[k] for k in keys], self._base, self._L, self._pad)
        labels = None
        if self.n_symbols is None:
            labels = [encode_value(s) for s in self._alphabet._labels]
            back = [decode_value(v) for v in labels]
            if len(set(back)) != len(back):  # could not be read back: refuse to write it
                raise CheckpointError("labels that are equal once stored (e.g. 1 and 1.0 as keys)")
        header = {
            "n_symbols": self.n_symbols,
            "mode": self.mode,
            "forgetting": self.forgetting,
            "max_symbols": self.max_symbols,
            "labels": labels,
            "keys": [encode_value(k) for k in keys],
            "track_heads": self.track_heads,
            "heads": [[encode_value(k), list(sym), ended] for k, (sym, ended) in self._heads.items()],
            "window": self.window if self.window == "auto" else int(self.window),
            "level": self._L,
        }
        weights = self._w / self._weight if self.forgetting != 1.0 else self._w
        arrays = {"codes": self._codes, "weights": weights, "n_triples": np.array(self.n_triples),
                  "tails": tails, **self.starts().to_arrays()}
        return self._FORMAT, self._VERSION, header, arrays

    @classmethod
    def load(cls, path: str | os.PathLike) -> Self:
        """Read a checkpoint written by :meth:`save` (versions 1 to 4; before 3 no stream starts were
        kept: they load as none; before 4 the window is 1); ``CheckpointError`` if bad."""
        header, arrays = read_checkpoint(path, cls._FORMAT, cls._VERSION)
        return cls.from_checkpoint(header, arrays, source=str(path))

    @classmethod
    def from_checkpoint(cls, header: dict, arrays: dict, source: str = "checkpoint"):
        """The accumulator of a checkpoint's header and arrays (sparse v2 or dense v1).

        Validates everything: array shapes and types, sorted distinct codes, symbol
        indices below n, non-negative counts, tails and heads; raises
        ``CheckpointError`` naming the problem. O(nnz + n + streams) (v1: O(n³)).
        """
        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"{source}: {what}")

        try:
            acc = cls(header["n_symbols"], header["mode"], header["forgetting"],
                      bool(header.get("track_heads", False)), header.get("max_symbols"),
                      header.get("window", 1))
            level = int(header.get("level", acc.current_window))
            if not 1 <= level <= acc.current_window:
                raise bad(f"window level {level} for window {acc.window!r}")
            acc._set_level(level)
            if header["labels"] is not None:
                labels = [decode_value(v) for v in header["labels"]]
                acc._alphabet.add_labels(labels)
                if acc.n != len(labels):
                    raise bad(f"{len(labels)} labels but {acc.n} distinct symbols")
            n = acc.n
            acc._heads.update(checkpoint_heads(header, n, bad, 2 * level))
            acc._codes, acc._w = checkpoint_counts(arrays, n, bad, level)
            total = float(arrays["n_triples"])
            if not (np.isfinite(total) and total >= 0):
                raise bad(f"n_triples {total!r} is not a non-negative number")
            acc._total = total
            acc._tails.update(checkpoint_tails(header, arrays, acc, bad))
            acc._starts = StreamStarts.from_arrays(n, arrays)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{source}: malformed accumulator checkpoint ({exc})") from None
        return acc


Bad = Callable[[str], CheckpointError]  # makes the error of a checkpoint, naming its source


def checkpoint_heads(header: dict, n: int, bad: Bad, size: int = 2) -> dict:
    """The validated stream heads of a checkpoint header, ``{key: (symbols, ended)}``, at most
    ``size`` (2L) symbols each. O(streams)."""
    heads = {}
    for key, symbols, ended in header.get("heads", []):
        sym = tuple(int(v) for v in symbols)
        if len(sym) > size or any(not 0 <= v < n for v in sym):
            raise bad(f"head {sym} of stream {key!r} out of range for {n} symbols")
        heads[decode_value(key)] = (sym, bool(ended))
    return heads


def checkpoint_counts(arrays: dict, n: int, bad: Bad, window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The validated counts ``(codes, weights)`` of a checkpoint: sparse grams of ``window`` (v2+)
    or dense ``c3`` (v1).

    Codes sorted, distinct, with symbols below n; weights finite and non-negative (zero
    weights dropped). O(nnz · L) (v1: O(n³)).
    """
    if "codes" in arrays:
        codes, w = np.asarray(arrays["codes"]), np.asarray(arrays["weights"])
        if codes.ndim != 1 or w.shape != codes.shape:
            raise bad(f"codes of shape {codes.shape} and weights of shape {w.shape}")
        if codes.size and codes.dtype.kind not in "iu":
            raise bad(f"codes of type {codes.dtype}")
        codes, w = codes.astype(np.int64), w.astype(np.float64)
        if codes.size and (codes[0] < 0 or (np.diff(codes) <= 0).any()):
            raise bad("codes are not sorted and distinct")
        if codes.size and int(unpack_grams(codes, window).max()) >= n:
            raise bad(f"a gram has a symbol index out of range for {n} symbols")
    elif "c3" in arrays:  # version 1: dense counts
        c3 = np.asarray(arrays["c3"], dtype=np.float64)
        if c3.shape != (n, n, n):
            raise bad(f"counts of shape {c3.shape} for {n} symbols")
        if (c3 < 0).any():
            raise bad("negative counts")
        t = Triples.from_dense(c3)
        codes, w = t.codes, t.weights
    else:
        raise bad("no counts (neither 'codes' nor 'c3')")
    if (w < 0).any():
        raise bad("negative counts")
    if not np.isfinite(w).all():
        raise bad("counts hold NaN or infinite values")
    keep = w > 0
    return codes[keep], w[keep]


def checkpoint_tails(header: dict, arrays: dict, acc, bad: Bad) -> dict:
    """The validated stream tails of a checkpoint, ``{key: tail code}`` in ``acc``'s encoding:
    rows of ``tails`` (v4) or ``tail_a``, ``tail_b`` (v1-v3, window 1). O(streams · L)."""
    keys = [decode_value(k) for k in header["keys"]]
    if "tails" in arrays:
        rows = np.asarray(arrays["tails"], dtype=np.int64)
        if rows.shape != (len(keys), 2 * acc._L):
            raise bad(f"tails of shape {rows.shape} for {len(keys)} streams at window {acc._L}")
    else:
        a, b = (np.asarray(arrays[k], dtype=np.int64) for k in ("tail_a", "tail_b"))
        if a.shape != (len(keys),) or b.shape != a.shape:
            raise bad(f"{a.size} tails for {len(keys)} streams")
        rows = np.stack([a, b], axis=1)
        rows[(a == -2) & (b == -2)] = DONE_DIGIT  # v3 wrote (-2, -2) for a stream done
    tails = {}
    for key, row in zip(keys, rows, strict=True):
        try:
            tails[key] = tail_of_row(row, acc._base, acc._L, acc._pad, acc.n)
        except ValueError as exc:
            raise bad(f"stream {key!r}: {exc}") from None
    return tails

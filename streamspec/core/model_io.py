"""Saving and loading observable-operator models: checksummed npz + JSON header, no pickle.

:class:`ModelIO` is the persistence half of
:class:`~streamspec.core.model.ObservableOperatorModel` (a mixin, as
:class:`~streamspec.streaming.accumulator_io.AccumulatorIO` is the accumulator's).
What is saved: the operators, the filter settings, the rank, the symbols' labels, the
factors (for warm starts), the backoff (its trigram's counts, the HMM and the weights,
as arrays) and the metadata (JSON). Versions: 1 without a backoff, 2 with the bigram
backoff of streamspec 0.2 (refused on reading, with what to do: its predictions cannot
be rebuilt without the triple counts), 3 with today's backoff, 4 a factored model (the
operators as ``B`` and ``B_right``, ``B[x] @ B_right``, as a warm refit writes them: version 4
so that an older streamspec refuses the file instead of reading ``B`` alone); metadata, when
there is any, is one more header entry, and checkpoints without it load with ``{}``.
"""

from __future__ import annotations

import os

from streamspec.core.backoff import Backoff
from streamspec.core.checkpoint import (
    CheckpointError,
    decode_value,
    dump_checkpoint,
    encode_value,
    load_checkpoint_bytes,
    read_checkpoint,
    write_checkpoint,
)
from streamspec.core.factors import MFactors

__all__ = ["ModelIO"]


class ModelIO:
    """``to_bytes`` / ``save`` and ``from_bytes`` / ``load`` of a model (mixin).

    Reads the model's constructor arguments as attributes (``b1``, ``binf``, ``B``,
    ``filter``, ``window``, ``min_proba``, ``rank``, ``symbols``, ``factors``,
    ``backoff``, ``metadata``); loading calls the class with them.
    """

    _FORMAT = "streamspec.ObservableOperatorModel"
    _VERSION = 4  # 2: the old bigram backoff; 3: today's; 4: factored; without a backoff: version 1

    def _header_arrays(self) -> tuple[dict, dict]:
        header = {
            "filter": self.filter,
            "window": int(self.window),
            "min_proba": float(self.min_proba),
            "rank": int(self.rank),
            "symbols": None if self.symbols is None else [encode_value(s) for s in self.symbols],
        }
        if self.metadata:  # why: absent when empty, so models without metadata save as before
            header["metadata"] = dict(self.metadata)
        ops, right = self.operator_factors  # why not B: a factored model is saved as it is held
        arrays = {"b1": self.b1, "binf": self.binf, "B": ops}
        if right is not None:
            arrays["B_right"] = right
        factors = self.factors
        if factors is not None:  # kept so that a restarted refitter can warm-start
            header["factorization"] = factors.factorization
            arrays["R"], arrays["S"] = factors.R, factors.S
            if factors.right is not None:  # (a factored refit's: R[x] @ R_right)
                arrays["R_right"] = factors.right
        if self.backoff is not None:
            bh, ba = self.backoff.to_parts()
            header["backoff"] = bh
            arrays.update({f"backoff_{k}": v for k, v in ba.items()})
        return header, arrays

    def _version(self) -> int:
        if self.operator_factors[1] is not None:
            return 4
        return 1 if self.backoff is None else 3

    def to_bytes(self) -> bytes:
        """The model as a checkpoint in bytes (npz + JSON header, checksummed; no pickle).

        Version 1 without a backoff, version 3 with one (its counts, HMM and weights as
        arrays), version 4 for a factored model (``right`` given). Time and memory
        O(n · d² + nnz).
        """
        return dump_checkpoint(self._FORMAT, self._version(), *self._header_arrays())

    def save(self, path: str | os.PathLike) -> None:
        """Write the model as a checkpoint file (atomic; the backoff included, as sparse arrays).

        O(n · d² + nnz).
        """
        write_checkpoint(path, self._FORMAT, self._version(), *self._header_arrays())

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "model"):
        """The model of :meth:`to_bytes` (versions 1, 3 and 4). O(n · d² + nnz log nnz)."""
        header, arrays = load_checkpoint_bytes(data, cls._FORMAT, cls._VERSION, source)
        return cls._from_parts(header, arrays, source)

    @classmethod
    def load(cls, path: str | os.PathLike):
        """The model saved by :meth:`save` (versions 1, 3 and 4). O(n · d² + nnz log nnz)."""
        header, arrays = read_checkpoint(path, cls._FORMAT, cls._VERSION)
        return cls._from_parts(header, arrays, str(path))

    @classmethod
    def _from_parts(cls, header, arrays, source):
        try:
            symbols = header["symbols"]
            backoff = None
            if header.get("backoff") is not None:
                if "components" not in header["backoff"]:
                    raise CheckpointError(
                        f"{source}: a model saved by streamspec 0.2 with a bigram backoff; its "
                        "predictions now mix a trigram of the triple counts, which this file does "
                        "not hold: refit it from its counts (streamspec learn, or the daemon's "
                        "counts checkpoint)")
                parts = {k[len("backoff_"):]: v for k, v in arrays.items() if k.startswith("backoff_")}
                backoff = Backoff.from_parts(header["backoff"], parts, int(arrays["B"].shape[0]))
            model = cls(
                arrays["b1"],
                arrays["binf"],
                arrays["B"],
                filter=header["filter"],
                window=header["window"],
                min_proba=header["min_proba"],
                symbols=None if symbols is None else [decode_value(s) for s in symbols],
                backoff=backoff,
                rank=header.get("rank"),  # None in checkpoints written before it was kept
                factors=(MFactors(arrays["R"], arrays["S"], header["factorization"],
                                  right=arrays.get("R_right")) if "R" in arrays else None),
                metadata=header.get("metadata"),  # absent before it was kept: {}
                right=arrays.get("B_right"),
            )
            return model
        except CheckpointError:
            raise
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{source}: malformed model checkpoint ({exc})") from None

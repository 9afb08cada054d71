"""The shared model in a Kafka topic: published by the elected refitter, served by every daemon.

With ``--state-backend kafka`` one daemon at a time refits on the global counts
(the merge of the latest snapshot of every partition, :mod:`connectors.state.snapshots`)
and publishes each model to the *model topic* (one partition); every daemon
follows that topic and serves predictions from the newest model it has read.

Election
--------
The refitter is the owner of source partition 0: the consumer group's
assignment already makes exactly one member own it (between two rebalances).
When partition 0 moves, its new owner reads the model topic to its end and
continues the version sequence from the newest model there.

Message layout
--------------
* key: ``b"model"``;
* value: :meth:`ObservableOperatorModel.to_bytes` (npz + JSON header,
  checksummed, never a pickle; it keeps the factors so a new refitter can
  warm-start);
* headers: ``format`` (``streamspec.ObservableOperatorModel/1``),
  ``model-version`` (1, 2, ... across refitters), ``records`` (symbols in the
  counts it was fitted on), ``loss`` and ``refitter`` (client id).

With ``hmm_states`` set (``consume --states K``), each model is followed by its
hidden Markov model: key ``b"hmm"``, value :meth:`HiddenMarkovModel.to_bytes`,
headers ``format`` (``streamspec.HiddenMarkovModel/1``), ``model-version`` (the
version of the operator model fitted on the same counts), ``records``, ``refitter``.
Daemons skip these messages (:func:`is_hmm_message`); they are for the topic's readers.

The newest model is the one with the largest version (ties: the later in the
log), so a model published late by an evicted refitter never replaces a newer one.

Examples
--------
>>> from streamspec import ObservableOperatorModel
>>> coin = ObservableOperatorModel([1.0], [1.0], [[[0.25]], [[0.75]]], symbols=["t", "h"])
>>> key, value, headers = encode_model(coin, version=3, records=10, loss=0.5, refitter="d1")
>>> rec = ModelRecord.from_message(value, headers)
>>> rec.version, rec.records, rec.model().symbols
(3, 10, ['t', 'h'])
>>> newest = NewestModel()
>>> newest.offer(rec), newest.offer(ModelRecord(2, 9, b"", "d0")), newest.version
(True, False, 3)
>>> from streamspec import HiddenMarkovModel
>>> hmm = HiddenMarkovModel([1.0], [[1.0]], [[0.25, 0.75]], symbols=["t", "h"])
>>> key, value, headers = encode_hmm(hmm, version=3, records=10, refitter="d1")
>>> key, is_hmm_message(headers), HiddenMarkovModel.from_bytes(value).emissionprob_
(b'hmm', True, array([[0.25, 0.75]]))
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.model import ObservableOperatorModel

__all__ = ["HMM_FORMAT", "MODEL_FORMAT", "ModelRecord", "NewestModel", "encode_hmm",
           "encode_model", "is_hmm_message", "REFITTER_PARTITION"]

MODEL_FORMAT = b"streamspec.ObservableOperatorModel/1"
HMM_FORMAT = b"streamspec.HiddenMarkovModel/1"
REFITTER_PARTITION = 0
"""The owner of this source partition refits and publishes the models."""


def encode_model(
    model: ObservableOperatorModel, version: int, records: int, loss: float, refitter: str
) -> tuple[bytes, bytes, list]:
    """``(key, value, headers)`` of the model-topic message of ``model``."""
    headers = [
        ("format", MODEL_FORMAT),
        ("model-version", str(int(version)).encode()),
        ("records", str(int(records)).encode()),
        ("loss", repr(float(loss)).encode()),
        ("refitter", refitter.encode()),
    ]
    return b"model", model.to_bytes(), headers


def encode_hmm(hmm: HiddenMarkovModel, version: int, records: int, refitter: str
               ) -> tuple[bytes, bytes, list]:
    """``(key, value, headers)`` of the message of the HMM fitted with model ``version``."""
    headers = [
        ("format", HMM_FORMAT),
        ("model-version", str(int(version)).encode()),
        ("records", str(int(records)).encode()),
        ("refitter", refitter.encode()),
    ]
    return b"hmm", hmm.to_bytes(), headers


def is_hmm_message(headers) -> bool:
    """Whether a model-topic message (its headers) holds an HMM rather than a model."""
    return any(k == "format" and v == HMM_FORMAT for k, v in (headers or []))


@dataclass(frozen=True)
class ModelRecord:
    """One model-topic message, not yet decoded.

    Attributes
    ----------
    version
        The model version (1, 2, ...).
    records
        Symbols in the global counts it was fitted on.
    value
        :meth:`ObservableOperatorModel.to_bytes` of the model.
    refitter
        Client id of the daemon that fitted it.
    """

    version: int
    records: int
    value: bytes = field(repr=False)
    refitter: str = ""

    @classmethod
    def from_message(cls, value: bytes | None, headers) -> ModelRecord:
        """Read a model-topic message's headers; ``ValueError`` if it is not a model."""
        h = {k: v for k, v in (headers or [])}
        if h.get("format") != MODEL_FORMAT or value is None:
            raise ValueError(f"not a model message (format {h.get('format')!r})")
        try:
            return cls(int(h["model-version"]), int(h.get("records", b"0")), value,
                       h.get("refitter", b"").decode("utf-8", "replace"))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed model headers ({exc})") from None

    def model(self) -> ObservableOperatorModel:
        """Decode the model (``CheckpointError`` if it is corrupt)."""
        return ObservableOperatorModel.from_bytes(self.value, f"model version {self.version}")


class NewestModel:
    """The model-topic record with the largest version seen so far (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.record: ModelRecord | None = None

    @property
    def version(self) -> int:
        """The newest version (0: none yet)."""
        rec = self.record
        return rec.version if rec is not None else 0

    def offer(self, record: ModelRecord) -> bool:
        """Keep ``record`` if its version is at least the newest one's."""
        with self._lock:
            if self.record is not None and record.version < self.record.version:
                return False
            self.record = record
            return True

"""Durable per-source learning state: counts plus the exact point where reading resumes.

Exactly-once learning rests on one rule: the counts and the position that
produced them are written together, in one atomic checkpoint file (temporary
file, ``fsync``, rename), and nothing else is trusted on restart. A Kafka
partition's state is a :class:`PartitionState` (its accumulator, its stream
tails, the next offset to read and its dead-letter counts); files read by
``streamspec learn`` keep a :class:`SourceState` (the accumulator and the
positions of every file). The global view is the merge of the partitions, exact
because merging matches symbols by label.

Layout of a state folder::

    <state_dir>/<topic>/partition-00000.ckpt        one per partition: the newest
    <state_dir>/<topic>/partition-00000.ckpt.prev   the one before it (the fallback)
    <state_dir>/<topic>/model.ckpt                  the latest model

A partition checkpoint names what it belongs to: its header holds the topic,
the partition and the consumer group (format version 2), and the mixing weights its
stream taught with its prequential loss (version 3, :mod:`connectors.state.weights`;
an older file has none and loads all the same), and
:meth:`StateStore.restore` refuses, with :class:`ForeignCheckpoint`, a file
written for any other. A version-1 file (written before the group was recorded)
is accepted only when its topic and partition match the file's name.

Examples
--------
>>> import tempfile
>>> from streamspec import MomentAccumulator
>>> store = StateStore(tempfile.mkdtemp())
>>> st = PartitionState("clicks", 0)
>>> st.acc.learn_many("abcab", key="u1")
>>> st.acc.end("u1")  # window "auto": the grams around the last symbols count at the end
>>> st.offset, st.records = 5, 5
>>> _ = store.save(st)
>>> back = store.load("clicks", 0)
>>> back.offset, back.acc.n_triples, back.acc.symbols
(5, 3.0, ['a', 'b', 'c'])
>>> store.partitions("clicks")
[0]
>>> store.merged("clicks").n_triples
3.0
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from connectors.state.identity import LogIdentity
from connectors.state.weights import HEADER_KEY, LearnedWeights
from streamspec.core.checkpoint import (
    CheckpointError,
    dump_checkpoint,
    load_checkpoint_bytes,
    read_checkpoint,
    remove_stale_temporaries,
    write_atomic,
)
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["PartitionState", "SourceState", "StateStore", "merge_accumulators",
           "dump_verified", "ForeignCheckpoint", "BlockedCheckpoint", "Restored"]

_PARTITION_FORMAT = "streamspec.PartitionState"
_SOURCE_FORMAT = "streamspec.SourceState"
_VERSION = 1
_PARTITION_VERSION = 3  # 2: the header names the consumer group; 3: and the learned weights


class ForeignCheckpoint(CheckpointError):
    """A readable partition checkpoint written for another topic, partition or group."""


class BlockedCheckpoint(CheckpointError):
    """Something that is not a file (a folder) where a partition's checkpoint must be written."""


def _split_acc(acc: MomentAccumulator) -> tuple[dict, dict]:
    kind, version, header, arrays = acc.to_checkpoint()
    return {"format": kind, "version": version, **header}, arrays


def dump_verified(kind: str, header: dict, arrays: dict, read_back,
                  version: int = _VERSION) -> bytes:
    """The checkpoint bytes of ``(header, arrays)``, decoded once by ``read_back`` before use.

    ``read_back(header, arrays, source)`` must rebuild the object (and raise
    ``CheckpointError`` if it cannot): a checkpoint that would not load is never
    written, so it can never replace the last good one. Time O(size) twice.
    """
    data = dump_checkpoint(kind, version, header, arrays)
    back_header, back_arrays = load_checkpoint_bytes(data, kind, version, "new checkpoint")
    read_back(back_header, back_arrays, "new checkpoint (read back before writing)")
    return data


def _join_acc(header: dict, arrays: dict, source: str) -> MomentAccumulator:
    acc_header = dict(header)
    if acc_header.pop("format", None) != MomentAccumulator._FORMAT:
        raise CheckpointError(f"{source}: the accumulator part has a foreign format")
    version = acc_header.pop("version", None)
    if not isinstance(version, int) or not 1 <= version <= MomentAccumulator._VERSION:
        raise CheckpointError(f"{source}: unsupported accumulator version {version!r}")
    return MomentAccumulator.from_checkpoint(acc_header, arrays, source=source)


@dataclass
class PartitionState:
    """What one Kafka partition has taught the daemon, and where it resumes.

    Parameters
    ----------
    topic, partition
        The partition.
    acc
        Its counts and per-stream tails.
    offset
        The next offset to read: every record before it is in ``acc`` (or was a
        dead letter), none after it.
    records
        Symbols learned from this partition.
    dead_letters
        Dead letters per reason.
    owner
        Client id of the daemon that wrote the checkpoint (informational).
    group
        The consumer group whose checkpoint this is (``None``: read from a version-1
        file, which did not record it).
    log
        What identifies the log read: the last record counted, records deleted before
        they were read (:class:`~connectors.state.identity.LogIdentity`; header entry
        ``log``, absent from checkpoints written before it was kept).
    weights
        The mixing weights and prequential loss the checkpoint held
        (:class:`~connectors.state.weights.LearnedWeights`; ``None`` in older ones).
    scorer
        The daemon's online predictor of the partition, if any
        (:class:`connectors.kafka.scoring.PartitionScorer`: anything with
        ``learned_weights()``): its weights, when it has some, are the ones checkpointed.
    """

    topic: str
    partition: int
    acc: MomentAccumulator = field(default_factory=MomentAccumulator)
    offset: int = 0
    records: int = 0
    dead_letters: Counter = field(default_factory=Counter)
    owner: str = ""
    written_at: float = 0.0
    group: str | None = None
    log: LogIdentity = field(default_factory=LogIdentity)
    weights: LearnedWeights | None = None
    scorer: Any = field(default=None, repr=False, compare=False)

    def learned(self) -> LearnedWeights | None:
        """The weights and loss learned so far: the scorer's, else the checkpoint's. O(1)."""
        live = self.scorer.learned_weights() if self.scorer is not None else None
        return live if live is not None else self.weights

    def checkpoint_parts(self) -> tuple[dict, dict]:
        acc_header, arrays = _split_acc(self.acc)
        header = {
            "topic": self.topic,
            "partition": int(self.partition),
            "group": self.group,
            "offset": int(self.offset),
            "records": int(self.records),
            "dead_letters": dict(self.dead_letters),
            "owner": self.owner,
            "written_at": time.time(),
            "log": self.log.to_header(),
            "accumulator": acc_header,
        }
        learned = self.learned()
        if learned is not None:
            header[HEADER_KEY], weight_arrays = learned.to_parts()
            arrays = {**arrays, **weight_arrays}
        return header, arrays

    @classmethod
    def load(cls, path: str | os.PathLike) -> PartitionState:
        """Read one partition checkpoint file; ``CheckpointError`` if bad or absent."""
        header, arrays = read_checkpoint(path, _PARTITION_FORMAT, _PARTITION_VERSION)
        return cls.from_parts(header, arrays, str(path))

    @classmethod
    def from_parts(cls, header: dict, arrays: dict, source: str) -> PartitionState:
        try:
            return cls(
                topic=str(header["topic"]),
                partition=int(header["partition"]),
                acc=_join_acc(header["accumulator"], arrays, source),
                offset=int(header["offset"]),
                records=int(header["records"]),
                dead_letters=Counter({str(k): int(v) for k, v in header["dead_letters"].items()}),
                owner=str(header.get("owner", "")),
                written_at=float(header.get("written_at", 0.0)),
                group=None if header.get("group") is None else str(header["group"]),
                log=LogIdentity.from_header(header.get("log")),
                weights=LearnedWeights.from_parts(header.get(HEADER_KEY), arrays, source),
            )
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{source}: malformed partition state ({exc})") from None

    def check_identity(self, topic: str, partition: int, group: str | None, source: str) -> None:
        """Raise :class:`ForeignCheckpoint` unless this state belongs to (topic, partition, group).

        ``group=None`` checks topic and partition only. A state without a group (a
        version-1 file) passes when its topic and partition match. O(1).
        """
        mine = (self.topic, int(self.partition))
        wanted = (topic, int(partition))
        wrong_group = group is not None and self.group is not None and self.group != group
        if mine != wanted or wrong_group:
            raise ForeignCheckpoint(
                f"{source}: the checkpoint belongs to topic={self.topic} "
                f"partition={self.partition} group={self.group}, not to topic={topic} "
                f"partition={partition} group={group}: refused (never used, never overwritten)"
            )


@dataclass
class SourceState:
    """What a set of files has taught ``streamspec learn``, and where each file resumes.

    Parameters
    ----------
    acc
        The counts.
    positions
        ``FileSource.position()``: per path, where reading resumes.
    records
        Symbols learned.
    errors
        Malformed lines skipped, per reason.
    """

    acc: MomentAccumulator = field(default_factory=MomentAccumulator)
    positions: dict[str, Any] = field(default_factory=dict)
    records: int = 0
    errors: Counter = field(default_factory=Counter)

    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically (temporary file, fsync, rename), once it is known to read back.

        O(distinct triples + streams); the new file replaces the old one only after
        it decoded (:func:`dump_verified`), else ``CheckpointError`` and the old one stays.
        """
        acc_header, arrays = _split_acc(self.acc)
        header = {
            "positions": self.positions,
            "records": int(self.records),
            "errors": dict(self.errors),
            "accumulator": acc_header,
        }
        data = dump_verified(_SOURCE_FORMAT, header, arrays,
                             lambda h, a, src: _join_acc(h["accumulator"], a, src))
        return write_atomic(path, data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> SourceState:
        """Read a state written by :meth:`save`; ``CheckpointError`` if bad or absent."""
        header, arrays = read_checkpoint(path, _SOURCE_FORMAT, _VERSION)
        try:
            return cls(
                acc=_join_acc(header["accumulator"], arrays, str(path)),
                positions=dict(header["positions"]),
                records=int(header["records"]),
                errors=Counter({str(k): int(v) for k, v in header["errors"].items()}),
            )
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{path}: malformed source state ({exc})") from None


class StateStore:
    """The checkpoint files of a state folder, one per partition, each written atomically.

    Parameters
    ----------
    root
        The state folder (created when first written).
    owner
        Written into every checkpoint (informational: which daemon wrote it).
    group
        The consumer group: written into every checkpoint, and :meth:`restore`
        refuses a checkpoint of another group (``None``: not checked, not written).

    Notes
    -----
    :meth:`save` keeps the previous checkpoint as ``partition-NNNNN.ckpt.prev``
    (a hard link made before the new file replaces the newest), so that
    :meth:`restore` can fall back to it when the newest cannot be read.
    """

    def __init__(self, root: str | os.PathLike, owner: str = "", group: str | None = None):
        self.root = Path(root)
        self.owner = owner
        self.group = group
        self._good: set[Path] = set()  # newest files known to read back: worth keeping as .prev

    def topic_dir(self, topic: str) -> Path:
        if not topic or "/" in topic or topic in (".", ".."):
            raise ValueError(f"invalid topic name {topic!r}")
        return self.root / topic

    def path(self, topic: str, partition: int) -> Path:
        return self.topic_dir(topic) / f"partition-{int(partition):05d}.ckpt"

    def previous_path(self, topic: str, partition: int) -> Path:
        """The partition's previous good checkpoint (the fallback of :meth:`restore`)."""
        path = self.path(topic, partition)
        return path.with_name(path.name + ".prev")

    def model_path(self, topic: str) -> Path:
        return self.topic_dir(topic) / "model.ckpt"

    def hmm_path(self, topic: str) -> Path:
        """Where the daemon keeps the HMM of its last refit (``hmm_states`` set)."""
        return self.topic_dir(topic) / "model.ckpt.hmm"  # MODEL.hmm, as learn --states writes

    def save(self, state: PartitionState) -> Path:
        """Write the partition's checkpoint atomically; return its path.

        The new checkpoint is decoded before it replaces the old one: one that would
        not read back raises ``CheckpointError`` and the last good one stays.
        O(distinct triples + streams).
        """
        state.owner = self.owner or state.owner
        if self.group is not None:
            state.group = self.group
        header, arrays = state.checkpoint_parts()
        data = dump_verified(_PARTITION_FORMAT, header, arrays, PartitionState.from_parts,
                             version=_PARTITION_VERSION)
        state.written_at = header["written_at"]
        path = self.path(state.topic, state.partition)
        if path in self._good:
            # keep the newest as the fallback; a link, so the newest never goes missing
            prev = self.previous_path(state.topic, state.partition)
            link = prev.with_name(f".{prev.name}.link.tmp")
            try:
                link.unlink(missing_ok=True)
                os.link(path, link)
                os.replace(link, prev)
            except FileNotFoundError:
                pass  # removed by hand meanwhile: nothing to keep
        out = write_atomic(path, data)
        self._good.add(path)
        return out

    def load(self, topic: str, partition: int) -> PartitionState | None:
        """The partition's checkpoint, or ``None`` if it has none.

        A checkpoint that exists but cannot be read raises ``CheckpointError``: it
        is never silently replaced by an empty state (that would count everything
        again).
        """
        path = self.path(topic, partition)
        if not path.exists():
            return None
        return PartitionState.load(path)

    def restore(self, topic: str, partition: int) -> Restored:
        """Load the partition's state for this store's group: newest, else the previous one.

        The newest checkpoint is used when it reads back and belongs to (topic,
        partition, :attr:`group`); when it cannot be read (corrupt, truncated, not a
        file...) the previous one (``.prev``) is used instead, which is exact too:
        its counts are those of the records before its offset, and the records
        after it are read again from the log. A checkpoint of another topic,
        partition or group raises :class:`ForeignCheckpoint` (no fallback: the
        folder was tampered with); a folder where either file must be written
        raises :class:`BlockedCheckpoint` (saying what to do); none readable raises
        :class:`CheckpointError` naming both errors. Stale temporary files of interrupted writes are removed.
        O(size of the checkpoint).
        """
        path = self.path(topic, partition)
        remove_stale_temporaries(path.parent, path.name)
        prev = self.previous_path(topic, partition)
        remove_stale_temporaries(prev.parent, prev.name)
        for p in (path, prev):
            if p.exists() and not p.is_file():
                # why: it would be read around (the fallback) but never written over:
                # every later checkpoint of the partition would fail
                kind = "folder" if p.is_dir() else "special file"
                raise BlockedCheckpoint(
                    f"{p} is a {kind}, not a checkpoint file: this partition's checkpoints "
                    f"cannot be written there. Move it away (mv '{p}' '{p}.moved') and "
                    "restart; the partition is not read until then")
        if not path.exists() and not prev.exists():
            return Restored(None, "beginning")
        errors = []
        for source, p in (("checkpoint", path), ("previous-checkpoint", prev)):
            if not p.exists() and not p.is_symlink():
                errors.append(f"{p}: no such checkpoint file")
                continue
            try:
                state = PartitionState.load(p)
            except CheckpointError as exc:
                errors.append(str(exc))
                continue
            except OSError as exc:  # a folder, no permission, an I/O error
                errors.append(f"{p}: unreadable checkpoint ({type(exc).__name__}: {exc})")
                continue
            state.check_identity(topic, partition, self.group, str(p))
            if source == "checkpoint":
                self._good.add(path)
            return Restored(state, source, errors[0] if errors else None)
        raise CheckpointError("; ".join(errors))

    def partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` with a checkpoint."""
        folder = self.topic_dir(topic)
        if not folder.is_dir():
            return []
        out = []
        for p in folder.glob("partition-*.ckpt"):
            try:
                out.append(int(p.stem.split("-", 1)[1]))
            except ValueError:
                continue
        return sorted(out)

    def load_all(self, topic: str) -> list[PartitionState]:
        states = (self.load(topic, p) for p in self.partitions(topic))
        return [s for s in states if s is not None]

    def merged(self, topic: str) -> MomentAccumulator:
        """The global counts: every partition's accumulator merged by symbol label."""
        return merge_accumulators(s.acc for s in self.load_all(topic))


@dataclass
class Restored:
    """What :meth:`StateStore.restore` found for a partition.

    Attributes
    ----------
    state
        The state, or ``None`` when the partition has no checkpoint.
    source
        ``"checkpoint"`` (the newest), ``"previous-checkpoint"`` (the newest could
        not be read) or ``"beginning"`` (none).
    newest_error
        Why the newest was not used (with ``source="previous-checkpoint"``).
    """

    state: PartitionState | None
    source: str
    newest_error: str | None = None


def merge_accumulators(
    accs: Iterable[MomentAccumulator], order: Iterable | None = None
) -> MomentAccumulator:
    """Merge accumulators by symbol label; ``order`` fixes the first labels' indices.

    Keeping the label order of the previous model lets a refit warm-start from
    it (new symbols are appended, existing ones keep their index). Labels of
    ``order`` that no accumulator holds are left out.

    Examples
    --------
    >>> a, b = MomentAccumulator(window=1), MomentAccumulator(window=1)
    >>> a.learn_many("abab", key=1); b.learn_many("cbcb", key=2)
    >>> m = merge_accumulators([a, b], order=["c", "z"])
    >>> m.symbols, m.n_triples
    (['c', 'a', 'b'], 4.0)
    """
    accs = list(accs)
    if not accs:
        return MomentAccumulator()
    present = set().union(*(a.symbols for a in accs))
    first = accs[0]
    cap = getattr(first, "max_symbols", None)
    seed = MomentAccumulator(first.n_symbols, first.mode, first.forgetting, max_symbols=cap,
                             window=first.window)
    if order is not None and first.n_symbols is None:
        seed.alphabet.add_labels([s for s in order if s in present])
    return reduce(lambda x, y: x.merge(y), accs, seed)

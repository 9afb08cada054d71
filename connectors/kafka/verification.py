"""Before a partition is read on: is its log the one its counts were read from?

Every checkpoint holds the mark of the last record counted
(:class:`~connectors.state.identity.RecordMark`: offset, timestamp, digest, leader
epoch, topic id). :class:`LogVerifier` holds a partition back (it is listed in
:attr:`~connectors.kafka.assignment.Assignment.to_verify`) and seeks it to the
mark's offset when it is assigned, after every reconnection and topic id change
(:class:`~connectors.kafka.log_watch.BrokerWatch`), when its high-water mark falls
below its position, and when a fetch is out of range. The first fetch then answers:

* the marked record, unchanged: **verified**; the records after it are learned;
* another record at that offset, another topic id, or a log that ends before the
  mark (for a second, so that a leader's late high-water mark is not taken for a
  truncation): the log was **replaced or truncated**;
* records only after the mark, or an out-of-range fetch below the log start: the
  log's start offset decides. Past the partition's offset, records were **deleted
  before they were read** (retention ahead of the daemon), offsets and count known;
  otherwise the marked record alone is gone (retention, compaction; or the offsets
  after it hold control records) and nothing unread is missing (checked by topic id
  only, logged).

What happens then is ``on_offset_out_of_range``: ``fail`` stops the partition with
an ERROR naming the topic, partition, the checkpoint's record and what the log
holds now; ``reset`` keeps the counts and reads on (from the new log's start, or
after the deleted records), saying how many records it cannot vouch for, and ends
the partition's streams there so that no triple spans the gap. Deleted records are
counted in the checkpoint (:attr:`~connectors.state.identity.LogIdentity.deleted_unread`)
and in ``streamspec_records_deleted_unread_total``.

A checkpoint written before marks were kept is checked by its offset alone (said
once). Cost: one record fetched again per partition verified, no extra request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError

from connectors.config import DaemonConfig
from connectors.kafka.assignment import Assignment
from connectors.kafka.clients import OFFSETS_TIMEOUT_MS, high_water
from connectors.kafka.expectation import Expectation, Verdict
from connectors.kafka.log_watch import BrokerWatch
from connectors.metrics import DaemonMetrics
from connectors.state.files import PartitionState
from connectors.state.identity import RecordMark, describe_record

__all__ = ["LogVerifier", "SHORT_LOG_GRACE"]

log = logging.getLogger("streamspec.daemon")

SHORT_LOG_GRACE = 1.0  # seconds a log must end before the mark to be called truncated


class LogVerifier:
    """Checks held partitions against their logs and applies ``on_offset_out_of_range``.

    Parameters
    ----------
    config
        ``on_offset_out_of_range`` (``fail`` or ``reset``).
    assignment
        The partitions held; :attr:`~connectors.kafka.assignment.Assignment.to_verify`
        holds their :class:`Expectation`.
    metrics
        Counts verifications, mismatches, resets and records deleted unread.
    fail_partition
        ``fail_partition(tp, reason, error)``: stop a partition (paused, listed, exit 4).
    watch
        Reconnections and the topic's id (:class:`~connectors.kafka.log_watch.BrokerWatch`).

    Attributes
    ----------
    consumer
        The group consumer (set once connected).
    """

    def __init__(self, config: DaemonConfig, assignment: Assignment, metrics: DaemonMetrics,
                 fail_partition: Callable[[TopicPartition, str, str], None], watch: BrokerWatch):
        self.config, self.assignment, self.metrics = config, assignment, metrics
        self.fail_partition, self.watch = fail_partition, watch
        self.consumer: KafkaConsumer | None = None
        self._legacy_said = False

    # ------------------------------------------------------------------ holding back

    def expect(self, tp: TopicPartition, state: PartitionState, reason: str) -> bool:
        """Hold ``tp`` back and seek it to its marked record; False if there is nothing to check.

        Called under the assignment's lock (also from the rebalance callback: no blocking call).
        """
        mark = state.log.mark
        if mark is None and state.offset == 0:
            return False  # nothing counted: nothing to recognise
        if mark is None and not state.log.recorded and not self._legacy_said:
            self._legacy_said = True
            log.warning("event=checkpoint-without-identity partition=%s-%d offset=%d (written "
                        "before checkpoints recorded the last record counted: only its offset "
                        "is checked against the log, here and for any other such partition; "
                        "its next checkpoint records it)", tp.topic, tp.partition, state.offset)
        exp = Expectation(state.offset, mark, reason, high_water(self.consumer, tp))
        if not self._seek(tp, exp.fetch_offset):
            return False
        self.assignment.to_verify[tp] = exp
        return True

    def recheck_all(self, reason: str, batch: dict) -> None:
        """Verify every partition held again (a reconnection, another topic id); drop ``batch``.

        The records of ``batch`` may come from the new log: none is learned, every
        partition in it is sought back to its own offset (or its mark).
        """
        a = self.assignment
        with a.lock:
            again = [tp for tp, state in sorted(a.states.items())
                     if tp not in a.to_verify and self.expect(tp, state, reason)]
            for tp in batch:  # its records are dropped: fetch them again
                if tp in a.to_verify:
                    self._seek(tp, a.to_verify[tp].fetch_offset)
                elif tp in a.states:
                    self._seek(tp, a.states[tp].offset)
        if again:
            log.info("event=%s topic_id=%s partitions=%s action=verify (the last record counted "
                     "of each is read again before reading on)", reason, self.watch.topic_id(),
                     ",".join(str(tp.partition) for tp in again))

    def mark_of(self, tp: TopicPartition, message) -> RecordMark:
        """The mark of ``message``, the last record counted of ``tp`` (with the topic id, high water)."""
        return RecordMark.of(message, self.watch.topic_id(), high_water(self.consumer, tp))

    # ------------------------------------------------------------------ the first fetch

    def check_batch(self, tp: TopicPartition, state: PartitionState, messages: list) -> list:
        """The messages of a held-back partition that may be learned (under the lock).

        The first fetch after the seek decides (see the module docstring); until the
        verdict is applied (:meth:`settle`) nothing is learned.
        """
        exp = self.assignment.to_verify[tp]
        if exp.verdict is not None or exp.gap is not None:
            return []  # decided, or being decided, by the poll loop
        messages = [m for m in messages if m.offset >= exp.fetch_offset]  # fetched before the seek
        if not messages:
            return []
        first = messages[0]
        if exp.mark is not None and first.offset == exp.mark.offset:
            detail = exp.mark.differs_from(first, self.watch.topic_id())
            if detail is not None:
                exp.verdict = Verdict("replaced", detail, f"holds at {describe_record(first)}")
                return []
            self._verified(tp, exp, "record")
            return messages[1:]
        if first.offset > exp.fetch_offset:
            # a gap: deleted records, or control records and compaction in a live log;
            # the log start tells them apart (asked in settle(), outside the lock)
            exp.gap = first.offset
            self._seek(tp, exp.fetch_offset)  # these records are fetched again once decided
            return []
        self._verified(tp, exp, "offsets")
        return messages

    def _gap(self, tp: TopicPartition, exp: Expectation, start: int) -> None:
        """Decide a gap after the marked record (or the offset) from the log's start offset."""
        if start > exp.offset:  # retention removed records never read
            exp.verdict = Verdict("deleted", f"the log starts at offset {start}",
                                  f"starts at offset {start}", start)
            return
        if exp.mark is not None and not self._topic_unchanged(tp, exp):
            return
        self._mark_gone(tp, exp)  # only the marked record is gone: nothing unread is missing
        self._seek(tp, exp.offset)
        self._verified(tp, exp, "offsets")

    @staticmethod
    def _mark_gone(tp: TopicPartition, exp: Expectation) -> None:
        """The marked record alone is no longer in the log: say so; only offsets are checked on."""
        if exp.mark is not None:
            log.warning("event=log-unverifiable partition=%s-%d record_offset=%d (that record is "
                        "no longer in the log: retention or compaction removed it; the topic id "
                        "%s) action=read-on offset=%d", tp.topic, tp.partition, exp.mark.offset,
                        "matches" if exp.mark.topic_id else "is unknown", exp.offset)
        exp.mark = None

    def _topic_unchanged(self, tp: TopicPartition, exp: Expectation) -> bool:
        now = self.watch.topic_id()
        if exp.mark.topic_id and now and now != exp.mark.topic_id:
            exp.verdict = Verdict("replaced", f"the topic id changed from {exp.mark.topic_id} to "
                                  f"{now} (the topic was deleted and re-created)",
                                  f"is topic id {now}")
            return False
        return True

    def _verified(self, tp: TopicPartition, exp: Expectation, checked: str) -> None:
        del self.assignment.to_verify[tp]
        self.metrics.verifications += 1
        log.info("event=log-verified partition=%s-%d offset=%d checked=%s reason=%s",
                 tp.topic, tp.partition, exp.offset, checked, exp.reason)

    # ------------------------------------------------------------------ the poll loop

    def check_positions(self) -> None:
        """Verify again any partition whose high-water mark fell below its position. O(partitions)."""
        a = self.assignment
        with a.lock:
            for tp, state in a.states.items():
                if tp in a.to_verify:
                    continue
                hw = high_water(self.consumer, tp)
                if hw is not None and hw < state.offset:
                    self.expect(tp, state, "behind-high-water")

    def settle(self) -> None:
        """Decide the held-back partitions that fetched nothing, then apply the verdicts.

        The log start a reset needs is asked outside the lock (a blocking request).
        """
        a = self.assignment
        with a.lock:
            for tp in [tp for tp in a.to_verify if tp not in a.states]:
                del a.to_verify[tp]
            for tp, exp in a.to_verify.items():
                if exp.verdict is None and exp.gap is None:
                    self._idle(tp, exp, time.monotonic())
            ready = {tp: exp for tp, exp in a.to_verify.items()
                     if exp.verdict is not None or exp.gap is not None}
        if not ready:
            return
        reset = self.config.on_offset_out_of_range == "reset"
        want = [tp for tp, exp in ready.items()
                if exp.gap is not None or (reset and exp.verdict.kind != "deleted")]
        starts = self._starts(want)
        if starts is None:
            return
        with a.lock:
            for tp, exp in ready.items():
                if a.to_verify.get(tp) is not exp or tp not in a.states:
                    continue  # revoked, or checked again meanwhile
                if exp.verdict is None:
                    self._gap(tp, exp, starts.get(tp) or 0)
                if exp.verdict is not None:
                    self._apply(tp, exp, starts.get(tp))

    def _starts(self, tps: list) -> dict | None:
        """The log-start offsets of ``tps`` (a blocking request); ``None``: ask again next poll."""
        if not tps:
            return {}
        try:
            return self.consumer.beginning_offsets(tps, timeout_ms=OFFSETS_TIMEOUT_MS)
        except KafkaError as exc:
            log.warning("event=offsets-unavailable partitions=%s error=%r retry=next-poll",
                        ",".join(str(tp.partition) for tp in tps), str(exc))
            return None

    def _idle(self, tp: TopicPartition, exp: Expectation, now: float) -> None:
        """Judge a held-back partition from its high-water mark alone (nothing fetched yet)."""
        hw = high_water(self.consumer, tp)
        if hw is None:
            return
        if exp.mark is not None:
            if hw > exp.mark.offset:
                exp.short_since = None
                return
            exp.short_since = exp.short_since or now
            if now - exp.short_since >= SHORT_LOG_GRACE:
                exp.verdict = Verdict("truncated", f"the log ends before the checkpoint's last "
                                      f"record (offset {exp.mark.offset})",
                                      f"ends at offset {hw} (holds offsets below {hw})")
        elif hw != exp.high_water:  # a fresh answer, not a stale one (None at assignment)
            if hw < exp.offset:
                exp.verdict = Verdict("truncated", f"the log ends before the checkpoint offset "
                                      f"{exp.offset}", f"ends at offset {hw}")
            elif hw == exp.offset:
                self._verified(tp, exp, "offsets")

    def out_of_range(self, exc: OffsetOutOfRangeError) -> None:
        """A fetch was refused as out of range: below the log start (deleted) or beyond its end."""
        positions = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
        a = self.assignment
        tps = [tp for tp in positions if tp in a.states]
        if not tps:
            return
        try:
            starts = self.consumer.beginning_offsets(tps, timeout_ms=OFFSETS_TIMEOUT_MS)
            ends = self.consumer.end_offsets(tps, timeout_ms=OFFSETS_TIMEOUT_MS)
        except KafkaError as err:
            log.warning("event=offsets-unavailable error=%r retry=next-poll", str(err))
            return
        with a.lock:
            for tp in tps:
                state = a.states.get(tp)
                if state is None:
                    continue
                exp = a.to_verify.get(tp) or Expectation(state.offset, None, "out-of-range")
                a.to_verify[tp] = exp
                start, end = starts.get(tp) or 0, ends.get(tp)
                if positions[tp] < start and start <= exp.offset:  # only the mark is gone
                    if exp.mark is None or self._topic_unchanged(tp, exp):
                        self._mark_gone(tp, exp)
                        exp.high_water = None  # any answer now is about this log
                        self._seek(tp, exp.offset)
                        continue  # the next fetch, at the offset, confirms it
                elif positions[tp] < start:
                    exp.verdict = Verdict("deleted", f"the log starts at offset {start}",
                                          f"starts at offset {start}", start)
                else:
                    exp.verdict = Verdict("truncated", f"the log ends at offset {end}, before "
                                          f"offset {positions[tp]}", f"ends at offset {end}")
                self._apply(tp, exp, start)

    # ------------------------------------------------------------------ the policy

    def _apply(self, tp: TopicPartition, exp: Expectation, start: int | None) -> None:
        """Apply ``on_offset_out_of_range`` to a partition whose log is not the one read."""
        state, verdict = self.assignment.states[tp], exp.verdict
        if verdict.kind == "deleted":
            self._deleted(tp, state, exp, verdict)
            return
        self.metrics.log_mismatches += 1
        mark = exp.mark.describe() if exp.mark is not None else "unknown (an older checkpoint)"
        hw = exp.mark.high_water if exp.mark is not None else None
        unread = max(0, (hw or 0) - exp.offset)
        if self.config.on_offset_out_of_range != "reset":
            log.error("event=log-mismatch partition=%s-%d reason=log-%s detail=%r "
                      "checkpoint_offset=%d checkpoint_record=%r log_now=%r action=stop-partition "
                      "(policy fail: nothing of this log is counted; restart with "
                      "--on-offset-out-of-range reset to keep the %d records counted and read "
                      "this log from its start)", tp.topic, tp.partition, verdict.kind,
                      verdict.detail, exp.offset, mark, verdict.log_now, state.records)
            self.fail_partition(tp, f"log-{verdict.kind}", f"{tp.topic}-{tp.partition} is not the "
                                f"log its checkpoint was read from: {verdict.detail}")
            return
        start = start or 0
        log.warning("event=log-reset partition=%s-%d reason=log-%s detail=%r checkpoint_offset=%d "
                    "checkpoint_record=%r log_now=%r action=read-from-log-start log_start=%d "
                    "records_kept=%d old_log_unread=%d (records %d..%d of the old log were seen "
                    "but never read: they cannot be vouched for)", tp.topic, tp.partition,
                    verdict.kind, verdict.detail, exp.offset, mark, verdict.log_now, start,
                    state.records, unread, exp.offset, exp.offset + unread - 1)
        state.log.mark = None
        state.log.resets += 1
        self.metrics.log_resets += 1
        self._read_on(tp, state, start)

    def _deleted(self, tp: TopicPartition, state: PartitionState, exp: Expectation,
                 verdict: Verdict) -> None:
        first, last = exp.offset, verdict.first_available - 1
        n = last - first + 1
        self.metrics.records_deleted_unread += n
        if self.config.on_offset_out_of_range != "reset":
            log.error("event=records-deleted-unread partition=%s-%d offsets=%d-%d count=%d "
                      "action=stop-partition (retention removed them before they were read; "
                      "policy fail: restart with --on-offset-out-of-range reset to count them as "
                      "lost and read on from offset %d)", tp.topic, tp.partition, first, last, n,
                      verdict.first_available)
            self.fail_partition(tp, "records-deleted-unread", f"records {first}..{last} of "
                                f"{tp.topic}-{tp.partition} ({n}) were deleted before they were "
                                "read")
            return
        state.log.note_deleted(first, last)
        log.warning("event=records-deleted-unread partition=%s-%d offsets=%d-%d count=%d total=%d "
                    "action=read-on from=%d (retention removed them before they were read: "
                    "counted as lost in the checkpoint; the streams end at the gap)", tp.topic,
                    tp.partition, first, last, n, state.log.deleted_unread,
                    verdict.first_available)
        self._read_on(tp, state, verdict.first_available)

    def _read_on(self, tp: TopicPartition, state: PartitionState, offset: int) -> None:
        """Continue ``tp`` at ``offset``: its streams end here (no triple spans the gap)."""
        for key in state.acc.keys:
            state.acc.end(key)
        state.offset = offset
        self._seek(tp, offset)
        self.assignment.to_verify.pop(tp, None)
        self.assignment.dirty.add(tp)

    def _seek(self, tp: TopicPartition, offset: int) -> bool:
        """Seek ``tp``; False if the consumer no longer has it (revoked meanwhile)."""
        try:
            self.consumer.seek(tp, offset)
        except KafkaError:  # IllegalStateError: not assigned any more
            return False
        return True

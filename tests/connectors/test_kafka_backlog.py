"""The daemon under a backlog and against a shared state topic, with a real broker (Tansu).

* a backlog in several partitions is read in turns, not one partition to its end first;
* state-topic snapshots are checked for the consumer group, and a corrupt newest
  snapshot falls back to the previous one, exactly.
"""

from __future__ import annotations

import logging
import threading

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    DaemonThread,
    by_label,
    config,
    keyed_streams,
    new_topic,
    produce,
    reference,
    wait_until,
)

from connectors.kafka import ConsumerDaemon  # noqa: E402
from connectors.state.files import PartitionState  # noqa: E402
from connectors.state.snapshots import encode_snapshot, read_snapshots  # noqa: E402
from connectors.state.topic_io import ensure_topic  # noqa: E402


class ProgressDaemon(ConsumerDaemon):
    """Records the next offset of every partition after each partition batch it learns."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.progress: list[dict[int, int]] = []

    def _consume(self, tp, messages) -> None:
        super()._consume(tp, messages)
        self.progress.append(self.offsets())


def test_a_backlog_is_read_from_every_partition_in_turn(kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 3)
    # long keys (the stream ids), so that each partition holds several fetches' worth
    # (~2.6 MB) with the default settings and a small number of messages
    messages = [(key + b"." * 200, value)
                for key, value in keyed_streams(n_keys=9, length=4000, seed=71)]
    ends = produce(kafka_bootstrap, topic, messages)
    assert len(ends) == 3 and min(ends.values()) >= 4000  # a backlog in every partition
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", refit_every=0,
                 refit_process=False, max_poll_records=500)
    daemon = ProgressDaemon(cfg)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    try:
        wait_until(lambda: daemon.progress and daemon.progress[-1] == ends, "the whole backlog")
    finally:
        daemon.stop()
        thread.join(60)
    assert result == [0]
    first_done = next(i for i, seen in enumerate(daemon.progress)
                      if any(seen.get(p) == end for p, end in ends.items()))
    at_first_end = daemon.progress[first_done]
    # every partition advanced before any one was read to its end
    assert all(at_first_end.get(p, 0) > 0 for p in ends), at_first_end
    batches = len(daemon.progress)
    print(f"backlog: {sum(ends.values())} records in {batches} partition batches; "
          f"offsets when the first partition reached its end: {at_first_end} of {ends}")


def _publish(bootstrap, state_topic, state: PartitionState, partition: int,
             value: bytes | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=64 << 20)
    key, encoded, headers = encode_snapshot(state, owner="test")
    producer.send(state_topic, key=key, value=encoded if value is None else value,
                  headers=headers, partition=partition).get(timeout=30)
    producer.close()


def _state_of(topic: str, partition: int, messages, offset: int, group: str | None):
    st = PartitionState(topic, partition, reference(messages), offset=offset,
                        records=len(messages), group=group)
    return st


def test_a_snapshot_of_another_group_is_refused_never_overwritten(kafka_bootstrap, unique_name,
                                                                  tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    ends = produce(kafka_bootstrap, topic, keyed_streams(n_keys=3, length=100, seed=82))
    state_topic = f"{topic}.state"
    ensure_topic(kafka_bootstrap, state_topic, 1)
    foreign = _state_of(topic, 0, [(b"k", b"a")] * 5, 5, group="someone-else")
    _publish(kafka_bootstrap, state_topic, foreign, 0)
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", state_backend="kafka",
                 session_timeout_ms=2000)
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: daemon.failed, "the partition refused")
        assert daemon.failed == {kafka.TopicPartition(topic, 0): "foreign-checkpoint"}
        assert daemon.metrics.unreadable_checkpoints == 1 and not daemon.states
    latest = read_snapshots(kafka_bootstrap, state_topic).get(0)
    assert (latest.offset, latest.group) == (5, "someone-else")  # never replaced
    assert ends[0] == 300


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one_exactly(
        kafka_bootstrap, unique_name, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    messages = keyed_streams(n_keys=3, length=100, seed=83)
    ends = produce(kafka_bootstrap, topic, messages)
    state_topic = f"{topic}.state"
    ensure_topic(kafka_bootstrap, state_topic, 1)
    good = _state_of(topic, 0, messages[:120], 120, group=group)
    _publish(kafka_bootstrap, state_topic, good, 0)
    newer = _state_of(topic, 0, messages[:200], 200, group=group)
    _publish(kafka_bootstrap, state_topic, newer, 0, value=b"torn snapshot")
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", state_backend="kafka",
                 session_timeout_ms=2000)
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: read_snapshots(kafka_bootstrap, state_topic).offsets().get(0)
                   == ends[0], "the partition at its end offset")
        assert not daemon.failed and daemon.metrics.unreadable_checkpoints == 1
    back = read_snapshots(kafka_bootstrap, state_topic).get(0).state()
    # the records after offset 120 were read again, none twice: exactly the log's counts
    assert by_label(back.acc) == by_label(reference(messages)) and back.records == 300
    assert back.group == group
    assert "event=snapshot-fallback" in caplog.text and "used_offset=120" in caplog.text

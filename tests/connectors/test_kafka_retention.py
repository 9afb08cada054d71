"""Retention ahead of the daemon: records deleted before they were read are counted and named.

What is real and what is not: Tansu 0.6 (the test broker) deletes no record. Its
in-memory storage does not enforce ``retention.ms`` (a topic created with
``retention.ms=500`` still starts at offset 0 after 40 s) and ``DeleteRecords`` is
unimplemented (the broker drops the connection). So the broker here is real, the
daemon is a real ``streamspec consume`` process and the records are real, but the
deletion is said by :class:`kafka_helpers.RetentionProxy`, a Kafka-protocol proxy
between the daemon and the broker that answers exactly as a Kafka broker does once
retention removed the offsets below S: the earliest offset is S, and a fetch below S
is refused with ``OFFSET_OUT_OF_RANGE``. Every count is checked against the records
on the topic, and every record not counted must be named (how many, which offsets)
by an ERROR or a WARNING.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    RetentionProxy,
    by_label,
    checkpoint_offset,
    daemon_cmd,
    event_lines,
    field,
    keyed_streams,
    pieces_reference,
    produce,
    reference,
    spawn,
    terminate,
    wait_until,
)

from connectors.broker import create_topic  # noqa: E402
from connectors.kafka import EXIT_PARTITION_FAILURE  # noqa: E402
from connectors.state import StateStore  # noqa: E402


@pytest.fixture
def proxy(kafka_bootstrap):
    p = RetentionProxy(kafka_bootstrap)
    yield p
    p.close()


def _daemon(proxy, topic, group, state_dir, log_path, policy, *extra) -> subprocess.Popen:
    return spawn(daemon_cmd(proxy.bootstrap, topic, group, state_dir, "--on-offset-out-of-range",
                            policy, "--refit-every", "0", *extra), log_path)


def test_records_deleted_while_the_daemon_was_stopped_fail_then_are_counted_as_lost(
        kafka_bootstrap, proxy, unique_name, tmp_path):
    topic, group, state_dir = unique_name("-in"), unique_name("-g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, partitions=1)
    read = keyed_streams(n_keys=4, length=250, seed=21)  # offsets 0..999: read, then stopped
    produce(kafka_bootstrap, topic, read)
    log_path = tmp_path / "daemon.log"
    proc = _daemon(proxy, topic, group, state_dir, log_path, "fail")
    try:
        wait_until(lambda: checkpoint_offset(state_dir, topic) == 1000, "the first records", proc=proc)
    finally:
        assert terminate(proc, resume=True) == 0
    later = keyed_streams(n_keys=4, length=750, seed=22)  # offsets 1000..3999
    produce(kafka_bootstrap, topic, later)
    proxy.log_start[(topic, 0)] = 2500  # retention removed 0..2499: 1000..2499 never read
    seen = len(log_path.read_text())
    proc = _daemon(proxy, topic, group, state_dir, log_path, "fail")
    try:
        wait_until(lambda: "failed=0:records-deleted-unread" in log_path.read_text()[seen:],
                   "the partition stopped", proc=proc)
    finally:
        code = terminate(proc, resume=True)
    text = log_path.read_text()[seen:]
    assert code == EXIT_PARTITION_FAILURE
    line = event_lines(text, "records-deleted-unread")[0]
    assert " ERROR " in line and f"partition={topic}-0 " in line
    assert field(line, "offsets") == "1000-2499" and field(line, "count") == "1500"
    kept = StateStore(state_dir).load(topic, 0)
    assert kept.offset == 1000 and by_label(kept.acc) == by_label(reference(read))
    # reset: counted as lost, named, and the rest read
    seen = len(log_path.read_text())
    proc = _daemon(proxy, topic, group, state_dir, log_path, "reset")
    try:
        wait_until(lambda: checkpoint_offset(state_dir, topic) == 4000
                   and "deleted_unread=1500" in log_path.read_text()[seen:], "the rest read",
                   proc=proc)
    finally:
        code = terminate(proc, resume=True)
    text = log_path.read_text()[seen:]
    assert code == 0
    line = event_lines(text, "records-deleted-unread")[0]
    assert " WARNING " in line and field(line, "offsets") == "1000-2499"
    assert field(line, "count") == "1500" and field(line, "from") == "2500"
    final = StateStore(state_dir).load(topic, 0)
    assert final.log.deleted_unread == 1500 and final.log.deleted_ranges == [(1000, 2499)]
    assert final.records == 1000 + 1500
    assert by_label(final.acc) == by_label(pieces_reference(read, later[1500:]))


def test_records_deleted_while_the_daemon_reads_are_counted_and_named(
        kafka_bootstrap, proxy, unique_name, tmp_path):
    topic, group, state_dir = unique_name("-in"), unique_name("-g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, partitions=1)
    first = keyed_streams(n_keys=4, length=250, seed=31)  # offsets 0..999
    produce(kafka_bootstrap, topic, first)
    log_path = tmp_path / "daemon.log"
    proc = _daemon(proxy, topic, group, state_dir, log_path, "reset", "--checkpoint-every", "1")
    try:
        wait_until(lambda: checkpoint_offset(state_dir, topic) == 1000, "the first records", proc=proc)
        proc.send_signal(signal.SIGSTOP)  # caught up at 1000 when retention overtakes it
        proxy.log_start[(topic, 0)] = 2000
        more = keyed_streams(n_keys=4, length=750, seed=32)  # offsets 1000..3999
        produce(kafka_bootstrap, topic, more)
        proc.send_signal(signal.SIGCONT)
        wait_until(lambda: checkpoint_offset(state_dir, topic) == 4000, "the rest read", proc=proc)
        wait_until(lambda: "deleted_unread=1000" in log_path.read_text(), "a status line",
                   proc=proc)
    finally:
        code = terminate(proc, resume=True)
    text = log_path.read_text()
    assert code == 0
    [line] = event_lines(text, "records-deleted-unread")
    assert field(line, "offsets") == "1000-1999" and field(line, "count") == "1000"
    final = StateStore(state_dir).load(topic, 0)
    assert final.log.deleted_unread == 1000 and final.records == 1000 + 2000
    assert by_label(final.acc) == by_label(pieces_reference(first, more[1000:]))

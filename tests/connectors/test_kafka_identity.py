"""A checkpoint that knows which log it read: replaced brokers, re-created topics, old checkpoints.

Real Tansu brokers, real ``streamspec consume`` processes. Each test replaces the
log under a daemon (a broker killed and replaced by an empty one on the same
address, or a topic deleted and re-created), then checks the counts exactly against
the records that were on the topics, and that every record not counted is named by
an ERROR or a WARNING (how many, which offsets), under both policies of
``--on-offset-out-of-range``.
"""

from __future__ import annotations

import signal

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    FixedPortBroker,
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

from connectors.broker import create_topic, free_port  # noqa: E402
from connectors.kafka import EXIT_PARTITION_FAILURE  # noqa: E402
from connectors.state import StateStore  # noqa: E402
from connectors.state.identity import record_digest  # noqa: E402

# slow enough that a backlog is read in many small steps, each checkpointed
STEPPED = ("--max-poll-records", "50", "--checkpoint-every", "1", "--refit-every", "0")


def _seen(state_dir, topic) -> tuple[int | None, bool]:
    """The high-water mark the daemon saw (its checkpoint's mark), and whether it is reading on."""
    st = StateStore(state_dir).load(topic, 0)
    if st is None or st.log.mark is None:
        return None, False
    return st.log.mark.high_water, st.offset > 2300


@pytest.mark.parametrize("policy,new_log", [("fail", "shorter"), ("fail", "longer"),
                                            ("reset", "shorter"), ("reset", "longer")])
def test_broker_replaced_by_an_empty_one_while_the_daemon_has_a_backlog(tmp_path, policy,
                                                                         new_log):
    port = free_port()
    broker = FixedPortBroker(port, tmp_path / "broker-old.log")
    bootstrap = broker.start()
    topic, group, state = "clicks", "g", tmp_path / "state"
    log_path = tmp_path / "daemon.log"
    proc = None
    try:
        create_topic(bootstrap, topic, partitions=1)
        first = keyed_streams(n_keys=4, length=500, seed=1)
        produce(bootstrap, topic, first)
        proc = spawn(daemon_cmd(bootstrap, topic, group, state, "--on-offset-out-of-range",
                                policy, *STEPPED), log_path)
        wait_until(lambda: checkpoint_offset(state, topic) == len(first), "the first records", proc=proc)
        proc.send_signal(signal.SIGSTOP)  # a backlog arrives...
        backlog = keyed_streams(n_keys=4, length=5000, seed=2)
        produce(bootstrap, topic, backlog)
        old = first + backlog
        proc.send_signal(signal.SIGCONT)  # ...and is being read when the broker dies
        wait_until(lambda: _seen(state, topic) == (len(old), True), "the backlog seen", proc=proc)
        proc.send_signal(signal.SIGSTOP)
        at_kill = checkpoint_offset(state, topic)
        broker.kill()
        broker = FixedPortBroker(port, tmp_path / "broker-new.log")
        broker.start()
        create_topic(bootstrap, topic, partitions=1)
        length = (at_kill // 2 if new_log == "shorter" else at_kill + 2000) // 4
        new = keyed_streams(n_keys=4, length=length, seed=3)
        produce(bootstrap, topic, new)
        proc.send_signal(signal.SIGCONT)
        if policy == "fail":  # the partition stops, and the status line says so
            wait_until(lambda: "failed=0:log-" in log_path.read_text(), "the failure", proc=proc)
        else:
            wait_until(lambda: checkpoint_offset(state, topic) == len(new)
                       and "event=log-reset" in log_path.read_text(), "the new log read",
                       proc=proc)
        code = terminate(proc, resume=True)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        broker.stop()
    text = log_path.read_text()
    final = StateStore(state).load(topic, 0)
    if policy == "fail":
        assert code == EXIT_PARTITION_FAILURE
        line = event_lines(text, "log-mismatch")[0]
        counted = int(field(line, "checkpoint_offset"))
        assert at_kill <= counted <= at_kill + 50
        # nothing of the new log is counted: exactly the old log's first records
        assert at_kill <= final.offset <= counted and final.records == final.offset
        assert by_label(final.acc) == by_label(reference(old[:final.offset]))
        assert event_lines(text, "partition-failed")
    else:
        assert code == 0
        line = event_lines(text, "log-reset")[0]
        counted = int(field(line, "checkpoint_offset"))
        assert at_kill <= counted <= at_kill + 50
        # the old log's counts kept, the new log counted whole, no triple across the two
        assert final.offset == len(new) and final.records == counted + len(new)
        assert by_label(final.acc) == by_label(pieces_reference(old[:counted], new))
        # the old log's records seen but never read are named: how many, which offsets
        assert int(field(line, "old_log_unread")) == len(old) - counted
        assert f"records {counted}..{len(old) - 1} of the old log" in line
        assert final.log.resets == 1
    # the ERROR or WARNING names the topic, the partition, the checkpoint's record and the log now
    assert f"partition={topic}-0 " in line
    key, value = old[counted - 1]
    assert f"offset {counted - 1} (timestamp" in line and record_digest(key, value) in line
    if new_log == "shorter":
        assert field(line, "reason") == "log-truncated" and f"ends at offset {len(new)}" in line
    else:
        key, value = new[counted - 1]
        assert field(line, "reason") == "log-replaced" and record_digest(key, value) in line


def _state(backend: str, bootstrap: str, topic: str, state_dir):
    """The partition's latest durable state: its checkpoint file, or its state-topic snapshot."""
    if backend == "local":
        return StateStore(state_dir).load(topic, 0)
    from connectors.state.snapshots import read_snapshots

    snap = read_snapshots(bootstrap, f"{topic}.state", [0]).get(0)
    return None if snap is None else snap.state()


def _run_until(cmd, log_path, condition, what) -> tuple[int, str]:
    """Start a daemon, wait for ``condition(log text)``, SIGTERM it; its exit status and log."""
    start = log_path.read_text() if log_path.exists() else ""
    proc = spawn(cmd, log_path)
    try:
        wait_until(lambda: condition(log_path.read_text()[len(start):]), what, proc=proc)
    finally:
        code = terminate(proc, resume=True)
    return code, log_path.read_text()[len(start):]


@pytest.mark.parametrize("backend", ["local", "kafka"])
def test_topic_deleted_and_recreated_with_more_records_than_the_checkpoint(
        kafka_bootstrap, unique_name, tmp_path, backend):
    from kafka.admin import KafkaAdminClient

    topic, group, state_dir = unique_name("-in"), unique_name("-g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, partitions=1)
    old = keyed_streams(n_keys=4, length=150, seed=11)
    produce(kafka_bootstrap, topic, old)
    log_path = tmp_path / "daemon.log"

    def cmd(policy):
        return daemon_cmd(kafka_bootstrap, topic, group, state_dir, "--state-backend", backend,
                          "--on-offset-out-of-range", policy, "--refit-every", "0")

    def at(offset):
        return lambda text: (getattr(_state(backend, kafka_bootstrap, topic, state_dir),
                                     "offset", None) == offset and "event=status" in text)

    code, _ = _run_until(cmd("fail"), log_path, at(len(old)), "the old log read")
    assert code == 0
    before = _state(backend, kafka_bootstrap, topic, state_dir)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    wait_until(lambda: _recreate(kafka_bootstrap, topic), "the topic re-created")
    new = keyed_streams(n_keys=4, length=250, seed=12)  # 1000 records: past the checkpoint (600)
    produce(kafka_bootstrap, topic, new)
    # fail: the partition stops, nothing of the new log is counted, the state is kept
    code, text = _run_until(cmd("fail"), log_path, lambda t: "failed=0:log-replaced" in t,
                            "the partition stopped")
    assert code == EXIT_PARTITION_FAILURE
    line = event_lines(text, "log-mismatch")[0]
    kept = _state(backend, kafka_bootstrap, topic, state_dir)
    assert kept.offset == len(old) and by_label(kept.acc) == by_label(before.acc)
    assert by_label(kept.acc) == by_label(reference(old))
    assert f"partition={topic}-0 " in line and "checkpoint_offset=600 " in line
    assert record_digest(*old[599]) in line and record_digest(*new[599]) in line
    assert "the topic id changed" in line
    # reset: the counts kept, the new log read from its start, whole
    code, text = _run_until(cmd("reset"), log_path, at(len(new)), "the new log read")
    assert code == 0
    line = event_lines(text, "log-reset")[0]
    assert "old_log_unread=0 " in line and "records_kept=600 " in line
    final = _state(backend, kafka_bootstrap, topic, state_dir)
    assert final.records == len(old) + len(new) and final.log.resets == 1
    assert by_label(final.acc) == by_label(pieces_reference(old, new))


def _recreate(bootstrap, topic) -> bool:
    from kafka.errors import TopicAlreadyExistsError

    try:
        create_topic(bootstrap, topic, partitions=1)
    except TopicAlreadyExistsError:  # the deletion is not done yet
        return False
    return True

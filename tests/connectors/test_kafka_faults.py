"""The daemon under faults, against a real broker (Tansu): each test reproduces one failure.

A checkpoint of another partition or group, an unreadable newest checkpoint (and
a folder where a checkpoint should be), offsets beyond the end of a re-created
log, a frozen broker, refits that fail, a SIGTERM before the signal handlers
exist, and the leftovers of a write interrupted by SIGKILL.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request

import numpy as np
import pytest
from kafka_helpers import (  # shared helpers (the module needs kafka anyway)
    ROOT,
    DaemonThread,
    by_label,
    checkpoint_offsets,
    config,
    keyed_streams,
    new_topic,
    produce,
    reference,
    wait_until,
)

kafka = pytest.importorskip("kafka")

from connectors.broker import TansuBroker  # noqa: E402
from connectors.kafka import EXIT_PARTITION_FAILURE, ConsumerDaemon  # noqa: E402
from connectors.state import PartitionState, StateStore  # noqa: E402
from streamspec.core.checkpoint import CheckpointError, load_checkpoint_bytes  # noqa: E402

TP = kafka.TopicPartition


def _run(cfg) -> tuple[ConsumerDaemon, list, threading.Thread]:
    daemon = ConsumerDaemon(cfg)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    return daemon, result, thread


def _stop(daemon, thread) -> None:
    daemon.stop()
    thread.join(60)
    assert not thread.is_alive(), "the daemon did not stop"


def _metrics(daemon) -> str:
    wait_until(lambda: daemon.metrics_port is not None, "the metrics endpoint")
    with urllib.request.urlopen(f"http://127.0.0.1:{daemon.metrics_port}/metrics",
                                timeout=10) as response:
        return response.read().decode()


def test_foreign_checkpoint_is_refused_never_used_never_overwritten(
        kafka_bootstrap, unique_name, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=6, length=60, seed=51)
    ends = produce(kafka_bootstrap, topic, messages)
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir)):
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "first checkpoints")
    store = StateStore(state_dir)
    p0, p1 = store.path(topic, 0), store.path(topic, 1)
    shutil.copyfile(p1, p0)  # partition 1's valid file where partition 0's belongs
    store.previous_path(topic, 0).unlink(missing_ok=True)
    copied, p1_bytes = p0.read_bytes(), p1.read_bytes()
    more = keyed_streams(n_keys=6, length=10, seed=52)
    ends = {p: max(ends[p], e) for p, e in produce(kafka_bootstrap, topic, more).items()}
    cfg = config(kafka_bootstrap, topic, group, state_dir, metrics_port=0)
    caplog.clear()
    daemon, result, thread = _run(cfg)
    try:
        wait_until(lambda: StateStore(state_dir).load(topic, 1).offset == ends[1],
                   "partition 1 read on")
        assert daemon.failed == {TP(topic, 0): "foreign-checkpoint"}
        text = _metrics(daemon)
        assert "streamspec_failed_partitions 1" in text
        wait_until(lambda: "failed=0:foreign-checkpoint" in caplog.text, "a status line")
    finally:
        _stop(daemon, thread)
    assert result == [EXIT_PARTITION_FAILURE]
    assert p0.read_bytes() == copied  # never overwritten
    assert p1.read_bytes() != p1_bytes  # partition 1 itself moved on
    assert f"event=assigned partition={topic}-0 " not in caplog.text  # never used
    refused = [r for r in caplog.records if "foreign-checkpoint" in r.getMessage()
               and r.levelno == logging.ERROR]
    assert refused and "partition=1" in refused[0].getMessage()  # names both
    # a group's checkpoint is refused for another group too
    with pytest.raises(CheckpointError, match="group"):
        StateStore(state_dir, group="another").restore(topic, 1)


def test_unreadable_newest_checkpoint_falls_back_to_the_previous_one_exactly(
        kafka_bootstrap, unique_name, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    state_dir = tmp_path / "state"
    first = keyed_streams(n_keys=4, length=100, seed=61)
    second = keyed_streams(n_keys=4, length=50, seed=62)
    ends = produce(kafka_bootstrap, topic, first)
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir)):
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "the first pass")
        ends = produce(kafka_bootstrap, topic, second)
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "the second pass")
    store = StateStore(state_dir)
    prev = PartitionState.load(store.previous_path(topic, 0))
    assert prev.offset < ends[0]  # the fallback is behind: its records must be re-read
    rng = np.random.default_rng(0)
    store.path(topic, 0).write_bytes(rng.bytes(4096))  # the newest replaced by random bytes
    stale = store.path(topic, 0).parent / ".partition-00000.ckpt.abc123.tmp"
    stale.write_bytes(b"x" * 1000)  # what a SIGKILL during a write leaves
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir)) as daemon:
        wait_until(lambda: daemon.states and daemon.states[TP(topic, 0)].offset == ends[0],
                   "the records after the fallback re-read")
    assert not stale.exists()
    assert "event=checkpoint-fallback" in caplog.text and f"offset={prev.offset}" in caplog.text
    assert "corrupt checkpoint" in caplog.text and "allow_pickle" not in caplog.text
    final = StateStore(state_dir).load(topic, 0)
    assert final.offset == ends[0]
    assert by_label(final.acc) == by_label(reference(first + second))  # no loss, no double


def test_a_folder_as_checkpoint_fails_that_partition_only_and_visibly(
        kafka_bootstrap, unique_name, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 3)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=9, length=40, seed=71)
    ends = produce(kafka_bootstrap, topic, messages)
    StateStore(state_dir).path(topic, 1).mkdir(parents=True)  # not a file
    cfg = config(kafka_bootstrap, topic, group, state_dir, metrics_port=0)
    daemon, result, thread = _run(cfg)
    try:
        wait_until(lambda: checkpoint_offsets_safe(state_dir, topic) == {0: ends[0], 2: ends[2]},
                   "partitions 0 and 2 read to their end")
        assert daemon.failed == {TP(topic, 1): "unreadable-checkpoint"}
        assert "streamspec_failed_partitions 1" in _metrics(daemon)
        assert daemon.lag() is None  # never "lag=0" while a partition is unread
        wait_until(lambda: "failed=1:unreadable-checkpoint" in caplog.text, "a status line")
    finally:
        _stop(daemon, thread)
    assert result == [EXIT_PARTITION_FAILURE]


def checkpoint_offsets_safe(state_dir, topic) -> dict[int, int]:
    """Offsets of the readable partition checkpoints (a folder in their place is skipped)."""
    store, out = StateStore(state_dir), {}
    for p in store.partitions(topic):
        try:
            out[p] = store.load(topic, p).offset
        except (CheckpointError, OSError):
            continue
    return out


@pytest.mark.parametrize("policy", ["fail", "reset"])
def test_checkpoint_offset_beyond_a_recreated_log(kafka_bootstrap, unique_name, tmp_path,
                                                  caplog, policy):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    state_dir = tmp_path / "state"
    # the history learned from the topic before it was deleted and re-created
    old = keyed_streams(n_keys=2, length=300, seed=81)
    state = PartitionState(topic, 0, reference(old), offset=600, records=600)
    StateStore(state_dir, owner="before", group=group).save(state)
    new = keyed_streams(n_keys=2, length=100, seed=82)  # the re-created log: offsets 0..199
    ends = produce(kafka_bootstrap, topic, new)
    cfg = config(kafka_bootstrap, topic, group, state_dir, on_offset_out_of_range=policy)
    daemon, result, thread = _run(cfg)
    try:
        if policy == "fail":
            wait_until(lambda: daemon.failed, "the partition refused")
            assert daemon.failed == {TP(topic, 0): "offset-out-of-range"}
        else:
            wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "the new log read")
    finally:
        _stop(daemon, thread)
    back = StateStore(state_dir).load(topic, 0)
    if policy == "fail":
        assert result == [EXIT_PARTITION_FAILURE]
        assert back.offset == 600 and by_label(back.acc) == by_label(state.acc)
        assert "checkpoint offset 600" in caplog.text and "high-water mark 200" in caplog.text
    else:
        assert result == [0]
        expected = reference(old + new)  # kept, plus the new log
        assert by_label(back.acc) == by_label(expected) and back.records == 800
        assert "event=offset-reset" in caplog.text


def test_frozen_broker_is_reported_once_per_attempt_with_backoff(unique_name, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    broker = TansuBroker(tmp_path / "broker.log")
    bootstrap = broker.start()
    try:
        topic, group = new_topic(bootstrap, unique_name, 1)
        state_dir = tmp_path / "state"
        first = keyed_streams(n_keys=2, length=100, seed=91)
        ends = produce(bootstrap, topic, first)
        cfg = config(bootstrap, topic, group, state_dir)
        daemon, result, thread = _run(cfg)
        try:
            wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "the first pass")
            daemon.assignment.dirty.add(TP(topic, 0))  # something to commit while the broker is frozen
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                wait_until(lambda: len(_failure_lines(caplog)) >= 3, "three failed attempts",
                           timeout=60)
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            second = keyed_streams(n_keys=2, length=50, seed=92)
            ends = produce(bootstrap, topic, second)
            wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "after the freeze")
        finally:
            _stop(daemon, thread)
    finally:
        broker.stop()
    assert result == [0]
    lines = _failure_lines(caplog)
    delays = [float(ln.split("retry_in=")[1].split("s")[0]) for ln in lines]
    assert delays[:3] == [0.5, 1.0, 2.0], lines  # one line per attempt, backing off
    assert [int(ln.split("attempt=")[1].split()[0]) for ln in lines][:3] == [1, 2, 3]
    assert by_label(StateStore(state_dir).load(topic, 0).acc) == by_label(reference(first + second))


def _failure_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "event=commit-failed" in r.getMessage() and "retry_in=" in r.getMessage()]


def test_refit_failures_are_logged_and_counted(kafka_bootstrap, unique_name, tmp_path, caplog,
                                               monkeypatch):
    from streamspec.core.mestimator import MEstimator

    def failing(self, *args, **kwargs):
        raise np.linalg.LinAlgError("injected: the fit does not converge")

    monkeypatch.setattr(MEstimator, "fit", failing)
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    ends = produce(kafka_bootstrap, topic, keyed_streams(n_keys=3, length=300, seed=95))
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", refit_process=False,
                 metrics_port=0, refit_duty=1.0)
    daemon, result, thread = _run(cfg)
    try:
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends, "the end")
        wait_until(lambda: daemon.refits.refitter.n_failures >= 1, "a failed refit")
        wait_until(lambda: "streamspec_refit_failures_total 0" not in _metrics(daemon)
                   and "streamspec_refit_failures_total" in _metrics(daemon), "the counter")
        wait_until(lambda: "refit_failures=0" not in _last_status(caplog), "a status line")
    finally:
        _stop(daemon, thread)
    assert result == [0] and daemon.model is None
    assert "event=refit-failed" in caplog.text and "injected" in caplog.text


def _last_status(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if "event=status" in r.getMessage()]
    return lines[-1] if lines else "refit_failures=0"


def test_sigterm_before_the_handlers_exist_exits_zero(tmp_path):
    # the signal arrives while the daemon is being built, before run() installs its handlers
    script = (
        "import os, signal, sys\n"
        "import connectors.kafka as k\n"
        "real = k.ConsumerDaemon.__init__\n"
        "def init(self, cfg):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real(self, cfg)\n"
        "k.ConsumerDaemon.__init__ = init\n"
        "from streamspec.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script, "consume", "--bootstrap", "127.0.0.1:1", "--topic", "t",
         "--state-dir", str(tmp_path / "s")], env=env, cwd=ROOT, capture_output=True,
        text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "event=stopped" in proc.stderr and "Traceback" not in proc.stderr


def test_random_bytes_are_reported_as_a_corrupt_checkpoint():
    rng = np.random.default_rng(1)
    for data in (rng.bytes(100), b"", b"\x93NUMPY" + rng.bytes(50)):
        with pytest.raises(CheckpointError, match="corrupt checkpoint") as info:
            load_checkpoint_bytes(data, "streamspec.PartitionState", 2, "f.ckpt")
        assert "pickle" not in str(info.value)


def test_a_version_1_checkpoint_is_accepted_only_for_the_partition_it_names(tmp_path):
    from streamspec.core.checkpoint import write_checkpoint

    st = PartitionState("clicks", 3, offset=7, records=7)
    st.acc.learn_many("abcabca", key="u")
    header, arrays = st.checkpoint_parts()
    del header["group"]  # as written before the group was recorded
    store = StateStore(tmp_path, group="g")
    write_checkpoint(store.path("clicks", 3), "streamspec.PartitionState", 1, header, arrays)
    assert store.restore("clicks", 3).state.offset == 7
    shutil.copyfile(store.path("clicks", 3), store.path("clicks", 4))
    with pytest.raises(CheckpointError, match="partition=3"):
        store.restore("clicks", 4)

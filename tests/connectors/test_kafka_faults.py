"""The daemon under faults, against a real broker (Tansu): each test reproduces one failure.

A checkpoint of another partition or group, an unreadable newest checkpoint, a
folder where a checkpoint should be, an older checkpoint (without the log's
identity) beyond the end of a re-created log, a frozen broker, refits that fail
(also for memory), a SIGTERM or a SIGINT before the signal handlers exist, and the
leftovers of a write interrupted by SIGKILL.
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
    daemon_cmd,
    keyed_streams,
    new_topic,
    pieces_reference,
    produce,
    read_to_end,
    reference,
    spawn,
    topic_records,
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
    ends = read_to_end(kafka_bootstrap, topic, group, state_dir, messages)
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


def test_a_folder_at_a_checkpoint_path_fails_that_partition_once_per_start_saying_what_to_do(
        kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 3)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=9, length=40, seed=71)
    ends = read_to_end(kafka_bootstrap, topic, group, state_dir, messages)
    store = StateStore(state_dir)
    blocked, prev = store.path(topic, 1), store.previous_path(topic, 1)
    blocked.replace(prev)  # a readable fallback (until now the daemon read it, then exit 3)...
    blocked.mkdir()  # ...and a folder where the newest must be written
    prev_bytes = prev.read_bytes()
    more = keyed_streams(n_keys=9, length=10, seed=72)
    ends = {p: max(ends[p], e) for p, e in produce(kafka_bootstrap, topic, more).items()}
    log_path = tmp_path / "daemon.log"
    for start in (1, 2):  # reported once per start, with what to do; the others read on
        seen = log_path.read_text() if log_path.exists() else ""
        proc = spawn(daemon_cmd(kafka_bootstrap, topic, group, state_dir), log_path)
        try:
            wait_until(lambda seen=seen: checkpoint_offsets_safe(state_dir, topic) == {
                           0: ends[0], 2: ends[2]} and "failed=1:checkpoint-path-blocked"
                       in log_path.read_text()[len(seen):],
                       "partitions 0 and 2 read, partition 1 failed", proc=proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        text = log_path.read_text()[len(seen):]
        assert code == EXIT_PARTITION_FAILURE, f"start {start}: exit {code}"
        named = [ln for ln in text.splitlines() if str(blocked) in ln]
        assert len(named) == 1 and " ERROR " in named[0] and "Move it away" in named[0]
        assert "event=fatal" not in text and "lag=0 " not in text.split("failed=1:")[-1]
    assert blocked.is_dir() and prev.read_bytes() == prev_bytes  # neither touched


def checkpoint_offsets_safe(state_dir, topic) -> dict[int, int]:
    """Offsets of the readable partition checkpoints (a folder in their place is skipped)."""
    store, out = StateStore(state_dir), {}
    for p in store.partitions(topic):
        try:
            out[p] = store.load(topic, p).offset
        except (CheckpointError, OSError):
            continue
    return out


def _legacy_checkpoint(store: StateStore, state: PartitionState) -> None:
    """A checkpoint as written before it recorded the log's identity (no ``log`` entry)."""
    from streamspec.core.checkpoint import write_checkpoint

    header, arrays = state.checkpoint_parts()
    del header["log"]
    write_checkpoint(store.path(state.topic, state.partition), "streamspec.PartitionState", 2,
                     header, arrays)


@pytest.mark.parametrize("policy", ["fail", "reset"])
def test_an_older_checkpoint_without_identity_loads_and_its_offset_is_checked(
        kafka_bootstrap, unique_name, tmp_path, caplog, policy):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state_dir = tmp_path / "state"
    store = StateStore(state_dir, owner="before", group=group)
    # the history learned before the topic was deleted and re-created, by an older daemon
    old = {p: keyed_streams(n_keys=2, length=300, seed=81 + p) for p in (0, 1)}
    for p in (0, 1):
        _legacy_checkpoint(store, PartitionState(topic, p, reference(old[p]), offset=600,
                                                 records=600, group=group))
    assert not StateStore(state_dir).load(topic, 0).log.recorded
    new = keyed_streams(n_keys=6, length=40, seed=82)  # the re-created log: far below 600
    ends = produce(kafka_bootstrap, topic, new)
    cfg = config(kafka_bootstrap, topic, group, state_dir, on_offset_out_of_range=policy)
    daemon, result, thread = _run(cfg)
    try:
        if policy == "fail":
            wait_until(lambda: len(daemon.assignment.ever_failed) == 2, "both partitions refused")
            assert set(daemon.assignment.ever_failed.values()) == {"log-truncated"}
        else:
            wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "the new log read")
    finally:
        _stop(daemon, thread)
    said = [r for r in caplog.records if "event=checkpoint-without-identity" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"  # once, for both partitions
    on_topic = topic_records(kafka_bootstrap, topic)
    for p in (0, 1):
        back = StateStore(state_dir).load(topic, p)
        if policy == "fail":
            assert back.offset == 600 and by_label(back.acc) == by_label(reference(old[p]))
            assert f"partition={topic}-{p} reason=log-truncated" in caplog.text
        else:
            new_p = [(m.key, m.value) for m in on_topic[p]]
            assert back.offset == len(new_p) and back.records == 600 + len(new_p)
            assert by_label(back.acc) == by_label(pieces_reference(old[p], new_p))
            assert back.log.recorded and back.log.mark.offset == len(new_p) - 1  # recorded now
    assert result == [EXIT_PARTITION_FAILURE if policy == "fail" else 0]
    assert "ends at offset" in caplog.text and "checkpoint_offset=600" in caplog.text


class _LosesItsPartitions(ConsumerDaemon):
    """A daemon whose partitions are revoked once and never reassigned (as after an outage).

    Once it has read ``ends``, its consumer leaves the subscription: the group takes the
    partitions back and gives them to nobody.
    """

    ends: dict = {}
    lost = False

    def _after_batch(self) -> None:
        super()._after_batch()
        if not self.lost and self.offsets() == self.ends:
            self.lost = True
            self.consumer.unsubscribe()


def test_a_daemon_left_without_partitions_says_so_and_rejoins(kafka_bootstrap, unique_name,
                                                            tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state_dir = tmp_path / "state"
    first = keyed_streams(n_keys=6, length=50, seed=97)
    ends = produce(kafka_bootstrap, topic, first)
    daemon = _LosesItsPartitions(config(kafka_bootstrap, topic, group, state_dir, metrics_port=0))
    daemon.ends = ends
    result: list = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    try:
        wait_until(lambda: daemon.lost, "the partitions revoked")
        wait_until(lambda: "event=no-partitions" in caplog.text, "the report")
        wait_until(lambda: "unassigned=" in _last_status(caplog), "the status line")
        assert 'streamspec_unassigned_seconds 0\n' not in _metrics(daemon)
        second = keyed_streams(n_keys=6, length=30, seed=98)
        ends = {p: max(ends[p], e) for p, e in produce(kafka_bootstrap, topic, second).items()}
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "read after the rejoin")
        assert "streamspec_rejoins_total 1" in _metrics(daemon)
        assert "streamspec_unassigned_seconds 0\n" in _metrics(daemon)
    finally:
        _stop(daemon, thread)
    assert result == [0]
    line = next(r for r in caplog.records if "event=no-partitions" in r.getMessage())
    assert line.levelname == "WARNING" and "action=rejoin" in line.getMessage()
    assert f"group={group} topic={topic}" in line.getMessage()
    assert "the topic has 2 partitions" in line.getMessage()
    assert "event=partitions-regained" in caplog.text
    merged = StateStore(state_dir).merged(topic)
    assert by_label(merged) == by_label(reference(first + second))


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


def test_a_refit_out_of_memory_is_one_line_and_the_status_shows_it(
        kafka_bootstrap, unique_name, tmp_path, caplog, monkeypatch):
    from streamspec.core.mestimator import MEstimator

    def out_of_memory(self, *args, **kwargs):
        raise MemoryError("injected: cannot allocate the fit")

    monkeypatch.setattr(MEstimator, "fit", out_of_memory)
    caplog.set_level(logging.INFO)  # every logger: the refitter's own too
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    ends = produce(kafka_bootstrap, topic, keyed_streams(n_keys=3, length=300, seed=96))
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", refit_process=False,
                 refit_duty=1.0)
    daemon, result, thread = _run(cfg)
    try:
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends, "the end")
        wait_until(lambda: "refit_error=MemoryError" in _last_status(caplog), "a status line")
    finally:
        _stop(daemon, thread)
    assert result == [0]
    about = [r for r in caplog.records if "event=status" not in r.getMessage()
             and ("MemoryError" in r.getMessage() or r.exc_info)]
    assert about and all(r.exc_info is None and "event=refit-failed reason=memory" in
                         r.getMessage() for r in about)
    assert len(about) <= daemon.refits.refitter.n_failures
    assert "Traceback" not in caplog.text and "\n" not in about[0].getMessage()


def _last_status(caplog) -> str:
    lines = [r.getMessage() for r in caplog.records if "event=status" in r.getMessage()]
    return lines[-1] if lines else "refit_failures=0"


def _consume_after(script: str, tmp_path) -> subprocess.CompletedProcess:
    """``streamspec consume`` of an address nobody serves, in a Python that runs ``script`` first
    (to inject a fault) and then the CLI; its output captured."""
    script += "from streamspec.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", script, "consume", "--bootstrap", "127.0.0.1:1", "--topic", "t",
         "--state-dir", str(tmp_path / "s")], env=env, cwd=ROOT, capture_output=True,
        text=True, timeout=120)


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
    )
    proc = _consume_after(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "event=stopped" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("module", ["streamspec.experiments.paper", "connectors.kafka"])
def test_sigint_during_the_start_up_imports_exits_130_quietly(tmp_path, module):
    # the signal arrives while the commands (or the daemon) are being imported
    script = (
        "import importlib.abc, os, signal, sys\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name == {module!r}:\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
    )
    proc = _consume_after(script, tmp_path)
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.strip().endswith("interrupted")


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

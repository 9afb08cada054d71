"""The consumer daemon against a real broker (Tansu): exactness, crashes, rebalances, poison.

Every test produces real messages to a real topic and runs the real daemon, in
a thread or (for SIGKILL/SIGTERM) as a subprocess. Counts are compared exactly,
label by label, with a MomentAccumulator fed the same records directly.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

kafka = pytest.importorskip("kafka")

from connectors.broker import create_topic  # noqa: E402
from connectors.config import DaemonConfig  # noqa: E402
from connectors.kafka import ConsumerDaemon  # noqa: E402
from connectors.records import RecordFormat, parse_kafka  # noqa: E402
from connectors.state import StateStore, merge_accumulators  # noqa: E402
from streamspec.core.hmm import HMM  # noqa: E402
from streamspec.core.hmm_estimator import HMMEstimator  # noqa: E402
from streamspec.core.model import ObservableOperatorModel  # noqa: E402
from streamspec.streaming.accumulator import MomentAccumulator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120  # seconds: a generous bound on any wait (never an assertion on time)
# consumer-group timings that make joins and rebalances take 1-2 s against Tansu
GROUP_SETTINGS = dict(session_timeout_ms=3000, heartbeat_interval_ms=500,
                      max_poll_interval_ms=10000)


# ---------------------------------------------------------------------------- helpers


def keyed_streams(n_keys: int, length: int, seed: int = 0) -> list[tuple[bytes, bytes]]:
    """Interleaved (key, symbol) messages of ``n_keys`` HMM streams of ``length`` symbols."""
    hmm = HMM.random(n_states=2, n_symbols=4, random_state=seed)
    rng = np.random.default_rng(seed)
    seqs = {f"user-{k}": list(hmm.sample(length, random_state=seed + k + 1)) for k in range(n_keys)}
    pos = dict.fromkeys(seqs, 0)
    out = []
    while pos:
        key = list(pos)[rng.integers(len(pos))]
        out.append((key.encode(), "abcd"[seqs[key][pos[key]]].encode()))
        pos[key] += 1
        if pos[key] == length:
            del pos[key]
    return out


def produce(bootstrap: str, topic: str, messages, headers=None) -> dict[int, int]:
    """Send the messages in order; the end offset (last + 1) of every partition written."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                             max_request_size=8 << 20)
    futures = [producer.send(topic, key=k, value=v) for k, v in messages]
    producer.flush()
    ends: dict[int, int] = {}
    for f in futures:
        md = f.get(timeout=30)
        ends[md.partition] = max(ends.get(md.partition, 0), md.offset + 1)
    producer.close()
    return ends


class Feeder(threading.Thread):
    """Produces ``messages`` in batches of ``batch``, pausing ``pause`` s after each until hurried.

    ``ends`` holds the end offset (last + 1) of every partition written so far;
    ``produced`` is set once every message is sent; setting ``hurry`` drops the pauses.
    """

    def __init__(self, bootstrap: str, topic: str, messages, batch: int, pause: float):
        super().__init__()
        self.bootstrap, self.topic, self.messages = bootstrap, topic, messages
        self.batch, self.pause = batch, pause
        self.ends: dict[int, int] = {}
        self.produced, self.hurry = threading.Event(), threading.Event()

    def run(self) -> None:
        for i in range(0, len(self.messages), self.batch):
            for p, e in produce(self.bootstrap, self.topic, self.messages[i:i + self.batch]).items():
                self.ends[p] = max(self.ends.get(p, 0), e)
            if not self.hurry.is_set():
                time.sleep(self.pause)
        self.produced.set()


def new_topic(bootstrap: str, unique_name, partitions: int) -> tuple[str, str]:
    """A topic of ``partitions`` partitions, created, and a consumer-group name: unique to the test."""
    topic, group = unique_name("-in"), unique_name("-g")
    create_topic(bootstrap, topic, partitions=partitions)
    return topic, group


def reference(messages, fmt: RecordFormat | None = None) -> MomentAccumulator:
    """A MomentAccumulator fed the good records of ``messages`` directly, in order."""
    fmt = fmt or RecordFormat()
    acc = MomentAccumulator()
    for k, v in messages:
        try:
            records = parse_kafka(k, v, fmt)
        except ValueError:
            continue
        for r in records:
            if r.symbol is not None:
                acc.learn_one(r.symbol, r.key)
            if r.end:
                acc.end(r.key)
    return acc


def by_label(acc: MomentAccumulator) -> dict[tuple, float]:
    """Non-zero triple counts keyed by labels (x1, x2, x3): independent of symbol order.

    From the sparse counts, so it serves at any alphabet size."""
    t, s = acc.triples(), acc.symbols
    return {(s[a], s[b], s[c]): w for a, b, c, w in
            zip(t.x1.tolist(), t.x2.tolist(), t.x3.tolist(), t.weights.tolist(), strict=True)}


def checkpoint_offsets(state_dir, topic: str) -> dict[int, int]:
    return {s.partition: s.offset for s in StateStore(state_dir).load_all(topic)}


def wait_until(condition, what: str, timeout: float = WAIT, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def config(bootstrap, topic, group, state_dir, **kw) -> DaemonConfig:
    settings = dict(bootstrap=bootstrap, topic=topic, group=group, state_dir=str(state_dir),
                    refit_every=500, checkpoint_interval=0.2, status_interval=1.0,
                    poll_timeout_ms=100, **GROUP_SETTINGS)
    settings.update(kw)
    return DaemonConfig(**settings)


class DaemonThread:
    """A ConsumerDaemon running in a thread of the test process."""

    def __init__(self, cfg: DaemonConfig):
        self.daemon = ConsumerDaemon(cfg)
        self.result: list = []
        self.thread = threading.Thread(target=lambda: self.result.append(self.daemon.run()))

    def __enter__(self):
        self.thread.start()
        return self.daemon

    def __exit__(self, *exc):
        self.daemon.stop()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the daemon did not stop"


def daemon_cmd(bootstrap, topic, group, state_dir, *extra) -> list[str]:
    return [
        sys.executable, "-m", "streamspec.cli.commands", "consume", "--bootstrap", bootstrap,
        "--topic", topic, "--group", group, "--state-dir", str(state_dir),
        "--refit-every", "2000", "--checkpoint-interval", "0.1", "--status-interval", "1",
        "--session-timeout-ms", str(GROUP_SETTINGS["session_timeout_ms"]),
        "--heartbeat-interval-ms", str(GROUP_SETTINGS["heartbeat_interval_ms"]),
        "--max-poll-interval-ms", str(GROUP_SETTINGS["max_poll_interval_ms"]),
        "--poll-timeout-ms", "100", *extra,
    ]


def spawn(cmd, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the OS when the test ends
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def consume_all(bootstrap, topic: str, expected: int, timeout: float = 30):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=200).values():
            out.extend(msgs)
    consumer.close()
    return out


def committed(bootstrap, group: str, topic: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}


# ---------------------------------------------------------------------------- tests


def test_end_to_end_counts_equal_direct_accumulator(kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 3)
    messages = keyed_streams(n_keys=9, length=400)
    ends = produce(kafka_bootstrap, topic, messages)
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state",
                 models_topic=unique_name("-models"), predictions_topic=unique_name("-pred"),
                 metrics_port=0)
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends,
                   "checkpoints at the end offsets")
        wait_until(lambda: daemon.metrics_port is not None, "the metrics endpoint")
        import urllib.request

        url = f"http://127.0.0.1:{daemon.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert f"streamspec_records_total {len(messages)}" in text
        assert "streamspec_lag 0" in text
        wait_until(lambda: daemon.metrics.refits >= 1, "a refit")
        # with a model in place, every new record gets a prediction
        more = keyed_streams(n_keys=9, length=20, seed=99)
        ends = {p: max(ends[p], e) for p, e in produce(kafka_bootstrap, topic, more).items()}
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends,
                   "checkpoints at the new end offsets")
    messages += more
    merged = StateStore(tmp_path / "state").merged(topic)
    assert by_label(merged) == by_label(reference(messages))
    assert merged.n_triples == 9 * (420 - 2)
    assert sum(s.records for s in StateStore(tmp_path / "state").load_all(topic)) == len(messages)
    # offsets were committed after the checkpoints, and equal them
    assert committed(kafka_bootstrap, group, topic) == ends
    # model snapshots: a documented, non-pickle format ObservableOperatorModel loads
    snaps = consume_all(kafka_bootstrap, cfg.models_topic, expected=1)
    assert snaps, "no model snapshot published"
    model = ObservableOperatorModel.from_bytes(snaps[-1].value)
    assert sorted(model.symbols) == ["a", "b", "c", "d"]
    assert dict(snaps[-1].headers)["format"] == b"streamspec.ObservableOperatorModel/1"
    saved = ObservableOperatorModel.load(tmp_path / "state" / topic / "model.ckpt")
    assert saved.symbols is not None and saved.n_symbols == 4
    # predictions: valid next-symbol distributions
    preds = consume_all(kafka_bootstrap, cfg.predictions_topic, expected=len(more))
    assert len(preds) == len(more)
    body = json.loads(preds[0].value)
    assert set(body["next"]) <= {"a", "b", "c", "d"}
    assert abs(sum(body["next"].values()) - 1) < 1e-4


def test_states_option_fits_publishes_and_restores_an_hmm(kafka_bootstrap, unique_name,
                                                          tmp_path, capsys):
    from streamspec.cli import main as cli_main
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    messages = keyed_streams(n_keys=6, length=400, seed=5)
    ends = produce(kafka_bootstrap, topic, messages)
    state = tmp_path / "state"
    hmm_file = state / topic / "model.ckpt.hmm"
    cfg = config(kafka_bootstrap, topic, group, state, hmm_states=2,
                 models_topic=unique_name("-models"))
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: checkpoint_offsets(state, topic) == ends, "checkpoints at the end")
        wait_until(lambda: daemon.metrics.refits >= 1 and hmm_file.exists(), "a refit with an HMM")
        wait_until(lambda: daemon._refitter.model.hmm is not None, "the HMM served")
    saved = HiddenMarkovModel.load(hmm_file)
    assert saved.n_states == 2 and sorted(saved.symbols) == ["a", "b", "c", "d"]
    # published after its model, with the model's version
    out = consume_all(kafka_bootstrap, cfg.models_topic, expected=2)
    out.sort(key=lambda m: (m.partition, m.offset))
    formats = [dict(m.headers)["format"] for m in out]
    assert formats[:2] == [b"streamspec.ObservableOperatorModel/1",
                           b"streamspec.HiddenMarkovModel/1"]
    assert out[0].partition == out[1].partition and out[0].key == out[1].key
    assert dict(out[0].headers)["model-version"] == dict(out[1].headers)["model-version"]
    published = HiddenMarkovModel.from_bytes(out[1].value)
    assert published.n_states == 2
    # the fit is a fit: about as likely as a cold fit on the same counts
    streams: dict[bytes, list[str]] = {}
    for key, value in messages:
        streams.setdefault(key, []).append(value.decode())
    direct = HMMEstimator(n_states=2, random_state=0).fit(reference(messages))
    ll_saved = sum(saved.score(x) for x in streams.values()) / len(messages)
    ll_direct = sum(direct.score(x) for x in streams.values()) / len(messages)
    assert abs(ll_saved - ll_direct) < 0.01
    # a restart warm-starts the next HMM fit from the saved one
    restarted = ConsumerDaemon(cfg)
    assert restarted._hmm_estimator.last.hmm == saved
    assert restarted._hmm_estimator.last.model is restarted.model is not None
    # inspect on the state folder shows the matrices
    assert cli_main(["inspect", str(state)]) == 0
    text = capsys.readouterr().out
    assert "streamspec.HiddenMarkovModel" in text and "transmat" in text


def test_poison_messages_go_to_dead_letter_topic(kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 1)
    dlq = unique_name("-dlq")
    create_topic(kafka_bootstrap, dlq, partitions=1)
    good = keyed_streams(n_keys=2, length=50, seed=3)
    bad = [
        (b"user-0", b"\xff\xfe\xfd"),  # undecodable
        (b"user-1", b""),  # empty
        (b"user-0", None),  # a tombstone: no value
        (b"user-1", b"x" * 5000),  # oversized (max_bytes=1000)
        (b"user-0", b"z"),  # not in the fixed alphabet
    ]
    # poison in the middle: the daemon must go on with the good messages after it
    messages = good[:40] + bad + good[40:]
    ends = produce(kafka_bootstrap, topic, messages)
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", dead_letter_topic=dlq,
                 alphabet=("a", "b", "c", "d"), format={"max_bytes": 1000})
    with DaemonThread(cfg):
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends,
                   "checkpoints at the end offsets")
    state = StateStore(tmp_path / "state").load(topic, 0)
    assert dict(state.dead_letters) == {"undecodable": 1, "empty": 2, "oversized": 1,
                                        "unknown-symbol": 1}
    assert by_label(state.acc) == by_label(reference(good))
    from streamspec.cli.commands import describe_checkpoint

    info = describe_checkpoint(StateStore(tmp_path / "state").path(topic, 0))
    assert info["offset"] == ends[0] and info["dead_letters"]["empty"] == 2
    letters = consume_all(kafka_bootstrap, dlq, expected=5)
    reasons = sorted(dict(m.headers)["reason"].decode() for m in letters)
    assert reasons == ["empty", "empty", "oversized", "undecodable", "unknown-symbol"]
    offsets = sorted(int(dict(m.headers)["source-offset"]) for m in letters)
    assert offsets == list(range(40, 45))
    undecodable = [m for m in letters if dict(m.headers)["reason"] == b"undecodable"][0]
    assert undecodable.value == b"\xff\xfe\xfd" and undecodable.key == b"user-0"


def _final_counts_after_restarts(bootstrap, topic, group, state_dir, ends, tmp_path):
    """Run the daemon once more to the end offsets, then SIGTERM it; it must exit 0."""
    log_path = tmp_path / "daemon.log"
    starts = log_path.read_text().count("event=connected") + 1 if log_path.exists() else 1
    proc = spawn(daemon_cmd(bootstrap, topic, group, state_dir), log_path)
    try:
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends
                   and log_path.read_text().count("event=connected") >= starts,
                   "checkpoints at the end offsets", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    return code


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    kafka_bootstrap, unique_name, tmp_path
):
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=8, length=2500, seed=7)
    # keep producing while the daemon is being killed and restarted
    feeding = Feeder(kafka_bootstrap, topic, messages, batch=100, pause=0.2)
    feeding.start()
    rng = random.Random(11)
    mid_stream = 0
    # faster eviction of the killed member: each restart then rejoins in about 3 s
    timings = ["--session-timeout-ms", "2000", "--heartbeat-interval-ms", "500"]
    log_path = tmp_path / "daemon.log"
    try:
        for _ in range(6):
            proc = spawn(daemon_cmd(kafka_bootstrap, topic, group, state_dir, *timings),
                         log_path)
            try:
                before = sum(checkpoint_offsets(state_dir, topic).values())
                wait_until(lambda b=before: sum(checkpoint_offsets(state_dir, topic).values()) > b
                           or feeding.produced.is_set(), "progress since the last kill", proc=proc)
                time.sleep(rng.uniform(0.0, 0.5))  # a random moment while it consumes
                busy = not feeding.produced.is_set()
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            mid_stream += busy
    finally:
        feeding.hurry.set()
        feeding.join()
    assert mid_stream >= 5, f"only {mid_stream} kills came while messages were arriving"
    code = _final_counts_after_restarts(kafka_bootstrap, topic, group, state_dir, feeding.ends,
                                        tmp_path)
    assert code == 0
    merged = StateStore(state_dir).merged(topic)
    assert by_label(merged) == by_label(reference(messages))
    assert merged.n_triples == 8 * (2500 - 2)


def test_sigterm_exits_zero_with_final_checkpoint_and_commit(
    kafka_bootstrap, unique_name, tmp_path
):
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=4, length=300, seed=5)
    ends = produce(kafka_bootstrap, topic, messages)
    # a long checkpoint interval: only the shutdown checkpoint can write the end offsets
    cmd = daemon_cmd(kafka_bootstrap, topic, group, state_dir)
    cmd[cmd.index("--checkpoint-interval") + 1] = "3600"
    cmd += ["--checkpoint-every", "100000000"]
    proc = spawn(cmd, tmp_path / "daemon.log")
    try:
        wait_until(lambda: "event=assigned" in (tmp_path / "daemon.log").read_text(),
                   "partition assignment", proc=proc)
        wait_until(lambda: "records=1200" in _last_status(tmp_path / "daemon.log"),
                   "all records consumed", proc=proc)
        assert checkpoint_offsets(state_dir, topic) == {}, "checkpointed before the shutdown"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0
    assert checkpoint_offsets(state_dir, topic) == ends
    assert committed(kafka_bootstrap, group, topic) == ends
    assert by_label(StateStore(state_dir).merged(topic)) == by_label(reference(messages))
    assert "event=final-checkpoint" in (tmp_path / "daemon.log").read_text()


def _last_status(log_path: Path) -> str:
    lines = [ln for ln in log_path.read_text().splitlines() if "event=status" in ln]
    return lines[-1] if lines else ""


def test_two_daemons_split_partitions_and_take_over_after_kill(
    kafka_bootstrap, unique_name, tmp_path
):
    topic, group = new_topic(kafka_bootstrap, unique_name, 4)
    state_dir = tmp_path / "state"
    first = keyed_streams(n_keys=12, length=200, seed=21)
    second = keyed_streams(n_keys=12, length=200, seed=22)
    ends = produce(kafka_bootstrap, topic, first)
    a = spawn(daemon_cmd(kafka_bootstrap, topic, group, state_dir, "--client-id", "daemon-a"),
              tmp_path / "a.log")
    b = spawn(daemon_cmd(kafka_bootstrap, topic, group, state_dir, "--client-id", "daemon-b"),
              tmp_path / "b.log")
    try:
        def owners():
            return {s.partition: s.owner for s in StateStore(state_dir).load_all(topic)}

        # both daemons own partitions at the same time: the group split them
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends
                   and set(owners().values()) == {"daemon-a", "daemon-b"},
                   "both daemons checkpointing their share", proc=a)
        before = checkpoint_offsets(state_dir, topic)
        a_parts = [p for p, o in owners().items() if o == "daemon-a"]
        a.send_signal(signal.SIGKILL)
        a.wait(30)
        ends = {p: max(ends.get(p, 0), e) for p, e in produce(kafka_bootstrap, topic,
                                                               second).items()}
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends
                   and set(owners().values()) == {"daemon-b"},
                   "daemon-b owning every partition at the end offsets", proc=b)
        log_b = (tmp_path / "b.log").read_text()
        for p in a_parts:  # b resumed a's partitions from a's checkpointed offsets
            assert f"partition={topic}-{p} offset={before[p]} from=checkpoint" in log_b
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
    assert b.returncode == 0
    merged = merge_accumulators(s.acc for s in StateStore(state_dir).load_all(topic))
    assert by_label(merged) == by_label(reference(first + second))


def test_unavailable_broker_is_retried_with_backoff_and_sigterm_exits_zero(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path / "daemon.log"
    proc = spawn(daemon_cmd(f"127.0.0.1:{port}", "t", "g", tmp_path / "state"), log_path)
    try:
        wait_until(lambda: log_path.read_text().count("event=broker-unavailable") >= 2,
                   "two connection attempts", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0
    lines = [ln for ln in log_path.read_text().splitlines() if "event=broker-unavailable" in ln]
    delays = [float(ln.split("retry_in=")[1].rstrip("s")) for ln in lines]
    assert delays[:2] == [0.5, 1.0]  # exponential backoff, not a spin
    assert "event=stopped" in log_path.read_text()


def test_unreadable_checkpoint_pauses_its_partition_only(kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("-in")
    state_dir = tmp_path / "state"
    create_topic(kafka_bootstrap, topic, partitions=2)
    first = keyed_streams(n_keys=6, length=50, seed=31)
    ends = produce(kafka_bootstrap, topic, first)
    group = unique_name("-g")  # the same group: a checkpoint of another group is refused
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir)):
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "first checkpoints")
    broken = StateStore(state_dir).path(topic, 0)
    broken.write_bytes(b"garbage")
    StateStore(state_dir).previous_path(topic, 0).unlink(missing_ok=True)  # no fallback
    more = keyed_streams(n_keys=6, length=20, seed=32)
    ends = {p: max(ends[p], e) for p, e in produce(kafka_bootstrap, topic, more).items()}
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir)) as daemon:
        wait_until(lambda: StateStore(state_dir).load(topic, 1).offset == ends[1],
                   "partition 1 at its end offset")
        assert daemon.metrics.unreadable_checkpoints == 1
        assert daemon.failed == {kafka.TopicPartition(topic, 0): "unreadable-checkpoint"}
    assert broken.read_bytes() == b"garbage"  # never replaced by a fresh (double) count


def test_rebalance_checkpoints_before_revocation(kafka_bootstrap, unique_name, tmp_path, caplog):
    """A second member joins: the first hands over partitions through revocation checkpoints."""
    import logging

    caplog.set_level(logging.INFO, logger="streamspec.daemon")
    topic, group = new_topic(kafka_bootstrap, unique_name, 4)
    state_dir = tmp_path / "state"
    messages = keyed_streams(n_keys=16, length=100, seed=41)
    ends = produce(kafka_bootstrap, topic, messages)
    # no periodic checkpoint: only a revocation (or the shutdown) can write one
    lazy = dict(checkpoint_interval=3600.0, checkpoint_every=10**9)
    with DaemonThread(config(kafka_bootstrap, topic, group, state_dir, client_id="first",
                             **lazy)) as first:
        wait_until(lambda: first.metrics.messages == len(messages), "the first member's pass")
        assert checkpoint_offsets(state_dir, topic) == {}
        with DaemonThread(config(kafka_bootstrap, topic, group, state_dir, client_id="second",
                                 **lazy)) as second:
            wait_until(lambda: second.states and len(first.states) + len(second.states) == 4,
                       "the partitions split between both members")
            moved = sorted(tp.partition for tp in second.states)
            handed = checkpoint_offsets(state_dir, topic)
            assert all(handed[p] == ends[p] for p in moved)
    for p in moved:
        assert f"partition={topic}-{p} offset={ends[p]} from=checkpoint" in caplog.text
    assert by_label(StateStore(state_dir).merged(topic)) == by_label(reference(messages))


def test_json_values_and_their_poison(kafka_bootstrap, unique_name, tmp_path):
    topic, dlq = unique_name("-in"), unique_name("-dlq")
    create_topic(kafka_bootstrap, topic, partitions=1)
    create_topic(kafka_bootstrap, dlq, partitions=1)
    good = [(None, json.dumps({"user": f"u{i % 3}", "page": "abc"[i % 3 - (i % 2)]}).encode())
            for i in range(60)]
    bad = [(None, b'{"user": "u1", "page": '), (None, b'{"user": "u1"}'), (None, b"[1, 2]")]
    messages = good[:30] + bad + good[30:]
    ends = produce(kafka_bootstrap, topic, messages)
    fmt = {"value_format": "json", "key_field": "user", "symbol_field": "page"}
    cfg = config(kafka_bootstrap, topic, unique_name("-g"), tmp_path / "state",
                 dead_letter_topic=dlq, format=fmt)
    with DaemonThread(cfg):
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends,
                   "checkpoints at the end offsets")
    state = StateStore(tmp_path / "state").load(topic, 0)
    assert dict(state.dead_letters) == {"bad-json": 2, "missing-field": 1}
    expected = reference(good, RecordFormat(value_format="json", key_field="user",
                                            symbol_field="page"))
    assert by_label(state.acc) == by_label(expected) and state.acc.n_triples == 3 * 18
    reasons = sorted(dict(m.headers)["reason"] for m in consume_all(kafka_bootstrap, dlq, 3))
    assert reasons == [b"bad-json", b"bad-json", b"missing-field"]

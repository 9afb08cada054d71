"""Helpers shared by the Kafka tests: producing keyed streams, reference counts, daemons in
threads and subprocesses, waiting without timing assertions.

Imported as ``kafka_helpers`` (pytest puts the ``tests`` folder, where ``conftest.py`` is, on
``sys.path``).
"""

from __future__ import annotations

import os
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
from connectors.state import StateStore  # noqa: E402
from streamspec.core.hmm import HMM  # noqa: E402
from streamspec.streaming.accumulator import MomentAccumulator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
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
        sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
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

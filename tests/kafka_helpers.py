"""Helpers shared by the Kafka tests: producing keyed streams, reference counts, daemons in
threads and subprocesses, waiting without timing assertions.

Imported as ``kafka_helpers`` (pytest puts the ``tests`` folder, where ``conftest.py`` is, on
``sys.path``).
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

kafka = pytest.importorskip("kafka")

from connectors.broker import TansuBroker, create_topic  # noqa: E402
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
    acc = MomentAccumulator(window=1)  # as the daemons of config() and daemon_cmd()
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
    # window 1: the daemon's mechanics are checked against exact triple counts of open streams
    # (the default "auto" counts the last grams of a stream when it goes on or ends; it runs in
    # test_kafka_demo_runs_the_main_job_end_to_end and tests/streaming/test_window_default.py)
    settings = dict(bootstrap=bootstrap, topic=topic, group=group, state_dir=str(state_dir),
                    refit_every=500, checkpoint_interval=0.2, status_interval=1.0,
                    poll_timeout_ms=100, window=1, **GROUP_SETTINGS)
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


def read_to_end(bootstrap, topic: str, group: str, state_dir, messages) -> dict[int, int]:
    """``messages`` produced, then read by a daemon thread (:func:`config`) until every partition's
    checkpoint is at its end offset; the end offsets, per partition."""
    ends = produce(bootstrap, topic, messages)
    with DaemonThread(config(bootstrap, topic, group, state_dir)):
        wait_until(lambda: checkpoint_offsets(state_dir, topic) == ends, "first checkpoints")
    return ends


def daemon_cmd(bootstrap, topic, group, state_dir, *extra) -> list[str]:
    return [
        sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
        "--topic", topic, "--group", group, "--state-dir", str(state_dir),
        "--refit-every", "2000", "--checkpoint-interval", "0.1", "--status-interval", "1",
        "--session-timeout-ms", str(GROUP_SETTINGS["session_timeout_ms"]),
        "--heartbeat-interval-ms", str(GROUP_SETTINGS["heartbeat_interval_ms"]),
        "--max-poll-interval-ms", str(GROUP_SETTINGS["max_poll_interval_ms"]),
        "--poll-timeout-ms", "100", "--window", "1", *extra,  # window 1: as config() above
    ]


def spawn(cmd, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    log = open(log_path, "ab")  # noqa: SIM115 - closed by the OS when the test ends
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)


def terminate(proc: subprocess.Popen, resume: bool = False) -> int:
    """SIGTERM a running daemon process (SIGCONT first with ``resume``: it may be stopped) and
    its exit status; one that has not exited 60 s later is killed and the timeout raised."""
    if proc.poll() is None:
        if resume:
            proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()  # why: a hung daemon must not outlive the test
        raise


def checkpoint_offset(state_dir, topic: str, partition: int = 0) -> int:
    """The offset of ``partition``'s checkpoint, -1 without one."""
    return checkpoint_offsets(state_dir, topic).get(partition, -1)


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


# ---------------------------------------------------------------------------- faults of the log


def topic_records(bootstrap, topic: str) -> dict[int, list]:
    """Every record of ``topic`` on the broker, per partition, in offset order (to its high water)."""
    from connectors.state.topic_io import read_topic

    out: dict[int, list] = {}
    read_topic(bootstrap, topic, lambda m: out.setdefault(m.partition, []).append(m),
               client_id="test-reader")
    return {p: sorted(ms, key=lambda m: m.offset) for p, ms in out.items()}


def pieces_reference(*pieces) -> MomentAccumulator:
    """The counts of several runs of messages, each one's streams ended before the next begins.

    What the daemon keeps after a reset or a gap: no triple spans two pieces.
    """
    from connectors.state import merge_accumulators

    return merge_accumulators(reference(piece) for piece in pieces)


def event_lines(text: str, event: str) -> list[str]:
    return [ln for ln in text.splitlines() if f"event={event} " in ln or ln.endswith(f"event={event}")]


def field(line: str, name: str) -> str:
    """The value of ``name=value`` in a log line (up to the next space)."""
    return line.split(f" {name}=", 1)[1].split()[0]


class FixedPortBroker(TansuBroker):
    """A Tansu broker on a given loopback port: start another on the same address after a kill.

    With in-memory storage a killed broker loses everything; a new one on the same port is
    the 'broker replaced by an empty one' of a real outage.
    """

    def __init__(self, port: int, log_path: Path):
        super().__init__(log_path=log_path, port=port)

    def kill(self) -> None:
        """SIGKILL: the broker and everything it held (topics, records, groups) are gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
        self.stop()  # closes the log


class RetentionProxy:
    """A Kafka-protocol proxy that makes a real broker answer as if retention had deleted records.

    Tansu 0.6 deletes no record: its in-memory storage ignores ``retention.ms`` (its
    ``maintain`` does nothing there) and ``DeleteRecords`` is unimplemented (the connection
    drops). What a Kafka broker says once retention removed offsets below S is small and
    well defined, so this proxy says it on the broker's behalf, for the partitions in
    :attr:`log_start` (``{(topic, partition): S}``):

    * ``ListOffsets`` for the earliest offset answers S;
    * a ``Fetch`` at an offset below S answers ``OFFSET_OUT_OF_RANGE`` with no records
      (and the log-start offset S); every other fetch is passed on unchanged;
    * ``Metadata`` and ``FindCoordinator`` name the proxy instead of the broker, so that
      every connection of the client goes through it; ``ApiVersions`` offers ``Fetch`` up
      to version 6 (no fetch sessions, so each fetch names its offsets).

    Everything else is relayed byte for byte: the records, the groups and the commits
    are the broker's own.
    """

    _FETCH, _LIST_OFFSETS, _METADATA, _COORDINATOR, _VERSIONS = 1, 2, 3, 10, 18
    _FETCH_MAX_VERSION = 6

    def __init__(self, upstream: str):
        import socket

        self.upstream = upstream.rsplit(":", 1)
        self.log_start: dict[tuple[str, int], int] = {}
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            broker = socket.create_connection((self.upstream[0], int(self.upstream[1])))
            pending: dict[int, tuple] = {}
            threading.Thread(target=self._requests, args=(client, broker, pending),
                             daemon=True).start()
            threading.Thread(target=self._responses, args=(broker, client, pending),
                             daemon=True).start()

    @staticmethod
    def _frame(sock) -> bytes | None:
        def exactly(n):
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    return None
                data += chunk
            return data

        size = exactly(4)
        return None if size is None else exactly(int.from_bytes(size, "big", signed=True))

    def _requests(self, client, broker, pending) -> None:
        from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest

        decoders = {self._FETCH: FetchRequest, self._LIST_OFFSETS: ListOffsetsRequest}
        try:
            while (payload := self._frame(client)) is not None:
                key, version, corr = struct.unpack(">hhi", payload[:8])
                if key in decoders:
                    pending[corr] = (key, version, decoders[key].decode(payload, version=version,
                                                                        header=True))
                elif key in (self._METADATA, self._COORDINATOR, self._VERSIONS):
                    pending[corr] = (key, version, None)
                broker.sendall(len(payload).to_bytes(4, "big") + payload)
        except OSError:
            pass
        finally:
            broker.close()

    def _responses(self, broker, client, pending) -> None:
        try:
            while (payload := self._frame(broker)) is not None:
                entry = pending.pop(struct.unpack(">i", payload[:4])[0], None)
                if entry is not None:
                    payload = self._rewrite(*entry, payload)
                client.sendall(len(payload).to_bytes(4, "big") + payload)
        except OSError:
            pass
        finally:
            client.close()

    def _rewrite(self, key: int, version: int, request, payload: bytes) -> bytes:
        from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse
        from kafka.protocol.metadata import (
            ApiVersionsResponse,
            FindCoordinatorResponse,
            MetadataResponse,
        )

        kinds = {self._FETCH: FetchResponse, self._LIST_OFFSETS: ListOffsetsResponse,
                 self._METADATA: MetadataResponse, self._COORDINATOR: FindCoordinatorResponse,
                 self._VERSIONS: ApiVersionsResponse}
        response = kinds[key].decode(payload, version=version, header=True)
        if key == self._VERSIONS:
            for api in response.api_keys:
                if api.api_key == self._FETCH:
                    api.max_version = min(api.max_version, self._FETCH_MAX_VERSION)
        elif key == self._METADATA:
            for broker in response.brokers:
                broker.host, broker.port = "127.0.0.1", self.port
        elif key == self._COORDINATOR:
            if version >= 4:
                for c in response.coordinators:
                    c.host, c.port = "127.0.0.1", self.port
            else:
                response.host, response.port = "127.0.0.1", self.port
        elif key == self._LIST_OFFSETS:
            self._earliest(request, response)
        else:
            self._fetch(request, response)
        return response.encode(header=True)  # the version it was decoded with

    def _earliest(self, request, response) -> None:
        asked = {(t.name, p.partition_index): p.timestamp
                 for t in request.topics for p in t.partitions}
        for t in response.topics:
            for p in t.partitions:
                start = self.log_start.get((t.name, p.partition_index))
                if start is not None and asked.get((t.name, p.partition_index)) == -2:
                    p.offset = max(p.offset, start)

    def _fetch(self, request, response) -> None:
        asked = {(t.topic, p.partition): p.fetch_offset
                 for t in request.topics for p in t.partitions}
        for t in response.responses:
            for p in t.partitions:
                start = self.log_start.get((t.topic, p.partition_index))
                if start is None:
                    continue
                p.log_start_offset = start
                if asked.get((t.topic, p.partition_index), start) < start:
                    p.error_code = 1  # OFFSET_OUT_OF_RANGE
                    p.records = None

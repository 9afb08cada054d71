"""Scale-out through Kafka (issue 6): several daemons, one state topic, one shared model.

Daemons run as real subprocesses (``streamspec consume --state-backend kafka``,
through ``python -m streamspec``)
against the real broker (Tansu), each with a state folder of its own: nothing
is shared but Kafka. Counts are compared exactly, label by label, with one
MomentAccumulator fed every record directly.
"""

from __future__ import annotations

import re
import signal
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    GROUP_SETTINGS,
    DaemonThread,
    Feeder,
    by_label,
    config,
    create_topic,
    keyed_streams,
    new_topic,
    produce,
    reference,
    spawn,
    wait_until,
)

from connectors.config import DaemonConfig  # noqa: E402
from connectors.model_topic import ModelRecord, is_hmm_message  # noqa: E402
from connectors.state import PartitionState  # noqa: E402
from connectors.state.snapshots import (  # noqa: E402
    LatestSnapshots,
    Snapshot,
    encode_snapshot,
    read_snapshots,
)
from connectors.state.topic_io import ensure_topic, read_topic  # noqa: E402
from streamspec import HiddenMarkovModel, HMMEstimator  # noqa: E402

WAIT = 120  # a generous bound on any wait (never an assertion on time)


# ---------------------------------------------------------------------------- helpers


class Daemon:
    """One ``streamspec consume --state-backend kafka`` subprocess and its log."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, tmp_path: Path,
                 *extra: str):
        self.name = name
        self.log = tmp_path / f"{name}.log"
        cmd = [
            sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
            "--topic", topic, "--group", group, "--client-id", name,
            "--state-backend", "kafka", "--state-dir", str(tmp_path / f"state-{name}"),
            "--refit-every", "3000", "--checkpoint-interval", "0.2", "--status-interval", "1",
            "--session-timeout-ms", "2000",
            "--heartbeat-interval-ms", str(GROUP_SETTINGS["heartbeat_interval_ms"]),
            "--max-poll-interval-ms", str(GROUP_SETTINGS["max_poll_interval_ms"]),
            "--poll-timeout-ms", "100", "--metrics-port", "0", "--window", "1", *extra,
        ]
        self.proc = spawn(cmd, self.log)
        self._port: int | None = None

    def metrics(self) -> dict[str, float]:
        """The daemon's gauges and counters ({} until its endpoint is up)."""
        if self._port is None:
            found = re.search(r"event=metrics url=http://127\.0\.0\.1:(\d+)/metrics",
                              self.log.read_text())
            if found is None:
                return {}
            self._port = int(found.group(1))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._port}/metrics",
                                        timeout=10) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("streamspec_") and "{" not in line:
                name, value = line.split()
                out[name[len("streamspec_"):]] = float(value)
        return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except Exception:
                self.proc.kill()
                raise
        return self.proc.returncode


def models_in_log_order(bootstrap: str, model_topic: str) -> list[ModelRecord]:
    out: list[ModelRecord] = []
    read_topic(bootstrap, model_topic, lambda m: None if is_hmm_message(m.headers) else
               out.append(ModelRecord.from_message(m.value, m.headers)))
    return out


def hmms_by_version(bootstrap: str, model_topic: str) -> dict[int, HiddenMarkovModel]:
    """The HMMs published on the model topic, by the version of their operator model."""
    out: dict[int, HiddenMarkovModel] = {}

    def take(m) -> None:
        if is_hmm_message(m.headers):
            out[int(dict(m.headers)["model-version"])] = HiddenMarkovModel.from_bytes(m.value)

    read_topic(bootstrap, model_topic, take)
    return out


def check_alive(daemons) -> None:
    for d in daemons:
        if not d.alive():
            raise AssertionError(f"{d.name} exited with {d.proc.returncode}: "
                                 f"{d.log.read_text()[-2000:]}")


def wait_for_split(daemons, partitions: int) -> None:
    """Until every daemon owns at least one partition and together all of them."""
    def split() -> bool:
        check_alive(daemons)
        owned = [d.metrics().get("partitions", 0) for d in daemons]
        return min(owned) >= 1 and sum(owned) == partitions

    wait_until(split, "the partitions split between all daemons", timeout=WAIT)


def wait_for_final_model(bootstrap, model_topic, daemons, total: int) -> ModelRecord:
    """Until the refitter published a model of all ``total`` records and every daemon serves it."""
    final: list[ModelRecord] = []

    def published() -> bool:
        check_alive(daemons)
        models = models_in_log_order(bootstrap, model_topic)
        if models and models[-1].records == total:
            final[:] = [models[-1]]
            return True
        return False

    wait_until(published, f"a model fitted on all {total} records", timeout=WAIT)
    version = final[0].version
    wait_until(lambda: all(d.metrics().get("model_version") == version for d in daemons)
               or check_alive(daemons), f"every daemon serving model version {version}",
               timeout=WAIT)
    return final[0]


def global_state(bootstrap, state_topic):
    latest = read_snapshots(bootstrap, state_topic)
    return latest, latest.merged()


# ---------------------------------------------------------------------------- units


def test_snapshot_roundtrip_and_latest_wins_by_offset():
    st = PartitionState("clicks", 3)
    st.acc.learn_many("abcabca", key="u1")
    st.offset, st.records = 7, 7
    key, value, headers = encode_snapshot(st, owner="d1")
    newer = Snapshot.from_message(key, value, headers)
    assert (key, newer.partition, newer.offset, newer.records, newer.owner) == (b"3", 3, 7, 7, "d1")
    back = newer.state()
    assert by_label(back.acc) == by_label(st.acc) and back.offset == 7
    older = Snapshot(3, 5, 5, b"never decoded")
    latest = LatestSnapshots()
    # a late (zombie) write of an older state never replaces a newer one
    assert latest.offer(newer) and not latest.offer(older)
    assert latest.offsets() == {3: 7} and latest.records() == 7
    assert by_label(latest.merged()) == by_label(st.acc)
    with pytest.raises(ValueError):
        Snapshot.from_message(b"3", b"x", [("format", b"something-else/1")])


def test_config_and_cli_choose_the_backend():
    import argparse

    from streamspec.cli.consume import config_from_args, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert DaemonConfig(topic="t").state_backend == "local"
    with pytest.raises(ValueError, match="state_backend"):
        DaemonConfig(topic="t", state_backend="nfs")
    assert config_from_args(parser.parse_args(["consume", "--topic", "t"])).state_backend == "local"
    args = parser.parse_args(["consume", "--topic", "t", "--state-backend", "kafka"])
    cfg = config_from_args(args)
    assert (cfg.state_backend, cfg.state_topic_name, cfg.model_topic_name) == (
        "kafka", "t.state", "t.models")


def test_state_topic_restore_reads_latest_snapshot_per_partition(kafka_bootstrap, unique_name):
    from kafka import KafkaProducer

    state_topic = unique_name("-state")
    ensure_topic(kafka_bootstrap, state_topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=5)
    expected = {}
    # source partitions 0..3 over 2 state partitions; offsets out of order, as a zombie would write
    for p, offsets in {0: [3, 9, 6], 1: [4], 2: [2, 8], 3: [5, 1]}.items():
        for off in offsets:
            st = PartitionState("src", p)
            st.acc.learn_many("ab" * off, key=f"k{p}")
            st.acc.end(f"k{p}")  # window "auto" (the default): the last grams count at the end
            st.offset = st.records = off
            key, value, headers = encode_snapshot(st, owner=f"w{off}")
            producer.send(state_topic, key=key, value=value, headers=headers,
                          partition=p % 2).get(timeout=30)
        expected[p] = max(offsets)
    producer.close()
    assert read_snapshots(kafka_bootstrap, state_topic).offsets() == expected
    some = read_snapshots(kafka_bootstrap, state_topic, [1, 2])
    assert some.offsets() == {1: 4, 2: 8}
    assert some.get(2).state().acc.n_triples == 2 * 8 - 2


# ---------------------------------------------------------------------------- daemons


def test_three_daemons_share_one_exact_global_state_and_model(
    kafka_bootstrap, unique_name, tmp_path
):
    topic, group = new_topic(kafka_bootstrap, unique_name, 6)
    daemons = [Daemon(kafka_bootstrap, topic, group, f"d{i}", tmp_path, "--states", "2")
               for i in range(3)]
    try:
        wait_for_split(daemons, 6)
        messages = keyed_streams(n_keys=18, length=300, seed=61)
        ends = produce(kafka_bootstrap, topic, messages)
        state_topic = f"{topic}.state"
        wait_until(lambda: check_alive(daemons) or read_snapshots(kafka_bootstrap, state_topic)
                   .offsets() == ends, "snapshots at the end offsets")
        latest, merged = global_state(kafka_bootstrap, state_topic)
        assert by_label(merged) == by_label(reference(messages))
        assert merged.n_triples == 18 * (300 - 2)
        assert latest.records() == len(messages)
        # every daemon published snapshots of its own partitions: the work was split
        assert {s.owner for s in latest.snapshots().values()} == {"d0", "d1", "d2"}
        final = wait_for_final_model(kafka_bootstrap, f"{topic}.models", daemons, len(messages))
        assert sorted(final.model().symbols) == ["a", "b", "c", "d"]
        gauges = [d.metrics() for d in daemons]
        assert [g["model_version"] for g in gauges] == [final.version] * 3
        assert sum(g["refitter"] for g in gauges) == 1  # one refitter: partition 0's owner
        refitter = daemons[[g["refitter"] for g in gauges].index(1)].name
        assert final.refitter == refitter == latest.get(0).owner
        assert all(g["global_records"] == len(messages) for g in gauges)
        # --states 2: the refitter published, after each model, the HMM fitted on its counts
        wait_until(lambda: final.version in hmms_by_version(kafka_bootstrap, f"{topic}.models"),
                   f"the HMM of model version {final.version}")
        hmm = hmms_by_version(kafka_bootstrap, f"{topic}.models")[final.version]
        assert hmm.n_states == 2 and sorted(hmm.symbols) == ["a", "b", "c", "d"]
        streams: dict[bytes, list[str]] = {}
        for key, value in messages:
            streams.setdefault(key, []).append(value.decode())
        per_symbol = sum(hmm.score(s) for s in streams.values()) / len(messages)
        direct = HMMEstimator(n_states=2, random_state=0).fit(reference(messages))
        best = sum(direct.score(s) for s in streams.values()) / len(messages)
        # as good as a cold fit on all the counts (it was warm-started from earlier ones)
        assert per_symbol > np.log(0.25) + 0.05 and abs(per_symbol - best) < 0.01
        # nothing but Kafka holds the state: no checkpoint file anywhere
        assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.hmm"))
    finally:
        codes = [d.stop() for d in daemons]
    assert codes == [0, 0, 0]


def test_sigkill_of_the_refitter_mid_stream_keeps_counts_exact(
    kafka_bootstrap, unique_name, tmp_path
):
    topic, group = new_topic(kafka_bootstrap, unique_name, 6)
    state_topic, model_topic = f"{topic}.state", f"{topic}.models"
    messages = keyed_streams(n_keys=24, length=500, seed=71)
    daemons = [Daemon(kafka_bootstrap, topic, group, f"d{i}", tmp_path) for i in range(3)]
    everyone = list(daemons)
    # keep producing while a daemon is killed and another joins
    feeding = Feeder(kafka_bootstrap, topic, messages, batch=200, pause=0.15)
    try:
        wait_for_split(daemons, 6)
        feeding.start()
        # wait for progress and a first shared model, then kill the refitter (partition 0's owner)
        wait_until(lambda: check_alive(daemons) or (
            read_snapshots(kafka_bootstrap, state_topic).records() >= len(messages) // 5
            and models_in_log_order(kafka_bootstrap, model_topic)), "progress and a first model")
        owner = read_snapshots(kafka_bootstrap, state_topic, [0]).get(0).owner
        victim = next(d for d in daemons if d.name == owner)
        victim.kill()
        mid_stream = not feeding.produced.is_set()
        survivors = [d for d in daemons if d is not victim]
        survivors.append(Daemon(kafka_bootstrap, topic, group, "d3", tmp_path))
        everyone.append(survivors[-1])
        feeding.join(WAIT)
        wait_until(lambda: check_alive(survivors) or read_snapshots(kafka_bootstrap, state_topic)
                   .offsets() == feeding.ends, "snapshots at the end offsets")
        assert mid_stream, "the refitter was killed after the stream ended"
        latest, merged = global_state(kafka_bootstrap, state_topic)
        assert by_label(merged) == by_label(reference(messages))
        assert merged.n_triples == 24 * (500 - 2)
        final = wait_for_final_model(kafka_bootstrap, model_topic, survivors, len(messages))
        assert [d.metrics()["model_version"] for d in survivors] == [final.version] * 3
        models = models_in_log_order(kafka_bootstrap, model_topic)
        versions = [m.version for m in models]
        # the new refitter continued the killed one's version sequence
        assert versions == sorted(set(versions)) and versions[0] == 1
        assert owner in {m.refitter for m in models} and final.refitter != owner
    finally:
        feeding.hurry.set()
        if feeding.is_alive():
            feeding.join(WAIT)
        codes = [d.stop() for d in everyone if d.proc.returncode != -signal.SIGKILL]
    assert codes == [0, 0, 0]


def test_corrupt_latest_snapshot_pauses_its_partition_only(kafka_bootstrap, unique_name, tmp_path):
    from kafka import KafkaProducer

    topic = unique_name("-in")
    create_topic(kafka_bootstrap, topic, partitions=2)
    ends = produce(kafka_bootstrap, topic, keyed_streams(n_keys=6, length=50, seed=81))
    state_topic = f"{topic}.state"
    ensure_topic(kafka_bootstrap, state_topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    headers = [("format", b"streamspec.PartitionState/1"), ("source-partition", b"0"),
               ("source-offset", b"5"), ("records", b"5")]
    producer.send(state_topic, key=b"0", value=b"garbage", headers=headers,
                  partition=0).get(timeout=30)
    producer.close()
    cfg = config(kafka_bootstrap, topic, unique_name("-g"), tmp_path / "state",
                 state_backend="kafka", session_timeout_ms=2000)
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: read_snapshots(kafka_bootstrap, state_topic).offsets().get(1)
                   == ends[1], "partition 1 at its end offset")
        assert daemon.metrics.unreadable_checkpoints == 1
        assert sorted(tp.partition for tp in daemon.states) == [1]
    # never replaced by a fresh (double) count
    latest = read_snapshots(kafka_bootstrap, state_topic).get(0)
    assert (latest.offset, latest.value) == (5, b"garbage")

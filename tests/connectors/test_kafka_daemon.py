"""The consumer daemon against a real broker (Tansu): exactness, crashes, rebalances, poison.

Every test produces real messages to a real topic and runs the real daemon, in
a thread or (for SIGKILL/SIGTERM) as a subprocess. Counts are compared exactly,
label by label, with a MomentAccumulator fed the same records directly.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    DaemonThread,
    Feeder,
    by_label,
    checkpoint_offsets,
    committed,
    config,
    consume_all,
    daemon_cmd,
    keyed_streams,
    new_topic,
    produce,
    read_to_end,
    reference,
    spawn,
    terminate,
    wait_until,
)

from connectors.broker import create_topic  # noqa: E402
from connectors.kafka import ConsumerDaemon  # noqa: E402
from connectors.records import RecordFormat  # noqa: E402
from connectors.state import StateStore, merge_accumulators  # noqa: E402
from streamspec.core.hmm_estimator import HMMEstimator  # noqa: E402
from streamspec.core.model import ObservableOperatorModel  # noqa: E402


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
    # what each model was fitted on: offsets within the log, and as many records (one
    # valid symbol each) as the offsets say
    for snap in snaps:
        h = dict(snap.headers)
        fitted = {int(p): o for p, o in json.loads(h["fitted-offsets"]).items()}
        assert set(fitted) == set(ends) and all(0 <= fitted[p] <= ends[p] for p in ends)
        assert int(h["fitted-records"]) == sum(fitted.values()) > 0
        assert float(h["snapshot-time"]) <= snap.timestamp / 1000 + 1
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
        wait_until(lambda: daemon.refits.refitter.model.hmm is not None, "the HMM served")
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
    assert restarted.refits.hmm_estimator.last.hmm == saved
    assert restarted.refits.hmm_estimator.last.model is restarted.model is not None
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
    from streamspec.cli.inspect import describe_checkpoint

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
        code = terminate(proc)
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
    group = unique_name("-g")  # the same group: a checkpoint of another group is refused
    ends = read_to_end(kafka_bootstrap, topic, group, state_dir, first)
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

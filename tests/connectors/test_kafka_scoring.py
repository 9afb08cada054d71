"""The daemon predicts every record before it learns it: prequential loss, learned weights.

Real broker (Tansu), real ``streamspec consume`` processes (the state-topic test runs
the daemon in a thread, as the scale-out tests do). The topic holds keyed streams of a
known hidden Markov model, so the loss the daemon reports can be recomputed: the final
model's own prequential loss on the same records, the unigram's and the true model's.
"""

from __future__ import annotations

import math
import re
import signal
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    DaemonThread,
    checkpoint_offsets,
    config,
    daemon_cmd,
    field,
    new_topic,
    produce,
    spawn,
    topic_records,
    wait_until,
)

from connectors.state import StateStore, merge_weights  # noqa: E402
from connectors.state.snapshots import read_snapshots  # noqa: E402
from streamspec.core.checkpoint import write_checkpoint  # noqa: E402
from streamspec.core.hmm import HMM  # noqa: E402
from streamspec.core.model import ObservableOperatorModel  # noqa: E402

HIDDEN = HMM.random(n_states=3, n_symbols=6, random_state=3, concentration=0.3)
LETTERS = "abcdef"


def hmm_streams(n_keys: int, length: int, seed: int) -> list[tuple[bytes, bytes]]:
    """Interleaved (key, symbol) messages of ``n_keys`` streams of the hidden HMM."""
    rng = np.random.default_rng(seed)
    seqs = {f"user-{seed}-{k}": HIDDEN.sample(length, random_state=seed * 1000 + k)
            for k in range(n_keys)}
    pos = dict.fromkeys(seqs, 0)
    out = []
    while pos:
        key = list(pos)[rng.integers(len(pos))]
        out.append((key.encode(), LETTERS[seqs[key][pos[key]]].encode()))
        pos[key] += 1
        if pos[key] == length:
            del pos[key]
    return out


def partition_streams(bootstrap: str, topic: str) -> dict[int, list[list[str]]]:
    """Each partition's streams (symbols in offset order), as the daemon read them."""
    out = {}
    for p, messages in topic_records(bootstrap, topic).items():
        streams: dict[bytes, list[str]] = {}
        for m in messages:
            streams.setdefault(m.key, []).append(m.value.decode())
        out[p] = list(streams.values())
    return out


def unigram_loss(streams: list[list[str]]) -> float:
    counts = Counter(s for seq in streams for s in seq)
    total = sum(counts.values())
    return -sum(c * math.log(c / total) for c in counts.values()) / total


def status_lines(log: Path) -> list[str]:
    return [ln for ln in log.read_text().splitlines() if "event=status" in ln]


def per_partition(value: str) -> dict[int, float]:
    """``0:1.23,1:4.5`` -> ``{0: 1.23, 1: 4.5}`` (``-``: none)."""
    if value == "-":
        return {}
    return {int(p): float(v) for p, v in (item.split(":") for item in value.split(","))}


def multiples(lo: int, hi: int, k: int) -> int:
    """How many of the symbols numbered lo..hi-1 a daemon scoring 1 in ``k`` scores."""
    return -(-hi // k) - -(-lo // k)


def metric(text: str, name: str) -> dict[int, float]:
    return {int(p): float(v) for p, v in
            re.findall(rf'^streamspec_{name}{{partition="(\d+)"}} (\S+)$', text, re.M)}


def test_status_line_and_metrics_show_a_prequential_loss_that_matches_a_recomputation(
        kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    messages = hmm_streams(n_keys=16, length=1500, seed=1)
    first = produce(kafka_bootstrap, topic, messages[:3000])
    log, state = tmp_path / "daemon.log", tmp_path / "state"
    proc = spawn(daemon_cmd(kafka_bootstrap, topic, group, state, "--metrics-port", "0",
                            "--score-every", "1"), log)
    try:
        wait_until(lambda: (state / topic / "model.ckpt").exists(), "a model", proc=proc)
        ends = produce(kafka_bootstrap, topic, messages[3000:])  # read with a model served
        wait_until(lambda: checkpoint_offsets(state, topic) == ends, "checkpoints at the end",
                   proc=proc)
        records = sum(ends.values())

        def final_status() -> str:
            lines = [ln for ln in status_lines(log) if f"records={records} " in ln]
            return lines[-1] if lines and "model_version=0 " not in lines[-1] else ""

        wait_until(lambda: final_status() and len(per_partition(field(final_status(), "loss"))) == 2,
                   "a status line with every record and a loss per partition", proc=proc)
        line = final_status()
        port = re.search(r"event=metrics url=http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0
    loss, scored = per_partition(field(line, "loss")), per_partition(field(line, "scored"))
    gauge, count = metric(text, "prequential_log_loss"), metric(text, "scored_symbols_total")
    nats = metric(text, "prequential_loss_nats_total")
    streams = partition_streams(kafka_bootstrap, topic)
    model = ObservableOperatorModel.load(state / topic / "model.ckpt")
    saved = {s.partition: s.weights for s in StateStore(state).load_all(topic)}
    for p in (0, 1):
        assert gauge[p] == pytest.approx(loss[p], abs=1e-4)  # one figure, two places
        assert count[p] == scored[p] == saved[p].scored
        assert nats[p] / count[p] == pytest.approx(gauge[p], rel=1e-4)
        assert ends[p] - first[p] <= scored[p] <= ends[p]  # each one read with a model served
        own = model.log_loss(streams[p])  # the final model's prequential loss, same records
        true = HIDDEN.operators().log_loss([[LETTERS.index(c) for c in s] for s in streams[p]])
        assert loss[p] == pytest.approx(own, rel=0.05)
        assert true - 0.02 < loss[p] < unigram_loss(streams[p]) - 0.1


def test_a_restarted_daemon_goes_on_from_the_learned_weights_and_old_checkpoints_load(
        kafka_bootstrap, unique_name, tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    state = tmp_path / "state"
    messages = hmm_streams(n_keys=12, length=1000, seed=2)
    produce(kafka_bootstrap, topic, messages[:3000])
    proc = spawn(daemon_cmd(kafka_bootstrap, topic, group, state), tmp_path / "one.log")
    try:
        wait_until(lambda: (state / topic / "model.ckpt").exists(), "a model", proc=proc)
        first = produce(kafka_bootstrap, topic, messages[3000:])
        wait_until(lambda: checkpoint_offsets(state, topic) == first, "every record read",
                   proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    before = {s.partition: s.weights for s in StateStore(state).load_all(topic)}
    assert all(w is not None and w.scored > 0 for w in before.values())
    # the saved model starts from what the partitions taught: their weights merged
    model = ObservableOperatorModel.load(state / topic / "model.ckpt")
    backoff = model.backoff
    assert backoff.held_out == {}  # a refit that kept the weights (nothing held out)
    merged = merge_weights(before.values(), backoff.mixture, backoff.components)
    seen = merged.n_observed > 0
    assert seen.sum() >= 2
    assert np.allclose(backoff.mixture.blends(np.flatnonzero(seen)),
                       merged.blends(np.flatnonzero(seen)), rtol=0, atol=1e-9)
    # partition 1's checkpoint as written before weights were kept (format version 2)
    store = StateStore(state)
    old = store.load(topic, 1)
    header, arrays = old.checkpoint_parts()
    del header["predictor"], arrays["predictor_log_weights"]
    write_checkpoint(store.path(topic, 1), "streamspec.PartitionState", 2, header, arrays)
    assert store.load(topic, 1).weights is None
    more = produce(kafka_bootstrap, topic, hmm_streams(n_keys=12, length=300, seed=3))
    proc = spawn(daemon_cmd(kafka_bootstrap, topic, group, state), tmp_path / "two.log")
    try:
        wait_until(lambda: checkpoint_offsets(state, topic) == more, "the new records read",
                   proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    after = {s.partition: s.weights for s in StateStore(state).load_all(topic)}
    # by default 1 symbol in 16 is scored, by its number in the partition (here its offset)
    scored = {p: multiples(first[p], more[p], 16) for p in (0, 1)}
    assert all(scored[p] > 0 for p in (0, 1))
    # partition 0 went on from its checkpoint: the new symbols scored on top of the old ones
    w0, a0 = before[0], after[0]
    assert a0.scored == w0.scored + scored[0]
    assert a0.loss > w0.loss
    assert a0.mixture.n_observed.sum() == w0.mixture.n_observed.sum() + scored[0]
    # partition 1 (the old checkpoint) started from the model's weights, counting from 0
    assert after[1].scored == scored[1] == after[1].mixture.n_observed.sum()
    assert "event=partition-failed" not in (tmp_path / "two.log").read_text()


def test_the_state_topic_carries_the_weights_to_the_next_daemon(kafka_bootstrap, unique_name,
                                                                tmp_path):
    topic, group = new_topic(kafka_bootstrap, unique_name, 2)
    messages = hmm_streams(n_keys=10, length=800, seed=4)
    produce(kafka_bootstrap, topic, messages[:2000])
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "unused", state_backend="kafka",
                 refit_every=1000, checkpoint_interval=0.2)
    state_topic = cfg.state_topic_name

    def snapshot_weights() -> dict:
        latest = read_snapshots(kafka_bootstrap, state_topic, client_id=unique_name("-r"))
        return {s.partition: (s.offset, s.weights) for s in latest.states()}

    with DaemonThread(cfg) as daemon:
        wait_until(lambda: daemon.model_version >= 1, "a model served")
        first = produce(kafka_bootstrap, topic, messages[2000:])
        wait_until(lambda: {p: o for p, (o, _) in snapshot_weights().items()} == first
                   and all(w is not None and w.scored for _, w in snapshot_weights().values()),
                   "snapshots at the end, with learned weights")
    before = {p: w for p, (_, w) in snapshot_weights().items()}
    more = produce(kafka_bootstrap, topic, hmm_streams(n_keys=10, length=200, seed=5))
    with DaemonThread(config(kafka_bootstrap, topic, group, tmp_path / "unused",
                             state_backend="kafka", refit_every=1000,
                             checkpoint_interval=0.2)) as daemon:
        wait_until(lambda: {p: o for p, (o, _) in snapshot_weights().items()} == more,
                   "snapshots at the new end")
        assert daemon.model is not None
    after = {p: w for p, (_, w) in snapshot_weights().items()}
    for p in (0, 1):  # restored from the state topic: the counts of scored symbols go on
        assert after[p].scored > before[p].scored
        assert after[p].mixture.n_observed.sum() > before[p].mixture.n_observed.sum()
        assert math.isfinite(after[p].log_loss)

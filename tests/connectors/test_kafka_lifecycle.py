"""The daemon from an operator's side: stopping, restarting, reading its state folder, starting.

``streamspec consume`` refits on SIGTERM (the last records are in the saved model),
its model versions go on across restarts, its status line's ``symbols=`` is the
refit's, ``streamspec inspect DIR`` prints the merged counts, and a daemon started
without ``--bootstrap`` says where it looked and what to give it.
"""

from __future__ import annotations

import json
import signal
import socket

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    by_label,
    checkpoint_offsets,
    daemon_cmd,
    event_lines,
    field,
    spawn,
    terminate,
    wait_until,
)

from connectors.broker import create_topic  # noqa: E402
from connectors.state import PartitionState, StateStore, merge_accumulators  # noqa: E402
from streamspec.core.model import ObservableOperatorModel  # noqa: E402


def _produce_to(bootstrap: str, topic: str, partition: int, streams: dict[str, str]) -> int:
    """Send each key's symbols (interleaved) to one partition; its end offset."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    longest = max(len(s) for s in streams.values())
    futures = [producer.send(topic, key=key.encode(), value=s[i].encode(), partition=partition)
               for i in range(longest) for key, s in streams.items() if i < len(s)]
    producer.flush()
    end = max(f.get(timeout=30).offset for f in futures) + 1
    producer.close()
    return end


def _last(text: str, event: str) -> str:
    return event_lines(text, event)[-1]


def test_consume_refits_on_sigterm_and_its_model_versions_go_on_after_a_restart(
        kafka_bootstrap, unique_name, tmp_path):
    topic, group, state = unique_name("-in"), unique_name("-g"), tmp_path / "state"
    create_topic(kafka_bootstrap, topic, partitions=2)
    # two partitions with different alphabets: the merged counts have both
    ends = {0: _produce_to(kafka_bootstrap, topic, 0, {"u0": "abcab" * 30, "u1": "cab" * 50}),
            1: _produce_to(kafka_bootstrap, topic, 1, {"v0": "xy" * 75, "v1": "yyx" * 50})}
    log_path = tmp_path / "daemon.log"
    cmd = daemon_cmd(kafka_bootstrap, topic, group, state, "--refit-every", "500",
                     "--refit-duty", "1")
    proc = spawn(cmd, log_path)
    try:
        wait_until(lambda: "event=refit " in log_path.read_text(), "the first refit", proc=proc)
        # too few new records for a refit by count; 'z' is new
        ends[1] = _produce_to(kafka_bootstrap, topic, 1, {"v2": "xyz" * 20})
        caught_up = f"offsets=0:{ends[0]},1:{ends[1]}"
        wait_until(lambda: checkpoint_offsets(state, topic) == ends
                   and caught_up in log_path.read_text(), "the new records read", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    text = log_path.read_text()
    assert code == 0
    assert "event=final-refit " in text
    refit, status = _last(text, "refit"), _last(text, "status")
    assert field(refit, "version") == "2" and field(refit, "symbols") == "6"
    assert field(status, "symbols") == field(refit, "symbols")  # the same alphabet
    saved = ObservableOperatorModel.load(state / topic / "model.ckpt")
    assert sorted(saved.symbols) == list("abcxyz") and saved.metadata["model_version"] == "2"
    # a restart serves the saved model as version 2, and the next refit is version 3
    proc = spawn(cmd, log_path)
    try:
        wait_until(lambda: "model_version=2 " in log_path.read_text()[len(text):],
                   "the saved model served", proc=proc)
        ends[0] = _produce_to(kafka_bootstrap, topic, 0, {"u3": "abc" * 200})
        wait_until(lambda: "event=refit version=3 " in log_path.read_text(), "the next refit",
                   proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0
    assert "event=refit version=1 " not in log_path.read_text()[len(text):]
    assert int(ObservableOperatorModel.load(state / topic / "model.ckpt")
               .metadata["model_version"]) >= 3


def test_inspect_of_a_state_folder_prints_the_merged_counts(tmp_path, capsys):
    from streamspec.cli import main

    store = StateStore(tmp_path, group="g")
    states = []
    for p, text in ((0, "abcabcab"), (1, "xyzxyzx")):
        st = PartitionState("clicks", p, group="g")
        st.acc.learn_many(text, key=f"k{p}")
        st.acc.end(f"k{p}")  # window "auto" (the default): the last grams count at the end
        st.offset = st.records = len(text)
        store.save(st)
        states.append(st)
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    merged = out.split(f"{tmp_path / 'clicks'}: merged partition counts", 1)[1]
    expected = merge_accumulators(st.acc for st in states)
    assert f"n_triples: {expected.n_triples}" in merged and "records: 15" in merged
    assert "n_symbols: 6" in merged and "offsets: {0: 8, 1: 7}" in merged
    assert main(["inspect", str(tmp_path), "--json"]) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["format"] == "merged partition counts" and last["partitions"] == [0, 1]
    assert last["n_triples"] == expected.n_triples == 11.0
    assert by_label(expected)[("a", "b", "c")] == 2.0


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_consume_without_bootstrap_says_where_it_looked_and_what_to_give(tmp_path):
    if _port_open(9092):
        pytest.skip("something listens on 127.0.0.1:9092, the default address")
    log_path = tmp_path / "daemon.log"
    cmd = daemon_cmd("x", "clicks", "g", tmp_path / "state")
    i = cmd.index("--bootstrap")
    del cmd[i:i + 2]  # no --bootstrap
    proc = spawn(cmd, log_path)
    try:
        wait_until(lambda: "event=broker-unavailable" in log_path.read_text(), "the first attempt",
                   proc=proc)
    finally:
        code = terminate(proc)
    line = event_lines(log_path.read_text(), "broker-unavailable")[0]
    assert code == 0 and "bootstrap=127.0.0.1:9092 " in line
    assert "the default address" in line and "--bootstrap HOST:PORT" in line

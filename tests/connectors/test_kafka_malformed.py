"""Malformed messages are reported and limited as malformed lines of files are (issue 20, item 2).

Against a real broker (Tansu): every dead letter is a WARNING naming topic-partition,
offset, reason and a hint; ``max_malformed`` (``consume --max-malformed``) turns
skipping into a clean stop (checkpoint, commit, exit status 3), the files' policy.
"""

from __future__ import annotations

import json
import logging

import pytest

kafka = pytest.importorskip("kafka")

from kafka_helpers import (  # noqa: E402
    DaemonThread,
    by_label,
    checkpoint_offsets,
    committed,
    config,
    produce,
    reference,
    wait_until,
)

from connectors.broker import create_topic  # noqa: E402
from connectors.records import RecordFormat  # noqa: E402
from connectors.state import StateStore  # noqa: E402

FMT = {"value_format": "json", "key_field": "user", "symbol_field": "page"}


def messages(n_good: int, bad_every: int) -> list[tuple[None, bytes]]:
    out = []
    for i in range(n_good):
        out.append((None, json.dumps({"user": f"u{i % 3}", "page": "abc"[i % 3]}).encode()))
        if i % bad_every == bad_every - 1:
            out.append((None, b"user=u1,page=a"))  # CSV-ish text where JSON is expected
    return out


def test_dead_letters_are_warnings_with_where_and_a_hint(kafka_bootstrap, unique_name, tmp_path,
                                                          caplog):
    topic = unique_name("-in")
    create_topic(kafka_bootstrap, topic, partitions=1)
    msgs = messages(60, bad_every=30)
    ends = produce(kafka_bootstrap, topic, msgs)
    caplog.set_level(logging.WARNING)
    cfg = config(kafka_bootstrap, topic, unique_name("-g"), tmp_path / "state",
                 dead_letter_topic="", format=FMT)
    with DaemonThread(cfg) as daemon:
        wait_until(lambda: checkpoint_offsets(tmp_path / "state", topic) == ends, "the end")
    assert daemon.fatal is None  # no limit by default: poison goes to the dead letters
    lines = [r.getMessage() for r in caplog.records if "event=dead-letter" in r.getMessage()]
    assert lines == [f"event=dead-letter {topic}-0 offset {i}: bad-json: "
                     + lines[k].split(": bad-json: ", 1)[1] for k, i in enumerate((30, 61))]
    assert all("not JSON: is it CSV?" in ln for ln in lines)
    assert any("event=malformed-summary 2 of" in r.getMessage() for r in caplog.records)


def test_max_malformed_stops_the_daemon_cleanly(kafka_bootstrap, unique_name, tmp_path, caplog):
    topic, group = unique_name("-in"), unique_name("-g")
    create_topic(kafka_bootstrap, topic, partitions=1)
    msgs = messages(200, bad_every=10)  # 20 of 220: 9 %
    produce(kafka_bootstrap, topic, msgs)
    caplog.set_level(logging.WARNING)
    cfg = config(kafka_bootstrap, topic, group, tmp_path / "state", dead_letter_topic="",
                 format=FMT, max_malformed=5)
    runner = DaemonThread(cfg)
    with runner as daemon:
        wait_until(lambda: runner.result or daemon.fatal is not None, "the stop on the limit")
    runner.thread.join(60)
    assert runner.result == [3]  # was: no limit at all for messages
    assert "more than --max-malformed 5" in daemon.fatal
    assert any("reason=too-many-malformed" in r.getMessage() for r in caplog.records)
    # stopped cleanly: what was learned is checkpointed and committed, nothing past it
    state = StateStore(tmp_path / "state").load(topic, 0)
    assert committed(kafka_bootstrap, group, topic) == {0: state.offset}
    learned = msgs[:state.offset]
    good = [m for m in learned if m[1].startswith(b"{")]
    assert by_label(state.acc) == by_label(reference(good, RecordFormat(**FMT)))
    assert sum(state.dead_letters.values()) >= 6  # the limit was passed in the last batch read

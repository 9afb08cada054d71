"""End to end on streams of more than 5,000 distinct symbols, under a 2 GB address-space limit.

The dense counts of the old code took n³ · 8 bytes: 1 TB at 5,000 symbols (and it
died at the 513th distinct word with "Unable to allocate 8.00 GiB"). Every adapter
is run here in a subprocess whose address space is capped with
``resource.setrlimit(RLIMIT_AS, 2 GB)`` -- the first test checks that the cap really
refuses a dense n³ array -- on a generated word stream: the CLI (``learn``, then
``predict`` and ``inspect``), :class:`~streamspec.SpectralHMM` under river's
progressive validation, and the Kafka daemon against the real broker (both state
backends). ``--max-symbols`` and the daemon's behaviour on a ``MemoryError`` while
learning a valid record (no dead letter, a clean non-zero stop, a readable
checkpoint) are tested too.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from kafka_helpers import by_label, produce, wait_until  # shared helpers (the module needs kafka anyway)

from streamspec.streaming.accumulator import OTHER, MomentAccumulator

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 2_000_000_000  # bytes of address space of every subprocess below
WAIT = 300  # seconds: a generous bound on any wait (never an assertion on time)
MIN_DISTINCT = 5_000


# ---------------------------------------------------------------------------- helpers


def word_stream(n_words: int, vocab: int = 7_000, seed: int = 0) -> list[str]:
    """Words with structure: 60% the fixed successor of the previous word, 20% Zipf, 20% uniform."""
    rng = np.random.default_rng(seed)
    succ = rng.permutation(vocab)
    zipf = 1.0 / np.arange(1, vocab + 1)
    zipf /= zipf.sum()
    u = rng.random(n_words)
    z = rng.choice(vocab, size=n_words, p=zipf)
    flat = rng.integers(vocab, size=n_words)
    out, prev = [], 0
    for t in range(n_words):
        prev = int(succ[prev]) if u[t] < 0.6 else int(z[t]) if u[t] < 0.8 else int(flat[t])
        out.append(f"w{prev}")
    return out


@pytest.fixture(scope="module")
def words() -> list[str]:
    w = word_stream(24_000)
    assert len(set(w)) >= MIN_DISTINCT
    return w


def _limit() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def env() -> dict[str, str]:
    threads = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    return {**os.environ, **threads, "PYTHONPATH": str(ROOT),
            "PYTHONWARNINGS": "ignore::DeprecationWarning"}


def run_limited(args: list[str], timeout: float = WAIT, stdin: str | None = None):
    """Run ``python ARGS`` under the address-space limit; the CompletedProcess."""
    return subprocess.run([sys.executable, *args], preexec_fn=_limit, env=env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, input=stdin)


def cli(*args: str, **kw):
    return run_limited(["-m", "streamspec", *args], **kw)


def direct(symbols, max_symbols: int | None = None, key=None) -> MomentAccumulator:
    acc = MomentAccumulator(max_symbols=max_symbols)
    for s in symbols:
        acc.learn_one(s, key)
    return acc


def write_words(path: Path, words: list[str], per_line: int = 12) -> Path:
    path.write_text("\n".join(" ".join(words[i:i + per_line])
                              for i in range(0, len(words), per_line)) + "\n")
    return path


# ---------------------------------------------------------------------------- the limit


def test_the_limit_refuses_dense_counts_of_the_old_code():
    """Under the limit, the dense n³ array of the old accumulator cannot even be allocated."""
    code = ("import numpy as np\n"
            "try:\n    np.zeros((1024, 1024, 1024))\nexcept MemoryError:\n    print('refused')\n")
    out = run_limited(["-c", code])
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stderr


# ---------------------------------------------------------------------------- (a) the CLI


def test_cli_learn_predict_inspect_on_a_word_file(tmp_path, words):
    data = write_words(tmp_path / "book.txt", words)
    model, counts = tmp_path / "m.ckpt", tmp_path / "c.ckpt"
    out = cli("learn", str(data), "--encoding", "tokens", "--out", str(model),
              "--counts", str(counts), "--progress", "never")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "event=fitted" in out.stderr and "counts_mb=" in out.stderr
    acc = MomentAccumulator.load(counts)
    assert acc.n == len(set(words)) >= MIN_DISTINCT
    assert by_label(acc) == by_label(direct(words))  # exact counts: one sequence of words
    # predict: valid distributions over the model's words, the 20 most probable by default
    out = cli("predict", "--model", str(model),  # one history a line of standard input
              stdin=f"{words[10]} {words[11]}\nnonsense-word\n")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(lines) == 2
    for line in lines:
        assert len(line["next"]) == 20 and line["top"] in set(words)
        assert 0 < sum(line["next"].values()) <= 1 + 1e-6
    assert lines[1]["unknown"] == ["nonsense-word"]
    # inspect: n, the rank and the memory the counts take
    out = cli("inspect", str(model), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    info = json.loads(out.stdout)
    assert info["n_symbols"] == acc.n and info["rank"] >= 1 and info["model_mb"] > 0
    assert len(info["symbols"]) <= 51  # a huge alphabet is not printed whole
    out = cli("inspect", str(counts))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"n_symbols: {acc.n}" in out.stdout and "counts_mb:" in out.stdout
    assert f"distinct_triples: {acc.triples().nnz}" in out.stdout


def test_cli_learn_with_a_state_file_resumes_exactly_at_large_n(tmp_path, words):
    """--state checkpoints (sparse, read back before they replace the last one) at large n."""
    data = write_words(tmp_path / "book.txt", words)
    state = tmp_path / "s.ckpt"
    out = cli("learn", str(data), "--encoding", "tokens", "--state", str(state), "--no-fit",
              "--checkpoint-every", "500", "--progress", "never")
    assert out.returncode == 0, out.stderr[-3000:]
    from connectors.state import SourceState

    st = SourceState.load(state)
    assert st.records == len(words) and by_label(st.acc) == by_label(direct(words))


# ---------------------------------------------------------------------------- (d) --max-symbols


def test_cli_max_symbols_bounds_the_alphabet(tmp_path, words):
    data = write_words(tmp_path / "book.txt", words)
    counts = tmp_path / "c.ckpt"
    out = cli("learn", str(data), "--encoding", "tokens", "--max-symbols", "1000", "--no-fit",
              "--counts", str(counts), "--progress", "never")
    assert out.returncode == 0, out.stderr[-3000:]
    acc = MomentAccumulator.load(counts)
    assert acc.n == 1000 and acc.symbols[-1] == OTHER and acc.max_symbols == 1000
    assert by_label(acc) == by_label(direct(words, max_symbols=1000))
    assert acc.n_triples == len(words) - 2  # nothing is dropped: the rest is "<other>"
    # and a model fits on the capped counts
    out = cli("learn", str(data), "--encoding", "tokens", "--max-symbols", "300", "--out",
              str(tmp_path / "m.ckpt"), "--progress", "never")
    assert out.returncode == 0, out.stderr[-3000:]
    from streamspec.core.model import ObservableOperatorModel

    assert ObservableOperatorModel.load(tmp_path / "m.ckpt").n_symbols == 300


def test_river_model_max_symbols(words):
    from streamspec import SpectralHMM

    model = SpectralHMM(rank=3, refit_every=2_000, max_symbols=200)
    for w in words[:6_000]:
        model.learn_one({}, w)
    assert len(model.symbols) == 200 and model.symbols[-1] == OTHER
    assert model.accumulator.n == 200 and model.refitter.last_error is None
    p = model.predict_proba_one({})
    assert set(p) == set(model.symbols) and abs(sum(p.values()) - 1) < 1e-9


# ---------------------------------------------------------------------------- (b) river


RIVER_SCRIPT = """
import json, math, sys
from river import evaluate, metrics
from streamspec import SpectralHMM
words = json.load(open(sys.argv[1]))
model = SpectralHMM(refit_every=5_000)
metric = metrics.Accuracy()
evaluate.progressive_val_score(dataset=(({}, w) for w in words), model=model, metric=metric)
rows = model.online._rows
p = model.predict_proba_one({})
print(json.dumps({"accuracy": metric.get(), "n": len(model.symbols), "fits": model.refitter.n_fits,
                  "failures": model.refitter.n_failures, "error": model.refitter.last_error,
                  "rank": model.rank_, "cached": rows.size, "capacity": rows.capacity,
                  "prequential": model.online.log_loss, "psum": sum(p.values()), "plen": len(p)}))
"""


def test_river_progressive_validation_on_a_word_stream(tmp_path, words):
    path = tmp_path / "words.json"
    path.write_text(json.dumps(words))
    out = run_limited(["-c", RIVER_SCRIPT, str(path)])
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.splitlines()[-1])
    n = r["n"]
    assert n == len(set(words)) >= MIN_DISTINCT and len(words) >= 20_000
    assert r["fits"] >= 4 and r["failures"] == 0, r["error"]
    assert np.isfinite(r["accuracy"]) and r["accuracy"] > 10 / n  # a uniform guess: 1 / n
    assert r["cached"] <= r["capacity"] and np.isfinite(r["prequential"])
    assert r["plen"] == n and abs(r["psum"] - 1) < 1e-9


def test_online_rows_are_bounded_and_exact_at_large_n(words):
    from streamspec import SpectralEstimator
    from streamspec.streaming.online_predictor import OnlinePredictor

    acc = direct(words)
    model = SpectralEstimator(rank=8).fit(acc)
    online = OnlinePredictor(window=2, cache_floats=50 * acc.n)
    online.set_model(model)
    rng = np.random.default_rng(0)
    for k in range(150):  # fresh streams of two symbols: the model's own reading of them
        ctx = [int(v) for v in rng.integers(acc.n, size=2)]
        online.observe(k, ctx[0], learn=False)
        online.observe(k, ctx[1], learn=False)
        w = model.walk(np.array(ctx))
        expected = model.backoff.rows(w.u[-1:], w.v[-1:], w.states[-1:],
                                      model.predict_from_state(model.state_for(ctx))[None],
                                      online.mixture.blends(w.u[-1:] * 0 + model.backoff.buckets(
                                          w.u[-1:], w.v[-1:])))[0]
        np.testing.assert_allclose(online.row(k), expected, atol=1e-12)
        assert online._rows.size <= 50 * acc.n
    # a context ending with a symbol the model has never seen still gives a distribution
    online.observe("new", acc.n + 5)
    assert abs(online.row("new").sum() - 1) < 1e-9


# ---------------------------------------------------------------------------- (c) the daemon


kafka = pytest.importorskip("kafka")

from connectors.broker import create_topic  # noqa: E402
from connectors.config import DaemonConfig  # noqa: E402
from connectors.kafka import EXIT_STATE_FAILURE, ConsumerDaemon, learn_record  # noqa: E402
from connectors.records import Record  # noqa: E402
from connectors.state import PartitionState, StateStore  # noqa: E402
from connectors.state.snapshots import read_snapshots  # noqa: E402
from streamspec.core.checkpoint import CheckpointError  # noqa: E402

GROUP = ["--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500",
         "--max-poll-interval-ms", "20000", "--poll-timeout-ms", "100"]


def keyed_words(words: list[str], n_keys: int = 4) -> list[tuple[bytes, bytes]]:
    return [(f"user-{t % n_keys}".encode(), w.encode()) for t, w in enumerate(words)]


def reference(messages) -> MomentAccumulator:
    acc = MomentAccumulator()
    for k, v in messages:
        acc.learn_one(v.decode(), k.decode())
    return acc


def count_messages(bootstrap: str, topic: str, seconds: float = 3.0) -> int:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            return 0
        tps = [kafka.TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        n, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            n += sum(len(m) for m in consumer.poll(timeout_ms=200).values())
        return n
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", ["local", "kafka"])
def test_daemon_on_a_word_topic(kafka_bootstrap, unique_name, tmp_path, words, backend):
    topic, group = unique_name("-in"), unique_name("-g")
    create_topic(kafka_bootstrap, topic, partitions=2)
    messages = keyed_words(words)
    ends = produce(kafka_bootstrap, topic, messages)
    state_dir = tmp_path / "state"
    log_path = tmp_path / "daemon.log"
    cmd = [sys.executable, "-m", "streamspec", "consume", "--bootstrap", kafka_bootstrap,
           "--topic", topic, "--group", group, "--state-dir", str(state_dir),
           "--state-backend", backend, "--refit-every", "10000", "--checkpoint-interval", "0.5",
           "--status-interval", "1", *GROUP]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=ROOT,
                                preexec_fn=_limit)
    try:
        if backend == "local":
            def offsets():
                return {s.partition: s.offset for s in StateStore(state_dir).load_all(topic)}
        else:
            def offsets():
                return read_snapshots(kafka_bootstrap, f"{topic}.state").offsets()
        wait_until(lambda: offsets() == ends, "checkpoints at the end offsets", WAIT, proc)
        if backend == "local":  # a refit at this alphabet size, in the worker process
            wait_until(lambda: (state_dir / topic / "model.ckpt").exists(), "a model", WAIT, proc)
        wait_until(lambda: "counts_mb=" in log_path.read_text(), "a status line", WAIT, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:  # the final refit at this size, on a loaded machine:
            proc.send_signal(signal.SIGTERM)  # a second signal stops waiting for it (documented)
            code = proc.wait(120)
    text = log_path.read_text()
    assert code == 0, text[-3000:]
    assert "dead-letter" not in text and "event=fatal" not in text
    if backend == "local":
        states = StateStore(state_dir).load_all(topic)  # the checkpoints load back
        merged = StateStore(state_dir).merged(topic)
    else:
        latest = read_snapshots(kafka_bootstrap, f"{topic}.state")
        states = latest.states()
        merged = latest.merged()
    assert {s.partition: s.offset for s in states} == ends
    assert all(not s.dead_letters for s in states)
    assert sum(s.records for s in states) == len(messages)
    assert merged.n >= MIN_DISTINCT
    assert by_label(merged) == by_label(reference(messages))
    assert count_messages(kafka_bootstrap, f"{topic}.dead-letters") == 0
    if backend == "local":
        from streamspec.core.model import ObservableOperatorModel

        assert ObservableOperatorModel.load(state_dir / topic / "model.ckpt").n_symbols >= 1000


def test_daemon_max_symbols(kafka_bootstrap, unique_name, tmp_path, words):
    topic, group = unique_name("-in"), unique_name("-g")
    create_topic(kafka_bootstrap, topic, partitions=1)
    messages = keyed_words(words[:3_000])
    ends = produce(kafka_bootstrap, topic, messages)
    cfg = DaemonConfig(bootstrap=kafka_bootstrap, topic=topic, group=group,
                       state_dir=str(tmp_path / "s"), max_symbols=50, refit_every=0,
                       refit_process=False, checkpoint_interval=0.2, poll_timeout_ms=100,
                       session_timeout_ms=3000, heartbeat_interval_ms=500)
    daemon = ConsumerDaemon(cfg)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    try:
        wait_until(lambda: {s.partition: s.offset for s in StateStore(tmp_path / "s").load_all(topic)}
                   == ends, "checkpoints at the end offsets", WAIT)
    finally:
        daemon.stop()
        thread.join(60)
    assert result == [0]
    acc = StateStore(tmp_path / "s").load(topic, 0).acc
    assert acc.n == 50 and acc.symbols[-1] == OTHER
    expected = MomentAccumulator(max_symbols=50)
    for k, v in messages:
        expected.learn_one(v.decode(), k.decode())
    assert by_label(acc) == by_label(expected)


# ---------------------------------------------------------------------------- (e) MemoryError


def _json_messages(n: int, victim_at: int) -> list[tuple[bytes, bytes]]:
    words = word_stream(n, vocab=300, seed=5)
    out = [(f"u{t % 3}".encode(), json.dumps({"symbol": w}).encode()) for t, w in enumerate(words)]
    # the victim: a valid record with a symbol and an end of sequence (two steps to undo)
    out[victim_at] = (b"u1", json.dumps({"symbol": "boom", "end": True}).encode())
    return out


def _reference_json(messages) -> MomentAccumulator:
    acc = MomentAccumulator()
    for k, v in messages:
        body = json.loads(v)
        acc.learn_one(body["symbol"], k.decode())
        if body.get("end"):
            acc.end(k.decode())
    return acc


@pytest.mark.parametrize("where", ["learn_one", "end"])
def test_memory_error_on_a_valid_record_stops_cleanly(kafka_bootstrap, unique_name, tmp_path,
                                                     monkeypatch, where):
    topic, group = unique_name("-in"), unique_name("-g")
    create_topic(kafka_bootstrap, topic, partitions=1)
    victim = 700
    messages = _json_messages(1_000, victim)
    ends = produce(kafka_bootstrap, topic, messages)
    state_dir = tmp_path / "s"
    cfg = DaemonConfig(bootstrap=kafka_bootstrap, topic=topic, group=group,
                       state_dir=str(state_dir), refit_every=0, refit_process=False,
                       checkpoint_interval=0.05, poll_timeout_ms=100, max_poll_records=50,
                       session_timeout_ms=3000, heartbeat_interval_ms=500,
                       format={"value_format": "json"})
    original = getattr(MomentAccumulator, where)

    def failing(self, *args):
        if (where == "learn_one" and args[0] == "boom") or (where == "end" and args[0] == "u1"):
            raise MemoryError("injected: cannot grow the counts")
        return original(self, *args)

    monkeypatch.setattr(MomentAccumulator, where, failing)
    daemon = ConsumerDaemon(cfg)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "the daemon did not stop on its own"
    assert result == [EXIT_STATE_FAILURE] and daemon.fatal is not None
    state = StateStore(state_dir).load(topic, 0)  # readable
    assert state.offset == victim and not state.dead_letters
    assert by_label(state.acc) == by_label(_reference_json(messages[:victim]))  # not half-learned
    assert count_messages(kafka_bootstrap, f"{topic}.dead-letters") == 0
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    assert all(om.offset <= victim for tp, om in offsets.items() if tp.topic == topic)
    # with memory back, a restart reads the failed record again and finishes exactly
    monkeypatch.setattr(MomentAccumulator, where, original)
    daemon = ConsumerDaemon(cfg)
    result = []
    thread = threading.Thread(target=lambda: result.append(daemon.run()))
    thread.start()
    try:
        wait_until(lambda: StateStore(state_dir).load(topic, 0).offset == ends[0], "the end", WAIT)
    finally:
        daemon.stop()
        thread.join(60)
    assert result == [0]
    state = StateStore(state_dir).load(topic, 0)
    assert by_label(state.acc) == by_label(_reference_json(messages)) and not state.dead_letters


@pytest.mark.parametrize("window", [1, "auto"])
def test_learn_record_is_all_or_nothing(monkeypatch, window):
    acc = MomentAccumulator(window=window)
    for t, w in enumerate("abcabcab"):
        acc.learn_one(w, t % 2)
    before = (by_label(acc), dict(acc._tails), acc.symbols, acc.n_triples, acc.windows().total)
    original = MomentAccumulator.end

    def failing(self, key=None):
        raise MemoryError("injected")

    monkeypatch.setattr(MomentAccumulator, "end", failing)
    with pytest.raises(MemoryError):
        learn_record(acc, [Record(key=0, symbol="z", end=True)])
    after = (by_label(acc), dict(acc._tails), acc.symbols, acc.n_triples, acc.windows().total)
    if window == "auto":  # the new label shortened the window for good (exactly: nothing lost),
        before, after = before[2:], after[2:]  # so counts and tails are coded at 4, not 5
    assert after == before
    monkeypatch.setattr(MomentAccumulator, "end", original)
    assert learn_record(acc, [Record(key=0, symbol="z", end=True)]) == 1
    assert "z" in acc.symbols and 0 not in acc.keys


def test_a_checkpoint_that_would_not_read_back_never_replaces_the_last_good_one(tmp_path,
                                                                               monkeypatch):
    store = StateStore(tmp_path)
    st = PartitionState("t", 0)
    st.acc.learn_many(word_stream(500), key="k")
    st.offset = 500
    path = store.save(st)
    good = path.read_bytes()
    st.acc.learn_many(["x", "y", "z"], key="k")
    st.offset = 503

    def broken(cls, header, arrays, source):
        raise CheckpointError(f"{source}: cannot read it back")

    monkeypatch.setattr(PartitionState, "from_parts", classmethod(broken))
    with pytest.raises(CheckpointError):
        store.save(st)
    assert path.read_bytes() == good
    monkeypatch.undo()
    assert store.load("t", 0).offset == 500

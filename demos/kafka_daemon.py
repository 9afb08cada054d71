"""Live demo: a broker, a producer replaying a data set as keyed streams, and the daemon.

Starts a local Tansu broker, creates the topics, starts ``streamspec consume``
as a subprocess (its log lines, refits and status lines, appear on stderr),
replays a data set from ``../shared/data`` as interleaved keyed streams at a
steady rate, and prints, once a second, a few of the daemon's next-symbol
predictions and the model snapshots it publishes. After ``--seconds`` it
stops the daemon with SIGTERM (final checkpoint and commit, exit 0) and
describes the state folder it leaves behind.

Usage::

    python demos/kafka_daemon.py [--data alice|splice] [--seconds 20] [--rate 3000]

Data sets: ``alice`` (the letters of Alice in Wonderland, read by 8 readers
from different places in the book) or ``splice`` (every gene sequence one
stream, A/C/G/T).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

from connectors.broker import create_topic, local_broker  # noqa: E402
from streamspec.core.model import ObservableOperatorModel  # noqa: E402


def streams(data: str, n_readers: int = 8) -> list[tuple[str, str]]:
    """Interleaved (key, symbol) pairs of the data set's streams."""
    from streamspec.experiments import datasets

    try:
        return _interleave(data, n_readers, datasets)
    except FileNotFoundError as exc:  # one line, not a traceback: say where to put the data
        raise SystemExit(f"kafka_daemon.py: the {data} data set is needed: {exc}") from None


def _interleave(data: str, n_readers: int, datasets) -> list[tuple[str, str]]:
    if data == "alice":
        text = datasets.load_alice_letters()
        step = len(text) // n_readers
        seqs = {f"reader-{i}": text[i * step:(i + 1) * step] for i in range(n_readers)}
    elif data == "splice":
        seqs = {f"gene-{i}": s for i, s in enumerate(datasets.load_splice())}
    else:
        raise SystemExit(f"unknown data set {data!r}")
    out, pos = [], dict.fromkeys(seqs, 0)
    active = [k for k in seqs if seqs[k]]
    window = 8 if data == "splice" else len(active)  # a few genes at a time, all readers
    while active:
        for key in active[:window]:
            out.append((key, seqs[key][pos[key]]))
            pos[key] += 1
        active = [k for k in active if pos[k] < len(seqs[k])]
    return out


def replay(bootstrap: str, topic: str, pairs, rate: float, stop: threading.Event) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    t0 = time.monotonic()
    for i, (key, symbol) in enumerate(pairs):
        if stop.is_set():
            break
        producer.send(topic, key=key.encode(), value=str(symbol).encode())
        ahead = i / rate - (time.monotonic() - t0)
        if ahead > 0.01:
            time.sleep(ahead)
    producer.flush()
    producer.close()


def watch(bootstrap: str, predictions: str, models: str, stop: threading.Event) -> None:
    consumer = KafkaConsumer(predictions, models, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    last_print, latest = 0.0, {}
    while not stop.is_set():
        for tp, msgs in consumer.poll(timeout_ms=200).items():
            for m in msgs:
                if tp.topic == models:
                    model = ObservableOperatorModel.from_bytes(m.value)
                    h = dict(m.headers)
                    print(f"[model] version {h['model-version'].decode()}: {model.n_symbols} "
                          f"symbols, loss {h['loss'].decode()}, after "
                          f"{h['records'].decode()} records", flush=True)
                else:
                    p = json.loads(m.value)
                    latest[p["key"]] = p
        if latest and time.monotonic() - last_print >= 1.0:
            last_print = time.monotonic()
            for key in sorted(latest)[:3]:
                p = latest[key]
                top3 = sorted(p["next"].items(), key=lambda kv: -kv[1])[:3]
                hist = "".join(map(str, p["history"]))
                shown = ", ".join(f"{s}:{q:.2f}" for s, q in top3)
                print(f"[predict] {key} after '{hist}' -> {shown}", flush=True)
    consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=["alice", "splice"], default="alice")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run")
    parser.add_argument("--rate", type=float, default=3000.0, help="messages per second")
    parser.add_argument("--rank", default="3")
    args = parser.parse_args(argv)
    pairs = streams(args.data)
    print(f"{len(pairs):,} messages from {args.data}", flush=True)
    with local_broker() as bootstrap, tempfile.TemporaryDirectory() as state_dir:
        topic, predictions, models = "symbols", "symbols.predictions", "symbols.models"
        for t, n in ((topic, 4), (predictions, 1), (models, 1), (f"{topic}.dead-letters", 1)):
            create_topic(bootstrap, t, n)
        cmd = [sys.executable, "-m", "streamspec", "consume",
               "--bootstrap", bootstrap, "--topic", topic, "--group", "demo",
               "--state-dir", state_dir, "--rank", args.rank, "--refit-every", "5000",
               "--predictions-topic", predictions, "--models-topic", models,
               "--status-interval", "2", "--session-timeout-ms", "3000",
               "--heartbeat-interval-ms", "500", "--max-poll-interval-ms", "10000"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        daemon = subprocess.Popen(cmd, env=env, cwd=ROOT)
        stop = threading.Event()
        threads = [
            threading.Thread(target=replay, args=(bootstrap, topic, pairs, args.rate, stop)),
            threading.Thread(target=watch, args=(bootstrap, predictions, models, stop)),
        ]
        for t in threads:
            t.start()
        try:
            time.sleep(args.seconds)
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            for t in threads:
                t.join()
            daemon.send_signal(signal.SIGTERM)
            code = daemon.wait(60)
        print(f"daemon exited with {code}; its state folder:", flush=True)
        subprocess.run([sys.executable, "-m", "streamspec", "inspect",
                        str(Path(state_dir) / topic)], env=env, cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

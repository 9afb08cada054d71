"""Benchmark: the daemon's model age (from a record to the first served model that includes it).

    python demos/bench_model_age.py [--rate 10000] [--seconds 90] [--backlog 500000]
                                    [--keys 300] [--partitions 4] [--refit-nice N] [--quick]
                                    [--log FILE] [-- DAEMON FLAGS]

The five books of ``books/`` as words (words seen twice or more, the rest ``<other>``:
n ≈ 2.1·10⁴, the vocabulary of ``bench_large.py books``; the text is read again from its
start when it runs out), one word per record, keyed by ``--keys`` stream keys (each key
reads its own contiguous part of the text), to a topic of ``--partitions`` partitions of
a local broker. First ``--backlog`` records are written at once and ``streamspec consume``
(a separate process, its default refit settings: a refit every 20,000 symbols, in a
worker process, ``refit_duty`` 0.5) reads them; once a model covers them, records are
produced at a steady ``--rate`` per second for ``--seconds`` seconds.

What a model was fitted on is in the daemon's ``event=refit`` line, written when the model
is served (``fitted_offsets``: the next offset of each partition when its counts were
copied; ``age``: seconds since then; the same figures are headers of its models-topic
message, if one is set). A record produced at t (its timestamp) is first served in the
earliest model whose fitted offset of its partition is past it: its age is that model's
timestamp minus t. Ages are measured for the records of the steady phase produced before
its last ``--tail`` seconds (the daemon keeps running meanwhile); a record no model
covered by the end is counted as older than the tail. Printed: the distribution of ages
(median, 90th percentile, max), its parts (consume lag: the snapshot's time minus the
newest record in it; fit and publish: the model's time minus its snapshot's), the refit
durations from the daemon's log, whether the daemon kept up with the rate, and the load
average (2 shared cores: other jobs change the figures). BLAS threads are pinned to one.
``--quick`` is a smoke run (backlog 100,000, 30 s at the rate, tail 15 s). Flags after
``--`` go to ``streamspec consume`` (e.g. ``-- --refit-duty 1``).

docs/kafka-daemon.md ("Model age") holds the recorded figures.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from bench_large import _books_dir, book_words  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from connectors.broker import create_topic, local_broker  # noqa: E402


def words() -> list[str] | None:
    """The books as words, singletons as ``<other>`` (``None`` without the data)."""
    folder = _books_dir()
    if folder is None:
        return None
    tokens: list[str] = []
    for f in sorted(folder.glob("*.txt")):
        tokens += book_words(f)
    counts = Counter(tokens)
    return [w if counts[w] >= 2 else "<other>" for w in tokens]


class Stream:
    """Record j: key ``j % keys``, the next word of that key's own part of the text."""

    def __init__(self, tokens: list[str], keys: int):
        self.keys = [f"reader-{k}".encode() for k in range(keys)]
        size = len(tokens) // keys
        self.parts = [[w.encode() for w in tokens[k * size:(k + 1) * size]] for k in range(keys)]
        self.size = size

    def record(self, j: int) -> tuple[bytes, bytes]:
        k = j % len(self.keys)
        return self.keys[k], self.parts[k][(j // len(self.keys)) % self.size]


def produce_at(producer: KafkaProducer, topic: str, stream: Stream, start: int, count: int,
               rate: float | None) -> float:
    """Send records ``start .. start + count`` (at ``rate`` per second; ``None``: at once).

    Returns the achieved rate (records per second of sending).
    """
    t0 = time.monotonic()
    j = start
    while j < start + count:
        due = start + count if rate is None else min(start + count,
                                                      start + int(rate * (time.monotonic() - t0)) + 1)
        while j < due:
            key, value = stream.record(j)
            producer.send(topic, key=key, value=value)
            j += 1
        if rate is not None:
            time.sleep(0.002)
    producer.flush()
    return count / max(time.monotonic() - t0, 1e-9)


_REFIT = re.compile(r"^(\S+ \S+) INFO streamspec.daemon event=refit version=(\d+) n=\d+ "
                    r"warm=(\w+) symbols=(\d+) .*?seconds=([\d.]+) .*?"
                    r"fitted_offsets=(\S+) age=([\d.]+)", re.M)


def served_models(log_text: str) -> list[dict]:
    """The models served while running, from the daemon's ``event=refit`` lines.

    Each: ``served`` (Unix s: the line's time, right after the model was served),
    ``offsets`` (what its counts held), ``snapshot`` (when they were copied), ``version``,
    ``warm``, ``symbols``, ``seconds`` (the fit). The shutdown's final refit is left out.
    """
    stop = log_text.find("event=signal")
    text = log_text if stop < 0 else log_text[:stop]
    out = []
    for when, version, warm, symbols, seconds, offsets, age in _REFIT.findall(text):
        served = datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append({"served": served, "version": int(version), "warm": warm == "True",
                    "symbols": int(symbols), "seconds": float(seconds),
                    "offsets": {int(p): int(o) for p, o in (x.split(":") for x in
                                                             offsets.split(",") if ":" in x)},
                    "snapshot": served - float(age)})
    return out


def covers(models: list[dict], ends: dict[int, int]) -> bool:
    return any(all(m["offsets"].get(p, 0) >= e for p, e in ends.items()) for m in models)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    ends = {tp.partition: off for tp, off in consumer.end_offsets(tps).items()}
    consumer.close()
    return ends


def record_times(bootstrap: str, topic: str, starts: dict[int, int],
                 ends: dict[int, int]) -> dict[int, np.ndarray]:
    """Timestamps (ms) of each partition's records ``starts[p] .. ends[p]``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in ends]
    consumer.assign(tps)
    out: dict[int, list[int]] = {p: [] for p in ends}
    for tp in tps:
        consumer.seek(tp, starts[tp.partition])
    left = sum(ends[p] - starts[p] for p in ends)
    while left > 0:
        for tp, messages in consumer.poll(timeout_ms=500, max_records=5000).items():
            for m in messages:
                if m.offset < ends[tp.partition]:
                    out[tp.partition].append(m.timestamp)
                    left -= 1
    consumer.close()
    return {p: np.asarray(v, dtype=np.float64) for p, v in out.items()}


def ages(models, times: dict[int, np.ndarray], starts: dict[int, int],
         since_ms: float = 0.0) -> np.ndarray:
    """Seconds from each record to the first model covering it (inf: none did); only the
    records stamped at ``since_ms`` or later (the broker's end offsets may lag a little
    behind the records just flushed: a backlog record is never counted as a steady one)."""
    served = np.array([1000 * m["served"] for m in models], dtype=np.float64)
    order = np.argsort(served, kind="stable")
    out = []
    for p, t in times.items():
        covered = np.maximum.accumulate(
            np.array([models[i]["offsets"].get(p, 0) for i in order], dtype=np.int64))
        offsets = starts[p] + np.arange(t.size)
        first = np.searchsorted(covered, offsets, side="right")  # first model past the offset
        at = np.where(first < len(order), served[order][np.minimum(first, len(order) - 1)],
                      np.inf)
        out.append(((at - t) / 1000.0)[t >= since_ms])
    return np.concatenate(out)


def consume_lags(models, bootstrap: str, topic: str, since_ms: float) -> list[float]:
    """Per model after ``since_ms``: its snapshot time minus the newest record it includes."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    lags = []
    for m in models:
        if 1000 * m["served"] < since_ms:
            continue
        newest = 0.0
        for p, o in m["offsets"].items():
            if o == 0:
                continue
            tp = TopicPartition(topic, p)
            consumer.assign([tp])
            consumer.seek(tp, o - 1)
            got = consumer.poll(timeout_ms=2000, max_records=1).get(tp, [])
            if got:
                newest = max(newest, got[0].timestamp / 1000.0)
        lags.append(m["snapshot"] - newest)
    consumer.close()
    return lags


def pct(a, q: float) -> float:
    return float(np.percentile(a, q)) if len(a) else float("nan")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=10_000)
    p.add_argument("--seconds", type=float, default=90)
    p.add_argument("--backlog", type=int, default=500_000)
    p.add_argument("--keys", type=int, default=300)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--tail", type=float, default=35)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--log", help="copy the daemon's log to this file")
    p.add_argument("--refit-nice", type=int, help="the daemon's --refit-nice (default: its own)")
    p.add_argument("daemon_flags", nargs="*", help="after --: flags of streamspec consume")
    args = p.parse_args(argv)
    if args.quick:
        args.backlog, args.seconds, args.tail = 100_000, 30, 15
    tokens = words()
    if tokens is None:
        print("bench_model_age: no data (looked for books/ under STREAMSPEC_DATA and "
              "../shared/data); skipped")
        return 0
    stream = Stream(tokens, args.keys)
    n = len(set(tokens))
    print(f"books/ as words: {len(tokens):,} tokens, n = {n:,} (words seen twice, + <other>); "
          f"{args.keys} keys, {args.partitions} partitions; backlog {args.backlog:,} records, "
          f"then {args.rate:,.0f} records/s for {args.seconds:.0f} s; load average "
          f"{'/'.join(f'{v:.1f}' for v in os.getloadavg())} (1/5/15 min, {os.cpu_count()} cores)",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp, local_broker(f"{tmp}/broker.log") as bootstrap:
        return run(args, stream, bootstrap, tmp)


def run(args, stream: Stream, bootstrap: str, tmp: str) -> int:
    topic = "words"
    create_topic(bootstrap, topic, args.partitions)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=1 << 16)
    produce_at(producer, topic, stream, 0, args.backlog, None)
    backlog_ends = end_offsets(bootstrap, topic)
    log_path = Path(tmp) / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
           "--topic", topic, "--group", "age", "--state-dir", f"{tmp}/state",
           "--dead-letter-topic", "", "--status-interval", "10",
           *([] if args.refit_nice is None else ["--refit-nice", str(args.refit_nice)]),
           *args.daemon_flags]
    print("daemon: " + " ".join(cmd[1:]).replace(bootstrap, "HOST:PORT").replace(tmp, "TMP"),
          flush=True)
    with open(log_path, "wb") as out:
        daemon = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        while not covers(served_models(log_path.read_text()), backlog_ends):
            if daemon.poll() is not None or time.monotonic() - t0 > 900:
                print(f"the daemon {'exited' if daemon.poll() is not None else 'took > 900 s'} "
                      f"before a model covered the backlog; its log:\n{log_path.read_text()[-3000:]}")
                return 1
            time.sleep(0.5)
        print(f"backlog covered by a model after {time.monotonic() - t0:.0f} s; steady phase",
              flush=True)
        load0 = os.getloadavg()
        steady_start_ms = time.time() * 1000
        start = args.backlog
        measured = int(args.rate * max(args.seconds - args.tail, 1))
        achieved = produce_at(producer, topic, stream, start, measured, args.rate)
        measured_ends = end_offsets(bootstrap, topic)
        achieved2 = produce_at(producer, topic, stream, start + measured,
                               int(args.rate * args.tail), args.rate)
        load1 = os.getloadavg()
        end_ends = end_offsets(bootstrap, topic)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(120)
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGTERM)  # the second one: do not wait for the final refit
            daemon.wait(60)
        producer.close()
    if args.log:
        Path(args.log).write_text(log_path.read_text())
    report(args, bootstrap, topic, log_path.read_text(), backlog_ends,
           measured_ends, end_ends, steady_start_ms, (achieved, achieved2), (load0, load1))
    return 0


def report(args, bootstrap, topic, log_text, backlog_ends, measured_ends, end_ends,
           steady_start_ms, achieved, loads) -> None:
    models = served_models(log_text)  # the final model (at shutdown) is not among them
    times = record_times(bootstrap, topic, backlog_ends, measured_ends)
    a = ages(models, times, backlog_ends, steady_start_ms)
    covered = a[np.isfinite(a)]
    print(f"\nproduced {sum(measured_ends.values()) - sum(backlog_ends.values()):,} measured "
          f"records at {achieved[0]:,.0f}/s, then "
          f"{sum(end_ends.values()) - sum(measured_ends.values()):,} more at "
          f"{achieved[1]:,.0f}/s (tail {args.tail:.0f} s)")
    print(f"model age of the measured records: median {pct(covered, 50):.1f} s, 90th percentile "
          f"{pct(covered, 90):.1f} s, max {covered.max() if covered.size else float('nan'):.1f} s; "
          f"not covered by a model before the end: {int((~np.isfinite(a)).sum()):,} of {a.size:,}")
    steady = [m for m in models if 1000 * m["served"] >= steady_start_ms]
    lags = consume_lags(steady, bootstrap, topic, steady_start_ms)
    fits = [m["served"] - m["snapshot"] for m in steady]
    gaps = np.diff([m["snapshot"] for m in steady])
    print(f"models served in the steady phase: {len(steady)}; consume lag at their snapshots "
          f"(snapshot time - newest record in it): median {pct(lags, 50):.2f} s, max "
          f"{max(lags, default=float('nan')):.2f} s; snapshot to served: median "
          f"{pct(fits, 50):.1f} s, max {max(fits, default=float('nan')):.1f} s; between "
          f"snapshots: median {pct(gaps, 50):.1f} s, max {max(gaps, default=float('nan')):.1f} s")
    sec = [m["seconds"] for m in models]
    cpu = [float(c) for c in re.findall(r"event=worker-fit seconds=[\d.]+ cpu_seconds=([\d.]+)",
                                        log_text)]
    print(f"refits served: {len(models)} (warm {sum(m['warm'] for m in models)}), fit seconds: "
          f"median {pct(sec, 50):.1f}, max {max(sec, default=float('nan')):.1f}; steady phase: "
          + ", ".join(f"v{m['version']} {m['seconds']:.1f} s" for m in steady)
          + (f"; the worker's CPU seconds per fit: median {pct(cpu, 50):.1f}, max "
             f"{max(cpu):.1f}" if cpu else ""))
    stop = log_text.find("event=signal")
    behind = [int(v) for when, v in re.findall(r"^(\S+ \S+) INFO .*? event=status .*? lag=(\d+)",
                                               log_text if stop < 0 else log_text[:stop], re.M)
              if 1000 * datetime.strptime(when, "%Y-%m-%d %H:%M:%S,%f").timestamp()
              >= steady_start_ms]
    worst = max(behind, default=-1) / args.rate
    kept = 0 <= worst <= 5
    print(f"alphabet of the last refit: {models[-1]['symbols'] if models else '?'}; the daemon "
          f"{'kept up' if kept else 'did NOT keep up'} with {args.rate:,.0f} records/s (records "
          f"not yet read, at its status lines of the steady phase: at most {worst:.1f} s of "
          f"them, last {behind[-1] / args.rate if behind else float('nan'):.1f} s; kept up: "
          f"at most 5 s)")
    print(f"load average during the steady phase: {'/'.join(f'{v:.1f}' for v in loads[0])} at "
          f"its start, {'/'.join(f'{v:.1f}' for v in loads[1])} at its end (1/5/15 min)")


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: aggregate throughput of 1, 2 and 3 daemons sharing one model through Kafka.

Starts a local broker, produces N keyed one-letter messages (Alice's letters as
100 interleaved streams) to a 6-partition topic, then, for k = 1, 2, 3 (runs
interleaved), starts k ``streamspec consume --state-backend kafka`` subprocesses
in a fresh consumer group with a fresh state and model topic, and measures how
fast they drain the topic together.

Measurement: every daemon serves its counters on a metrics endpoint, sampled
every 0.1 s. The window opens at the first sample where every daemon owns at
least one partition and together all six (the group has settled: start-up and
joins excluded), and closes when every daemon reports a lag of 0. The rate is
the messages consumed by all daemons in the window divided by its length. The
run is then checked: the latest snapshots of the state topic must hold exactly N
records.

The CPU time of the daemon processes in the window (``/proc``; refit workers
not included) gives the cores they used and the messages per CPU-second: when
the latter stays flat while the aggregate stops growing, the daemons are CPU
bound and the machine has no more cores to give.

Before that, a CPU probe measures what extra processes can add on this machine:
the throughput of 1, 2 and 3 processes running a pure-Python loop side by side,
relative to one.

Usage::

    python demos/bench_scaleout.py [--messages 600000] [--runs 2] [--daemons 1,2,3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from bench_kafka import produce  # noqa: E402

from connectors.broker import create_topic, local_broker  # noqa: E402
from connectors.state.snapshots import read_snapshots  # noqa: E402

PARTITIONS = 6


def _spin(seconds: float, out) -> None:
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            n += 1
    out.put(n)


def cpu_probe(processes: int, seconds: float = 2.0) -> float:
    """Loop iterations per second of ``processes`` busy processes together."""
    q = multiprocessing.get_context("spawn").Queue()
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(seconds, q))
             for _ in range(processes)]
    for p in procs:
        p.start()
    total = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


class Daemon:
    """One daemon subprocess with its metrics endpoint."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str, tmp: str, run: str):
        self.log = Path(tmp) / f"{run}-{name}.log"
        cmd = [
            sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
            "--topic", topic, "--group", group, "--client-id", name,
            "--state-backend", "kafka", "--state-topic", f"{topic}.state-{run}",
            "--models-topic", f"{topic}.models-{run}", "--state-dir", f"{tmp}/{run}-{name}",
            "--refit-every", "20000", "--checkpoint-interval", "1", "--status-interval", "0",
            "--max-poll-records", "500", "--session-timeout-ms", "3000",
            "--heartbeat-interval-ms", "500", "--max-poll-interval-ms", "10000",
            "--metrics-port", "0",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
        self._log = open(self.log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=ROOT)
        self.port: int | None = None

    def metrics(self) -> dict[str, float]:
        if self.proc.poll() is not None:
            raise RuntimeError(f"daemon exited: {self.log.read_text()[-2000:]}")
        if self.port is None:
            return {}
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {line.split()[0][len("streamspec_"):]: float(line.split()[1])
                for line in text.splitlines() if line.startswith("streamspec_") and "{" not in line}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _port_from_log(d: Daemon) -> None:
    if d.port is None:
        found = re.search(r"event=metrics url=http://127\.0\.0\.1:(\d+)/metrics", d.log.read_text())
        if found is not None:
            d.port = int(found.group(1))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (its own threads; Linux ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_daemons(
    bootstrap: str, topic: str, n: int, k: int, run: str, tmp: str
) -> tuple[float, float, int]:
    """Aggregate msg/s of ``k`` daemons draining ``topic``, the cores they used, the records check."""
    daemons = [Daemon(bootstrap, topic, f"g-{run}", f"d{i}", tmp, run) for i in range(k)]
    try:
        t0 = m0 = c0 = None
        while True:
            for d in daemons:
                _port_from_log(d)
            gauges = [d.metrics() for d in daemons]
            now = time.perf_counter()
            if all(gauges):
                owned = [g.get("partitions", 0) for g in gauges]
                consumed = sum(g["messages_total"] for g in gauges)
                if t0 is None and min(owned) >= 1 and sum(owned) == PARTITIONS:
                    t0, m0 = now, consumed
                    c0 = sum(cpu_seconds(d.proc.pid) for d in daemons)
                if t0 is not None and sum(owned) == PARTITIONS and all(
                    g.get("lag", 1) == 0 for g in gauges
                ):
                    rate = (consumed - m0) / (now - t0) if now > t0 else float("nan")
                    cores = (sum(cpu_seconds(d.proc.pid) for d in daemons) - c0) / (now - t0)
                    break
            time.sleep(0.1)
    finally:
        for d in daemons:
            d.stop()
    records = read_snapshots(bootstrap, f"{topic}.state-{run}").records()
    return rate, cores, records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=600_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--daemons", default="1,2,3", help="comma-separated process counts")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.daemons.split(",")]
    print(f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}")
    one = cpu_probe(1)
    print("CPU probe (pure-Python loops side by side, relative to 1 process): "
          + ", ".join(f"{p}: {cpu_probe(p) / one:.2f}x" for p in counts))
    n = args.messages
    with local_broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = "bench"
        create_topic(bootstrap, topic, PARTITIONS)
        t = time.perf_counter()
        produce(bootstrap, topic, n)
        print(f"produced {n} messages to {PARTITIONS} partitions in {time.perf_counter() - t:.1f}s")
        rates: dict[int, list[float]] = {k: [] for k in counts}
        cores: dict[int, list[float]] = {k: [] for k in counts}
        for run in range(args.runs):
            for k in counts:
                rate, used, records = run_daemons(bootstrap, topic, n, k, f"r{run}k{k}", tmp)
                rates[k].append(rate)
                cores[k].append(used)
                print(f"run {run + 1}, {k} daemon(s): {rate:,.0f} msg/s together, "
                      f"{used:.2f} cores, {rate / used:,.0f} msg per CPU-second; global records "
                      f"{records} ({'exact' if records == n else 'WRONG'}); "
                      f"load average {os.getloadavg()[0]:.1f}")
        base = statistics.median(rates[counts[0]])
        print("| daemons | aggregate msg/s (median) | runs | vs 1 daemon | cores used (median) "
              "| msg per CPU-second |")
        print("| --- | --- | --- | --- | --- | --- |")
        for k in counts:
            med, c = statistics.median(rates[k]), statistics.median(cores[k])
            print(f"| {k} | {med:,.0f} | {', '.join(f'{r:,.0f}' for r in rates[k])} | "
                  f"{med / base:.2f}x | {c:.2f} | {med / c:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

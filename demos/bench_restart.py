"""Benchmark: what a restart of ``streamspec consume`` costs, and what checkpoint-then-commit costs.

Starts a local Tansu broker (``connectors.broker.local_broker``) and, for every
history size N (``--symbols``) and workload (``--workloads``):

1. **A real state folder with N symbols of history.** Producing 10⁸ records
   would take hours, so only the last few are real: 2,000 keyed records are
   produced to a new one-partition topic and consumed by a real ``streamspec
   consume`` process, stopped with SIGTERM (its checkpoint, committed offset and
   group are real). Its partition checkpoint is then read back
   (``StateStore.load``), its accumulator is replaced by a synthetic history of N
   symbols (100 streams, counted with ``MomentAccumulator.learn_many``) merged
   with the real one (``merge``: the real tails are kept as the later part), and
   written back with the function the daemon itself uses (``StateStore.save``,
   same topic, partition, group and offset). The checkpoint's size, the time to
   write it (``StateStore.save`` in this process: what every periodic checkpoint
   of such a state costs the poll loop) and to read it (``StateStore.restore``,
   the daemon's restore path, timed in a new process; page cache warm) are
   measured.

   Workloads: ``pages`` are page views of a 300-page site (8 hidden intents,
   sticky, each with a Zipf(1.1) distribution over the pages): the distinct
   triples keep growing with the history, so the checkpoint does too.
   ``letters`` are Alice's letters (26 symbols): the counts saturate at a few
   thousand distinct triples, and the checkpoint size no longer depends on N.

2. **Restart cost**, ``streamspec consume`` as a subprocess (``--refit-every 0``:
   no refits, the rest default) on that state with new records waiting in the
   topic (an empty one, then 200), timed from ``Popen`` by its log lines
   (``event=start``, ``event=connected``, ``event=assigned``: the partition is
   restored; ``event=dead-letter``: the empty record, the first one consumed,
   logged as it is read) and by its metrics endpoint (scraped every 20 ms; it
   shows the first record only after the checkpoint that follows the first batch):

   * after a clean stop: the previous daemon of the group exited on SIGTERM (it
     left the group);
   * after a SIGKILL: a daemon that had consumed and committed is killed, new
     records are produced, and a new daemon is started at once; the dead member
     holds the partition until the broker evicts it (``session_timeout_ms``).
     On the first workload and history size, the SIGKILL restart is repeated with
     other session timeouts (``--session-sweep``) to show what bounds it.

   The join time is ``assigned - connected - load`` (the restore runs inside the
   assignment callback). Each measured daemon is then stopped with SIGTERM and
   the time to exit (its final checkpoint) is reported.

3. **Checkpoint-then-commit overhead**: on a 1-partition topic of ``--messages``
   Alice letters (100 keyed streams), read in turn by a bare kafka-python
   ``poll(max_records=500)`` loop and by in-process daemons
   (``ConsumerDaemon`` + ``DaemonConfig``, no refits, ``max_poll_records=500``)
   that checkpoint every 500 messages, every 5,000, the default (50,000 or 1 s),
   and never until they stop. Rates from the first message to the last, fresh
   group each, rounds interleaved, medians; ratios to the bare loop of the same
   round. Then ``demos/bench_kafka.py`` (daemon with refits vs bare) is run once
   as it is and its ratio is quoted.

Usage::

    python demos/bench_restart.py [--symbols 1e7,1e8] [--workloads pages,letters]
                                  [--runs 1] [--messages 200000] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "demos"))
warnings.filterwarnings("ignore", category=DeprecationWarning)

import numpy as np  # noqa: E402
from bench_kafka import GROUP, bare  # noqa: E402
from bench_kafka import produce as produce_letters  # noqa: E402
from kafka import KafkaProducer  # noqa: E402

from connectors.broker import create_topic, free_port, local_broker  # noqa: E402
from connectors.config import DaemonConfig  # noqa: E402
from connectors.kafka import ConsumerDaemon  # noqa: E402
from connectors.state import StateStore  # noqa: E402
from streamspec.streaming.accumulator import MomentAccumulator  # noqa: E402

STREAMS = 100
SEED_RECORDS = 2000  # real records consumed by the daemon that makes the state folder
NEW_RECORDS = 200  # waiting in the topic before each measured start
SCRAPE = 0.02
LIVE: list = []  # daemon processes started, killed if the benchmark stops early
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore::DeprecationWarning",
       "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------- workloads


class Pages:
    """Page views of a site: 8 sticky hidden intents, each a Zipf(1.1) law over 300 pages."""

    name = "pages"

    def __init__(self, n_pages: int = 300, intents: int = 8, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.labels = np.array([f"page-{i:04d}" for i in range(n_pages)])
        law = np.arange(1, n_pages + 1, dtype=float) ** -1.1
        law /= law.sum()
        self.cum = [np.cumsum(law[rng.permutation(n_pages)]) for _ in range(intents)]

    def chunk(self, rng: np.random.Generator, m: int, stream: int, start: int) -> np.ndarray:
        k = len(self.cum)
        dwell = rng.geometric(0.2, size=m // 2 + 16)  # mean 5 symbols per intent
        state = np.repeat(rng.integers(0, k, size=dwell.size), dwell)[:m]
        u = rng.random(m)
        out = np.empty(m, dtype=np.int64)
        for s in range(k):
            w = state == s
            out[w] = np.searchsorted(self.cum[s], u[w])
        return np.minimum(out, len(self.labels) - 1)


class Letters:
    """Alice's letters, one reader per stream, each starting elsewhere in the book."""

    name = "letters"

    def __init__(self):
        try:
            from streamspec.experiments.datasets import load_alice_letters

            text = load_alice_letters()
        except Exception:  # the data set is optional for a benchmark
            text = "thequickbrownfoxjumpsoverthelazydog" * 3000
        self.labels = np.array(sorted(set(text)))
        self.text = np.searchsorted(self.labels, np.array(list(text)))

    def chunk(self, rng: np.random.Generator, m: int, stream: int, start: int) -> np.ndarray:
        n = self.text.size
        pos = (stream * 1087 + start + np.arange(m, dtype=np.int64)) % n
        return self.text[pos]


WORKLOADS = {"pages": Pages, "letters": Letters}


def history(workload, n: int, seed: int = 1, chunk: int = 1_000_000) -> MomentAccumulator:
    """A sliding-mode accumulator that counted ``n`` symbols of 100 streams (string labels)."""
    rng = np.random.default_rng(seed)
    acc = MomentAccumulator()
    per = n // STREAMS
    for r in range(STREAMS):
        done = 0
        while done < per:
            m = min(chunk, per - done)
            acc.learn_many(workload.labels[workload.chunk(rng, m, r, done)], key=f"reader-{r}")
            done += m
    return acc


def produce(bootstrap: str, topic: str, workload, n: int, seed: int, marker: bool = False) -> None:
    """``n`` keyed records of the workload; ``marker``: after an empty one (a dead letter)."""
    rng = np.random.default_rng(seed)
    xs = workload.labels[workload.chunk(rng, n, seed % STREAMS, seed * 7919)]
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    if marker:  # logged (event=dead-letter) the moment it is consumed, before any checkpoint
        producer.send(topic, key=b"reader-0", value=b"")
    for i, s in enumerate(xs):
        producer.send(topic, key=f"reader-{i % STREAMS}".encode(), value=str(s).encode())
    producer.flush()
    producer.close()


# ---------------------------------------------------------------------------- a daemon process


class Daemon:
    """``python -m streamspec consume`` with a metrics endpoint; log lines timed on arrival."""

    def __init__(self, bootstrap: str, topic: str, group: str, state_dir: str, *extra: str):
        self.port = free_port()
        cmd = [sys.executable, "-m", "streamspec", "consume", "--bootstrap", bootstrap,
               "--topic", topic, "--group", group, "--state-dir", state_dir,
               "--refit-every", "0", "--status-interval", "0", "--dead-letter-topic", "",
               "--metrics-port", str(self.port), *extra]
        self.lines: list[tuple[float, str]] = []
        LIVE.append(self)
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=ENV, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.perf_counter() - self.t0, line.rstrip()))

    def when(self, event: str) -> tuple[float, str] | None:
        for t, line in list(self.lines):
            if f"event={event}" in line:
                return t, line
        return None

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def wait(self, pred, timeout: float, what: str) -> float:
        """Scrape until ``pred(metrics)``; seconds since start when it held."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited ({self.proc.returncode}) waiting for {what}:\n"
                                   + "\n".join(line for _, line in self.lines[-20:]))
            if pred(self.metrics()):
                return time.perf_counter() - self.t0
            time.sleep(SCRAPE)
        raise TimeoutError(f"no {what} after {timeout}s:\n"
                           + "\n".join(line for _, line in self.lines[-20:]))

    def terminate(self) -> float:
        """SIGTERM; seconds until the process exited (status 0 required)."""
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(300)
        if code != 0:
            raise RuntimeError(f"daemon exited {code}:\n"
                               + "\n".join(line for _, line in self.lines[-20:]))
        self._reader.join(5)
        return time.perf_counter() - t

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)
        self._reader.join(5)


def timed_start(d: Daemon, expect_records: int) -> dict[str, float]:
    """Wait for the first consumed record; the phases, in seconds since the start.

    ``first`` is the log line of the marker (the first new record, empty: a dead
    letter), logged as it is consumed; ``reported`` is when the metrics endpoint
    first showed a consumed message: later, because the first batch is followed by
    a checkpoint (1 s since the daemon started) during which the endpoint waits.
    """
    reported = d.wait(lambda m: m.get("streamspec_messages_total", 0) > 0, 180, "first record")
    d.wait(lambda m: m.get("streamspec_messages_total", 0) >= NEW_RECORDS + 1, 180,
           "new records")
    start, connected, assigned, marker = (
        d.when(e) for e in ("start", "connected", "assigned", "dead-letter"))
    if not (start and connected and assigned and marker):
        raise RuntimeError("missing log lines:\n" + "\n".join(line for _, line in d.lines))
    m = re.search(r"from=(\S+) records=(\d+)", assigned[1])
    if m is None or m.group(1) != "checkpoint" or int(m.group(2)) < expect_records:
        raise RuntimeError(f"the partition was not restored from the history: {assigned[1]}")
    return {"start": start[0], "connected": connected[0], "assigned": assigned[0],
            "first": marker[0], "reported": reported}


# ---------------------------------------------------------------------------- restart cost


def make_state(bootstrap: str, tmp: Path, workload, n: int, tag: str, extra: tuple = ()) -> dict:
    """A real state folder whose partition checkpoint holds ``n`` symbols of history.

    ``extra``: flags of the daemon that creates the group (Tansu 0.6 keeps the
    session timeout of a group's first member for the whole group).
    """
    topic, group, state_dir = f"restart-{tag}", f"g-{tag}", str(tmp / f"state-{tag}")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, workload, SEED_RECORDS, seed=1)
    d = Daemon(bootstrap, topic, group, state_dir, *extra)
    d.wait(lambda m: m.get("streamspec_messages_total", 0) >= SEED_RECORDS, 180, "seed records")
    d.terminate()  # checkpoint, commit, leave the group
    store = StateStore(state_dir, group=group)
    state = store.load(topic, 0)
    assert state is not None and state.offset == SEED_RECORDS, state
    t = time.perf_counter()
    synthetic = history(workload, n)
    count_s = time.perf_counter() - t
    state.acc = synthetic.merge(state.acc)  # history first, the real records as the later part
    state.records += (n // STREAMS) * STREAMS  # the symbols of the synthetic history
    store = StateStore(state_dir, owner=state.owner, group=group)
    saves = []
    for _ in range(2):
        t = time.perf_counter()
        store.save(state)  # the daemon's own write: verified, atomic, fsync
        saves.append(time.perf_counter() - t)
    store.previous_path(topic, 0).unlink(missing_ok=True)  # no fallback to the pre-history file
    path = store.path(topic, 0)
    loads = [load_seconds(state_dir, topic, group, state.records) for _ in range(3)]
    info = {"topic": topic, "group": group, "state_dir": state_dir, "records": state.records,
            "triples": state.acc.triples().nnz, "bytes": path.stat().st_size,
            "count_s": count_s, "save_s": min(saves), "load_s": statistics.median(loads)}
    del state, synthetic
    return info


LOAD = """
import sys, time
from connectors.state import StateStore
t = time.perf_counter()
restored = StateStore(sys.argv[1], group=sys.argv[3]).restore(sys.argv[2], 0)
dt = time.perf_counter() - t
assert restored.source == "checkpoint" and restored.state.records == int(sys.argv[4])
print(dt)
"""


def load_seconds(state_dir: str, topic: str, group: str, records: int) -> float:
    """``StateStore.restore`` of the partition, timed in a new process (as in a restarted daemon)."""
    out = subprocess.run([sys.executable, "-c", LOAD, state_dir, topic, group, str(records)],
                         env=ENV, capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def bare_join(bootstrap: str, topic: str, group: str) -> float:
    """Seconds from creating a bare kafka-python consumer in a new group to its first records."""
    from kafka import KafkaConsumer

    t = time.perf_counter()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000,
                      heartbeat_interval_ms=1000)
    while not c.poll(timeout_ms=50):
        pass
    dt = time.perf_counter() - t
    c.close(autocommit=False)
    return dt


def restart_clean(bootstrap: str, st: dict, seed: int, extra: tuple = ()) -> dict:
    produce(bootstrap, st["topic"], st["workload"], NEW_RECORDS, seed, marker=True)
    d = Daemon(bootstrap, st["topic"], st["group"], st["state_dir"], *extra)
    phases = timed_start(d, st["records"])
    phases["stop"] = d.terminate()
    return phases


def restart_killed(bootstrap: str, st: dict, seed: int, extra: tuple = ()) -> dict:
    produce(bootstrap, st["topic"], st["workload"], NEW_RECORDS, seed)
    victim = Daemon(bootstrap, st["topic"], st["group"], st["state_dir"], *extra)
    victim.wait(lambda m: m.get("streamspec_commits_total", 0) >= 1, 300, "a commit")
    victim.kill()  # a member of the group, with a committed checkpoint
    produce(bootstrap, st["topic"], st["workload"], NEW_RECORDS, seed + 1, marker=True)
    d = Daemon(bootstrap, st["topic"], st["group"], st["state_dir"], *extra)
    phases = timed_start(d, st["records"])
    phases["stop"] = d.terminate()
    return phases


def describe(p: dict, load_s: float) -> str:
    join = p["assigned"] - p["connected"] - load_s
    return (f"start {p['start']:.2f}s, connected {p['connected']:.2f}s, assigned "
            f"{p['assigned']:.2f}s (join {join:.2f}s + load {load_s:.2f}s), first record "
            f"{p['first']:.2f}s (in the metrics {p['reported']:.2f}s); SIGTERM->exit "
            f"{p['stop']:.2f}s")


# ---------------------------------------------------------------------------- checkpoint overhead


def daemon_rate(bootstrap: str, topic: str, group: str, n: int, state_dir: str,
                **settings) -> tuple[float, int]:
    cfg = DaemonConfig(topic=topic, bootstrap=bootstrap, group=group, state_dir=state_dir,
                       refit_every=0, status_interval=0, max_poll_records=500,
                       dead_letter_topic="", **GROUP, **settings)
    d = ConsumerDaemon(cfg)
    thread = threading.Thread(target=d.run)
    thread.start()
    m = d.metrics
    while m.messages == 0:
        time.sleep(0.001)
    first, t0 = m.messages, time.perf_counter()
    while m.messages < n:
        time.sleep(0.002)
    t1 = time.perf_counter()
    checkpoints = m.checkpoints
    d.stop()
    thread.join()
    return (m.messages - first) / (t1 - t0), checkpoints


CKPT_VARIANTS = {
    "every 500 msgs": dict(checkpoint_every=500, checkpoint_interval=1.0),
    "every 5,000 msgs": dict(checkpoint_every=5000, checkpoint_interval=1.0),
    "default (50,000 msgs or 1 s)": dict(checkpoint_every=50_000, checkpoint_interval=1.0),
    "only at stop": dict(checkpoint_every=0, checkpoint_interval=1e9),
}


def checkpoint_overhead(bootstrap: str, tmp: Path, n: int, runs: int) -> None:
    topic = "ckpt"
    create_topic(bootstrap, topic, 1)
    produce_letters(bootstrap, topic, n)
    rates: dict[str, list[float]] = {"bare": []}
    ratios: dict[str, list[float]] = {k: [] for k in CKPT_VARIANTS}
    for run in range(runs):
        b = bare(bootstrap, topic, f"bare-{run}", n)
        rates["bare"].append(b)
        line = [f"bare {b:,.0f}"]
        for i, (name, settings) in enumerate(CKPT_VARIANTS.items()):
            r, c = daemon_rate(bootstrap, topic, f"d{i}-{run}", n, str(tmp / f"ck-{i}-{run}"),
                               **settings)
            rates.setdefault(name, []).append(r)
            ratios[name].append(r / b)
            line.append(f"{name} {r:,.0f} ({c} ckpts)")
        print(f"  round {run + 1}: " + "; ".join(line) + " msg/s", flush=True)
    print(f"\ncheckpoint overhead, {n:,} messages, medians of {runs} round(s):")
    print("| reader | msg/s | ratio to bare (median of rounds) |\n| --- | ---: | ---: |")
    print(f"| bare kafka-python loop | {statistics.median(rates['bare']):,.0f} | 1 |")
    for name in CKPT_VARIANTS:
        print(f"| daemon, checkpoint {name} | {statistics.median(rates[name]):,.0f} | "
              f"{statistics.median(ratios[name]):.2f} |")


def run_bench_kafka(messages: int, runs: int) -> None:
    cmd = [sys.executable, str(ROOT / "demos" / "bench_kafka.py"), "--messages", str(messages),
           "--runs", str(runs)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=1200)
    print(out.stdout.rstrip() or out.stderr[-2000:])


# ---------------------------------------------------------------------------- main


def measure(args, sizes, workloads, sweep, bootstrap: str, tmp: Path) -> list:
    """Parts 1-3 on the running broker; the rows of the restart table."""
    rows = []
    for w in workloads:
        for n in sizes:
            tag = f"{w.name}-{n:.0e}".replace("+", "")
            st = make_state(bootstrap, tmp, w, n, tag)
            st["workload"] = w
            print(f"\n{tag}: {st['records']:,} symbols, {st['triples']:,} distinct triples, "
                  f"checkpoint {st['bytes'] / 1e6:.1f} MB; counted in {st['count_s']:.1f}s, "
                  f"write {st['save_s']:.2f}s, load {st['load_s']:.2f}s", flush=True)
            clean, killed = [], []
            for run in range(args.runs):
                clean.append(restart_clean(bootstrap, st, seed=100 + 10 * run))
                print(f"  clean restart:   {describe(clean[-1], st['load_s'])}", flush=True)
                killed.append(restart_killed(bootstrap, st, seed=105 + 10 * run))
                print(f"  SIGKILL restart: {describe(killed[-1], st['load_s'])}", flush=True)
            if not rows:
                ref = bare_join(bootstrap, st["topic"], f"bare-{tag}")
                print(f"  reference: a bare kafka-python consumer joining a new group: "
                      f"first records after {ref:.2f}s", flush=True)
                for ms in sweep:  # a new group (and state) each: created with this timeout
                    extra = ("--session-timeout-ms", str(ms),
                             "--heartbeat-interval-ms", str(ms // 6))
                    sw = make_state(bootstrap, tmp, w, n, f"{tag}-session-{ms}", extra)
                    sw["workload"] = w
                    p = restart_killed(bootstrap, sw, seed=900 + ms, extra=extra)
                    print(f"  SIGKILL restart, session {ms} ms (new group): "
                          f"{describe(p, sw['load_s'])}", flush=True)
                    st.setdefault("sweep", []).append((ms, p, sw["load_s"]))
            rows.append((tag, st, clean, killed))
    print("\nrestart cost (seconds from Popen; min-max over the runs):")
    print("| history | distinct triples | checkpoint MB | write s | load s | clean: join s "
          "| clean: first record s | SIGKILL: join s | SIGKILL: first record s "
          "| SIGTERM->exit s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tag, st, clean, killed in rows:
        def span(ps, key, load_s=st["load_s"]):
            if key == "join":
                values = [p["assigned"] - p["connected"] - load_s for p in ps]
            else:
                values = [p[key] for p in ps]
            lo, hi = min(values), max(values)
            return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}"

        print(f"| {tag} | {st['triples']:,} | {st['bytes'] / 1e6:.1f} | {st['save_s']:.2f} "
              f"| {st['load_s']:.2f} | {span(clean, 'join')} | {span(clean, 'first')} "
              f"| {span(killed, 'join')} | {span(killed, 'first')} "
              f"| {span(clean + killed, 'stop')} |")
    for ms, p, load_s in rows[0][1].get("sweep", []):
        print(f"SIGKILL, --session-timeout-ms {ms}: first record {p['first']:.2f}s "
              f"(join {p['assigned'] - p['connected'] - load_s:.2f}s)")
    print("\ncheckpoint-then-commit overhead:", flush=True)
    checkpoint_overhead(bootstrap, tmp, args.messages, args.ckpt_runs)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--symbols", default="1e7,1e8",
                        help="history sizes, comma-separated (default 1e7,1e8)")
    parser.add_argument("--workloads", default="pages,letters",
                        help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--runs", type=int, default=1, help="restarts of each kind per state")
    parser.add_argument("--session-sweep", default="2000,12000",
                        help="other session timeouts (ms) for a SIGKILL restart, each in a new "
                             "group and state of the first size ('' for none); heartbeat = "
                             "timeout / 6")
    parser.add_argument("--messages", type=int, default=200_000,
                        help="messages of the checkpoint-overhead topic")
    parser.add_argument("--ckpt-runs", type=int, default=3)
    parser.add_argument("--skip-bench-kafka", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="1e6 pages only, no sweep, 30,000 messages, 1 round (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.symbols, args.workloads, args.session_sweep = "1e6", "pages", ""
        args.messages, args.ckpt_runs = 30_000, 1
    sizes = [int(float(s)) for s in args.symbols.split(",") if s]
    workloads = [WORKLOADS[w]() for w in args.workloads.split(",") if w]
    sweep = [int(s) for s in args.session_sweep.split(",") if s]
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    t_all = time.perf_counter()
    with local_broker() as bootstrap, tempfile.TemporaryDirectory() as tmpdir:
        try:
            measure(args, sizes, workloads, sweep, bootstrap, Path(tmpdir))
        finally:
            for d in LIVE:
                if d.proc.poll() is None:
                    d.proc.kill()
                    d.proc.wait()
    if not args.skip_bench_kafka:
        run_bench_kafka(args.messages, 1 if args.quick else 3)
    print(f"\ntotal {time.perf_counter() - t_all:.0f}s; load average {os.getloadavg()[0]:.1f} "
          f"at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())

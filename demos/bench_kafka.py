"""Benchmark: sustained consume rate of the daemon vs a bare kafka-python consumer loop.

Starts a local broker, produces N keyed one-symbol messages (the Alice letters,
as 100 interleaved streams) to one topic, then reads the whole topic
alternately with

* a bare ``KafkaConsumer.poll(max_records=500)`` loop that only counts messages,
* the :class:`connectors.kafka.ConsumerDaemon` with learning, checkpoints (every
  second), dead-letter handling and background refits on,

each run in a fresh consumer group. A rate is measured from the first message
received to the last (group joins are excluded), and the median of the runs is
reported with the ratio daemon / bare.

With ``--verify-cost`` it measures what verifying a restored partition's log costs
(:mod:`connectors.kafka.verification`: the last record counted is fetched again
and compared before the partition is read on): daemons restored from the same
checkpoints, with new records waiting, once as they are (verified by record) and
once with the log identity removed from the checkpoints (as written before it
was kept: offsets only), interleaved, fresh groups; per partition, the time from
its assignment to its first new record counted.

With ``--score-compare`` the daemon reads the topic with its partitions' records
predicted before they are learned (:mod:`connectors.kafka.scoring`) with each
``score_every`` of ``--score-rates`` (default 0, 1, 8, 32: none, i.e. the daemon before
scoring, every symbol, one in 8, one in 32), interleaved with the bare loop in each run,
and prints each one's rate and ratio to the bare loop, with the prequential log loss
the scoring daemons report.

With ``--fetch-compare`` it compares instead the daemon's fetch size before and
after partitions were interleaved (``fetch_max_bytes`` 50 MiB, kafka-python's
default, against the daemon's 1 MiB), with a backlog (the topic written first)
and without one (the daemon caught up while the messages are produced), and how
far the other partitions were read when the first one reached its end.

Usage::

    python demos/bench_kafka.py [--messages 200000] [--runs 3] [--partitions 1]
                                [--weighting W] [--rank 2] [--fetch-compare] [--verify-cost]
                                [--score-compare [--score-rates 0,1,8,32]] [--quick]

``--weighting`` defaults to the daemon's own default (MEstimator's); ``--quick``
is a smoke run (20,000 messages, one run).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402

from connectors.broker import create_topic, local_broker  # noqa: E402
from connectors.config import DaemonConfig  # noqa: E402
from connectors.kafka import ConsumerDaemon  # noqa: E402

GROUP = dict(session_timeout_ms=3000, heartbeat_interval_ms=500, max_poll_interval_ms=10000)


DATA = {"source": "?"}  # what symbols() read: said in the benchmark's first line
CPU = {"us": float("nan")}  # CPU time of this process per message, over the last timed read


def symbols(n: int) -> list[str]:
    """Letters of Alice in Wonderland (falls back to a synthetic text without the data)."""
    try:
        from streamspec.experiments.datasets import load_alice_letters

        text = load_alice_letters()
        letters = [c for c in (text if isinstance(text, str) else "".join(map(str, text)))]
        DATA["source"] = f"Alice's {len(letters):,} letters"
    except Exception:  # the data set is optional for a benchmark
        letters = list("the quick brown fox jumps over the lazy dog ") * 1000
        DATA["source"] = ("a repeated pangram (no Alice data found: set STREAMSPEC_DATA); every "
                          "stream is periodic, so its prequential loss is near 0")
    return [letters[i % len(letters)] for i in range(n)]


def produce(bootstrap: str, topic: str, n: int, streams: int = 100) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=1 << 16)
    keys = [f"reader-{i}".encode() for i in range(streams)]
    for i, s in enumerate(symbols(n)):
        producer.send(topic, key=keys[i % streams], value=s.encode())
    producer.flush()
    producer.close()


def bare(bootstrap: str, topic: str, group: str, n: int) -> float:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest", **GROUP)
    seen, first, t0, c0 = 0, 0, 0.0, 0.0
    while seen < n:
        batch = consumer.poll(timeout_ms=200, max_records=500)
        got = sum(len(v) for v in batch.values())
        if got and not seen:
            first, t0, c0 = got, time.perf_counter(), time.process_time()
        seen += got
    t1, c1 = time.perf_counter(), time.process_time()
    consumer.close(autocommit=False)
    CPU["us"] = 1e6 * (c1 - c0) / (seen - first)
    return (seen - first) / (t1 - t0)


def daemon(bootstrap: str, topic: str, group: str, n: int, state_dir: str,
           **settings) -> tuple[float, int]:
    rate, refits, _ = _timed_daemon(bootstrap, topic, group, n, state_dir, **settings)
    return rate, refits


def _scoring_label(every: int) -> str:
    if every == 0:
        return "no scoring (score_every=0)"
    return "every symbol (score_every=1)" if every == 1 else f"1 symbol in {every} (score_every={every})"


def scorer_cost(n: int, rates_of: list[int], streams: int = 100) -> None:
    """CPU time of a partition's scorer alone (no broker), per message, for each ``score_every``.

    The model: MEstimator (rank 2) on the first 100,000 messages; then the scorer reads
    the next ones as the daemon does (one ``add`` per message, a flush per 500).
    """
    from connectors.record_scoring import RecordScorer
    from connectors.records import Record
    from streamspec import MEstimator, MomentAccumulator

    letters = symbols(min(n, 400_000))
    keys = [f"reader-{i % streams}".encode() for i in range(len(letters))]
    acc = MomentAccumulator()
    for k, x in zip(keys[:100_000], letters[:100_000], strict=True):
        acc.learn_one(x, k)
    model = MEstimator(rank=2).fit(acc)
    records = [[Record(k, x)] for k, x in zip(keys[100_000:], letters[100_000:], strict=True)]
    print(f"scorer alone, {len(records):,} messages, model parts {'+'.join(model.backoff.components)}:")
    for every in rates_of:
        if not every:
            continue
        scorer = RecordScorer(acc, every=every)
        scorer.follow(model)
        c0 = time.process_time()
        for j in range(0, len(records), 500):
            for t, r in enumerate(records[j:j + 500]):
                scorer.add(r, j + t)
            scorer.flush()
        cpu = 1e6 * (time.process_time() - c0) / len(records)
        print(f"  {_scoring_label(every):<34}{cpu:6.2f} µs CPU per message, prequential loss "
              f"{scorer.online.log_loss:.4f}", flush=True)


def score_compare(bootstrap: str, topic: str, tmp: str, n: int, runs: int, rates_of: list[int],
                  **settings) -> None:
    """Rates of the daemon scoring with each ``score_every`` of ``rates_of``, beside the bare loop."""
    scoring = {_scoring_label(e): e for e in rates_of}
    rates: dict[str, list[float]] = {"bare": []}
    cpu: dict[str, list[float]] = {"bare": []}
    losses: dict[str, list[float]] = {}
    for run in range(runs):
        rates["bare"].append(bare(bootstrap, topic, f"bare-s{run}", n))
        cpu["bare"].append(CPU["us"])
        labels = list(scoring) if run % 2 == 0 else list(scoring)[::-1]
        for label in labels:
            group = f"score-{scoring[label]}-{run}"
            d = _ScoredDaemon(bootstrap, topic, group, n, f"{tmp}/{group}",
                              score_every=scoring[label], **settings)
            rates.setdefault(label, []).append(d.rate)
            cpu.setdefault(label, []).append(CPU["us"])
            losses.setdefault(label, []).append(d.loss)
        print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s ({cpu[k][-1]:.1f} µs CPU)"
                                             for k, v in rates.items()), flush=True)
    b, bc = statistics.median(rates["bare"]), statistics.median(cpu["bare"])
    print(f"\nmedian of {runs} run(s), {n:,} messages; ratio to the bare loop of the same runs "
          f"(CPU: this process's CPU time per message, the refits' worker excluded):")
    print(f"{'reader':<34}{'msg/s':>10}{'ratio':>8}{'CPU µs/msg':>12}{'prequential loss':>18}")
    print(f"{'bare kafka-python loop':<34}{b:>10,.0f}{1:>8.2f}{bc:>12.1f}")
    for label in scoring:
        loss = statistics.median(losses[label])
        print(f"{label:<34}{statistics.median(rates[label]):>10,.0f}"
              f"{statistics.median(rates[label]) / b:>8.2f}{statistics.median(cpu[label]):>12.1f}"
              f"{loss:>18.4f}")


class _ScoredDaemon:
    """One timed daemon run; its rate and the prequential loss of its partitions at the end."""

    def __init__(self, bootstrap: str, topic: str, group: str, n: int, state_dir: str,
                 **settings):
        holder: list = []
        self.rate, self.refits, _ = _timed_daemon(
            bootstrap, topic, group, n, state_dir,
            at_end=lambda d: holder.append(d.prequential()), **settings)
        learned = holder[0] if holder else {}
        total = sum(w.loss for w in learned.values())
        scored = sum(w.scored for w in learned.values())
        self.loss = total / scored if scored else float("nan")


def _timed_daemon(bootstrap: str, topic: str, group: str, n: int, state_dir: str,
                  ends: dict[int, int] | None = None, feed: Callable[[], None] | None = None,
                  at_end: Callable[[ConsumerDaemon], None] | None = None,
                  **settings) -> tuple[float, int, float | None]:
    """Rate (msg/s), refits, and the share of the others read when one partition was done.

    ``feed``, if given, is called once the daemon holds its partitions (it produces the
    messages); ``ends`` (end offsets) is needed for the share, sampled every 5 ms.
    """
    cfg = DaemonConfig(topic=topic, bootstrap=bootstrap, group=group, state_dir=state_dir,
                       refit_every=20_000, checkpoint_interval=1.0, status_interval=0,
                       max_poll_records=500, **GROUP, **settings)
    d = ConsumerDaemon(cfg)
    thread = threading.Thread(target=d.run)
    thread.start()
    m = d.metrics
    if feed is not None:
        while not d.states:
            time.sleep(0.01)
        feeder = threading.Thread(target=feed)
        feeder.start()
    while m.messages == 0:
        time.sleep(0.001)
    first, t0, c0 = m.messages, time.perf_counter(), time.process_time()
    share = None
    while m.messages < n:
        if ends and share is None:
            share = _others_share(d.offsets(), ends)
        time.sleep(0.005)
    t1, c1 = time.perf_counter(), time.process_time()
    CPU["us"] = 1e6 * (c1 - c0) / (m.messages - first)  # the refits run in another process
    if at_end is not None:
        at_end(d)
    d.stop()
    thread.join()
    if feed is not None:
        feeder.join()
    return (m.messages - first) / (t1 - t0), m.refits, share


def _others_share(offsets: dict[int, int], ends: dict[int, int]) -> float | None:
    """Once a partition is read to its end: the fraction of the others read (else None)."""
    if not any(offsets.get(p, 0) >= end for p, end in ends.items()):
        return None
    others = [p for p in ends if offsets.get(p, 0) < ends[p]]
    return sum(offsets.get(p, 0) for p in others) / max(1, sum(ends[p] for p in others))


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
    ends = consumer.end_offsets(tps)
    consumer.close()
    return {tp.partition: off for tp, off in ends.items()}


FETCH_SIZES = {"before (50 MiB)": 50 << 20, "after (1 MiB)": DaemonConfig(topic="x").fetch_max_bytes}


def fetch_compare(bootstrap: str, tmp: str, n: int, runs: int, partitions: int,
                  **settings) -> None:
    """Daemon rates with the fetch size before and after the fix, with and without a backlog."""
    create_topic(bootstrap, "backlog", partitions)
    produce(bootstrap, "backlog", n)
    ends = end_offsets(bootstrap, "backlog")
    rates: dict[tuple[str, str], list[float]] = {}
    shares: dict[str, list[float]] = {}
    for run in range(runs):
        for label, size in FETCH_SIZES.items():
            group = f"{label[:5]}-{run}"
            rate, _, share = _timed_daemon(bootstrap, "backlog", group, n, f"{tmp}/{group}-b",
                                           ends=ends, fetch_max_bytes=size, **settings)
            rates.setdefault((label, "backlog"), []).append(rate)
            shares.setdefault(label, []).append(share if share is not None else 1.0)
            live = f"live-{group}"
            create_topic(bootstrap, live, partitions)
            rate, _, _ = _timed_daemon(bootstrap, live, group, n, f"{tmp}/{group}-l",
                                       feed=lambda t=live: produce(bootstrap, t, n),
                                       fetch_max_bytes=size, **settings)
            rates.setdefault((label, "live"), []).append(rate)
            print(f"run {run + 1} {label}: backlog {rates[label, 'backlog'][-1]:,.0f} msg/s "
                  f"(others {100 * shares[label][-1]:.0f}% read when the first partition "
                  f"was done), no backlog {rate:,.0f} msg/s", flush=True)
    print(f"\nmedian of {runs} run(s), {n:,} messages, {partitions} partitions:")
    print(f"{'fetch_max_bytes':<18}{'backlog msg/s':>15}{'no backlog msg/s':>18}"
          f"{'others read at first end':>26}")
    for label in FETCH_SIZES:
        print(f"{label:<18}{statistics.median(rates[label, 'backlog']):>15,.0f}"
              f"{statistics.median(rates[label, 'live']):>18,.0f}"
              f"{100 * statistics.median(shares[label]):>25.0f}%")


class _Timed(ConsumerDaemon):
    """A daemon noting when each partition is assigned, verified, and counts a new record."""

    def __init__(self, cfg: DaemonConfig, restored: dict[int, int]):
        super().__init__(cfg)
        self.restored = restored  # partition -> checkpoint offset
        self.assigned: dict[int, float] = {}
        self.first_new: dict[int, float] = {}
        acquire = self.ownership.acquire

        def timed_acquire(partitions):
            now = time.perf_counter()
            for tp in partitions:
                self.assigned.setdefault(tp.partition, now)
            acquire(partitions)

        self.ownership.acquire = timed_acquire

    def _consume(self, tp, messages) -> None:
        super()._consume(tp, messages)
        state = self.states.get(tp)
        if (state is not None and tp.partition not in self.first_new
                and state.offset > self.restored[tp.partition]):
            self.first_new[tp.partition] = time.perf_counter()


def _restored_copy(src: str, dst: str, topic: str, group: str, identity: bool) -> dict[int, int]:
    """Copy a state folder's checkpoints for ``group``; without the log identity if asked."""
    from connectors.state import PartitionState, StateStore
    from streamspec.core.checkpoint import write_checkpoint

    store, offsets = StateStore(dst, group=group), {}
    for st in StateStore(src).load_all(topic):
        st.group = group
        offsets[st.partition] = st.offset
        if identity:
            store.save(st)
            continue
        header, arrays = st.checkpoint_parts()
        del header["log"]  # as written before identities were kept
        path = store.path(topic, st.partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_checkpoint(path, "streamspec.PartitionState", 2, header, arrays)
        assert not PartitionState.load(path).log.recorded
    return offsets


def verify_cost(bootstrap: str, tmp: str, n: int, runs: int, partitions: int) -> None:
    """Assignment -> first new record counted, with and without the log verified."""
    topic = "verify"
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, n)
    base = f"{tmp}/verify-base"
    d = ConsumerDaemon(DaemonConfig(topic=topic, bootstrap=bootstrap, group="verify-base",
                                    state_dir=base, refit_every=0, status_interval=0, **GROUP))
    thread = threading.Thread(target=d.run)
    thread.start()
    while d.metrics.messages < n:
        time.sleep(0.01)
    d.stop()
    thread.join()
    labels = {"verified (last record re-read)": True, "offsets only (older checkpoint)": False}
    delays: dict[str, list[float]] = {label: [] for label in labels}
    for run in range(runs):
        produce(bootstrap, topic, 200 * partitions)  # new records waiting in every partition
        for label in (list(labels) if run % 2 == 0 else list(labels)[::-1]):
            group = f"verify-{run}-{labels[label]}"
            state_dir = f"{tmp}/{group}"
            restored = _restored_copy(base, state_dir, topic, group, labels[label])
            cfg = DaemonConfig(topic=topic, bootstrap=bootstrap, group=group, state_dir=state_dir,
                               refit_every=0, status_interval=0, **GROUP)
            d = _Timed(cfg, restored)
            thread = threading.Thread(target=d.run)
            thread.start()
            deadline = time.monotonic() + 60
            while len(d.first_new) < partitions and time.monotonic() < deadline:
                time.sleep(0.002)
            d.stop()
            thread.join()
            delays[label] += [d.first_new[p] - d.assigned[p] for p in d.first_new]
        print(f"run {run + 1}: " + ", ".join(
            f"{label} {1000 * statistics.median(v[-partitions:]):.1f} ms"
            for label, v in delays.items()), flush=True)
    print(f"\nassignment -> first new record counted, {partitions} partitions x {runs} runs "
          f"(median, max):")
    for label, v in delays.items():
        print(f"  {label:<34} {1000 * statistics.median(v):7.1f} ms  {1000 * max(v):7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--weighting", default=None,
                        help="weighting of the refits (default: the daemon's, MEstimator's)")
    parser.add_argument("--rank", type=int, default=2, help="rank of the refits")
    parser.add_argument("--fetch-compare", action="store_true",
                        help="compare the fetch size before/after partitions were interleaved")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, one run")
    parser.add_argument("--score-compare", action="store_true",
                        help="the daemon scoring with each --score-rates, beside the bare loop")
    parser.add_argument("--score-rates", default="0,1,8,32",
                        help="--score-compare: the score_every values compared (default 0,1,8,32)")
    parser.add_argument("--verify-cost", action="store_true",
                        help="time a restored partition's log verification (assignment -> "
                             "first new record, with and without it)")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 1
    logging.basicConfig(level=logging.WARNING)
    n = args.messages
    with local_broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        if args.verify_cost:
            verify_cost(bootstrap, tmp, n, args.runs, args.partitions)
            return 0
        if args.fetch_compare:
            fetch_compare(bootstrap, tmp, n, args.runs, args.partitions,
                          weighting=args.weighting, rank=args.rank)
            return 0
        topic = "bench"
        create_topic(bootstrap, topic, args.partitions)
        t = time.perf_counter()
        produce(bootstrap, topic, n)
        print(f"produced {n} messages in {time.perf_counter() - t:.1f}s "
              f"({args.partitions} partition(s)) from {DATA['source']}; refits: rank {args.rank}, "
              f"{args.weighting or 'the default'} weighting, every 20,000 symbols")
        if args.score_compare:
            scorer_cost(n, [int(v) for v in args.score_rates.split(",")])
            score_compare(bootstrap, topic, tmp, n, args.runs,
                          [int(v) for v in args.score_rates.split(",")],
                          weighting=args.weighting, rank=args.rank)
            return 0
        bare_rates, daemon_rates, refits = [], [], []
        for run in range(args.runs):
            bare_rates.append(bare(bootstrap, topic, f"bare-{run}", n))
            rate, nfits = daemon(bootstrap, topic, f"daemon-{run}", n, f"{tmp}/state-{run}",
                                 weighting=args.weighting, rank=args.rank)
            daemon_rates.append(rate)
            refits.append(nfits)
            print(f"run {run + 1}: bare {bare_rates[-1]:,.0f} msg/s, "
                  f"daemon {daemon_rates[-1]:,.0f} msg/s ({nfits} refits)")
        b, d = statistics.median(bare_rates), statistics.median(daemon_rates)
        print(f"median: bare {b:,.0f} msg/s, daemon {d:,.0f} msg/s, ratio {d / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

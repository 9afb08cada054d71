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

Usage::

    python demos/bench_kafka.py [--messages 200000] [--runs 3] [--partitions 1]
                                [--weighting exact] [--rank 2]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from kafka import KafkaConsumer, KafkaProducer  # noqa: E402

from connectors.broker import create_topic, local_broker  # noqa: E402
from connectors.config import DaemonConfig  # noqa: E402
from connectors.kafka import ConsumerDaemon  # noqa: E402

GROUP = dict(session_timeout_ms=3000, heartbeat_interval_ms=500, max_poll_interval_ms=10000)


def symbols(n: int) -> list[str]:
    """Letters of Alice in Wonderland (falls back to a synthetic text without the data)."""
    try:
        from streamspec.experiments.datasets import load_alice_letters

        text = load_alice_letters()
        letters = [c for c in (text if isinstance(text, str) else "".join(map(str, text)))]
    except Exception:  # the data set is optional for a benchmark
        letters = list("the quick brown fox jumps over the lazy dog ") * 1000
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
    seen, first, t0 = 0, 0, 0.0
    while seen < n:
        batch = consumer.poll(timeout_ms=200, max_records=500)
        got = sum(len(v) for v in batch.values())
        if got and not seen:
            first, t0 = got, time.perf_counter()
        seen += got
    t1 = time.perf_counter()
    consumer.close(autocommit=False)
    return (seen - first) / (t1 - t0)


def daemon(bootstrap: str, topic: str, group: str, n: int, state_dir: str,
           **settings) -> tuple[float, int]:
    cfg = DaemonConfig(topic=topic, bootstrap=bootstrap, group=group, state_dir=state_dir,
                       refit_every=20_000, checkpoint_interval=1.0, status_interval=0,
                       max_poll_records=500, **GROUP, **settings)
    d = ConsumerDaemon(cfg)
    thread = threading.Thread(target=d.run)
    thread.start()
    m = d.metrics
    while m.messages == 0:
        time.sleep(0.001)
    first, t0 = m.messages, time.perf_counter()
    while m.messages < n:
        time.sleep(0.005)
    t1 = time.perf_counter()
    d.stop()
    thread.join()
    return (m.messages - first) / (t1 - t0), m.refits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--weighting", default="exact", help="weighting of the refits")
    parser.add_argument("--rank", type=int, default=2, help="rank of the refits")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    n = args.messages
    with local_broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        topic = "bench"
        create_topic(bootstrap, topic, args.partitions)
        t = time.perf_counter()
        produce(bootstrap, topic, n)
        print(f"produced {n} messages in {time.perf_counter() - t:.1f}s "
              f"({args.partitions} partition(s)); refits: rank {args.rank}, "
              f"{args.weighting} weighting, every 20,000 symbols")
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

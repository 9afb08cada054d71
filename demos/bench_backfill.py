"""Benchmark: parallel backfill of >= 10^8 symbols from files vs serial ``learn_many``.

Writes ``--files`` text files of random lower-case letters (``--symbols`` letters in
all, a line break every 80 bytes) to a temporary folder, reads them once to warm
the page cache, then counts all of them, in one run, with

* ``serial learn_many``: one process reads 16 MiB blocks, drops the line breaks and
  feeds the letters as integers 0..25 to one ``MomentAccumulator(n_symbols=26)``
  (the fastest single-process path there is: no parser at all);
* ``backfill in-process``: :func:`connectors.backfill.backfill` with ``n_workers=1``
  (the same chunk tasks and ordered tree of joins, in this process);
* ``process pool, N workers`` for N = 1, 2 (spawned processes);
* ``Dask LocalCluster, N workers`` for N = 1, 2 (worker processes, one thread each;
  the cluster start-up is timed separately and not included);
* for reference, the record-by-record path of ``streamspec learn`` (FileSource +
  ``learn_one``) on the first ``--reference-symbols`` letters.

Then, where parsing dominates, ``--csv-records`` keyed CSV rows (``key,symbol``, 100
interleaved streams, two files) counted by that FileSource + ``learn_one`` path and
by the backfill in-process, in a pool of 2 and on a Dask LocalCluster of 2.

The speed-up of 2 processes over 1 on a pure-Python loop is measured first: on a
shared machine it is the ceiling of any 2-worker figure. Every parallel result is
checked to hold exactly the serial counts. The best of ``--repeats`` runs is
reported as symbols per second.

Usage::

    python demos/bench_backfill.py [--symbols 100000000] [--files 4] [--chunk-mb 8]
                                   [--repeats 2] [--reference-symbols 1000000]
                                   [--csv-records 1000000] [--no-dask]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors import backfill as bf  # noqa: E402
from connectors.files import FileSource  # noqa: E402
from connectors.records import RecordFormat  # noqa: E402
from streamspec.streaming.accumulator import MomentAccumulator  # noqa: E402

LINE = 80  # bytes per line, its line break included


def _spin(n: int = 10_000_000) -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    return time.perf_counter() - t0


def cpu_ceiling() -> float:
    """Speed-up of 2 processes over 1 on a pure-Python loop now: the most 2 workers can give."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        one = pool.apply(_spin)
        two = max(pool.map(_spin, [10_000_000] * 2))
    return 2 * one / two


def write_files(folder: Path, n_symbols: int, n_files: int, seed: int = 0) -> list[Path]:
    """Files of random letters holding ``n_symbols`` letters in all (newlines excluded)."""
    rng = np.random.default_rng(seed)
    paths = []
    per_file = -(-n_symbols // n_files)
    for i in range(n_files):
        n = min(per_file, n_symbols - i * per_file)
        lines = -(-n // (LINE - 1))
        buf = rng.integers(ord("a"), ord("z") + 1, size=lines * LINE, dtype=np.uint8)
        buf[LINE - 1::LINE] = ord("\n")
        data = buf.tobytes()
        cut = n + n // (LINE - 1)  # n letters and the line breaks among them
        path = folder / f"letters{i}.txt"
        path.write_bytes(data[:cut])
        paths.append(path)
    return paths


def write_csv(folder: Path, n_records: int, n_files: int = 2, seed: int = 1) -> list[Path]:
    """Keyed CSV files: ``key,symbol`` rows of 100 interleaved streams of letters."""
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n_files):
        n = n_records // n_files
        keys = rng.integers(100, size=n)
        letters = rng.integers(26, size=n)
        text = "".join(f"user{k},{chr(97 + x)}\n" for k, x in zip(keys.tolist(), letters.tolist(),
                                                                   strict=True))
        path = folder / f"keyed{i}.csv"
        path.write_text(text)
        paths.append(path)
    return paths


def serial_learn_many(paths: list[Path]) -> MomentAccumulator:
    """One process: read, drop line breaks, letters -> 0..25, ``learn_many``."""
    acc = MomentAccumulator(n_symbols=26)
    shift = bytes((b - ord("a")) % 256 for b in range(256))
    for path in paths:
        with open(path, "rb") as fh:
            while block := fh.read(16 << 20):
                letters = block.translate(shift, b"\n")
                acc.learn_many(np.frombuffer(letters, dtype=np.uint8).astype(np.int64))
    return acc


def reference_learn_one(paths: list[Path], limit: int) -> int:
    """The record-by-record path of ``streamspec learn``, stopped after ``limit`` symbols."""
    acc = MomentAccumulator()
    n = 0
    for rec, _ in FileSource([str(p) for p in paths], RecordFormat()):
        acc.learn_one(rec.symbol, rec.key)
        n += 1
        if n >= limit:
            break
    return n


def same_counts(acc: MomentAccumulator, ref: MomentAccumulator) -> bool:
    """Whether label counts ``acc`` equal the integer counts ``ref`` (0..25 = a..z)."""
    order = [ord(s) - ord("a") for s in acc.symbols]
    return bool(np.array_equal(acc.counts(), ref.counts()[np.ix_(order, order, order)]))


def best_of(repeats: int, run) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--symbols", type=int, default=100_000_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--chunk-mb", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--reference-symbols", type=int, default=1_000_000)
    p.add_argument("--csv-records", type=int, default=1_000_000)
    p.add_argument("--no-dask", action="store_true", help="skip the Dask runs")
    args = p.parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    chunk = args.chunk_mb << 20
    fmt = RecordFormat("chars")
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        paths = write_files(Path(folder), args.symbols, args.files)
        size = sum(os.path.getsize(q) for q in paths)
        for q in paths:
            q.read_bytes()  # warm the page cache: every run reads from memory
        print(f"{args.symbols:,} symbols in {args.files} files ({size / 1e6:.0f} MB, written in "
              f"{time.perf_counter() - t0:.1f} s); {os.cpu_count()} CPUs; "
              f"{len(bf.file_chunks(paths, chunk))} chunks of {args.chunk_mb} MiB; 2 processes "
              f"now run a CPU-bound loop {cpu_ceiling():.2f}x as fast as 1 (the ceiling)", flush=True)
        n = args.symbols

        def record(name: str, seconds: float, note: str = "") -> None:
            rows.append((name, n / seconds, note))
            print(f"  {name:<30s} {seconds:7.2f} s  {n / seconds / 1e6:8.1f} M symbols/s  {note}",
                  flush=True)

        seconds, ref = best_of(args.repeats, lambda: serial_learn_many(paths))
        assert ref.n_triples == n - 2
        record("serial learn_many", seconds)
        seconds, acc = best_of(args.repeats, lambda: bf.backfill(paths, fmt, n_workers=1,
                                                                  chunk_bytes=chunk))
        record("backfill in-process", seconds, f"exact={same_counts(acc, ref)}")
        chunks = bf.file_chunks(paths, chunk)
        for workers in (1, 2):
            # the pool as backfill(n_workers=N) runs it (n_workers=1 alone would run in-process)
            seconds, res = best_of(args.repeats, lambda w=workers: bf._run_pool(chunks, fmt, None, w))
            record(f"process pool, {workers} worker{'s' * (workers > 1)}", seconds,
                   f"exact={same_counts(res.acc, ref)}")
        if not args.no_dask:
            import distributed

            for workers in (1, 2):
                t0 = time.perf_counter()
                with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                              host="127.0.0.1", dashboard_address=None) as cluster, \
                        distributed.Client(cluster) as client:
                    start = time.perf_counter() - t0
                    seconds, acc = best_of(args.repeats, lambda c=client: bf.backfill(
                        paths, fmt, scheduler=c, chunk_bytes=chunk))
                record(f"Dask LocalCluster, {workers} worker{'s' * (workers > 1)}", seconds,
                       f"exact={same_counts(acc, ref)} (cluster start {start:.1f} s, not counted)")
        if args.reference_symbols:
            t0 = time.perf_counter()
            m = reference_learn_one(paths, args.reference_symbols)
            rate = m / (time.perf_counter() - t0)
            print(f"  {'FileSource + learn_one':<30s} {m:,} symbols: {rate / 1e6:8.2f} M symbols/s "
                  "(the record-by-record path of `streamspec learn`)")
        if args.csv_records:
            csv_bench(Path(folder), args)
    return 0


def csv_bench(folder: Path, args: argparse.Namespace) -> None:
    """Keyed CSV, where the parser dominates: serial records vs backfills."""
    paths = write_csv(folder, args.csv_records)
    fmt = RecordFormat("csv", time_field=None, end_field=None)
    chunk = max(1, sum(os.path.getsize(q) for q in paths) // 16)
    n = args.csv_records
    print(f"{n:,} keyed CSV records in {len(paths)} files, {len(bf.file_chunks(paths, chunk))} chunks",
          flush=True)

    def record(name: str, seconds: float, note: str = "") -> None:
        print(f"  {name:<30s} {seconds:7.2f} s  {n / seconds / 1e6:8.2f} M records/s  {note}",
              flush=True)

    seconds, ref = best_of(1, lambda: bf.serial_count(paths, fmt))
    record("FileSource + learn_one", seconds)

    def exact(acc: MomentAccumulator) -> bool:
        return acc.symbols == ref.symbols and bool(np.array_equal(acc.counts(), ref.counts()))

    seconds, acc = best_of(1, lambda: bf.backfill(paths, fmt, n_workers=1, chunk_bytes=chunk))
    record("backfill in-process", seconds, f"exact={exact(acc)}")
    seconds, acc = best_of(1, lambda: bf.backfill(paths, fmt, n_workers=2, chunk_bytes=chunk))
    record("process pool, 2 workers", seconds, f"exact={exact(acc)}")
    if not args.no_dask:
        import distributed

        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            seconds, acc = best_of(1, lambda: bf.backfill(paths, fmt, scheduler=client, chunk_bytes=chunk))
        record("Dask LocalCluster, 2 workers", seconds, f"exact={exact(acc)}")


if __name__ == "__main__":
    raise SystemExit(main())

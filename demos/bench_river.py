"""Throughput and accuracy of ``SpectralHMM`` on a large keyed alphabet, against a dict bigram.

The stream: 1,000 keyed sessions over 2,000 symbols (``--events``, default 40,000), each
session a sticky walk over 8 clusters of a Zipf(1.1) alphabet, generated once (not
timed). Every model runs ``y_pred = model.predict_one(x); model.learn_one(x, y)`` over the
same list, in one process, BLAS pinned to one thread; the figures are events/s and
next-symbol accuracy, and ratios to the per-key bigram counter written in plain Python
dicts (the fastest a Python learner of this stream can be). ``SpectralHMM`` runs with
its defaults (refit every 10⁴ symbols, ``rank="auto"``), inline and ``background=True``
(fits on a schedule by symbols, so both change models at the same symbols), then with
``predict_proba_one`` instead of ``predict_one`` (its dict not read; read with ``p.get(y)``
for a log loss; built whole, ``lazy_proba=False``); and the same stream of ``--pages``
events (default 50,000) through river's ``evaluate.progressive_val_score`` with
``metrics.Accuracy()``.

Run from the repository root::

    python demos/bench_river.py             # the large alphabet (the issue's targets)
    python demos/bench_river.py --small     # also Alice and 12-symbol sessions vs river baselines
    python demos/bench_river.py --markdown  # also print tables for docs/benchmarks.md
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # why: one BLAS thread, figures comparable in one run

import argparse  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from river import evaluate, metrics  # noqa: E402
from river_baselines import BigramFrequency, MeanSized  # noqa: E402
from river_pipeline import alice_data, session_data  # noqa: E402

import streamspec  # noqa: E402
from streamspec import SpectralHMM  # noqa: E402
from streamspec.experiments.cluster_walks import cluster_sessions  # noqa: E402


class DictBigram:
    """Per-key bigram counter in plain dicts: predicts the most frequent follower of the
    key's last symbol (a running argmax, O(1) per event)."""

    def __init__(self, key: str = "user"):
        self.key = key
        self.counts: dict = {}
        self.best: dict = {}
        self.last: dict = {}

    def predict_one(self, x: dict):
        return self.best.get(self.last.get(x[self.key]))

    def learn_one(self, x: dict, y) -> None:
        k = x[self.key]
        prev = self.last.get(k)
        if prev is not None:
            row = self.counts.get(prev)
            if row is None:
                row = self.counts[prev] = {}
            c = row.get(y, 0) + 1
            row[y] = c
            b = self.best.get(prev)
            if b is None or c > row[b]:
                self.best[prev] = y
        self.last[k] = y


CPU: dict = {}  # events per CPU second of the last timed run of each row (the process's CPU time)


def timed(model, data: list, proba: bool = False) -> tuple[float, float]:
    """Events/s and next-symbol accuracy of ``predict_(proba_)one`` then ``learn_one``; the
    events per second of the process's CPU time (all its threads) go to ``CPU[model]``: on
    a shared, loaded machine the wall clock also counts the time other jobs had the cores."""
    predict = model.predict_proba_one if proba else model.predict_one
    learn, hits = model.learn_one, 0
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in data:
        hits += predict(x) == y
        learn(x, y)
    if isinstance(model, SpectralHMM):
        model.refitter.wait()  # a background fit's CPU time counts
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    CPU[id(model)] = len(data) / cpu
    return len(data) / seconds, hits / len(data)


def timed_log_loss(model: SpectralHMM, data: list) -> tuple[float, float]:
    """Events/s and the mean log loss (nats) of ``predict_proba_one`` read as a log-loss metric
    reads it, ``p.get(y)``, then ``learn_one``; CPU rate to ``CPU[model]`` as :func:`timed`.
    The loss is over the symbols already seen (a new label has no entry)."""
    learn, loss, scored, log = model.learn_one, 0.0, 0, math.log
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in data:
        q = model.predict_proba_one(x).get(y)
        if q is not None:
            loss -= log(max(q, 1e-300))
            scored += 1
        learn(x, y)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    CPU[id(model)] = len(data) / cpu
    return len(data) / seconds, loss / max(scored, 1)


def fits(model: SpectralHMM) -> str:
    r = model.refitter
    r.wait()
    secs = sum(rec.seconds for rec in r.records)
    return f"{r.n_fits} fits, {secs:.1f} s of fitting, rank {model.rank_}"


def large(n_events: int, n_pages: int) -> list[tuple]:
    """The targets of issue 21 on the 2,000-symbol, 1,000-key stream, in one run."""
    data = cluster_sessions(n_events)
    print(f"\n== 2,000 symbols, 1,000 keys, {len(data):,} events (predict_one + learn_one) ==")
    rows = []
    bigram = DictBigram()
    bigram_rate, bigram_acc = timed(bigram, data)
    rows.append(("per-key dict bigram (plain Python)", bigram_rate, bigram_acc, CPU[id(bigram)], ""))
    for name, kwargs in (("SpectralHMM inline", {}), ("SpectralHMM background=True",
                                                      {"background": True})):
        model = SpectralHMM(key="user", **kwargs)
        rate, acc = timed(model, data)
        rows.append((name, rate, acc, CPU[id(model)], fits(model)))
        model.refitter.close()
    model = SpectralHMM(key="user")
    rate, _ = timed(model, data, proba=True)
    rows.append(("SpectralHMM inline, predict_proba_one", rate, float("nan"), CPU[id(model)],
                 fits(model)))
    model = SpectralHMM(key="user")
    rate, loss = timed_log_loss(model, data)
    rows.append(("SpectralHMM inline, predict_proba_one, p.get(y)", rate, float("nan"),
                 CPU[id(model)], f"{fits(model)}; log loss {loss:.4f}"))
    model = SpectralHMM(key="user", lazy_proba=False)  # river's dict built whole at every call
    rate, _ = timed(model, data, proba=True)
    rows.append(("SpectralHMM inline, predict_proba_one, lazy_proba=False", rate, float("nan"),
                 CPU[id(model)], fits(model)))
    model = SpectralHMM(key="user", refit_every=None)  # the per-event cost alone
    for x, y in data[: len(data) // 2]:
        model.learn_one(x, y)
    model.refit()
    rate, acc = timed(model, data[len(data) // 2:])
    rows.append(("SpectralHMM, no refits (2nd half, one fit)", rate, acc, CPU[id(model)],
                 fits(model)))
    pages = cluster_sessions(n_pages, seed=1)
    model = SpectralHMM(key="user")
    t0, c0 = time.perf_counter(), time.process_time()
    score = evaluate.progressive_val_score(pages, model, metrics.Accuracy())
    rate, cpu = len(pages) / (time.perf_counter() - t0), len(pages) / (time.process_time() - c0)
    rows.append((f"progressive_val_score, {len(pages):,} events", rate, score.get(), cpu,
                 fits(model)))
    print(f"{'model':56s} {'events/s':>10s} {'÷ bigram':>9s} {'ev/CPU-s':>10s} {'÷ bigram':>9s} "
          f"{'accuracy':>9s}")
    for name, rate, acc, cpu, extra in rows:
        print(f"{name:56s} {rate:10,.0f} {rate / bigram_rate:9.4f} {cpu:10,.0f} "
              f"{cpu / rows[0][3]:9.4f} {acc:9.3f}  {extra}")
    return rows


def loop_seconds(make: Callable, data: list) -> tuple[float, object]:
    model = make()
    predict, learn = model.predict_one, model.learn_one
    t0 = time.perf_counter()
    for x, y in data:
        predict(x)
        learn(x, y)
    seconds = time.perf_counter() - t0
    if isinstance(model, SpectralHMM):
        model.refitter.close()
    return seconds, model


def river_loop_seconds(make: Callable, data: list) -> float:
    model = make()
    t0 = time.perf_counter()
    evaluate.progressive_val_score(data, model, metrics.Accuracy())
    seconds = time.perf_counter() - t0
    if isinstance(model, SpectralHMM):
        model.refitter.close()
    return seconds


def small(title: str, data: list, key: str | None, repeats: int) -> list[tuple]:
    """Small alphabets against river-written baselines (best of ``repeats``)."""
    models = {
        "SpectralHMM (background)": lambda: SpectralHMM(key=key, background=True),
        "SpectralHMM (inline)": lambda: SpectralHMM(key=key),
        "bigram frequency (river)": lambda: BigramFrequency(key=key),
        "MeanSized (stats.Mean)": MeanSized,
    }
    n, rows = len(data), []
    print(f"\n== {title}: {n:,} symbols, best of {repeats} ==")
    for name, make in models.items():
        best, _ = min((loop_seconds(make, data) for _ in range(repeats)), key=lambda r: r[0])
        river = min(river_loop_seconds(make, data) for _ in range(repeats))
        rows.append((name, n / best, n / river))
    bigram_rate = rows[2][1]
    print(f"{'model':30s} {'loop sym/s':>12s} {'river loop':>11s} {'÷ bigram':>9s}")
    for name, rate, river in rows:
        print(f"{name:30s} {rate:12,.0f} {river:11,.0f} {rate / bigram_rate:9.2f}")
    return rows


def markdown(large_rows: list[tuple], small_tables: dict[str, list[tuple]]) -> str:
    bigram_rate, bigram_cpu = large_rows[0][1], large_rows[0][3]
    lines = ["| model | events/s | ÷ dict bigram | events/CPU-s | ÷ dict bigram (CPU) | accuracy "
             "| notes |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, rate, acc, cpu, extra in large_rows:
        acc_s = "—" if acc != acc else f"{acc:.3f}"
        lines.append(f"| {name} | {rate:,.0f} | {rate / bigram_rate:.4f} | {cpu:,.0f} | "
                     f"{cpu / bigram_cpu:.4f} | {acc_s} | {extra} |")
    for title, rows in small_tables.items():
        bigram = rows[2][1]
        lines += ["", f"{title}:", "",
                  "| model | predict_one + learn_one (symbols/s) | progressive_val_score "
                  "(symbols/s) | ÷ bigram |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {name} | {rate:,.0f} | {river:,.0f} | {rate / bigram:.2f} |"
                  for name, rate, river in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--pages", type=int, default=50_000)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    print(f"streamspec {streamspec.__version__}, Python {platform.python_version()}, "
          f"numpy {np.__version__}, {platform.machine()}, load {os.getloadavg()[0]:.1f}")
    large_rows = large(args.events, args.pages)
    tables = {}
    if args.small:
        alice = alice_data(None)
        if alice is not None:
            tables[f"Alice, one stream ({len(alice):,} letters)"] = small(
                "Alice", alice, None, args.repeats)
        data, _, _ = session_data(1_000, 200)
        tables[f"1,000 sessions of 12 symbols ({len(data):,} symbols)"] = small(
            "Sessions", data, "session", args.repeats)
    if args.markdown:
        print()
        print(markdown(large_rows, tables))


if __name__ == "__main__":
    main()

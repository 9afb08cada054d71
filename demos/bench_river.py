"""Throughput of ``SpectralHMM`` in a progressive-validation loop, against river baselines.

The loop is ``y_pred = model.predict_one(x); model.learn_one(x, y)`` over a prebuilt list
of ``(x, y)`` pairs (so the data generation is not timed). ``SpectralHMM`` refits in the
background every 10⁴ symbols; the reference models are ``MeanSized`` (one river
``stats.Mean`` update per symbol: the cost floor of a river model) and the per-stream
bigram baseline written with river. Each figure is the best of ``--repeats`` runs. The
same loop through ``evaluate.progressive_val_score`` (with ``metrics.Accuracy()``) is
timed too, for the overhead of river's own loop.

Run from the repository root::

    python demos/bench_river.py            # Alice (if present) and 1,000 keyed sessions
    python demos/bench_river.py --markdown # also print a table for docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

from river import evaluate, metrics
from river_baselines import BigramFrequency, MeanSized
from river_pipeline import alice_data, session_data

import streamspec
from streamspec import SpectralHMM


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


def bench(title: str, data: list, key: str | None, repeats: int) -> list[tuple]:
    models = {
        "SpectralHMM (auto rank, background)": lambda: SpectralHMM(key=key, background=True),
        "SpectralHMM (rank 16, background)": lambda: SpectralHMM(
            rank=16, key=key, background=True
        ),
        "SpectralHMM (auto rank, inline)": lambda: SpectralHMM(key=key),
        "bigram frequency (river)": lambda: BigramFrequency(key=key),
        "MeanSized (stats.Mean)": MeanSized,
    }
    n = len(data)
    rows = []
    print(f"\n== {title}: {n:,} symbols, best of {repeats} ==")
    for name, make in models.items():
        best, model = min((loop_seconds(make, data) for _ in range(repeats)), key=lambda r: r[0])
        river = min(river_loop_seconds(make, data) for _ in range(repeats))
        extra = ""
        if isinstance(model, SpectralHMM):
            r = model.refitter
            extra = f"{r.n_fits} fits, last {r.last_fit_seconds * 1e3:.1f} ms, rank {model.rank_}"
        rows.append((name, n / best, n / river, extra))
    floor = dict((r[0], r[1]) for r in rows)
    mean_rate = floor["MeanSized (stats.Mean)"]
    bigram_rate = floor["bigram frequency (river)"]
    print(f"{'model':38s} {'loop sym/s':>12s} {'river loop':>11s} {'/Mean':>6s} {'/bigram':>8s}")
    for name, rate, river, extra in rows:
        print(
            f"{name:38s} {rate:12,.0f} {river:11,.0f} {rate / mean_rate:6.2f} "
            f"{rate / bigram_rate:8.2f}  {extra}"
        )
    return rows


def markdown(tables: dict[str, list[tuple]]) -> str:
    lines = []
    for title, rows in tables.items():
        rates = {r[0]: r[1] for r in rows}
        mean_rate, bigram_rate = rates["MeanSized (stats.Mean)"], rates["bigram frequency (river)"]
        lines += [
            f"{title}:",
            "",
            "| model | predict_one + learn_one (symbols/s) | progressive_val_score (symbols/s) "
            "| ÷ Mean-sized | ÷ bigram | notes |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for name, rate, river, extra in rows:
            lines.append(
                f"| {name} | {rate:,.0f} | {river:,.0f} | {rate / mean_rate:.2f} "
                f"| {rate / bigram_rate:.2f} | {extra} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--length", type=int, default=200)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    print(
        f"streamspec {streamspec.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()}"
    )
    tables = {}
    alice = alice_data(None)
    if alice is not None:
        tables[f"Alice, one stream ({len(alice):,} letters)"] = bench(
            "Alice", alice, None, args.repeats
        )
    data, _, _ = session_data(args.sessions, args.length)
    title = f"{args.sessions:,} interleaved sessions ({len(data):,} symbols, 12 symbols)"
    tables[title] = bench("Sessions", data, "session", args.repeats)
    if args.markdown:
        print()
        print(markdown(tables))


if __name__ == "__main__":
    main()

"""Background refits against inline ones at the same refit points, on several seeded streams.

Every stream runs ``y_pred = model.predict_one(x); model.learn_one(x, y)`` through
``SpectralHMM(refit_every=...)`` inline and with ``background=True`` (each with its
defaults otherwise), one after the other in one process, BLAS pinned to one thread. Per
stream and mode: next-symbol accuracy, prequential log loss (``model.online.log_loss``,
nats per scored symbol), events per wall-clock second and per CPU second of the process
(all its threads: the background fits count), and the fits and their seconds.
Then the differences background − inline per stream: issue 21 asks accuracy ≥ inline.

Streams: ``clusters`` is ``demos/bench_river.cluster_sessions`` (1,000 keys over 2,000
symbols, the stream of bench_river.py) with seeds 0, 1, ...; ``sessions`` the 12-symbol
sessions of a 5-state HMM (``demos/river_pipeline.session_data``; 1,000 sessions of 40
symbols at 40,000 events, fewer sessions of 40 for fewer events).

Run from the repository root::

    python demos/bench_background.py                       # clusters, seeds 0-3
    python demos/bench_background.py --stream sessions --seeds 0,1,2
    python demos/bench_background.py --quick               # 20,000 events, refit every 5,000
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # why: one BLAS thread, figures comparable in one run

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from bench_river import cluster_sessions  # noqa: E402
from river_pipeline import session_data  # noqa: E402

import streamspec  # noqa: E402
from streamspec import SpectralHMM  # noqa: E402


def stream(kind: str, n_events: int, seed: int) -> tuple[list, str]:
    """``(data, key)`` of a seeded stream of ``n_events`` events. O(n_events)."""
    if kind == "clusters":
        return cluster_sessions(n_events, seed=seed), "user"
    sessions = max(1, min(1_000, n_events // 40))  # 40 symbols a session at most sizes
    data, _, _ = session_data(sessions, -(-n_events // sessions), seed=seed)
    return data[:n_events], "session"


def run(data: list, key: str, every: int, background: bool) -> dict:
    """One pass of predict_one + learn_one; the figures of the row. O(events + fits)."""
    model = SpectralHMM(key=key, refit_every=every, background=background)
    predict, learn, hits = model.predict_one, model.learn_one, 0
    t0, c0 = time.perf_counter(), time.process_time()
    for x, y in data:
        hits += predict(x) == y
        learn(x, y)
    model.refitter.close()  # a fit still running counts
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    recs = list(model.refitter.records)
    return {"accuracy": hits / len(data), "log_loss": model.online.log_loss,
            "rate": len(data) / wall, "cpu_rate": len(data) / cpu,
            "fits": len(recs), "fit_seconds": sum(r.seconds for r in recs),
            "hmm_states": None if model.hmm is None else model.hmm.n_states, "rank": model.rank_}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", choices=("clusters", "sessions"), default="clusters")
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--every", type=int, default=10_000, help="refit_every")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--quick", action="store_true", help="20,000 events, refit every 5,000")
    args = parser.parse_args(argv)
    if args.quick:
        args.events, args.every = 20_000, 5_000
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"streamspec {streamspec.__version__}, Python {platform.python_version()}, "
          f"numpy {np.__version__}, load {os.getloadavg()[0]:.1f}; {args.stream}, "
          f"{args.events:,} events, refit_every={args.every:,}")
    print(f"{'seed':>4s} {'mode':10s} {'accuracy':>9s} {'log loss':>9s} {'events/s':>9s} "
          f"{'ev/CPU-s':>9s}  fits")
    diffs = []
    for seed in seeds:
        data, key = stream(args.stream, args.events, seed)
        rows = {}
        for mode in ("inline", "background"):
            r = rows[mode] = run(data, key, args.every, mode == "background")
            print(f"{seed:4d} {mode:10s} {r['accuracy']:9.4f} {r['log_loss']:9.5f} "
                  f"{r['rate']:9,.0f} {r['cpu_rate']:9,.0f}  {r['fits']} fits, "
                  f"{r['fit_seconds']:.1f} s; rank {r['rank']}, HMM {r['hmm_states']} "
                  "states", flush=True)
        a, b = rows["background"], rows["inline"]
        diffs.append((seed, a["accuracy"] - b["accuracy"], a["log_loss"] - b["log_loss"],
                      a["rate"] / b["rate"], a["cpu_rate"] / b["cpu_rate"]))
    print(f"\nbackground − inline: accuracy (hits per {args.events:,} = × {args.events:,}), log "
          "loss (and unrounded); background ÷ inline: events/s, events/CPU-s")
    for seed, d_acc, d_loss, r_wall, r_cpu in diffs:
        print(f"{seed:4d} {d_acc:+9.5f} ({d_acc * args.events:+.0f} hits) {d_loss:+9.5f} "
              f"({d_loss:+.1e})   {r_wall:6.3f} {r_cpu:6.3f}")
    d = np.array([row[1:] for row in diffs])
    print(f"mean {d[:, 0].mean():+9.5f} {'':12s} {d[:, 1].mean():+9.5f}   "
          f"{d[:, 2].mean():6.3f} {d[:, 3].mean():6.3f}")


if __name__ == "__main__":
    main()

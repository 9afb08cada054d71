"""The default cold fit at scale (issue 21): seconds, peak memory and held-out log loss.

    python demos/bench_cold_fit.py [--estimator m s] [--quick] [--baseline DIR] [--profile]

``bench_large.py``'s synthetic Zipf stream, n = 10⁵ symbols, 10⁷ training tokens
(``--quick``: 10⁶), the next 10,000 tokens held out, counted by a ``MomentAccumulator``
with ``n_symbols=n``; then, timed, ``MEstimator(rank=50).fit(acc)`` (``m``) and
``SpectralEstimator(rank=50).fit(acc)`` (``s``), both with their default backoff. Every
case runs in a fresh process with one BLAS thread; "peak MB" is that process's peak
resident memory (counting included), "before fit" its peak before the fit started.
``--baseline DIR``: each case also runs with the streamspec of another checkout (e.g.
``/work/main``) first on the path, before this one. ``--profile``: cProfile of the fit,
the 25 costliest functions (by cumulative time) printed by each case.

Prints a markdown table; ``docs/benchmarks.md`` ("Cold fit at scale") holds the recorded
figures.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_large import _peak_mb, run_fresh, zipf_hmm_stream  # noqa: E402

N_SYMBOLS, RANK, HELD_OUT = 100_000, 50, 10_000
NAMES = {"m": "MEstimator(rank=50)", "s": "SpectralEstimator(rank=50)"}


def case_cold_fit(path: str, kind: str, profile: bool) -> dict:
    """In a fresh process: count the training tokens, time the default cold fit, score it."""
    import streamspec
    from streamspec import MEstimator, MomentAccumulator, SpectralEstimator

    x = np.load(path)
    train, test = x[:-HELD_OUT], x[-HELD_OUT:].copy()
    acc = MomentAccumulator(n_symbols=N_SYMBOLS)
    acc.learn_many(train)
    acc.triples()
    del x, train
    before = _peak_mb()
    est = (MEstimator if kind == "m" else SpectralEstimator)(rank=RANK)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    model = est.fit(acc)
    seconds = time.perf_counter() - t0
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return {"seconds": seconds, "peak_mb": _peak_mb(), "before_mb": before,
            "log_loss": model.log_loss([test]), "where": str(Path(streamspec.__file__).parents[1])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--estimator", nargs="+", choices=["m", "s"], default=["m", "s"])
    p.add_argument("--quick", action="store_true", help="10⁶ training tokens instead of 10⁷")
    p.add_argument("--baseline", default=None, help="another checkout, run first for each case")
    p.add_argument("--profile", action="store_true", help="print a cProfile of each fit")
    args = p.parse_args(argv)
    length = 10**6 if args.quick else 10**7
    print(f"python {' '.join([Path(sys.argv[0]).name] + sys.argv[1:])}; 1 BLAS thread; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"\n### Cold default fit: n = {N_SYMBOLS:,}, {length:,} training tokens, rank {RANK}\n")
    print("| estimator (default: backoff) | checkout | seconds | peak MB | MB before the fit "
          "| held-out log loss |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "zipf.npy")
        np.save(path, zipf_hmm_stream(N_SYMBOLS, length + HELD_OUT))
        checkouts = ([(args.baseline, args.baseline)] if args.baseline else []) + [("this", None)]
        for kind in args.estimator:
            for name, checkout in checkouts:
                r = run_fresh(case_cold_fit, path, kind, args.profile, timeout=3600, checkout=checkout)
                if "error" in r:
                    print(f"| {NAMES[kind]} | {name} | {r['error']} | | | |", flush=True)
                    continue
                print(f"| {NAMES[kind]} | {name} | {r['seconds']:.1f} | {r['peak_mb']:.0f} | "
                      f"{r['before_mb']:.0f} | {r['log_loss']:.5f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

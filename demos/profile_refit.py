"""cProfile of one warm refit after 1% more data, on bench_large.py's Zipf stream.

    python demos/profile_refit.py [--n N] [--tokens T] [--estimator m|s] [--backoff auto|none]
                                  [--top K]

Counts the first 99% of ``T`` tokens of the stream over ``N`` symbols (default 10⁵ and
10⁷: issue 21's case), fits them once with ``fit_with_state`` at rank 50, adds the last
1%, and profiles the warm refit ``fit_with_state(acc, init=state)`` alone; prints its
seconds, its path, the held-out log loss of the refit and of the first model (the next
10,000 tokens), the process's peak memory and the ``K`` dearest functions, cumulative and
by own time. No cold fit (it would double the memory: the first model and the refit hold
2 GB of operators each at n = 10⁵, rank 50); ``bench_refit.py`` compares warm and cold.
One BLAS thread. Used for docs/benchmarks.md, "Warm refits".
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import pstats  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_large import zipf_hmm_stream  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--tokens", type=int, default=10_000_000)
    p.add_argument("--estimator", choices=["m", "s"], default="s")
    p.add_argument("--backoff", choices=["auto", "none"], default="auto")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    from streamspec import MEstimator, MomentAccumulator, SpectralEstimator

    x = zipf_hmm_stream(args.n, args.tokens + 10_000)
    train, test = x[: args.tokens], x[args.tokens :]
    cut = int(args.tokens * 0.99)
    acc = MomentAccumulator(n_symbols=args.n)
    acc.learn_many(train[:cut])
    kind = MEstimator if args.estimator == "m" else SpectralEstimator
    backoff = None if args.backoff == "none" else "auto"
    t0 = time.perf_counter()
    first, state = kind(rank=50, backoff=backoff).fit_with_state(acc)
    print(f"first fit {time.perf_counter() - t0:.1f} s", flush=True)
    first_loss = first.log_loss([test])
    del first  # the state keeps its model
    acc.learn_many(train[cut:])
    est = kind(rank=50, backoff=backoff)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    warm, _ = est.fit_with_state(acc, init=state)
    prof.disable()
    print(f"warm refit {time.perf_counter() - t0:.2f} s, path {est.refit_.path}; held-out log loss "
          f"{warm.log_loss([test]):.4f} (first model {first_loss:.4f}); peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(args.top)
    pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

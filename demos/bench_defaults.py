"""The measurements behind streamspec's defaults (``streamspec/core/defaults.py``).

    python demos/bench_defaults.py [--quick] [--ranks 2,8,16,32,auto] [--outer 1,2,3]

For three alphabet sizes, fits :class:`~streamspec.MEstimator` with every
default but the one varied, and prints the held-out log loss (nats per symbol,
last 10% of the stream, window-2 filter with the default Kneser–Ney backoff)
and the fit time (wall clock, best of two; the machine is shared, so times are
indicative):

- Alice's characters, as ``streamspec learn`` reads a text file (n ≈ 74);
- words of a book (the first 300,000 lower-cased words of ``books/1184.txt``,
  n ≈ 10⁴);
- a sample of 200,000 symbols of a random 8-state HMM with 30 symbols and
  sparse rows (``HMM.random(8, 30, random_state=0, concentration=0.1)``).

The unigram (symbol frequencies of the training part) is the floor every default
must beat clearly. Data sets that are missing (``STREAMSPEC_DATA`` or
``shared/data``) are skipped with a note.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np

from streamspec import HMM, MEstimator, MomentAccumulator
from streamspec.experiments.datasets import default_data_path


def datasets(quick: bool):
    root = default_data_path()
    alice = None if root is None else root / "alice" / "11-0.txt"
    if alice is not None and alice.is_file():
        yield "Alice characters", list(alice.read_text(encoding="utf-8"))
    else:
        print(f"(Alice skipped: no alice/11-0.txt under {root})")
    book = None if root is None else root / "books" / "1184.txt"
    if book is not None and book.is_file():
        words = re.findall(r"[a-z']+", book.read_text(encoding="utf-8").lower())
        yield "book words", words[: 100_000 if quick else 300_000]
    else:
        print(f"(book skipped: no books/1184.txt under {root})")
    hmm = HMM.random(n_states=8, n_symbols=30, random_state=0, concentration=0.1)
    yield "HMM m=8, n=30", hmm.sample(50_000 if quick else 200_000, random_state=1).tolist()


def unigram_loss(train_idx: np.ndarray, test_idx: np.ndarray, n: int) -> float:
    counts = np.bincount(train_idx, minlength=n) + 0.5  # why: a test symbol may be unseen
    p = counts / counts.sum()
    return float(-np.log(p[test_idx]).mean())


def timed_fit(est: MEstimator, acc, repeat: int):
    best, model = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = est.fit(acc)
        best = min(best, time.perf_counter() - t0)
    return model, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter streams, one repetition")
    parser.add_argument("--ranks", default="2,4,8,16,32,auto")
    parser.add_argument("--outer", default="1,2,3", help="max_outer values tried at --outer-rank")
    parser.add_argument("--outer-rank", default="16")
    args = parser.parse_args()
    ranks = [r if r == "auto" else int(r) for r in args.ranks.split(",")]
    outers = [int(v) for v in args.outer.split(",")] if args.outer else []
    outer_rank = args.outer_rank if args.outer_rank == "auto" else int(args.outer_rank)
    repeat = 1 if args.quick else 2
    print(f"{'data':18} {'n':>6} {'setting':>16} {'rank':>5} {'log loss':>9} {'seconds':>8}")
    for name, seq in datasets(args.quick):
        cut = int(0.9 * len(seq))
        acc = MomentAccumulator()
        acc.learn_many(seq[:cut])
        n = acc.n
        index = {s: i for i, s in enumerate(acc.symbols)}
        train_idx = np.array([index[s] for s in seq[:cut]])
        # why: symbols first seen in the held-out part have no row in the model; they are
        # dropped from the test stream (the same for every setting, so the table compares)
        test_idx = np.array([index.get(s, -1) for s in seq[cut:]])
        test_idx = test_idx[test_idx >= 0]
        print(f"{name:18} {n:6d} {'unigram':>16} {'':>5} "
              f"{unigram_loss(train_idx, test_idx, n):9.4f} {'':>8}")
        settings = [(f"rank={r}", {"rank": r}) for r in ranks]
        settings += [(f"max_outer={o}", {"rank": outer_rank, "max_outer": o}) for o in outers]
        for label, params in settings:
            r = params["rank"]
            if isinstance(r, int) and r > n:
                continue
            est = MEstimator(**params)
            model, seconds = timed_fit(est, acc, repeat)
            loss = model.log_loss([test_idx])
            print(f"{name:18} {n:6d} {label:>16} {est.rank_:5d} {loss:9.4f} {seconds:8.2f}",
                  flush=True)


if __name__ == "__main__":
    main()

"""Benchmarks of the core library, measured side by side in one run.

    python demos/bench_core.py [--quick] [--skip-em] [--skip-alice]

Prints, each against its reference in the same run:
1. ``MomentAccumulator.learn_many`` vs ``np.bincount`` of precomputed triple codes
   (10^7 symbols, n = 26);
2. ``MomentAccumulator.learn_one`` vs ``river.stats.Mean().update`` per call;
3. ``MEstimator`` fit (n = 26, rank 5, exact weighting, 10^6 symbols from a random
   5-state HMM) vs ``hmmlearn`` ``CategoricalHMM(n_components=5, n_iter=100)`` on
   the same data, with the held-out log loss of both;
4. the default predictor on Alice (letters; fitted on the first 80%, rank, filter
   and window chosen on the last tenth of that, evaluated on the last 20%) vs
   bigram and trigram models.

Timings are the best of several repetitions; the machine is shared, so only
ratios measured in one run mean anything.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.selection import select_predictor
from streamspec.experiments.baselines import NGramModel


def best_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def side_by_side(*fns, repeat: int = 9) -> list[float]:
    """Best time of each function, the runs interleaved so that all see the same load."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], best_time(fn, 1))
    return best


def bench_learn_many(n_symbols: int) -> None:
    n = 26
    x = np.random.default_rng(0).integers(0, n, n_symbols)
    codes = (x[1:-1] * n + x[2:]) * n + x[:-2]
    def ours():
        MomentAccumulator(n).learn_many(x)

    t_ref, t_ours = side_by_side(lambda: np.bincount(codes, minlength=n**3), ours)
    print(f"learn_many, {n_symbols:.0e} symbols, n=26: {n_symbols / t_ours / 1e6:8.1f} M symbols/s;"
          f" np.bincount of precomputed codes {n_symbols / t_ref / 1e6:8.1f} M/s;"
          f" ratio {t_ref / t_ours:.2f} (target >= 0.7)")


def bench_learn_one(n_symbols: int) -> None:
    from river import stats

    xs = np.random.default_rng(1).integers(0, 26, n_symbols).tolist()

    def ours():
        acc = MomentAccumulator(26)
        learn = acc.learn_one
        for s in xs:
            learn(s)
        acc.counts()

    def keyed():
        acc = MomentAccumulator(26)
        learn = acc.learn_one
        for i, s in enumerate(xs):
            learn(s, i & 7)
        acc.counts()

    def mean():
        m = stats.Mean()
        update = m.update
        for s in xs:
            update(s)

    t_ours, t_keyed, t_mean = side_by_side(ours, keyed, mean, repeat=7)
    print(f"learn_one: {t_ours / n_symbols * 1e9:6.0f} ns/call (default stream), "
          f"{t_keyed / n_symbols * 1e9:6.0f} ns/call (8 keyed streams); "
          f"river stats.Mean().update {t_mean / n_symbols * 1e9:6.0f} ns/call; "
          f"ratio {t_mean / t_ours:.2f} (keyed {t_mean / t_keyed:.2f}; target >= 0.5)")


def bench_fit(n_symbols: int, skip_em: bool) -> None:
    hmm = HMM.random(5, 26, random_state=0)
    train = hmm.sample(n_symbols, random_state=1)
    test = [hmm.sample(50_000, random_state=2)]
    acc = MomentAccumulator(26)
    acc.learn_many(train)
    est = MEstimator(rank=5, weighting="exact")
    t_m = best_time(lambda: est.fit(acc), 3)
    model = est.fit(acc)
    t_s = best_time(lambda: SpectralEstimator(rank=5).fit(acc), 3)
    spec = SpectralEstimator(rank=5).fit(acc)
    truth = hmm.operators().with_filter("recursive").log_loss(test)
    print(f"fit, n=26, rank 5, {n_symbols:.0e} symbols: MEstimator(exact) {t_m:.3f} s, "
          f"SpectralEstimator {t_s:.4f} s; held-out log loss: θ_M "
          f"{model.log_loss(test):.4f} (window 2) / {model.with_filter('recursive').log_loss(test):.4f}"
          f" (recursive), θ_spec {spec.log_loss(test):.4f}, true model {truth:.4f}")
    if skip_em:
        return
    try:
        from hmmlearn.hmm import CategoricalHMM
    except ImportError:
        print("hmmlearn is not installed (pip install streamspec[bench]): EM skipped")
        return
    em = CategoricalHMM(n_components=5, n_iter=100, tol=0.0, random_state=0, n_features=26)
    lengths = [10_000] * (n_symbols // 10_000)
    t0 = time.perf_counter()
    em.fit(train[: sum(lengths)].reshape(-1, 1), lengths=lengths)
    t_em = time.perf_counter() - t0
    em_loss = -em.score(test[0].reshape(-1, 1)) / test[0].size
    print(f"EM (hmmlearn CategoricalHMM, 5 states, 100 iterations): {t_em:.1f} s, held-out log "
          f"loss {em_loss:.4f}; MEstimator is {t_em / t_m:.0f}x faster (target >= 50x)")


def bench_alice() -> None:
    from streamspec.experiments.datasets import default_data_path, load_alice_letters

    if default_data_path() is None:
        print("Alice: no data folder found (set STREAMSPEC_DATA): skipped")
        return
    try:
        letters = load_alice_letters()
    except FileNotFoundError as exc:
        print(f"Alice: skipped, {exc}")
        return
    x = np.frombuffer(letters.encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("a")
    cut = int(0.8 * x.size)
    fit_part, val_part, test = x[: int(0.9 * cut)], x[int(0.9 * cut) : cut], [x[cut:]]
    acc = MomentAccumulator(26)
    acc.learn_many(fit_part)
    t0 = time.perf_counter()
    chosen = select_predictor(MEstimator(), acc, [val_part])
    full = MomentAccumulator(26)
    full.learn_many(x[:cut])
    est = MEstimator(rank=chosen.rank, filter=chosen.filter, window=chosen.window)
    model = est.fit(full)
    elapsed = time.perf_counter() - t0
    ours = model.log_loss(test)
    bigram = NGramModel(26, order=1, alpha=0.5).fit([x[:cut]]).log_loss(test)
    trigram = NGramModel(26, order=2, alpha=0.1).fit([x[:cut]]).log_loss(test)
    recursive5 = MEstimator(rank=5).fit(full).with_filter("recursive").log_loss(test)
    print(f"Alice ({x.size} letters; train 80%, test the last {len(test[0])}): default predictor "
          f"(θ_M, rank {chosen.rank}, {chosen.filter} filter, w={chosen.window}, chosen on held-out"
          f" 10% of the training part in {elapsed:.1f} s) {ours:.4f} nats/letter; bigram "
          f"{bigram:.4f}; trigram {trigram:.4f}; θ_M rank 5 recursive filter {recursive5:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--skip-em", action="store_true", help="do not run hmmlearn")
    parser.add_argument("--skip-alice", action="store_true", help="do not run the Alice check")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    bench_learn_many(10**7 // scale)
    bench_learn_one(10**6 // scale)
    bench_fit(10**6 // scale, args.skip_em)
    if not args.skip_alice:
        bench_alice()


if __name__ == "__main__":
    main()

"""More hidden states than symbols: window counts, HMMEstimator and the predictor over windows (issue 19).

    python demos/bench_windows.py [synthetic|sticky|real|all] [--quick] [--sizes 10000,100000]
                                  [--large] [--full-grid] [--cases 10:4,50:20] [--seeds default,1,2]
                                  [--aims-only] [--em-iter 100] [--em-restarts 3]
                                  [--em-max-symbols 200000] [--test 20000]

``synthetic`` (the default with ``all``): sparse random automata like PAutomaC's (each
state with 3 successors, one of them the next state of a cycle so that the chain is
irreducible, Dirichlet(1) weights; each state emitting 3 symbols, Dirichlet(1); 2 start
states), with (K, n) = (10, 4), (25, 8) and (50, 20) (``--full-grid``: all nine pairs of K = 10,
25, 50 states and n = 4, 8, 20 symbols), seeded. Training
data: independent sequences of mean length 5, 20 or 50 (1 + geometric), until the
size is reached (10⁴ and 10⁵ symbols; ``--large`` adds 10⁶ for every K); held
out: ``--test`` symbols (20,000) of fresh sequences, each scored from its start.
``--cases K:n,...`` runs only those automata (e.g. ``--cases 50:20 --sizes 1000000``: one
configuration at a time, as the 10⁶-symbol cases take minutes each). ``--seeds s1,s2,...``:
the automata's seeds, one automaton of each (K, n) per seed (``default``, the default, is
the seed ``100 K + n`` every earlier run used; the data's seeds do not change); after the
cases a per-seed table and a summary per (K, n) and size over the seeds (median and worst
of the window predictor against the truth, EM and the KN trigram, and of ``HMMEstimator``
against EM with EM's time over its own) are printed (:func:`summary`). ``--aims-only``
fits only the rows the issue's aims compare (truth, KN trigram, θ_M predictor over
windows, ``HMMEstimator`` over windows, EM), to spend the time on more automata.
``sticky``: the lead's question, a sticky 5-state, 10-symbol HMM (0.9 on the diagonal,
Dirichlet(½) emissions) on one stream of 10⁵ symbols. ``real``: Splice (4 symbols) and
the Bach chorales (20 pitches) from ``../shared/data`` (or ``STREAMSPEC_DATA``), a seeded
80% of the sequences to train, the rest held out; missing data are skipped with a line
saying where they were looked for.

Held-out log loss (nats per symbol; the sticky case reads one long stream) of:

- ``truth``: the generating HMM, forward filter from its start distribution;
- ``KN trigram``: ``KneserNeyTrigram`` of the triples and stream starts;
- ``θ_spec`` / ``θ_M``: today's ``SpectralEstimator()`` / ``MEstimator()`` on the triples
  (L = 1, every default: rank by held-out loss, the predictor mixing model, trigram and
  HMM online; ``log_loss`` reads the held-out sequences in order);
- ``HMM K, triples``: ``HMMEstimator(n_states=K)`` over triples, where K ≤ n;
- ``HMM K, windows``: ``HMMEstimator(n_states=K)`` on ``MomentAccumulator(window="auto")``
  counts (L = 4, 3 and 2 for n = 4, 8 and 20): moments over the shortest window whose
  Hankel supports K dimensions, EM over the longest window within the E-step budget; the
  window L is shown;
- ``EM K``: hmmlearn ``CategoricalHMM`` (K states, at most ``--em-iter`` iterations, tol
  10⁻⁵ nats per training symbol, ``implementation="scaling"``) on at most
  ``--em-max-symbols`` (200,000) training symbols, the best training likelihood of
  ``--em-restarts`` seeded starts (all as ``bench_predict.py``): the first whole training
  sequences up to the cap (one long stream: its leading symbols), so that EM at 10⁶ symbols
  and 50 states takes minutes, not hours; the row says how many symbols it saw and the
  iterations its best start ran.

- ``θ_spec / θ_M predictor, windows``: the same defaults on the window counts: the model is
  fitted over the windows of ``count_window="auto"`` (window l and rank k shown; θ_M: θ_spec
  over windows, then the per-symbol GLS step, docs/math.md section 11), and the HMM they mix
  in is fitted over the windows (up to 64 states, r, 2r or 4r for the supported window rank r,
  by held-out grams) (:func:`window_rows`);
- ``θ_M predictor, windows, model on triples``: ``MEstimator(count_window=1)`` on the same
  counts (the model over the triples, the HMM still over the windows: θ_M before it fitted
  over windows), side by side;
- ``θ_M predictor, count_window 2``: the default θ_M predictor with the model over windows of
  2 symbols whatever ``choose_window`` says;
- ``θ_spec / θ_M plain, count_window 2`` and ``θ_M plain, model on triples``: the models
  alone (``backoff=None``), over windows of 2 symbols and over the triples.

Fit times in CPU seconds of the process (``time.process_time``: one BLAS thread, set below
before numpy loads, so a fit's CPU time is its time alone, whatever else the shared machine
runs), counting included for our models; compare ratios within one run.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from streamspec import (  # noqa: E402
    HMM,
    HiddenMarkovModel,
    HMMEstimator,
    MEstimator,
    MomentAccumulator,
    SpectralEstimator,  # noqa: E402
)
from streamspec.core.backoff import contexts_of  # noqa: E402
from streamspec.core.trigram import KneserNeyTrigram  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # why: loaded by path in the tests too
from bench_predict import best_categorical_hmm  # noqa: E402

# ---------------------------------------------------------------------------- data


def sparse_automaton(K: int, n: int, seed: int, out: int = 3, emit: int = 3) -> HMM:
    """A PAutomaC-like HMM: each state has ``out`` successors (one the next state of a cycle),
    emits ``emit`` symbols, Dirichlet(1) weights; the start is spread over 2 states."""
    rng = np.random.default_rng(seed)
    T = np.zeros((K, K))  # column-stochastic: T[h2, h1]
    O = np.zeros((n, K))
    for h in range(K):
        others = rng.choice(np.setdiff1d(np.arange(K), [(h + 1) % K]), size=min(out, K) - 1, replace=False)
        succ = np.concatenate([[(h + 1) % K], others])
        T[succ, h] = rng.dirichlet(np.ones(succ.size))
        sym = rng.choice(n, size=min(emit, n), replace=False)
        O[sym, h] = rng.dirichlet(np.ones(sym.size))
    pi = np.zeros(K)
    pi[rng.choice(K, size=2, replace=False)] = rng.dirichlet(np.ones(2))
    return HMM(T, O, pi)


def sequences(hmm: HMM, total: int, mean: float, seed: int) -> list[np.ndarray]:
    """Independent sequences of 1 + geometric length (mean ``mean``) until ``total`` symbols."""
    rng = np.random.default_rng(seed)
    count = int(total / mean * 1.2) + 10
    lengths = 1 + rng.geometric(1.0 / mean, size=count) - 1 if mean > 1 else np.ones(count, int)
    lengths = np.maximum(lengths, 1)
    keep = np.searchsorted(np.cumsum(lengths), total) + 1
    lengths = lengths[:keep]
    out, start = [], 0
    for length in np.unique(lengths):  # one vectorised draw per length
        rows = np.flatnonzero(lengths == length)
        block = hmm.sample_many(rows.size, int(length), random_state=seed * 7919 + int(length))
        out += list(zip(rows.tolist(), block, strict=True))
        start += rows.size
    return [s for _, s in sorted(out, key=lambda r: r[0])]


# ---------------------------------------------------------------------------- models


def count(train: list[np.ndarray], n: int, window) -> tuple[MomentAccumulator, float]:
    t0 = time.process_time()
    acc = MomentAccumulator(n_symbols=n, window=window)
    for k, s in enumerate(train):
        acc.learn_many(s, key=k % 64)
        acc.end(k % 64)
    acc.windows()  # merge the buffers inside the timed part
    return acc, time.process_time() - t0


def hmm_loss(model: HiddenMarkovModel, test: list[np.ndarray]) -> float:
    total = sum(-model.score(s) for s in test)
    if not np.isfinite(total):  # a held-out symbol given probability 0: floor the emissions
        E = model.emissionprob_ + 1e-6
        model = HiddenMarkovModel(model.startprob_, model.transmat_, E / E.sum(axis=1, keepdims=True))
        total = sum(-model.score(s) for s in test)
    return total / sum(len(s) for s in test)


def trigram_loss(acc: MomentAccumulator, test: list[np.ndarray]) -> float:
    kn = KneserNeyTrigram(acc.triples(), acc.starts())
    total, size = 0.0, 0
    for s in test:
        u, v = contexts_of(s)
        total -= float(np.log(kn.proba_of(u[:-1], v[:-1], s)).sum())
        size += len(s)
    return total / size


def em_training(train: list[np.ndarray], cap: int) -> list[np.ndarray]:
    """The first training sequences up to ``cap`` symbols in all, the last one cut (whole
    sequences: cutting every sequence to a share would drop the short ones and shorten the
    others, changing the data's distribution; one long stream keeps its leading ``cap``)."""
    out, total = [], 0
    for s in train:
        if total >= cap:
            break
        out.append(s[: cap - total])
        total += len(out[-1])
    return out


def fit_em(train: list[np.ndarray], n: int, K: int, iters: int, restarts: int):
    """hmmlearn EM, best training likelihood of ``restarts`` seeded starts (seeds 0, 1, ...):
    ``(model, CPU seconds, iterations of the best)``, as ``bench_predict.py`` runs it (the
    scaled forward-backward, the same fixed point as the log one at a fraction of its cost;
    the caller caps the sequences with :func:`em_training`)."""
    t0 = time.process_time()
    best = best_categorical_hmm(train, n, K, iters, restarts)
    model = HiddenMarkovModel(best.startprob_, best.transmat_, best.emissionprob_)
    return model, time.process_time() - t0, len(best.monitor_.history)


def window_rows(acc: MomentAccumulator, test: list[np.ndarray], t_count: float, aims_only: bool = False
                ) -> list[tuple[str, float, float]]:
    """Today's predictors fitted on the window counts ``acc`` (``SpectralEstimator()`` /
    ``MEstimator()``, every default: the HMM they mix in is fitted over the windows, its
    states chosen among the supported rank r and 2r by held-out grams), as ``(name,
    held-out loss, seconds)`` rows; the HMM's number of states is shown. ``aims_only``: the
    default θ_M predictor only."""
    rows = []
    models = (("θ_spec predictor", SpectralEstimator()), ("θ_M predictor", MEstimator()),
              ("θ_M predictor, model on triples", MEstimator(count_window=1)),
              ("θ_M predictor, count_window 2", MEstimator(count_window=2)),
              ("θ_spec plain, count_window 2", SpectralEstimator(backoff=None, count_window=2)),
              ("θ_M plain, count_window 2", MEstimator(backoff=None, count_window=2)),
              ("θ_M plain, model on triples", MEstimator(backoff=None, count_window=1)))
    for name, est in models[1:2] if aims_only else models:
        t0 = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = est.fit(acc)
        hmm = model.backoff.hmm if model.backoff is not None else None
        states = f", HMM {hmm.n_states}" if hmm is not None else ""
        fitted = f", l = {getattr(est, 'window_', 1)}, k = {est.rank_}"
        rows.append((f"{name}, windows (L = {acc.current_window}{fitted}{states})",
                     model.log_loss(test), t_count + time.process_time() - t0))
    return rows


def run_case(train, test, n: int, K: int, args, truth: HMM | None = None) -> list[tuple[str, float, float]]:
    """Every model of the module docstring on one split: ``(name, loss, seconds)`` rows."""
    say = lambda what: print(f"  ... K={K} n={n}: {what}", file=sys.stderr, flush=True)  # noqa: E731
    rows = []
    if truth is not None:
        rows.append(("truth", hmm_loss(HiddenMarkovModel.from_hmm(truth), test), float("nan")))
    tri, t_tri = count(train, n, 1)
    rows.append(("KN trigram", trigram_loss(tri, test), t_tri))
    for name, est in () if args.aims_only else (("θ_spec (L = 1)", SpectralEstimator()),
                                                ("θ_M (L = 1)", MEstimator())):
        t0 = time.process_time()
        model = est.fit(tri)
        rows.append((name, model.log_loss(test), t_tri + time.process_time() - t0))
    say("trigram, θ_spec, θ_M")
    if K <= n and not args.aims_only:
        t0 = time.process_time()
        model = HMMEstimator(n_states=K, random_state=0).fit(tri)
        rows.append((f"HMM {K}, triples", hmm_loss(model, test), t_tri + time.process_time() - t0))
    acc, t_win = count(train, n, "auto")
    t0 = time.process_time()
    est = HMMEstimator(n_states=K, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = est.fit(acc)
    rows.append((f"HMM {K}, windows (L = {est.window_})", hmm_loss(model, test),
                 t_win + time.process_time() - t0))
    say(f"HMM over windows ({rows[-1][2]:.1f} s)")
    rows += window_rows(acc, test, t_win, args.aims_only)
    if args.em_restarts > 0:
        em_train = em_training(train, args.em_max_symbols)
        seen = sum(map(len, em_train))
        model, s, its = fit_em(em_train, n, K, args.em_iter, args.em_restarts)
        on = "" if seen == sum(map(len, train)) else f", on the first {seen:,} symbols"
        rows.append((f"EM {K} (best of {args.em_restarts}, {its} of ≤ {args.em_iter} iterations{on})",
                     hmm_loss(model, test), s))
        say(f"EM ({s:.1f} s)")
    return rows


def print_case(label: str, rows: list[tuple[str, float, float]]) -> None:
    truth = next((loss for name, loss, _ in rows if name == "truth"), None)
    print(f"\n{label}\n")
    print("| model | held-out log loss | vs truth | fit s |")
    print("|---|---|---|---|")
    for name, loss, s in rows:
        gap = "" if truth is None or name == "truth" else f"{100 * (loss - truth) / truth:+.2f}%"
        print(f"| {name} | {loss:.4f} | {gap} | {'' if np.isnan(s) else f'{s:.2f}'} |")
    sys.stdout.flush()


# ---------------------------------------------------------------------------- sections


def synthetic(args) -> None:
    grid = [(10, 4), (25, 8), (50, 20)] if not args.quick else [(10, 4)]
    sizes = args.sizes if not args.quick else [10_000]
    means = {4: 5.0, 8: 20.0, 20: 50.0}
    print("\n### Synthetic sparse automata (PAutomaC-like)")
    if args.full_grid:
        grid += [(10, 8), (25, 4), (50, 8), (10, 20), (25, 20), (50, 4)]
    if args.cases:
        grid = args.cases
    results = []  # (K, n, size, seed, rows)
    for K, n in grid:
        for seed in [100 * K + n if s is None else s for s in args.seeds]:
            truth = sparse_automaton(K, n, seed=seed)
            mean = means[n]
            test = sequences(truth, args.test if not args.quick else 3_000, mean, seed=1)
            for size in sizes + ([1_000_000] if args.large and 1_000_000 not in sizes else []):
                train = sequences(truth, size, mean, seed=2 + size)
                rows = run_case(train, test, n, K, args, truth)
                print_case(f"K = {K}, n = {n}, automaton seed {seed}, {size:,} training symbols in "
                           f"{len(train):,} sequences (mean length {mean:g})", rows)
                results.append((K, n, size, seed, rows))
    summary(results)


_RATIO = "EM s / HMMEst s"


def aims(rows: list[tuple[str, float, float]]) -> dict[str, float]:
    """The figures the issue's aims compare, from one case's rows: relative gaps (held-out
    loss / other - 1) of the default θ_M predictor over windows against the truth, EM and the
    KN trigram, of ``HMMEstimator`` (true K, windows) against EM and the truth, and EM's
    seconds over ``HMMEstimator``'s (NaN where a row is missing). O(rows)."""
    def find(prefix: str) -> tuple[float, float]:
        return next(((loss, s) for name, loss, s in rows if name.startswith(prefix)),
                    (float("nan"), float("nan")))
    truth, kn = find("truth")[0], find("KN trigram")[0]
    pred, em = find("θ_M predictor, windows"), find("EM ")
    hmm = next(((loss, s) for name, loss, s in rows if name.startswith("HMM ") and "windows" in name),
               (float("nan"), float("nan")))
    return {"pred/truth": pred[0] / truth - 1, "pred/EM": pred[0] / em[0] - 1,
            "pred/KN3": pred[0] / kn - 1, "HMMEst/truth": hmm[0] / truth - 1,
            "HMMEst/EM": hmm[0] / em[0] - 1, _RATIO: em[1] / hmm[1]}


def summary(results: list) -> None:
    """The per-seed table of :func:`aims` and, per (K, n) and size, the median and the worst
    over the seeds (worst: the largest gap, the smallest time ratio). O(cases)."""
    if not results:
        return
    keys = list(aims(results[0][4]))
    print("\n### Per automaton: the aims' figures (gaps: held-out loss / other - 1)\n")
    print("| K | n | symbols | seed | " + " | ".join(keys) + " |")
    print("|---" * (4 + len(keys)) + "|")
    for K, n, size, seed, rows in results:
        a = aims(rows)
        print(f"| {K} | {n} | {size:,} | {seed} | " + " | ".join(_fmt(k, a[k]) for k in keys) + " |")
    print("\n### Summary over the automata' seeds: median (worst)\n")
    print("| K | n | symbols | seeds | " + " | ".join(keys) + " |")
    print("|---" * (4 + len(keys)) + "|")
    for K, n, size in dict.fromkeys((K, n, size) for K, n, size, _, _ in results):
        group = [aims(rows) for k, m, z, _, rows in results if (k, m, z) == (K, n, size)]
        cells = []
        for k in keys:
            v = np.array([g[k] for g in group])
            worst = np.min(v) if k == _RATIO else np.max(v)  # of the time ratio the smallest is worst
            cells.append(f"{_fmt(k, float(np.median(v)))} ({_fmt(k, float(worst))})")
        print(f"| {K} | {n} | {size:,} | {len(group)} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def _fmt(key: str, v: float) -> str:
    return "–" if not np.isfinite(v) else (f"{v:.1f}×" if key == _RATIO else f"{100 * v:+.2f}%")


def sticky(args) -> None:
    m, n = 5, 10
    rng = np.random.default_rng(0)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    truth = HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T)
    size = 100_000 if not args.quick else 20_000
    train, test = [truth.sample(size, random_state=1)], [truth.sample(20_000, random_state=2)]
    rows = [("truth", hmm_loss(HiddenMarkovModel.from_hmm(truth), test), float("nan"))]
    for L in (1, 2) if args.quick else (1, 2, 3):
        acc, t_count = count(train, n, L)
        t0 = time.process_time()
        model = HMMEstimator(n_states=m, random_state=0, window=L).fit(acc)
        rows.append((f"HMMEstimator, EM over {2 * L + 1}-grams", hmm_loss(model, test),
                     t_count + time.process_time() - t0))
    if args.em_restarts > 0:
        em_train = em_training(train, args.em_max_symbols)
        model, s, _ = fit_em(em_train, n, m, args.em_iter, args.em_restarts)
        rows.append((f"EM (hmmlearn, best of {args.em_restarts}, on {sum(map(len, em_train)):,} "
                     "symbols)", hmm_loss(model, test), s))
    print("\n### Sticky HMM: 5 states, 10 symbols, 0.9 on the diagonal")
    print_case(f"one stream of {size:,} symbols, held out 20,000", rows)


def real(args) -> None:
    from streamspec.experiments.datasets import default_data_path, load_splice
    from streamspec.experiments.datasets_chorales import load_chorales

    print("\n### Real data: a seeded 80% of the sequences train, the rest held out")
    for name, load, Ks in (("Splice (DNA, 4 symbols)", load_splice, (4, 8, 16)),
                           ("Bach chorales (pitch, 20 symbols)", load_chorales, (10, 25))):
        try:
            raw = load()
        except FileNotFoundError as exc:
            print(f"\n({name} skipped: {exc}; looked under {default_data_path()})")
            continue
        labels = sorted({s for seq in raw for s in seq})
        index = {s: i for i, s in enumerate(labels)}
        seqs = [np.array([index[s] for s in seq], dtype=np.int64) for seq in raw]
        order = np.random.default_rng(0).permutation(len(seqs))
        cut = int(0.8 * len(seqs))
        train, test = [seqs[i] for i in order[:cut]], [seqs[i] for i in order[cut:]]
        for K in Ks[:1] if args.quick else Ks:
            rows = run_case(train, test, len(labels), K, args)
            print_case(f"{name}, K = {K}: {sum(map(len, train)):,} training symbols", rows)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", nargs="?", default="all", choices=["synthetic", "sticky", "real", "all"])
    p.add_argument("--quick", action="store_true", help="one small case of each section")
    p.add_argument("--sizes", default="10000,100000", help="training sizes (symbols)")
    p.add_argument("--large", action="store_true", help="also 10⁶ training symbols")
    p.add_argument("--cases", default="", help="only these automata, K:n pairs (e.g. 10:4,50:20)")
    p.add_argument("--full-grid", action="store_true",
                   help="every (K, n) of 10, 25, 50 states and 4, 8, 20 symbols, not only the diagonal")
    p.add_argument("--seeds", default="default",
                   help="automata seeds, comma-separated; 'default' is 100 K + n (the earlier runs')")
    p.add_argument("--aims-only", action="store_true",
                   help="only truth, KN trigram, θ_M predictor over windows, HMMEstimator, EM")
    p.add_argument("--test", type=int, default=20_000, help="held-out symbols (synthetic)")
    p.add_argument("--em-iter", type=int, default=100)
    p.add_argument("--em-restarts", type=int, default=3, help="0: no hmmlearn EM")
    p.add_argument("--em-max-symbols", type=int, default=200_000,
                   help="hmmlearn EM sees at most this many training symbols (the first sequences)")
    args = p.parse_args(argv)
    args.sizes = [int(float(s)) for s in args.sizes.split(",")]
    args.cases = [tuple(int(v) for v in c.split(":")) for c in args.cases.split(",") if c]
    args.seeds = [None if v.strip() == "default" else int(v) for v in args.seeds.split(",") if v.strip()]
    for K, n in args.cases:
        if n not in (4, 8, 20):
            p.error(f"--cases {K}:{n}: the sequences' mean length is set for n = 4, 8 or 20 only")
    if args.quick:
        args.em_iter, args.em_restarts = min(args.em_iter, 10), min(args.em_restarts, 1)
    for section in (("sticky", sticky), ("synthetic", synthetic), ("real", real)):
        if args.what in (section[0], "all"):
            section[1](args)


if __name__ == "__main__":
    main()

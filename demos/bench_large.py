"""Large-alphabet benchmarks: counting and fitting at n = 26 … 10⁵, and word streams.

    python demos/bench_large.py synthetic [--quick] [--baseline DIR]   # n = 10⁵, 10⁷ tokens
    python demos/bench_large.py scaling [--quick]     # time and peak memory against n
    python demos/bench_large.py books [--quick]       # ../shared/data/books (or STREAMSPEC_DATA)
    python demos/bench_large.py all

Every case runs in a fresh process (so that its peak resident memory, read from
``getrusage``, is its own), with BLAS and OpenMP pinned to one thread, cases of one
table run back to back in one invocation (the machine is shared: compare within a
run). Prints markdown tables; ``docs/benchmarks.md`` holds the recorded figures.

``--baseline DIR``: the synthetic section also runs every fit with the streamspec of
another checkout (e.g. ``/work/main``) first on the path, side by side, so that times,
peak memory and held-out log loss (the next 10,000 tokens of the stream) compare in one
run.

The synthetic stream: a sticky hidden Markov chain over ``m`` states, each state
emitting half of the time from a Zipf(1.1) law over a state-specific permutation of
the n symbols and half of the time from one shared Zipf law (common symbols), seeded.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

# ---------------------------------------------------------------------------- data

def zipf_hmm_stream(n: int, length: int, n_states: int = 20, exponent: float = 1.1,
                    stay: float = 0.9, seed: int = 0) -> np.ndarray:
    """Symbols 0..n-1 of the synthetic stream described in the module docstring."""
    rng = np.random.default_rng(seed)
    # hidden path: runs of geometric length, the next state uniform among the others
    runs = rng.geometric(1 - stay, size=int(length * (1 - stay) * 1.5) + 16)
    while runs.sum() < length:
        runs = np.concatenate([runs, rng.geometric(1 - stay, size=runs.size)])
    jumps = rng.integers(1, n_states, size=runs.size)
    states_of_runs = np.cumsum(jumps) % n_states
    states = np.repeat(states_of_runs, runs)[:length]
    ranks = np.arange(1, n + 1, dtype=np.float64)
    cdf = np.cumsum(ranks**-exponent)
    cdf /= cdf[-1]
    perms = np.stack([rng.permutation(n) for _ in range(n_states + 1)])
    shared = rng.random(length) < 0.5
    rank = np.minimum(np.searchsorted(cdf, rng.random(length)), n - 1)
    which = np.where(shared, n_states, states)
    return perms[which, rank].astype(np.int64)


def book_words(path: Path) -> list[str]:
    """Lower-cased words and sentence punctuation of one Gutenberg book."""
    from streamspec.experiments.datasets import strip_gutenberg

    text = strip_gutenberg(path.read_text(encoding="utf-8", errors="replace")).lower()
    return re.findall(r"[a-z]+(?:'[a-z]+)?|[.,;:!?]", text)


# ---------------------------------------------------------------------------- runner

def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _in_child(fn, args, queue):
    try:
        checkout = os.environ.get("BENCH_CHECKOUT")
        if checkout:  # a fresh interpreter: this checkout's streamspec is imported first
            sys.path.insert(0, checkout)
        base = _peak_mb()
        out = fn(*args)
        out.setdefault("peak_mb", _peak_mb())
        out["base_mb"] = base
        queue.put(out)
    except BaseException as exc:  # noqa: BLE001 - reported in the table
        queue.put({"error": f"{type(exc).__name__}: {str(exc)[:120]}"})


def run_fresh(fn, *args, timeout: float = 1800, checkout: str | None = None) -> dict:
    """Run ``fn(*args)`` (returns a dict) in a new process; adds its peak memory.

    ``checkout``: a directory whose ``streamspec`` the process imports first.
    """
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_in_child, args=(fn, args, q))
    saved = os.environ.get("BENCH_CHECKOUT")
    os.environ["BENCH_CHECKOUT"] = checkout or ""
    try:
        p.start()
    finally:
        os.environ["BENCH_CHECKOUT"] = saved or ""
    try:
        out = q.get(timeout=timeout)
    except Exception:  # noqa: BLE001
        out = {"error": "timed out or died"}
    p.join(5)
    if p.is_alive():
        p.kill()
    return out


# ---------------------------------------------------------------------------- cases

def case_count(path: str, n: int, indices: bool = False) -> dict:
    """Count the stream as labels (a growing alphabet) or, ``indices``, as symbol indices."""
    from streamspec import MomentAccumulator

    x = np.load(path)
    t0 = time.perf_counter()
    acc = MomentAccumulator(n_symbols=n) if indices else MomentAccumulator()
    acc.learn_many(x)
    t = acc.triples()
    secs = time.perf_counter() - t0
    return {"seconds": secs, "rate": x.size / secs, "nnz": t.nnz, "n": acc.n,
            "counts_mb": acc.memory_bytes() / 2**20}


def _fit_case(path: str, make, heldout: int = 0) -> dict:
    from streamspec import MomentAccumulator

    x = np.load(path)
    train, test = (x[:-heldout], x[-heldout:].copy()) if heldout else (x, None)
    acc = MomentAccumulator(n_symbols=int(x.max()) + 1)
    acc.learn_many(train)
    del x, train  # why: the stream is not the fit's memory; the counts are
    est = make()
    t0 = time.perf_counter()
    model = est.fit(acc)
    out = {"seconds": time.perf_counter() - t0, "rank": getattr(model, "rank", None)}
    out["peak_mb"] = _peak_mb()
    if test is not None:
        out["log_loss"] = model.log_loss([test])
    return out


def make_spectral(rank: int, backoff):
    from streamspec import SpectralEstimator

    return SpectralEstimator(rank=rank, backoff=backoff)


def make_m(rank: int, weighting: str | None, formulation: str | None = None,
           backoff: str | None = "auto"):
    from streamspec import MEstimator

    kw = {"rank": rank, "backoff": backoff}
    if weighting is not None:
        kw["weighting"] = weighting
    if formulation is not None:
        kw["formulation"] = formulation
    return MEstimator(**kw)


def case_fit(path: str, kind: str, rank: int, option, heldout: int = 0) -> dict:
    """``option``: the backoff (spectral), or ``(weighting, formulation[, backoff])`` (θ_M)."""
    if kind == "spectral":
        return _fit_case(path, lambda: make_spectral(rank, option), heldout)
    return _fit_case(path, lambda: make_m(rank, *option), heldout)


# ---------------------------------------------------------------------------- sections

def _fmt(out: dict, key: str, spec: str) -> str:
    if "error" in out:
        return "—"
    return format(out[key], spec) if key in out else "—"


def synthetic(quick: bool, baseline: str | None = None) -> None:
    n, length, rank, heldout = 100_000, (10**6 if quick else 10**7), 50, 10_000
    print(f"\n### Synthetic stream: n = {n:,}, {length:,} tokens, rank {rank}\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.npy")
        t0 = time.perf_counter()
        np.save(path, zipf_hmm_stream(n, length + heldout))
        print(f"(stream generated in {time.perf_counter() - t0:.1f} s; the last {heldout:,} "
              "tokens are held out)\n")
        print("| step | checkout | seconds | rate (M tokens/s) | peak memory (MB) | held-out log loss "
              "| notes |")
        print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for label, indices in [("counting (learn_many), labels: growing alphabet", False),
                               ("counting (learn_many), symbol indices (n_symbols=n)", True)]:
            c = run_fresh(case_count, path, n, indices)
            print(f"| {label} | this | {_fmt(c, 'seconds', '.2f')} | "
                  f"{c.get('rate', float('nan')) / 1e6:.1f} | {_fmt(c, 'peak_mb', '.0f')} | | "
                  f"{c.get('nnz', 0):,} distinct triples, counts {_fmt(c, 'counts_mb', '.0f')} MB; "
                  f"{c.get('error', '')} |", flush=True)
        checkouts = [("this", None)] + ([(baseline, baseline)] if baseline else [])
        for label, kind, option in [
            ("SpectralEstimator, HMM alone (backoff=None)", "spectral", None),
            ("SpectralEstimator, with backoff (default)", "spectral", "auto"),
            ("MEstimator(backoff=None)", "m", (None, None, None)),
            ("MEstimator (defaults)", "m", (None, None, "auto")),
        ]:
            for name, checkout in checkouts:
                f = run_fresh(case_fit, path, kind, rank, option, heldout, checkout=checkout)
                print(f"| {label} | {name} | {_fmt(f, 'seconds', '.1f')} | | {_fmt(f, 'peak_mb', '.0f')} "
                      f"| {_fmt(f, 'log_loss', '.4f')} | {f.get('error', '')} |", flush=True)


def scaling(quick: bool) -> None:
    length, rank = (2 * 10**5 if quick else 10**6), 10
    sizes = [26, 100, 1_000, 10_000, 100_000]
    print(f"\n### Time and peak memory against n ({length:,} tokens, rank {rank}; "
          "seconds / peak MB; — = refused or failed)\n")
    rows = [
        ("counting", None),
        ("SpectralEstimator (HMM alone)", ("spectral", None)),
        ("SpectralEstimator (with backoff)", ("spectral", "auto")),
        ("MEstimator identity", ("m", ("identity", None))),
        ("MEstimator diagonal", ("m", ("diagonal", None))),
        ("MEstimator per_symbol", ("m", ("per_symbol", None))),
        ("MEstimator dense per_symbol (paper)", ("m", ("per_symbol", "dense"))),
        ("MEstimator dense exact (paper)", ("m", ("exact", "dense"))),
    ]
    print("| n | " + " | ".join(r[0] for r in rows) + " |")
    print("| ---: | " + " | ".join("---:" for _ in rows) + " |")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = os.path.join(d, f"x{n}.npy")
            np.save(path, zipf_hmm_stream(n, length, n_states=min(20, n // 2)))
            cells = []
            for _, spec in rows:
                if spec is None:
                    out = run_fresh(case_count, path, n)
                else:
                    dense = spec[0] == "m" and spec[1][1] == "dense"
                    if dense and n > 100:
                        cells.append("n/a")
                        continue
                    out = run_fresh(case_fit, path, spec[0], min(rank, n), spec[1])
                cells.append("—" if "error" in out else f"{out['seconds']:.2f} s / {out['peak_mb']:.0f}")
            print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)


def _books_dir() -> Path | None:
    from streamspec.experiments.datasets import default_data_path

    root = default_data_path()
    if root is None or not (root / "books").is_dir():
        return None
    return root / "books"


def books(quick: bool) -> None:
    from streamspec import MEstimator, MomentAccumulator, SpectralEstimator

    folder = _books_dir()
    if folder is None:
        print("books: no data (looked for books/ under STREAMSPEC_DATA and ../shared/data); skipped")
        return
    train_words: list[str] = []
    test_words: list[str] = []
    files = sorted(folder.glob("*.txt"))
    for f in files:
        w = book_words(f)
        cut = int(len(w) * 0.9)
        train_words += w[:cut]
        test_words += w[cut:]
    test_cap = 20_000 if quick else 50_000
    rng = np.random.default_rng(0)
    start = int(rng.integers(0, max(1, len(test_words) - test_cap)))
    test_words = test_words[start : start + test_cap]
    # vocabulary: training words seen twice or more; the rest is one symbol "<other>"
    vocab, counts = np.unique(np.array(train_words), return_counts=True)
    keep = vocab[counts >= 2].tolist()
    index = {w: i for i, w in enumerate(keep)}
    other = len(keep)
    train = np.fromiter((index.get(w, other) for w in train_words), dtype=np.int64)
    test = np.fromiter((index.get(w, other) for w in test_words), dtype=np.int64)
    n = other + 1
    print(f"\n### Word streams: {len(files)} books, {train.size:,} training tokens, held-out "
          f"{test.size:,} tokens as one sequence, n = {n:,} (words seen twice, + <other>)\n")
    acc = MomentAccumulator(n_symbols=n)
    acc.learn_many(train)
    t = acc.triples()
    print(f"distinct triples {t.nnz:,}, counts {acc.memory_bytes() / 2**20:.0f} MB\n")
    print("| predictor | rank | fit (s) | held-out log loss (nats/word) |")
    print("| --- | ---: | ---: | ---: |")
    uni = np.bincount(train, minlength=n) + 0.5
    uni /= uni.sum()
    print(f"| unigram (add ½) | | | {-np.log(uni[test]).mean():.3f} |", flush=True)
    results = {}
    for rank in ([10] if quick else [10, 50]):
        for label, est in [
            ("SpectralEstimator (HMM + backoff, default)", SpectralEstimator(rank=rank)),
            ("MEstimator (defaults, + backoff)", MEstimator(rank=rank)),
        ]:
            t0 = time.perf_counter()
            model = est.fit(acc)
            secs = time.perf_counter() - t0
            ll = model.log_loss([test])
            results[(label, rank)] = (secs, ll)
            print(f"| {label} | {rank} | {secs:.1f} | {ll:.3f} |", flush=True)
            if label.startswith("Spectral"):
                alone = model.without_backoff()
                print(f"| … HMM alone (clipped) | {rank} | | {alone.log_loss([test]):.3f} |")
                print(f"| … backoff alone (interpolated Kneser–Ney bigram) | | | "
                      f"{model.backoff.log_loss([test]):.3f} |", flush=True)
    em_states = 10
    em_tokens = 50_000 if quick else 200_000
    try:
        from hmmlearn.hmm import CategoricalHMM
    except ImportError:
        print("| hmmlearn EM | | | (hmmlearn not installed) |")
        return
    sub = train[:em_tokens]
    em = CategoricalHMM(n_components=em_states, n_iter=20 if quick else 50, random_state=0,
                        n_features=n, tol=1e-4)
    t0 = time.perf_counter()
    em.fit(sub.reshape(-1, 1))
    secs = time.perf_counter() - t0
    # symbols never seen in the subset have emission probability 0: smooth before scoring
    em.emissionprob_ = (em.emissionprob_ + 1e-6) / (em.emissionprob_ + 1e-6).sum(axis=1, keepdims=True)
    ll = -em.score(test.reshape(-1, 1)) / test.size
    print(f"| hmmlearn EM, {em_states} states, first {em_tokens:,} training tokens | {em_states} | "
          f"{secs:.1f} | {ll:.3f} |")
    spec = results.get(("SpectralEstimator (HMM + backoff, default)", 10))
    if spec:
        print(f"\nfit-time ratio EM / SpectralEstimator (rank 10): {secs / spec[0]:.0f}× "
              f"(EM on {em_tokens / train.size:.0%} of the training tokens)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("section", choices=["synthetic", "scaling", "books", "all"])
    p.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    p.add_argument("--baseline", default=None, help="another checkout to compare the synthetic "
                   "fits with, side by side (e.g. /work/main)")
    args = p.parse_args(argv)
    print(f"python {' '.join([Path(sys.argv[0]).name] + sys.argv[1:])}; 1 BLAS thread, "
          f"{os.cpu_count()} cores")
    for name in (["synthetic", "scaling", "books"] if args.section == "all" else [args.section]):
        if name == "synthetic":
            synthetic(args.quick, args.baseline)
        else:
            globals()[name](args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

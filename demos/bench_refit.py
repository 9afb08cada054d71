"""Warm refits against cold fits after 1% more data: seconds, ratio and held-out log loss.

    python demos/bench_refit.py [books] [zipf] [windows] [refitter] [--quick] [--repeats R]
                                [--cases I ...]

For each data set the counts of the first 99% of the training stream are fitted once
(``fit_with_state``: the state a refitter keeps), the last 1% is added, and then, side by
side in one process and interleaved (best of ``--repeats``), the same estimator refits
warm from that state (``fit_with_state(acc, init=state)``, docs/math.md section 10) and
cold (``fit(acc)``) on the new counts. Both models are scored on held-out tokens, and so
is the model of the 99% ("before − cold": what not refitting at all would cost). Cases:
``MEstimator`` and ``SpectralEstimator``, without the backoff and with it (the default),
and the strict warm refit (``basis_tol=0``: the bases are always refreshed, by a subspace
iteration from the previous ones). Every case runs in a fresh process (its peak memory is
its own), with one BLAS thread.

* books: the five books of ``books/`` as words (``bench_large.py books``'s vocabulary,
  n ≈ 2·10⁴, ~10⁶ training tokens), ``rank="auto"`` for the first fit (a refit keeps its
  rank, and the cold fits are made at that rank, so that they compare); 30,000 held-out
  tokens.
* zipf: ``bench_large.py``'s synthetic Zipf stream, n = 10⁵, 10⁷ training tokens, rank
  50; the next 10,000 tokens held out.

* windows: fits over windows (small alphabets, ``count_window="auto"``, docs/math.md
  section 11): a 10-state, 4-symbol sparse automaton (``bench_windows.sparse_automaton``,
  seed 1; 10⁶ training symbols, 3·10⁵ with ``--quick``; the next 20,000 held out) and
  splice (UCI, 4 symbols, sequences of 60; 10% of the sequences held out, seed 0); +1% and
  +10% more data; the refit from a ``WindowState`` (``refit_.path`` "warm": the window and
  rank kept) against a cold fit; ``MEstimator`` and ``SpectralEstimator``, without and with
  the backoff (``--cases`` does not apply).

* refitter (not run by default): the Zipf stream through a ``Refitter`` as a daemon runs it:
  97% fitted cold, then three refits after 1% more data each (the model before the previous
  one dropped at each swap, so its operator mapping is reused: ``core/fresh_memory.py``), and a
  cold fit of all the counts; each refit's seconds and held-out log loss, ``MEstimator`` and
  ``SpectralEstimator`` with the backoff.

Prints a markdown table; ``docs/benchmarks.md`` ("Warm refits") holds the recorded figures.
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
from bench_large import book_words, run_fresh, zipf_hmm_stream  # noqa: E402

CASES = [  # (label, estimator, backoff, strict)
    ("MEstimator, backoff=None", "m", None, False),
    ("MEstimator, backoff=None, basis_tol=0", "m", None, True),
    ("SpectralEstimator, backoff=None", "s", None, False),
    ("SpectralEstimator, backoff=None, basis_tol=0", "s", None, True),
    ("MEstimator (default: backoff)", "m", "auto", False),
    ("SpectralEstimator (default: backoff)", "s", "auto", False),
]


def _estimator(kind: str, rank, backoff, strict: bool):
    from streamspec import MEstimator, SpectralEstimator

    kw = {"rank": rank, "backoff": backoff}
    if strict:
        kw["basis_tol"] = 0.0
    return MEstimator(**kw) if kind == "m" else SpectralEstimator(**kw)


def case_refit(path: str, n: int, rank, kind: str, backoff, strict: bool, repeats: int) -> dict:
    """In a fresh process: the state of the 99% fit, then warm and cold refits interleaved."""
    from streamspec import MomentAccumulator

    data = np.load(path)
    train, test = data["train"], data["test"]
    cut = int(train.size * 0.99)
    acc = MomentAccumulator(n_symbols=n)
    acc.learn_many(train[:cut])
    first, state = _estimator(kind, rank, backoff, strict).fit_with_state(acc)
    rank = first.rank  # "auto": the first fit's choice, which refits keep; the cold fits too
    first_loss, state_mb = first.log_loss([test]), state.nbytes() / 2**20
    del first  # the state keeps its model (a refit with the backoff reuses its weights and HMM)
    acc.learn_many(train[cut:])
    del data, train
    warm_s, cold_s, warm_loss, cold_loss, info = [], [], None, None, None
    for r in range(repeats):
        est = _estimator(kind, rank, backoff, strict)
        t0 = time.perf_counter()
        warm, kept = est.fit_with_state(acc, init=state)
        warm_s.append(time.perf_counter() - t0)
        info, warm_rank, warm_loss = est.refit_, warm.rank, warm.log_loss([test])
        # why each model is dropped once scored, and the state before the last cold fit: at
        # n = 10^5 every model holds 2 GB of operators, and a case must stay under 8 GB
        del warm, kept, est
        if r == repeats - 1:
            del state
        t0 = time.perf_counter()
        cold = _estimator(kind, rank, backoff, strict).fit(acc)
        cold_s.append(time.perf_counter() - t0)
        cold_loss = cold.log_loss([test])
        del cold
    return {"warm": min(warm_s), "cold": min(cold_s), "path": info.path,
            "residual": float(info.residual), "reused": info.reused, "rebuilt": info.rebuilt,
            "sines": [float(v) for v in info.sines],
            "rank": warm_rank, "warm_loss": warm_loss, "cold_loss": cold_loss,
            "first_loss": first_loss, "state_mb": state_mb}


def _table(name: str, path: str, n: int, rank, repeats: int, cases) -> None:
    print(f"\n### {name}\n")
    print("| estimator | rank | warm (s) | cold (s) | warm / cold | path (backward error, noise units) "
          "| held-out log loss warm | cold | warm − cold | before − cold | peak MB |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for label, kind, backoff, strict in cases:
        r = run_fresh(case_refit, path, n, rank, kind, backoff, strict, repeats)
        if "error" in r:
            print(f"| {label} | | | | | {r['error']} | | | | | |", flush=True)
            continue
        blocks = f"; blocks {r['reused']} kept, {r['rebuilt']} rebuilt" if kind == "m" else ""
        if r["sines"]:  # the Krylov rounds: the largest principal sine of each against the last
            blocks += "; Krylov sines " + ", ".join(f"{v:.1e}" for v in r["sines"])
        print(f"| {label} | {r['rank']} | {r['warm']:.2f} | {r['cold']:.2f} | "
              f"{r['warm'] / r['cold']:.3f} | {r['path']} ({r['residual']:.3f}{blocks}) | "
              f"{r['warm_loss']:.4f} | {r['cold_loss']:.4f} | {r['warm_loss'] - r['cold_loss']:+.1e} "
              f"| {r['first_loss'] - r['cold_loss']:+.1e} | {r['peak_mb']:.0f} |", flush=True)


def _chosen(cases: list[int] | None, quick: bool) -> list:
    """The rows asked for (1-based, in the order given), else all (the first four ``quick``)."""
    if cases is None:
        return CASES[:4] if quick else CASES
    return [CASES[i - 1] for i in cases]


def books(d: str, repeats: int, quick: bool, cases: list[int] | None = None) -> None:
    from streamspec.experiments.datasets import default_data_path

    root = default_data_path()
    folder = None if root is None else root / "books"
    if folder is None or not folder.is_dir():
        print(f"books: no data (looked for books/ under {root}); skipped")
        return
    train_words, test_words = [], []
    for f in sorted(folder.glob("*.txt")):
        w = book_words(f)
        cut = int(len(w) * 0.9)
        train_words += w[:cut]
        test_words += w[cut:]
    vocab, counts = np.unique(np.array(train_words), return_counts=True)
    index = {w: i for i, w in enumerate(vocab[counts >= 2].tolist())}
    other = len(index)
    train = np.fromiter((index.get(w, other) for w in train_words), dtype=np.int64)
    test = np.fromiter((index.get(w, other) for w in test_words), dtype=np.int64)
    start = int(np.random.default_rng(0).integers(0, test.size - 30_000))
    path = os.path.join(d, "books.npz")
    np.savez(path, train=train, test=test[start : start + 30_000])
    _table(f"Books as words: n = {other + 1:,}, {train.size:,} training tokens, +1%, rank auto",
           path, other + 1, "auto", repeats, _chosen(cases, quick))


def zipf(d: str, repeats: int, quick: bool, cases: list[int] | None = None) -> None:
    n, length, rank = 100_000, (10**6 if quick else 10**7), 50
    x = zipf_hmm_stream(n, length + 10_000)
    path = os.path.join(d, "zipf.npz")
    np.savez(path, train=x[:length], test=x[length:])
    _table(f"Synthetic Zipf stream: n = {n:,}, {length:,} training tokens, +1%, rank {rank}",
           path, n, rank, repeats, _chosen(cases, quick))


def case_refitter(path: str, n: int, rank, kind: str, refits: int) -> dict:
    """In a fresh process, a daemon's pattern: a ``Refitter`` fits all but ``refits``% of the
    training tokens cold, then refits after each further 1% (inline; at each swap the model
    before the previous one is dropped, as in a daemon); then a cold fit of the final counts."""
    from streamspec import MomentAccumulator
    from streamspec.streaming.refitter import Refitter

    data = np.load(path)
    train, test = data["train"], data["test"]
    step = train.size // 100
    cut = train.size - refits * step
    acc = MomentAccumulator(n_symbols=n)
    acc.learn_many(train[:cut])
    refitter = Refitter(_estimator(kind, rank, "auto", False), refit_every=None)
    t0 = time.perf_counter()
    refitter.fit_now(acc)
    first_s, secs, warm, losses = time.perf_counter() - t0, [], [], []
    for i in range(refits):
        acc.learn_many(train[cut + i * step : cut + (i + 1) * step])
        t0 = time.perf_counter()
        refitter.fit_now(acc)
        secs.append(time.perf_counter() - t0)
        warm.append(refitter.records[-1].warm)
        losses.append(refitter.model.log_loss([test]))
    refitter.close()
    del refitter  # its two models' operators: the cold fit below gets memory as a fresh process would
    t0 = time.perf_counter()
    cold = _estimator(kind, rank, "auto", False).fit(acc)
    cold_s = time.perf_counter() - t0
    return {"first": first_s, "refits": secs, "warm": warm, "losses": losses, "cold": cold_s,
            "cold_loss": cold.log_loss([test])}


def refitter(d: str, repeats: int, quick: bool, cases: list[int] | None = None) -> None:
    """The Zipf stream through a ``Refitter``: successive warm refits after 1% more data each."""
    n, length, rank, refits = 100_000, (10**6 if quick else 10**7), 50, 3
    x = zipf_hmm_stream(n, length + 10_000)
    path = os.path.join(d, "zipf.npz")
    np.savez(path, train=x[:length], test=x[length:])
    print(f"\n### A Refitter on the synthetic Zipf stream: n = {n:,}, {length:,} training tokens, "
          f"{100 - refits}% fitted cold, then {refits} refits after 1% more each, rank {rank}\n")
    print("| estimator | first fit (s) | refits (s; warm) | cold fit of all (s) | last refit / cold "
          "| held-out log loss after each refit | cold | peak MB |")
    print("| --- | ---: | --- | ---: | ---: | --- | ---: | ---: |")
    for label, kind in (("SpectralEstimator (default: backoff)", "s"),
                        ("MEstimator (default: backoff)", "m")):
        r = run_fresh(case_refitter, path, n, rank, kind, refits)
        if "error" in r:
            print(f"| {label} | | {r['error']} | | | | | |", flush=True)
            continue
        fits = ", ".join(f"{s:.2f}" + ("" if w else " (cold)")
                         for s, w in zip(r["refits"], r["warm"], strict=True))
        print(f"| {label} | {r['first']:.2f} | {fits} | {r['cold']:.2f} | "
              f"{r['refits'][-1] / r['cold']:.3f} | {', '.join(f'{v:.4f}' for v in r['losses'])} | "
              f"{r['cold_loss']:.4f} | {r['peak_mb']:.0f} |", flush=True)


WINDOW_CASES = [  # (label, estimator, backoff)
    ("MEstimator, backoff=None", "m", None),
    ("MEstimator (default: backoff)", "m", "auto"),
    ("SpectralEstimator, backoff=None", "s", None),
    ("SpectralEstimator (default: backoff)", "s", "auto"),
]


def _sequences(x: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(x, np.cumsum(lengths)[:-1]) if lengths.size else []


def case_windows(path: str, kind: str, backoff, more: float, repeats: int) -> dict:
    """In a fresh process: the state of the fit before ``more`` new data (a share of the
    total), then warm refits from it and cold fits interleaved (best of ``repeats``)."""
    from streamspec import MomentAccumulator

    data = np.load(path)
    train = _sequences(data["train"], data["train_len"])
    test = _sequences(data["test"], data["test_len"])
    total = sum(s.size for s in train)
    cut = int(total * (1 - more))
    acc = MomentAccumulator(n_symbols=int(data["n"]))
    seen, rest = 0, []
    for s in train:  # the first part: whole sequences, the one across the cut split there
        if seen >= cut:
            rest.append(s)
        elif seen + s.size > cut and len(train) == 1:  # one stream: it continues
            acc.learn_many(s[: cut - seen])
            rest.append(s[cut - seen:])
        else:
            acc.learn_many(s)
            if len(train) > 1:
                acc.end()
        seen += s.size
    first, state = _estimator(kind, "auto", backoff, False).fit_with_state(acc)
    first_loss = first.log_loss(test)
    del first
    for s in rest:
        acc.learn_many(s)
        if len(train) > 1:
            acc.end()
    warm_s, cold_s = [], []
    for _ in range(repeats):
        est = _estimator(kind, "auto", backoff, False)
        t0 = time.perf_counter()
        warm, kept = est.fit_with_state(acc, init=state)
        warm_s.append(time.perf_counter() - t0)
        info, warm_loss = est.refit_, warm.log_loss(test)
        cold_est = _estimator(kind, "auto", backoff, False)
        t0 = time.perf_counter()
        cold = cold_est.fit(acc)
        cold_s.append(time.perf_counter() - t0)
        cold_loss = cold.log_loss(test)
    return {"warm": min(warm_s), "cold": min(cold_s), "path": info.path, "reason": info.reason,
            "residual": float(info.residual), "changed": float(info.changed),
            "level": kept.level, "k": kept.k, "cold_level": cold_est.window_,
            "cold_k": cold_est.rank_, "warm_loss": warm_loss, "cold_loss": cold_loss,
            "first_loss": first_loss}


def _window_table(name: str, path: str, repeats: int) -> None:
    print(f"\n### {name}\n")
    print("| estimator | more data | l, k warm (cold) | warm (s) | cold (s) | warm / cold | path "
          "(mass changed; backward error, noise units) | held-out log loss warm | cold "
          "| warm − cold | before − cold | peak MB |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for more in (0.01, 0.1):
        for label, kind, backoff in WINDOW_CASES:
            r = run_fresh(case_windows, path, kind, backoff, more, repeats)
            if "error" in r:
                print(f"| {label} | {more:.0%} | | | | | {r['error']} | | | | | |", flush=True)
                continue
            why = "" if r["path"] == "warm" else f"; {r['reason']}"
            print(f"| {label} | +{more:.0%} | {r['level']}, {r['k']} ({r['cold_level']}, {r['cold_k']}) "
                  f"| {r['warm']:.3f} | {r['cold']:.3f} | {r['warm'] / r['cold']:.3f} | {r['path']} "
                  f"({r['changed']:.4f}; {r['residual']:.3f}{why}) | {r['warm_loss']:.5f} | "
                  f"{r['cold_loss']:.5f} | {r['warm_loss'] - r['cold_loss']:+.1e} | "
                  f"{r['first_loss'] - r['cold_loss']:+.1e} | {r['peak_mb']:.0f} |", flush=True)


def windows(d: str, repeats: int, quick: bool, cases: list[int] | None = None) -> None:
    from bench_windows import sparse_automaton

    from streamspec.experiments.datasets import load_splice

    size = 3 * 10**5 if quick else 10**6
    x = np.asarray(sparse_automaton(10, 4, seed=1).sample(size + 20_000, random_state=3))
    path = os.path.join(d, "automaton.npz")
    np.savez(path, train=x[:size], train_len=[size], test=x[size:], test_len=[20_000], n=4)
    _window_table(f"Sparse automaton, 10 states, 4 symbols: {size:,} training symbols, "
                  "count_window and rank auto", path, repeats)
    try:
        seqs = [np.array(["ACGT".index(c) for c in s]) for s in load_splice()]
    except (OSError, ValueError) as e:
        print(f"splice: no data ({e}); skipped")
        return
    order = np.random.default_rng(0).permutation(len(seqs))
    held = int(len(seqs) * 0.1)
    test, train = [seqs[i] for i in order[:held]], [seqs[i] for i in order[held:]]
    path = os.path.join(d, "splice.npz")
    np.savez(path, train=np.concatenate(train), train_len=[s.size for s in train],
             test=np.concatenate(test), test_len=[s.size for s in test], n=4)
    _window_table(f"Splice: {len(train):,} training sequences ({sum(s.size for s in train):,} "
                  f"symbols), {held:,} held out, count_window and rank auto", path, repeats)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sections", nargs="*", choices=["books", "zipf", "windows", "refitter"],
                   default=["books", "zipf", "windows"])
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer cases (a smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="interleaved warm/cold pairs (best of)")
    p.add_argument("--cases", type=int, nargs="+", default=None,
                   help="run these rows only, in this order (1-6, the table's order)")
    args = p.parse_args(argv)
    print(f"python {' '.join([Path(sys.argv[0]).name] + sys.argv[1:])}; 1 BLAS thread, "
          f"{os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as d:
        for name in args.sections:
            repeats = args.repeats or (1 if name == "zipf" else 3)
            {"books": books, "zipf": zipf, "windows": windows,
             "refitter": refitter}[name](d, repeats, args.quick, args.cases)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

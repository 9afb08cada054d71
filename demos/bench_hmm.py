"""HMM recovery from triple counts (HMMEstimator) vs hmmlearn EM, on random HMMs and real sets.

    python demos/bench_hmm.py [synthetic|real|all] [--quick] [--train N] [--test N]
                              [--sets alice,splice,chorales,dodgers,books] [--book-tokens N]

``synthetic`` (the default): random HMMs, sticky (0.9 on the diagonal, Dirichlet(½)
emissions) and generic (Dirichlet(1) columns), with 3-10 states and 10-50 symbols.
Every model learns from one training stream and is scored on one held-out stream of
the same HMM. ``real``: Alice (letters), Splice (DNA), Bach chorales (melody
pitch), Dodgers (binned loop-sensor counts) and a word stream from the books under
``../shared/data/books`` (or ``STREAMSPEC_DATA``); a set whose files are missing is
skipped with a line saying where the data were looked for.

Held-out log loss (nats per symbol): minus the total log-likelihood of the held-out
sequences divided by their number of symbols; for an HMM the forward filter over
each whole held-out sequence from the model's own start distribution, for the
operator models (window predictor, θ_M) ``log_loss``. Models, m hidden states:

- ``bigram``: add-½ bigram (``streamspec.experiments.baselines.NGramModel(order=1, alpha=0.5)``);
- ``window``: ``SpectralEstimator(rank=m)`` (θ_spec, window-2 filter), shown as
  default (with its Kneser-Ney backoff) / plain (``without_backoff()`` of the same
  fit, identical to a ``backoff=None`` fit: the backoff's final fit uses all counts);
- ``θ_M``: ``MEstimator(rank=m)``, likewise default / plain;
- ``moments``: ``HMMEstimator(n_iter=0)``, the method of moments alone;
- ``ours``: ``HMMEstimator()``, the default (moments, then 50 E-steps of EM, SQUAREM, on
  the distinct counted triples), forward filter (HMMEstimator has no backoff);
- ``ours+3``: the same with ``n_restarts=3``;
- ``EM``: hmmlearn ``CategoricalHMM`` (same m, n_iter=100, tol=1e-4) on the
  training sequences, best training likelihood of 3 seeded restarts;
- ``EM from ours``: hmmlearn EM (n_iter=100, tol=1e-4) started at our default fit:
  the nearest local maximum of the full-sequence likelihood, a reference for how far
  the triple-count fit is from it (hmmlearn's random starts can stall far from it);
- ``EM@ours``: hmmlearn EM (seed 0) given the time of our default fit: one
  iteration is timed, then EM runs ``max(1, floor(budget / that time))`` iterations.

The aims checked per case: ours within 0.1% of EM's (best of 3) log loss, EM's fit
at least 20× slower than ours, and ours better than EM@ours.

Our fit times include counting the triples (``MomentAccumulator.learn_many``); EM's
include all restarts. On synthetic HMMs, parameter errors against the truth after
matching states (Hungarian assignment on the L1 distance of emission columns, as in
``tests/core/test_hmm_recovery.py``): emission error = largest total-variation distance
between matched emission distributions, transition error = largest entry error of T.

Real splits: Alice (``11-0.txt``, letters a-z) and the books are single streams, the
last 10% held out as one sequence; the books stream is the first ``--book-tokens``
tokens (200,000; words and sentence punctuation) of the five books in file order,
vocabulary the training words seen at least twice plus ``<other>``: a subset so that
hmmlearn's three restarts take a few minutes. Splice, the chorales and Dodgers are
lists of sequences: a seeded 80% of the sequences train (counted sequence by
sequence: ``learn_many`` then ``end``; hmmlearn gets their lengths), the other 20%
are scored, each from its start. HMMEstimator needs m ≤ n, so Splice (4 symbols)
uses m = 3 and 4. A held-out score of -inf (a zero probability) is recomputed with
the emissions floored at 1e-6 and marked ``*``.

BLAS is pinned to one thread. The machine is shared: times are indicative, ratios
within one run are what counts.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
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
    SpectralEstimator,
)
from streamspec.experiments.baselines import NGramModel  # noqa: E402

EM_ITER, EM_TOL, EM_RESTARTS = 100, 1e-4, 3
AIM_GAP, AIM_SPEEDUP = 0.001, 20.0  # within 0.1% of EM's log loss, at least 20x faster

# ---------------------------------------------------------------------------- models


def sticky(m: int, n: int, seed: int) -> HMM:
    rng = np.random.default_rng(seed)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    O = rng.dirichlet(np.full(n, 0.5), size=m).T
    return HMM(T, O)


def generic(m: int, n: int, seed: int) -> HMM:
    return HMM.random(m, n, random_state=seed)


def match(truth: HMM, model: HiddenMarkovModel) -> tuple[float, float]:
    """Emission and transition errors after matching states."""
    return model.errors_against(truth)[:2]


def hmm_loss(model: HiddenMarkovModel, seqs: list[np.ndarray]) -> tuple[float, bool]:
    """``(log loss, floored)``: forward-filter log loss over the held-out sequences.

    A model that gives some held-out symbol probability 0 (hmmlearn on a symbol absent
    from its training data) is scored with its emissions floored at 1e-6 (``floored``).
    """
    total = sum(-model.score(s) for s in seqs)
    count = sum(len(s) for s in seqs)
    if np.isfinite(total):
        return total / count, False
    E = model.emissionprob_ + 1e-6
    model = HiddenMarkovModel(model.startprob_, model.transmat_, E / E.sum(axis=1, keepdims=True))
    return sum(-model.score(s) for s in seqs) / count, True


def count_triples(train: list[np.ndarray], n: int) -> tuple[MomentAccumulator, float]:
    t0 = time.perf_counter()
    acc = MomentAccumulator(n_symbols=n)
    for s in train:
        acc.learn_many(s)
        acc.end()
    acc.triples()  # merge the buffered counts now, inside the timed part
    return acc, time.perf_counter() - t0


def _em(X, lengths, n: int, m: int, n_iter: int, seed: int):
    from hmmlearn.hmm import CategoricalHMM

    h = CategoricalHMM(n_components=m, n_features=n, n_iter=n_iter, tol=EM_TOL, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h.fit(X, lengths)
    return h


def fit_em(train: list[np.ndarray], n: int, m: int, restarts: int = EM_RESTARTS):
    """hmmlearn EM, best training likelihood of ``restarts`` seeded starts: (model, seconds)."""
    X = np.concatenate(train).reshape(-1, 1)
    lengths = [len(s) for s in train]
    t0 = time.perf_counter()
    best, best_ll = None, -np.inf
    for seed in range(restarts):
        h = _em(X, lengths, n, m, EM_ITER, seed)
        ll = h.score(X, lengths)
        if ll > best_ll:
            best, best_ll = h, ll
    return HiddenMarkovModel.from_hmmlearn(best), time.perf_counter() - t0


def fit_em_from(train: list[np.ndarray], start: HiddenMarkovModel):
    """hmmlearn EM (n_iter=100, tol=1e-4) started at ``start``'s parameters: (model, seconds)."""
    from hmmlearn.hmm import CategoricalHMM

    X = np.concatenate(train).reshape(-1, 1)
    lengths = [len(s) for s in train]
    t0 = time.perf_counter()
    h = CategoricalHMM(n_components=start.n_states, n_features=start.n_symbols, n_iter=EM_ITER,
                       tol=EM_TOL, init_params="")
    h.startprob_, h.transmat_, h.emissionprob_ = start.startprob_, start.transmat_, start.emissionprob_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h.fit(X, lengths)
    return HiddenMarkovModel.from_hmmlearn(h), time.perf_counter() - t0


def fit_em_budget(train: list[np.ndarray], n: int, m: int, budget: float):
    """hmmlearn EM (seed 0) with about ``budget`` seconds: (model, seconds, iterations)."""
    X = np.concatenate(train).reshape(-1, 1)
    lengths = [len(s) for s in train]
    t0 = time.perf_counter()
    h = _em(X, lengths, n, m, 1, 0)
    one = time.perf_counter() - t0
    k = max(1, int(budget // one))
    if k > 1:
        t0 = time.perf_counter()
        h = _em(X, lengths, n, m, k, 0)
        one = time.perf_counter() - t0
    return HiddenMarkovModel.from_hmmlearn(h), one, len(h.monitor_.history)


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def warm_up() -> None:
    """One tiny fit of each kind, so that no timed fit pays for imports or first calls."""
    x = generic(2, 4, 0).sample(2_000, random_state=0)
    acc, _ = count_triples([x], 4)
    HMMEstimator(n_states=2, random_state=0).fit(acc)
    SpectralEstimator(rank=2).fit(acc)
    MEstimator(rank=2).fit(acc)
    fit_em([x], 4, 2, restarts=1)


# ---------------------------------------------------------------------------- one case


def run_case(train: list[np.ndarray], test: list[np.ndarray], n: int, m: int, restarts: bool = True,
             truth: HMM | None = None) -> dict:
    """Fit every model on ``train`` and score it on ``test``; a dict of results."""
    r: dict = {"m": m, "n": n}
    say = lambda what: print(f"  ... m={m} n={n}: {what}", file=sys.stderr, flush=True)  # noqa: E731
    r["bigram"] = (NGramModel(n, order=1, alpha=0.5).fit(train).log_loss(test), None)
    acc, t_count = count_triples(train, n)
    r["count_s"] = t_count
    for key, est in (("window", SpectralEstimator(rank=m)), ("theta_M", MEstimator(rank=m))):
        model, s = timed(est.fit, acc)
        r[key] = ((model.log_loss(test), model.without_backoff().log_loss(test)), t_count + s)
    say("window, θ_M")
    variants = [("moments", {"n_iter": 0}), ("ours", {})]
    if restarts:
        variants.append(("ours+3", {"n_restarts": 3}))
    fitted = {}
    for key, kw in variants:
        model, s = timed(HMMEstimator(n_states=m, random_state=0, **kw).fit, acc)
        fitted[key] = model
        r[key] = (hmm_loss(model, test), t_count + s)
        if truth is not None:
            r[key + "_err"] = match(truth, model)
    say("ours")
    model, s = fit_em(train, n, m)
    r["EM"] = (hmm_loss(model, test), s)
    if truth is not None:
        r["EM_err"] = match(truth, model)
    say(f"EM ({s:.1f} s)")
    model, s = fit_em_from(train, fitted["ours"])
    r["EM<ours"] = (hmm_loss(model, test), s)
    if truth is not None:
        r["EM<ours_err"] = match(truth, model)
    say(f"EM from ours ({s:.1f} s)")
    model, s, iters = fit_em_budget(train, n, m, r["ours"][1])
    r["EM@ours"] = (hmm_loss(model, test), s)
    r["EM@ours_iter"] = iters
    if truth is not None:
        r["truth"] = hmm_loss(HiddenMarkovModel.from_hmm(truth), test)[0]
    return r


def _t(s: float) -> str:
    return f"{s:.1f}" if s >= 10 else f"{s:.2f}" if s >= 0.1 else f"{s:.3f}"


def _ll(v) -> str:
    ll, floored = v
    return f"{ll:.4f}{'*' if floored else ''}"


def loss_row(label: str, r: dict) -> str:
    cells = [label, str(r["m"]), str(r["n"])]
    if "truth" in r:
        cells.append(f"{r['truth']:.4f}")
    cells.append(f"{r['bigram'][0]:.4f}")
    for key in ("window", "theta_M"):
        (d, p), s = r[key]
        cells.append(f"{d:.4f} / {p:.4f} ({_t(s)})")
    for key in ("moments", "ours", "ours+3", "EM", "EM<ours"):
        cells.append(f"{_ll(r[key][0])} ({_t(r[key][1])})" if key in r else "–")
    cells.append(f"{_ll(r['EM@ours'][0])} ({_t(r['EM@ours'][1])}, {r['EM@ours_iter']} it.)")
    return "| " + " | ".join(cells) + " |"


def aim_row(label: str, r: dict) -> str:
    ours, t_ours = r["ours"][0][0], r["ours"][1]
    em, t_em = r["EM"][0][0], r["EM"][1]
    budget = r["EM@ours"][0][0]
    gap = (ours - em) / em
    speed = t_em / t_ours
    met = [gap <= AIM_GAP, speed >= AIM_SPEEDUP, ours < budget]
    cells = [label, str(r["m"]), str(r["n"]), f"{100 * gap:+.2f}%", f"{speed:.0f}×",
             f"{ours - budget:+.4f}", " ".join("yes" if x else "**no**" for x in met)]
    if "ours+3" in r:
        best3 = r["ours+3"][0][0]
        cells.append(f"{100 * (best3 - em) / em:+.2f}% ({r['EM'][1] / r['ours+3'][1]:.0f}×)")
    polished = r["EM<ours"][0][0]
    cells.append(f"{100 * (ours - polished) / polished:+.2f}%")
    if "ours_err" in r:
        for i in (0, 1):
            cells.append(" / ".join(f"{r[k + '_err'][i]:.3f}" for k in ("moments", "ours", "EM", "EM<ours")))
    return "| " + " | ".join(cells) + " |"


LOSS_HEAD = ("| bigram | window: default / plain (s) | θ_M: default / plain (s) | moments (s) | ours (s) "
             "| ours+3 (s) | EM best of 3 (s) | EM from ours (s) | EM@ours (s, iterations) |")
AIM_HEAD = ("| ours vs EM | EM time / ours | ours − EM@ours (nats) | ≤0.1% / ≥20× / beats EM@ours "
            "| ours+3 vs EM (time ratio) | ours vs EM from ours |")


def print_tables(first: str, rows: list[tuple[str, dict]], truth: bool) -> None:
    head = first + (" truth |" if truth else "") + LOSS_HEAD[1:]
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for label, r in rows:
        print(loss_row(label, r))
    print()
    head = first + AIM_HEAD[1:]
    if truth:
        head += (" emission error: moments / ours / EM / EM from ours "
                 "| transition error: moments / ours / EM / EM from ours |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for label, r in rows:
        print(aim_row(label, r))


# ---------------------------------------------------------------------------- synthetic


def synthetic(args) -> None:
    cases = [(3, 10), (5, 20), (10, 50)] if not args.quick else [(3, 10), (5, 20)]
    train = args.train if not args.quick else 20_000
    test = args.test if not args.quick else 5_000
    print(f"\n### Synthetic HMMs: training stream {train:,} symbols, held-out stream {test:,} "
          "symbols (one sequence each)\n")
    print("Log loss in nats/symbol (fit seconds); window and θ_M: default (with backoff) / plain.\n")
    rows = []
    for kind, make in (("sticky", sticky), ("generic", generic)):
        for m, n in cases:
            truth = make(m, n, seed=m * 100 + n)
            seq = truth.sample(train + test, random_state=1)
            r = run_case([seq[:train]], [seq[train:]], n, m, truth=truth)
            rows.append((kind, r))
    print_tables("| HMM | m | n |", rows, truth=True)


# ---------------------------------------------------------------------------- real sets


def book_words(path: Path) -> list[str]:
    """Lower-cased words and sentence punctuation of one Gutenberg book (as bench_large.py)."""
    from streamspec.experiments.datasets import strip_gutenberg

    text = strip_gutenberg(path.read_text(encoding="utf-8", errors="replace")).lower()
    return re.findall(r"[a-z]+(?:'[a-z]+)?|[.,;:!?]", text)


def _split_sequences(seqs: list[np.ndarray], frac: float = 0.8, seed: int = 0):
    order = np.random.default_rng(seed).permutation(len(seqs))
    cut = int(math.ceil(frac * len(seqs)))
    return [seqs[i] for i in order[:cut]], [seqs[i] for i in order[cut:]]


def _split_stream(x: np.ndarray, frac: float = 0.9):
    cut = int(len(x) * frac)
    return [x[:cut]], [x[cut:]]


def load_set(name: str, quick: bool, book_tokens: int):
    """``(train, test, n, states, note)`` of one real set, symbols as indices 0..n-1."""
    from streamspec.experiments import datasets, datasets_chorales, datasets_dodgers

    if name == "alice":
        letters = datasets.load_alice_letters()
        x = np.frombuffer(letters.encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("a")
        if quick:
            x = x[:15_000]
        train, test = _split_stream(x)
        return train, test, 26, [5] if quick else [5, 10], "letters a–z, last 10% held out"
    if name == "splice":
        seqs = [np.array(["ACGT".index(c) for c in s]) for s in datasets.load_splice()]
        if quick:
            seqs = seqs[:150]
        train, test = _split_sequences(seqs)
        return train, test, 4, [4] if quick else [3, 4], "A/C/G/T, 80% of the sequences train"
    if name == "chorales":
        raw = datasets_chorales.load_chorales()
        values = sorted({v for s in raw for v in s})
        index = {v: i for i, v in enumerate(values)}
        seqs = [np.array([index[v] for v in s], dtype=np.int64) for s in raw]
        train, test = _split_sequences(seqs)
        return train, test, len(values), [5] if quick else [5, 10], "melody pitch, 80% of the chorales train"
    if name == "dodgers":
        seqs = [np.asarray(s, dtype=np.int64) for s in datasets_dodgers.load_dodgers()]
        if quick:
            seqs = [s[:500] for s in seqs]
        train, test = _split_sequences(seqs)
        return train, test, 10, [5] if quick else [5, 10], "10 quantile bins, 80% of the runs train"
    if name == "books":
        root = datasets.default_data_path()
        folder = None if root is None else root / "books"
        if folder is None or not folder.is_dir():
            raise FileNotFoundError(f"no books/ folder under {root}")
        words: list[str] = []
        for f in sorted(folder.glob("*.txt")):
            words += book_words(f)
            if len(words) >= book_tokens:
                break
        words = words[:book_tokens]
        cut = int(len(words) * 0.9)
        # vocabulary: training words seen twice or more; the rest is one symbol "<other>"
        vocab, counts = np.unique(np.array(words[:cut]), return_counts=True)
        keep = vocab[counts >= 2].tolist()
        index = {w: i for i, w in enumerate(keep)}
        other = len(keep)
        x = np.fromiter((index.get(w, other) for w in words), dtype=np.int64)
        train, test = [x[:cut]], [x[cut:]]
        first = sorted(folder.glob("*.txt"))[0].name
        note = (f"first {len(words):,} tokens of the books in file order ({first} first), words seen "
                "≥ 2 times in training + <other>, last 10% held out")
        return train, test, other + 1, [10], note
    raise ValueError(name)


def real(args) -> None:
    from streamspec.experiments.datasets import ENV_VAR, default_data_path

    root = default_data_path()
    book_tokens = args.book_tokens if not args.quick else 10_000
    print(f"\n### Real sets (data: {root}; {ENV_VAR} {'set' if os.environ.get(ENV_VAR) else 'not set'})\n")
    rows, notes = [], []
    for name in args.sets.split(","):
        try:
            train, test, n, states, note = load_set(name, args.quick, book_tokens)
        except FileNotFoundError as exc:
            print(f"- {name}: skipped, data not found ({exc})")
            continue
        ntr, nte = sum(map(len, train)), sum(map(len, test))
        notes.append(f"- {name}: n = {n}, {len(train):,} training sequence(s) / {ntr:,} symbols, "
                     f"{len(test):,} held-out / {nte:,} symbols; {note}")
        print(notes[-1], flush=True)
        for m in states:
            rows.append((name, run_case(train, test, n, m)))
    if rows:
        print("\nLog loss in nats/symbol (fit seconds) over all held-out symbols; window and θ_M: "
              "default (with backoff) / plain. * = emissions floored at 1e-6 to score.\n")
        print_tables("| set | m | n |", rows, truth=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("section", nargs="?", default="synthetic", choices=["synthetic", "real", "all"])
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases (a smoke run)")
    ap.add_argument("--train", type=int, default=100_000, help="synthetic training symbols")
    ap.add_argument("--test", type=int, default=20_000, help="synthetic held-out symbols")
    ap.add_argument("--sets", default="alice,splice,chorales,dodgers,books",
                    help="real sets, comma-separated")
    ap.add_argument("--book-tokens", type=int, default=200_000, help="tokens of the book word stream")
    args = ap.parse_args(argv)
    print(f"python demos/bench_hmm.py {' '.join(sys.argv[1:] if argv is None else argv)}; "
          f"1 BLAS thread, {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}")
    warm_up()
    if args.section in ("synthetic", "all"):
        synthetic(args)
    if args.section in ("real", "all"):
        real(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

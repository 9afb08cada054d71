"""Progressive validation of ``streamspec.SpectralHMM`` against river baselines.

Two streams:

- **Alice**: the letters of *Alice's Adventures in Wonderland* (26 symbols, one stream);
  skipped with a message when the data folder is absent.
- **Sessions**: a synthetic keyed stream, many sessions of a 5-state HMM interleaved at
  random (``x = {"session": id}``), as a web or app log would be. The true HMM's own
  filter gives the best achievable score, printed as a reference.

Each model predicts the next symbol, then learns it (``evaluate.progressive_val_score``
with ``metrics.Accuracy() + metrics.CrossEntropy()``). Baselines, as a river user would
write them: a per-stream bigram frequency model (``river_baselines.BigramFrequency``),
``naive_bayes.MultinomialNB`` on the one-hot last two symbols of the stream, and
``dummy.PriorClassifier`` (the unigram). The metric curves are printed and saved as a PNG.

Run from the repository root::

    python demos/river_pipeline.py                 # both streams, ~4 minutes (NB is slow)
    python demos/river_pipeline.py --quick         # smaller streams
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from river import compose, dummy, evaluate, metrics, naive_bayes, preprocessing
from river_baselines import BigramFrequency, with_last_symbols

from streamspec import HMM, SpectralHMM
from streamspec.experiments.datasets import default_data_path, load_alice_letters

HERE = Path(__file__).resolve().parent


def model_factories(key: str | None, refit_every: int) -> dict[str, Callable]:
    """name -> (make model, whether it needs the prev1/prev2 features)."""
    return {
        "SpectralHMM (auto rank)": (
            lambda: SpectralHMM(key=key, refit_every=refit_every),
            False,
        ),
        "SpectralHMM (rank 12)": (
            lambda: SpectralHMM(rank=12, key=key, refit_every=refit_every),
            False,
        ),
        "SpectralHMM (auto, backgr.)": (
            lambda: SpectralHMM(key=key, refit_every=refit_every, background=True),
            False,
        ),
        "bigram frequency": (lambda: BigramFrequency(key=key), False),
        "MultinomialNB(last 2)": (
            lambda: compose.Select("prev1", "prev2")
            | preprocessing.OneHotEncoder()
            | naive_bayes.MultinomialNB(alpha=0.1),
            True,
        ),
        "prior (unigram)": (dummy.PriorClassifier, False),
    }


def run(name: str, data: list, make: Callable, needs_prev: bool, key: str | None, step: int):
    """Progressive validation; returns (final accuracy, final cross-entropy, curve, seconds)."""
    model = make()
    stream = with_last_symbols(data, key=key) if needs_prev else iter(data)
    metric = metrics.Accuracy() + metrics.CrossEntropy()
    curve = []
    t0 = time.perf_counter()
    for state in evaluate.iter_progressive_val_score(stream, model, metric, step=step):
        curve.append((state["Step"], state["Accuracy"].get(), state["CrossEntropy"].get()))
    seconds = time.perf_counter() - t0
    acc, ce = metric
    if isinstance(model, SpectralHMM) and model.background:
        model.refitter.close()
    return acc.get(), ce.get(), curve, seconds, model


def alice_data(max_symbols: int | None) -> list | None:
    if default_data_path() is None:
        print("Alice: no data folder found (set STREAMSPEC_DATA); skipping the Alice stream.")
        return None
    try:
        letters = load_alice_letters()
    except FileNotFoundError as exc:
        print(f"Alice: {exc}; skipping the Alice stream.")
        return None
    if max_symbols:
        letters = letters[:max_symbols]
    return [({}, c) for c in letters]


def cycling_hmm(n_states: int = 5, n_symbols: int = 12, seed: int = 0) -> HMM:
    """An HMM that mostly moves to the next state (0.75) or stays (0.2); sparse emissions."""
    rng = np.random.default_rng(seed)
    T = np.full((n_states, n_states), 0.05 / (n_states - 1))
    for h in range(n_states):
        T[(h + 1) % n_states, h], T[h, h] = 0.75, 0.20
    T /= T.sum(axis=0)
    emissions = rng.dirichlet(np.full(n_symbols, 0.15), size=n_states).T
    return HMM(T, emissions)


def session_data(n_sessions: int, length: int, seed: int = 0):
    """Interleaved sessions of a 5-state HMM; also the true model's filter score."""
    letters = "abcdefghijkl"
    hmm = cycling_hmm(n_symbols=len(letters), seed=seed)
    seqs = hmm.sample_many(n_sessions, length, random_state=seed + 1)
    rng = np.random.default_rng(seed + 2)
    order = np.repeat(np.arange(n_sessions), length)
    rng.shuffle(order)
    pos = np.zeros(n_sessions, dtype=np.int64)
    data = []
    for s in order.tolist():
        data.append(({"session": f"u{s}"}, letters[seqs[s, pos[s]]]))
        pos[s] += 1
    # reference: the true HMM's recursive filter, per session
    oracle = hmm.operators().with_filter("recursive")
    ll, hits = 0.0, 0
    for seq in seqs:
        P = oracle.predictive_sequence(seq)
        ll -= float(np.log(P[np.arange(length), seq]).sum())
        hits += int((P.argmax(axis=1) == seq).sum())
    return data, hits / seqs.size, ll / seqs.size


def describe(name: str, model) -> None:
    """What the refitter did, for the SpectralHMM models."""
    if not isinstance(model, SpectralHMM):
        return
    r = model.refitter
    ranks = [rec.rank for rec in r.records]
    print(
        f"  [{name}] {r.n_fits} fits (last {r.last_fit_seconds * 1e3:.1f} ms), model fitted "
        f"on {r.fitted_on_symbols:,} symbols, ranks {ranks}"
    )


def report(title: str, results: dict, reference: tuple[float, float] | None = None) -> None:
    print(f"\n== {title} ==")
    print(f"{'model':28s} {'accuracy':>9s} {'cross-entropy':>14s} {'symbols/s':>10s}")
    for name, (acc, ce, _, seconds, n) in results.items():
        print(f"{name:28s} {acc:9.4f} {ce:14.4f} {n / seconds:10,.0f}")
    if reference is not None:
        print(f"{'(true HMM filter)':28s} {reference[0]:9.4f} {reference[1]:14.4f}")
    first = next(iter(results.values()))
    print("curve of SpectralHMM (symbols: accuracy / cross-entropy):")
    picks = first[2][:: max(1, len(first[2]) // 8)] + first[2][-1:]
    print("  " + "  ".join(f"{s:,}: {a:.3f}/{c:.3f}" for s, a, c in picks))


def plot(panels: list[tuple[str, dict, tuple | None]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(12, 4 * len(panels)), squeeze=False)
    for row, (title, results, reference) in enumerate(panels):
        for col, (label, idx) in enumerate((("accuracy", 1), ("cross-entropy (nats)", 2))):
            ax = axes[row, col]
            for name, (_, _, curve, _, _) in results.items():
                steps = [c[0] for c in curve]
                ax.plot(steps, [c[idx] for c in curve], label=name)
            if reference is not None:
                ax.axhline(reference[col], color="k", ls=":", label="true HMM filter")
            ax.set_title(f"{title}: {label} (cumulative)")
            ax.set_xlabel("symbols")
            if idx == 2:
                finite = [c[2] for r in results.values() for c in r[2] if math.isfinite(c[2])]
                if finite:
                    low = min(finite + ([reference[1]] if reference else []))
                    ax.set_ylim(0.95 * low, min(max(finite), 1.6 * low) * 1.02)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"\nsaved {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller streams")
    parser.add_argument("--sessions", type=int, default=1_000, help="interleaved sessions")
    parser.add_argument("--length", type=int, default=150, help="symbols per session")
    parser.add_argument("--refit-every", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=None,
                        help="PNG of the curves (default demos/river_pipeline.png; with "
                             "--quick none: the documented figure is not overwritten)")
    args = parser.parse_args(argv)
    if args.out is None and not args.quick:
        args.out = HERE / "river_pipeline.png"
    if args.quick:
        args.sessions, args.length = 200, 100
        args.refit_every = min(args.refit_every, 2_000)
    panels = []

    alice = alice_data(20_000 if args.quick else None)
    if alice is not None:
        results = {}
        step = max(1, len(alice) // 60)
        for name, (make, needs_prev) in model_factories(None, args.refit_every).items():
            acc, ce, curve, seconds, model = run(name, alice, make, needs_prev, None, step)
            results[name] = (acc, ce, curve, seconds, len(alice))
            describe(name, model)
        report(f"Alice, {len(alice):,} letters", results)
        panels.append(("Alice", results, None))

    data, oracle_acc, oracle_ce = session_data(args.sessions, args.length)
    results = {}
    step = max(1, len(data) // 60)
    for name, (make, needs_prev) in model_factories("session", args.refit_every).items():
        acc, ce, curve, seconds, model = run(name, data, make, needs_prev, "session", step)
        results[name] = (acc, ce, curve, seconds, len(data))
        describe(name, model)
    title = f"{args.sessions:,} interleaved sessions × {args.length} symbols"
    report(title, results, (oracle_acc, oracle_ce))
    panels.append(("Sessions", results, (oracle_acc, oracle_ce)))
    if args.out is not None:
        plot(panels, args.out)


if __name__ == "__main__":
    main()

"""HMM recovery from triple counts (HMMEstimator) vs hmmlearn EM on the whole stream.

    python demos/bench_hmm.py [--quick] [--train N] [--test N]

On random HMMs, sticky (0.9 on the diagonal) and generic (Dirichlet(1) columns),
with 3-10 states and 10-50 symbols, every model learns from one training stream
and is scored on one held-out stream of the same HMM: the held-out log loss is
``-score(heldout) / len(heldout)`` (nats per symbol; the forward filter over the
whole held-out stream, each model's own start distribution). Models:

- ``moments``: ``HMMEstimator(n_iter=0)``, the method of moments alone;
- ``moments+EM``: ``HMMEstimator()`` (the default: 50 iterations of EM on the
  counted triples);
- ``+restarts``: the same with ``n_restarts=3``;
- ``hmmlearn``: ``CategoricalHMM`` (same number of states, n_iter=100, tol=1e-4)
  on the training stream, best training likelihood of 3 seeded restarts.

Fit times include counting the triples for ours (``Triples.from_arrays``) and all
restarts for hmmlearn. The machine is shared, so times are indicative only.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from streamspec.hidden_markov_model import HiddenMarkovModel
from streamspec.hmm import HMM
from streamspec.hmm_estimator import HMMEstimator
from streamspec.triples import Triples


def sticky(m: int, n: int, seed: int) -> HMM:
    rng = np.random.default_rng(seed)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    O = rng.dirichlet(np.full(n, 0.5), size=m).T
    return HMM(T, O)


def generic(m: int, n: int, seed: int) -> HMM:
    return HMM.random(m, n, random_state=seed)


def fit_ours(seq: np.ndarray, n: int, m: int, **kw) -> tuple[HiddenMarkovModel, float]:
    t0 = time.perf_counter()
    triples = Triples.from_arrays(n, seq[:-2], seq[1:-1], seq[2:])
    model = HMMEstimator(n_states=m, random_state=0, **kw).fit(triples)
    return model, time.perf_counter() - t0


def fit_hmmlearn(seq: np.ndarray, n: int, m: int, restarts: int = 3) -> tuple[HiddenMarkovModel, float]:
    from hmmlearn.hmm import CategoricalHMM

    X = seq.reshape(-1, 1)
    t0 = time.perf_counter()
    best, best_ll = None, -np.inf
    for seed in range(restarts):
        h = CategoricalHMM(n_components=m, n_features=n, n_iter=100, tol=1e-4, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h.fit(X)
        ll = h.score(X)
        if ll > best_ll:
            best, best_ll = h, ll
    return HiddenMarkovModel.from_hmmlearn(best), time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    ap.add_argument("--train", type=int, default=100_000)
    ap.add_argument("--test", type=int, default=20_000)
    args = ap.parse_args(argv)
    cases = [(3, 10), (5, 20), (10, 50)] if not args.quick else [(3, 10), (5, 20)]
    train = args.train if not args.quick else 20_000
    test = args.test if not args.quick else 5_000
    print(f"training stream {train:,} symbols, held-out stream {test:,} symbols; "
          "log loss in nats/symbol (fit time, s)\n")
    print("| HMM | m | n | truth | moments | moments+EM | +restarts | hmmlearn EM (best of 3) |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, make in (("sticky", sticky), ("generic", generic)):
        for m, n in cases:
            truth = make(m, n, seed=m * 100 + n)
            seq = truth.sample(train + test, random_state=1)
            tr, te = seq[:train], seq[train:]
            ref = HiddenMarkovModel.from_hmm(truth)
            cells = [f"{-ref.score(te) / test:.4f}"]
            for kw in ({"n_iter": 0}, {}, {"n_restarts": 3}):
                model, secs = fit_ours(tr, n, m, **kw)
                cells.append(f"{-model.score(te) / test:.4f} ({secs:.2f})")
            model, secs = fit_hmmlearn(tr, n, m)
            cells.append(f"{-model.score(te) / test:.4f} ({secs:.1f})")
            print(f"| {kind} | {m} | {n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

"""The default predictor on processes none of the other benchmarks draws from.

    python demos/bench_unseen.py [--only NAME,...] [--em]

``bench_predict.py``'s sets (sticky and generic HMMs, five real sets) are the ones the
defaults were measured on; these six seeded processes are a check that nothing was tuned
to them. Each is split 80/20 (by position for one stream, by sequence for sessions):

* ``markov3``: a third-order Markov chain over 6 symbols (Dirichlet(0.2) rows), no hidden
  state but a memory of three symbols (the trigram's two are too few);
* ``zipf``: i.i.d. Zipf(1) over 500 symbols (no memory at all: the unigram is the truth);
* ``period``: a period of 13 symbols over 20, each symbol replaced at random w.p. 0.1;
* ``dense``: a 30-state HMM over 30 symbols with Dirichlet(1) rows (little to gain);
* ``sessions 8/50`` and ``sessions 30/6``: many short sequences (geometric lengths, mean
  12, ``bench_windows.sequences``) from sparse HMMs (Dirichlet(0.1) rows), 8 states over
  50 symbols and 30 over 6;
* ``markov4`` and ``markov4 1e6``: a fourth-order chain over 4 symbols
  (``streamspec.experiments.markov_chains``, Dirichlet(0.3) rows: 256 states, more than
  the backoff's HMM may have), 10⁵ and 10⁶ training symbols in sequences of 1,000;
* ``short sessions``: 60,000 sessions of mean length 2.5 over 5,000 symbols, a sparse bigram
  (five successors per symbol) behind a Zipf first symbol
  (``streamspec.experiments.markov_chains.short_sessions``).

Printed per process: held-out log loss (nats per symbol) of the KN bigram and trigram
(discount 0.75), the default ``MEstimator()``, its model alone (its window filter w,
chosen over windows: ``streamspec.core.filter_window``) and its HMM alone (its size K), the
truth where it is known (an HMM, a chain), and with ``--em`` hmmlearn's ``CategoricalHMM``
with the true number of states (best of 3 starts, at most 100 iterations, on at most
200,000 training symbols); fit CPU seconds, one BLAS thread. ``docs/benchmarks.md`` ("Processes never measured
before") holds the recorded figures.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from bench_predict import best_categorical_hmm, count, em_training, fit_default, hmm_loss  # noqa: E402
from bench_windows import sequences  # noqa: E402
from predict_sets import Case  # noqa: E402

from streamspec import HiddenMarkovModel  # noqa: E402
from streamspec.core.hmm import HMM  # noqa: E402
from streamspec.experiments.baselines import KneserNeyNGram  # noqa: E402
from streamspec.experiments.markov_chains import markov_chain, markov_chain_loss, short_sessions  # noqa: E402


def markov3(n: int, size: int, seed: int) -> np.ndarray:
    """A third-order Markov chain over ``n`` symbols, ``size`` symbols. O(size)."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(n, 0.2), size=n**3)
    x = list(rng.integers(0, n, 3))
    for _ in range(size - 3):
        x.append(int(rng.choice(n, p=P[(x[-3] * n + x[-2]) * n + x[-1]])))
    return np.array(x, dtype=np.int64)


def iid_zipf(n: int, size: int, seed: int) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1)
    return np.random.default_rng(seed).choice(n, size=size, p=p / p.sum())


def noisy_period(n: int, size: int, seed: int, period: int = 13, noise: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, n, period)[np.arange(size) % period]
    flip = rng.random(size) < noise
    x[flip] = rng.integers(0, n, int(flip.sum()))
    return x


def _case(name: str, n: int, data, truth: HMM | None = None, frac: float = 0.8) -> Case:
    if isinstance(data, np.ndarray):
        k = int(frac * data.size)
        return Case(name, n, [data[:k]], [data[k:]], "", True, truth)
    k = int(frac * len(data))
    return Case(name, n, data[:k], data[k:], "", True, truth)


def processes() -> dict[str, Callable[[], Case]]:
    """Name → a maker of the seeded case (made only when it runs)."""
    def hmm_case(name, m, n, size, seed, concentration, split_sessions):
        truth = HMM.random(m, n, random_state=seed, concentration=concentration)
        data = (sequences(truth, size, 12, seed) if split_sessions
                else truth.sample(size, random_state=seed + 1))
        return _case(name, n, data, truth)

    def chain_case(name, size, seed):
        seqs = list(markov_chain(4, 4, size, seed).reshape(-1, 1000))
        case = _case(name, 4, seqs)
        case.truth_loss = lambda: markov_chain_loss(4, 4, seed, case.test)
        return case

    return {
        "markov3": lambda: _case("markov3 (6 symbols)", 6, markov3(6, 200_000, 1)),
        "zipf": lambda: _case("zipf (500 symbols, i.i.d.)", 500, iid_zipf(500, 200_000, 2)),
        "period": lambda: _case("period 13 (20 symbols, 10% noise)", 20, noisy_period(20, 100_000, 3)),
        "dense": lambda: hmm_case("dense HMM 30/30", 30, 30, 300_000, 4, 1.0, False),
        "sessions 8/50": lambda: hmm_case("sessions HMM 8/50", 8, 50, 200_000, 5, 0.1, True),
        "sessions 30/6": lambda: hmm_case("sessions HMM 30/6", 30, 6, 300_000, 6, 0.1, True),
        "markov4": lambda: chain_case("markov4 (4 symbols)", 125_000, 7),
        "markov4 1e6": lambda: chain_case("markov4 (4 symbols), 10⁶", 1_250_000, 7),
        "short sessions": lambda: _case("short sessions (5,000 symbols)", 5000,
                                        short_sessions(5000, 60_000, 8)),
    }


def run(case: Case, em: bool) -> str:
    """One markdown row."""
    kn = [KneserNeyNGram(case.n, order=o, discount=0.75).fit(case.train).log_loss(case.test) for o in (1, 2)]
    acc, _ = count(case)
    r = fit_default("M", acc, case.test)
    parts = r["parts"]
    truth = em_cell = "–"
    if hasattr(case, "truth_loss"):
        truth = f"{case.truth_loss():.4f}"
    if case.truth is not None:
        truth = f"{hmm_loss(HiddenMarkovModel.from_hmm(case.truth), case.test)[0]:.4f}"
        if em:
            t0 = time.process_time()
            h = best_categorical_hmm(em_training(case.train), case.n, case.truth.n_states, 100, 3)
            seconds = time.process_time() - t0
            loss = hmm_loss(HiddenMarkovModel(h.startprob_, h.transmat_, h.emissionprob_), case.test)[0]
            em_cell = f"{loss:.4f} ({seconds:.0f} s)"
    hmm = "–" if parts["hmm"] is None else f"{parts['hmm']:.4f} ({parts['K']})"
    gain = 100 * (r["loss"] / kn[1] - 1)
    return (f"| {case.name} | {case.n_train:,} | {kn[0]:.4f} | {kn[1]:.4f} | {r['loss']:.4f} ({gain:+.2f}%) "
            f"| {parts['model']:.4f} ({r['window']}) | {hmm} | {truth} | {em_cell} | {r['fit']:.1f} |")


def main(argv=None) -> int:
    makers = processes()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(makers), help="comma-separated: " + ", ".join(makers))
    p.add_argument("--em", action="store_true", help="also hmmlearn's EM with the true K (minutes)")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(names) - set(makers))
    if unknown:
        p.error(f"unknown process(es) {', '.join(unknown)}; choose from {', '.join(makers)}")
    print("| process | training symbols | KN bigram | KN trigram | default (vs KN trigram) | model alone (w) "
          "| HMM alone (K) | truth | EM, true K (CPU) | default fit s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        print(run(makers[name](), args.em), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

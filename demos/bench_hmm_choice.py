"""How the default predictor's HMM size and EM budget decide its held-out loss (issues 18, 21).

    python demos/bench_hmm_choice.py sets [--sets synthetic,splice] [--only 'sticky m=10'] \
        [--states auto,5,10,20] [--budget 1,4] [--final 1,4] [--switching 1e-4,1e-5]
    python demos/bench_hmm_choice.py zipf [--fractions 0.98,0.99,1] [--quick]
    python demos/bench_hmm_choice.py validation [--only 'sticky m=5 n=10 T=1e4'] [--streams 3]

``sets``: for each data set of ``bench_predict.py`` (the same cases, counts and held-out
sequences), the default ``MEstimator`` with ``hmm_states`` set to each of ``--states``
and the backoff's EM budget (``backoff_fit.EM_BUDGET``) multiplied by each of
``--budget`` (``--final``: the share of it the chosen HMM's last EM on all the counts gets,
``backoff_fit._FINAL_SHARE``, multiplied instead): held-out log loss (nats per symbol,
scored as ``bench_predict.py`` scores the default), the states of the HMM it kept, its CPU
seconds; for ``auto``, the sizes it tried. Where the default loses to EM with the true
number of states, this says whether the size the held-out counts chose or the EM budget of
that size is what costs it. ``--switching``: the same fits rescored with each switching
rate α of the mixture (its fixed share, falling with the mixture's half-life) instead of the
default.

``zipf``: cold default fits, ``SpectralEstimator(rank=50)``, on the first ``--fractions``
of the training tokens of ``bench_large.py``'s Zipf stream (n = 10⁵, 10⁷ training tokens,
10⁶ with ``--quick``; the next 10,000 held out, as ``bench_refit.py zipf``): the held-out
loss, the HMM size chosen and each tried size's held-out loss (the HMM alone, on the
held-out counts of the fit). It shows how much a cold fit moves with 1% more data, which
is what a warm refit (that keeps its HMM) is compared with there.

``validation``: for each synthetic set of ``bench_predict.py``, the HMM sizes the default
fit tries on the kept 90% of the counts (each candidate as it was fitted there, smoothed as
the backoff smooths it), scored three ways: the size the fit chose from its held-out part
(a thinning of the same windows), each candidate's log loss on ``--streams`` independent
streams of the true HMM as long as the held-out part (10% of the training symbols; their
whole-stream forward filter, as the test is scored), and on the test streams. It says
whether held-out data that is not a thinning of the training windows would choose the
size the test prefers.

One BLAS thread; CPU seconds. The sizes tried and their losses are read by wrapping two
functions of ``streamspec.core.backoff_fit`` for the run (the library does not keep them).
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_predict  # noqa: E402
from bench_large import zipf_hmm_stream  # noqa: E402

import streamspec.core.backoff_fit as backoff_fit  # noqa: E402
import streamspec.core.backoff_windows as backoff_windows  # noqa: E402
from streamspec import MEstimator, MomentAccumulator, SpectralEstimator  # noqa: E402
from streamspec.core.hmm_smoothing import smoothed_hmm  # noqa: E402
from streamspec.core.mixture import ExpertMixture  # noqa: E402


class ChoiceLog:
    """The HMM sizes a fit tries and, over triples, their held-out losses: ``backoff_fit``'s
    ``_candidate_states`` and ``parsimonious_choice`` wrapped while it is entered."""

    def __init__(self):
        self.sizes: list[int] = []
        self.losses: list[float] = []

    def __enter__(self) -> ChoiceLog:
        self._saved = (backoff_fit._candidate_states, backoff_fit.parsimonious_choice,
                       backoff_fit.state_candidates)

        def candidates(*args, **kwargs):
            self.sizes = list(self._saved[0](*args, **kwargs))
            return self.sizes

        def choice(logp, w, draws=np.inf):
            self.losses = (-(logp * w).sum(axis=1) / w.sum()).tolist()
            return self._saved[1](logp, w, draws)

        def window_candidates(*args, **kwargs):  # over windows
            self.sizes = list(self._saved[2](*args, **kwargs))
            return self.sizes

        backoff_fit._candidate_states, backoff_fit.parsimonious_choice = candidates, choice
        backoff_fit.state_candidates = window_candidates
        return self

    def __exit__(self, *exc) -> None:
        (backoff_fit._candidate_states, backoff_fit.parsimonious_choice,
         backoff_fit.state_candidates) = self._saved

    def tried(self) -> str:
        if not self.losses or len(self.losses) != len(self.sizes):
            return ", ".join(map(str, self.sizes)) or "–"
        return ", ".join(f"{k}: {v:.4f}" for k, v in zip(self.sizes, self.losses, strict=True))


def fit_scaled(estimator, acc: MomentAccumulator, budget: float, final: float = 1.0):
    """``(model, CPU seconds, sizes tried)`` of a fit with the EM budget scaled by ``budget`` and
    the final EM's share of it by ``final``."""
    base, shares = backoff_fit.EM_BUDGET, dict(backoff_fit._FINAL_SHARE)
    backoff_fit.EM_BUDGET = base * budget
    backoff_fit._FINAL_SHARE.update({k: v * final for k, v in shares.items()})
    try:
        with ChoiceLog() as log:
            t0 = time.process_time()
            model = estimator.fit(acc)
            seconds = time.process_time() - t0
    finally:
        backoff_fit.EM_BUDGET = base
        backoff_fit._FINAL_SHARE.update(shares)
    return model, seconds, log.tried()


def _states(text: str) -> list[int | str]:
    return [s if s == "auto" else int(s) for s in text.split(",")]


def rescored(model, case, switching: list[float]) -> str:
    """The held-out loss with the fitted first weights and each switching rate α instead of the
    mixture's, its half-life kept (the weights do not depend on α: the same posterior, another
    fixed share)."""
    mix = model.backoff.mixture
    out = []
    try:
        for alpha in switching:
            model.backoff.mixture = ExpertMixture(mix.n_components, resolution=mix.resolution,
                                                  switching=alpha,
                                                  switching_half_life=mix.switching_half_life,
                                                  log_weights=mix.log_weights())
            out.append(f"{model.log_loss(case.test):.5f}")
    finally:
        model.backoff.mixture = mix
    return "".join(f" {v} |" for v in out)


def run_sets(args) -> None:
    alphas = [float(a) for a in args.switching.split(",")] if args.switching else []
    print("| set | hmm_states | EM budget × | final EM × | held-out loss | HMM states | fit s (CPU) | "
          "sizes tried (held-out loss of the HMM alone, over triples) |"
          + "".join(f" loss at α = {a:g} |" for a in alphas))
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |" + " ---: |" * len(alphas))
    pargs = bench_predict.parse_args(["--skip-em", "--skip-hmmest", "--sets", args.sets]
                                     + (["--only", args.only] if args.only else [])
                                     + (["--quick"] if args.quick else []))
    for case in bench_predict.cases(pargs):
        acc, _ = bench_predict.count(case)
        for states in _states(args.states):
            for budget, final in ((float(b), float(f)) for b in args.budget.split(",")
                                  for f in args.final.split(",")):
                model, seconds, tried = fit_scaled(MEstimator(hmm_states=states), acc, budget, final)
                hmm = model.backoff.hmm
                print(f"| {case.name} | {states} | {budget:g} | {final:g} | "
                      f"{model.log_loss(case.test):.5f} | {hmm.n_states if hmm is not None else '–'} | "
                      f"{seconds:.2f} | {tried} |" + rescored(model, case, alphas),
                      flush=True)


def run_zipf(args) -> None:
    n, length, held = 100_000, (10**6 if args.quick else 10**7), 10_000
    x = zipf_hmm_stream(n, length + held)
    train, test = x[:length], x[length:].copy()
    print(f"Zipf stream: n = {n:,}, {length:,} training tokens, the next {held:,} held out; "
          "SpectralEstimator(rank=50), cold\n")
    print("| share of the training tokens | held-out loss | HMM states | fit s (CPU) | sizes tried "
          "(held-out loss of the HMM alone) |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for frac in (float(f) for f in args.fractions.split(",")):
        acc = MomentAccumulator(n_symbols=n)
        acc.learn_many(train[: int(length * frac)])
        model, seconds, tried = fit_scaled(SpectralEstimator(rank=50), acc, 1.0)
        hmm = model.backoff.hmm
        print(f"| {frac:g} | {model.log_loss([test]):.5f} | {hmm.n_states if hmm is not None else '–'} | "
              f"{seconds:.1f} | {tried} |", flush=True)
        del model, acc


class CandidateLog:
    """The HMMs of each size a first fit tries on its kept counts, smoothed as the backoff
    scores them: ``backoff_windows._fit`` (over windows) and ``backoff_fit.fit_hmm`` (over
    triples) wrapped while it is entered; the chosen size's later EM on all the counts (started
    from it) is not recorded."""

    def __enter__(self) -> CandidateLog:
        self.models: dict[int, object] = {}
        self._saved = (backoff_windows._fit, backoff_fit.fit_hmm)

        def window_fit(kept, K, *args, **kwargs):
            fitted = self._saved[0](kept, K, *args, **kwargs)
            shared = inspect.signature(self._saved[0]).bind(kept, K, *args, **kwargs).arguments.get("shared")
            if fitted is not None and shared is not None:  # the candidates share one
                self.models[K] = smoothed_hmm(fitted[0], kept.total)
            return fitted

        def triple_fit(counts, K, *args, **kwargs):
            model = self._saved[1](counts, K, *args, **kwargs)
            if model is not None and kwargs.get("shared") is not None:  # the candidates share one
                self.models[K] = smoothed_hmm(model, counts.total)
            return model

        backoff_windows._fit, backoff_fit.fit_hmm = window_fit, triple_fit
        return self

    def __exit__(self, *exc) -> None:
        backoff_windows._fit, backoff_fit.fit_hmm = self._saved


def run_validation(args) -> None:
    print("| set | window | chosen from the held-out part | size | independent streams: "
          "log loss of each (mean) | test | chosen by the streams | best on the test |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    pargs = bench_predict.parse_args(["--skip-em", "--skip-hmmest", "--sets", "synthetic"]
                                     + (["--only", args.only] if args.only else [])
                                     + (["--quick"] if args.quick else []))
    for case in bench_predict.cases(pargs):
        acc, _ = bench_predict.count(case)
        length = max(1, sum(len(s) for s in case.train) // 10)
        streams = [case.truth.sample(length, random_state=5000 + r) for r in range(args.streams)]
        with CandidateLog() as log:
            model = MEstimator().fit(acc)
        chosen = model.backoff.hmm.n_states if model.backoff.hmm is not None else None
        rows = []
        for K, hmm in sorted(log.models.items()):
            each = [bench_predict.hmm_loss(hmm, [s])[0] for s in streams]
            rows.append((K, each, float(np.mean(each)), bench_predict.hmm_loss(hmm, case.test)[0]))
        if not rows:
            continue
        by_streams = min(rows, key=lambda r: r[2])[0]
        by_test = min(rows, key=lambda r: r[3])[0]
        for K, each, mean, test in rows:
            print(f"| {case.name} | {acc.current_window} | {chosen} | {K} | "
                  f"{', '.join(f'{v:.4f}' for v in each)} ({mean:.4f}) | {test:.4f} | {by_streams} | "
                  f"{by_test} |", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["sets", "zipf", "validation"],
                   help="sets: bench_predict's sets, HMM sizes and EM budgets; zipf: cold fits on "
                        "prefixes of the Zipf stream; validation: the sizes tried, scored on "
                        "independent streams")
    p.add_argument("--sets", default="synthetic", help="sets: as bench_predict.py --sets")
    p.add_argument("--only", default=None, help="sets: as bench_predict.py --only")
    p.add_argument("--states", default="auto", help="sets: hmm_states values, e.g. auto,5,10,20")
    p.add_argument("--budget", default="1", help="sets: EM budget multipliers, e.g. 1,4")
    p.add_argument("--final", default="1",
                   help="sets: multipliers of the chosen HMM's final EM share of the budget, e.g. 1,4")
    p.add_argument("--switching", default="",
                   help="sets: also the held-out loss with these switching rates α of the weights, "
                        "e.g. 1e-4,3e-5,1e-5")
    p.add_argument("--fractions", default="0.98,0.99,1", help="zipf: shares of the training tokens")
    p.add_argument("--streams", type=int, default=3,
                   help="validation: independent streams of the true HMM, each 10%% of the training")
    p.add_argument("--quick", action="store_true",
                   help="sets: bench_predict's quick sets; zipf: 10⁶ training tokens instead of 10⁷")
    args = p.parse_args(argv)
    print(f"python {' '.join([Path(sys.argv[0]).name] + sys.argv[1:])}; 1 BLAS thread; "
          f"load average {os.getloadavg()[0]:.1f}\n")
    {"sets": run_sets, "zipf": run_zipf, "validation": run_validation}[args.what](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

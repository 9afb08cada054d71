"""``learn --follow``'s saves: a refit from the last fit's state against one from a RefitStart.

    python demos/bench_follow.py [--sets alice,splice,chorales,dodgers]

Each set's training sequences are counted up to 99% of their symbols and fitted once
(``MEstimator().fit_with_state``, the default estimator), then the last 1% is counted and
the model refitted three ways, in one process, CPU seconds with one BLAS thread:

* ``RefitStart``: ``fit(acc, init=RefitStart.of(model))``, what a save of ``learn
  --follow`` did before it kept the fit's state (the factors, the HMM and the weights);
* ``state``: ``fit_with_state(acc, init=state)``, what a save does now (and the daemon's
  worker did already): bases, moments, weighting blocks, window and rank reused;
* ``cold``: ``fit(acc)``.

Each model's held-out log loss is printed beside it (the weights are the first fit's in
both refits: no stream teaches them here). Sets from ``../shared/data`` (or
``STREAMSPEC_DATA``), split as ``bench_predict.py`` splits them; ``docs/benchmarks.md``
("learn --follow refits from the fit's state") holds the recorded figures.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import predict_sets  # noqa: E402

from connectors.refit_start import RefitStart  # noqa: E402
from streamspec import MEstimator, MomentAccumulator  # noqa: E402


def _cpu(fn):
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def run(case: predict_sets.Case) -> str:
    """One markdown row: the three refits' seconds, paths and held-out losses."""
    acc = MomentAccumulator(n_symbols=case.n)
    cut, seen, rest = int(0.99 * case.n_train), 0, []
    for key, seq in enumerate(case.train):  # the first 99% of the symbols, then the rest
        head = seq[: max(0, cut - seen)]
        if head.size:
            acc.learn_many(head, key=key)
        if head.size < seq.size:
            rest.append((key, seq[head.size:]))
        else:
            acc.end(key)  # why: over windows an open stream's last grams are not counted yet
        seen += head.size
    (model, state), first = _cpu(lambda: MEstimator().fit_with_state(acc))
    for key, seq in rest:
        acc.learn_many(seq, key=key)
        acc.end(key)
    old_est, new_est = MEstimator(), MEstimator()
    old, old_s = _cpu(lambda: old_est.fit(acc, init=RefitStart.of(model)))
    (new, _), new_s = _cpu(lambda: new_est.fit_with_state(acc, init=state))
    cold, cold_s = _cpu(lambda: MEstimator().fit(acc))
    losses = [m.log_loss(case.test) for m in (old, new, cold)]
    return (f"| {case.name} | {first:.2f} | {old_s:.2f} ({old_est.refit_.path}) | "
            f"{new_s:.2f} ({new_est.refit_.path}) | {cold_s:.2f} | {old_s / max(new_s, 1e-9):.0f}× | "
            + " / ".join(f"{v:.4f}" for v in losses) + " |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sets", default="alice,splice,chorales,dodgers")
    args = p.parse_args(argv)
    print("| set | first fit s | RefitStart s (path) | state s (path) | cold s | RefitStart / state "
          "| loss RefitStart / state / cold |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        try:
            case = predict_sets.real_case(name, False)
        except (FileNotFoundError, OSError) as exc:
            print(f"| {name} | skipped: {exc} |")
            continue
        print(run(case), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

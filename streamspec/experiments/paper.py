"""The experiments of section 5 of Tran, Kim & Doshi-Velez (2016), reproduced.

This module runs them: :func:`run_experiment` by name, :func:`run_all` with their
outputs, and the command ``streamspec paper [EXPERIMENT] [--quick]`` (and
``demos/paper.py``). The parts live beside it:

- :mod:`~streamspec.experiments.paper_hmms`: the configurations (functions returning
  :class:`~streamspec.core.hmm.HMM` objects) and the deterministic sequence;
- :mod:`~streamspec.experiments.paper_settings`: constants, the paper's numbers and
  the estimators compared (:class:`~streamspec.experiments.paper_settings.Variant`);
- :mod:`~streamspec.experiments.paper_metrics`: triple counts and error metrics;
- :mod:`~streamspec.experiments.paper_toy` and :mod:`~streamspec.experiments.paper_real`:
  the runners, which return plain result dicts;
- :mod:`~streamspec.experiments.em_baseline`: the EM baseline (``hmmlearn``, optional);
- :mod:`~streamspec.experiments.paper_report` and
  :mod:`~streamspec.experiments.paper_plots`: a result dict as a Markdown report
  and, where the paper has a figure, a PNG plot.

Choices the paper leaves open, fixed here and used in every experiment
(see :data:`~streamspec.experiments.paper_settings.CHOICES`):

- a *training example* of the toy and synthetic experiments is an independent
  sequence drawn from the true HMM started at its stationary distribution, of
  which only the first triple is used (Hsu, Kakade & Zhang's "sequences" setting:
  N training examples give N triples);
- a *test example* is an independent sequence of length
  :data:`~streamspec.experiments.paper_settings.TEST_LENGTH` (5) from the same HMM;
  100 of them per repetition;
- the metric, "relative norm difference between estimated and true joint
  probability", is ``‖p̂ - p‖₂ / ‖p‖₂`` over the vector of the test sequences'
  joint probabilities, ``p̂`` being the raw operator product (no clipping);
- λ is the paper's value per table, used as is in our loss
  ``mᵀWm + λ N^(-1/2) ‖R‖₁`` (probabilities, W normalised so that W = I for
  identity-like second moments); it is never tuned;
- the chain's observation model is the ring's (the true state with probability
  0.6, any other uniformly); the grid's model rank is the true rank of its
  transition matrix (2, 6, 20: at rank = number of symbols every weighting gives
  exactly θ_spec, Proposition 1 with an exactly solvable system); the chain's
  model rank is 3 (the paper gives none; its true rank is 5 = n, where again all
  estimators coincide);
- real data: model rank ``k = min(8, n - 1)`` for every data set, EM with k
  hidden states; predictions of the spectral models use the window filter
  (restart from b1 over the last 2 symbols, docs/math.md section 4), EM uses its exact
  forward filter.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streamspec.experiments.datasets import default_data_path
from streamspec.experiments.paper_plots import plot_deterministic, plot_synthetic, plot_toy
from streamspec.experiments.paper_real import run_real
from streamspec.experiments.paper_report import to_markdown
from streamspec.experiments.paper_settings import EXPERIMENTS
from streamspec.experiments.paper_toy import (
    run_chain,
    run_deterministic,
    run_grid,
    run_ring,
    run_synthetic,
)

__all__ = [
    "run_experiment",
    "write_outputs",
    "render",
    "run_all",
    "DataNotFound",
    "register",
    "main",
]


def run_experiment(name: str, reps: int = 20, seed: int = 0, quick: bool = False) -> dict:
    """Run one experiment by name and return its result dict."""
    if name == "deterministic":
        return run_deterministic(seed=seed)
    if name == "ring":
        return run_ring(reps, seed, quick)
    if name == "grid":
        return run_grid(reps, seed, quick)
    if name == "chain":
        return run_chain(reps, seed, quick)
    if name == "synthetic":
        return run_synthetic(reps, seed, quick)
    if name == "real":
        return run_real(seed, quick)
    raise ValueError(f"unknown experiment {name!r}; choose from {EXPERIMENTS}")


def write_outputs(res: dict, out: str | Path, plots: bool = True) -> list[Path]:
    """Write ``<experiment>.md``, ``<experiment>.json`` and the plot; return the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    name = res["experiment"]
    paths = [out / f"{name}.md", out / f"{name}.json"]
    paths[0].write_text(to_markdown(res), encoding="utf-8")
    paths[1].write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")
    if plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return paths
        plotter = {"deterministic": plot_deterministic, "synthetic": plot_synthetic,
                   "real": None}.get(name, plot_toy)
        if plotter is not None:
            paths.append(out / f"{name}.png")
            plotter(res, paths[-1])
    return paths


def render(json_path: str | Path, out: str | Path | None = None) -> list[Path]:
    """Rewrite the Markdown and plot of a saved result (``<experiment>.json``)."""
    json_path = Path(json_path)
    res = json.loads(json_path.read_text(encoding="utf-8"))
    return write_outputs(res, out if out is not None else json_path.parent)


def run_all(names: Sequence[str], out: str | Path, reps: int = 20, seed: int = 0,
            quick: bool = False, verbose: bool = True) -> dict:
    """Run experiments, write their outputs, return ``{name: (result, seconds)}``."""
    done = {}
    for name in names:
        if name == "real" and default_data_path() is None:
            missing = ("no data folder found: set STREAMSPEC_DATA to the folder holding "
                       "alice/, splice/, bach-chorales/ and dodgers/")
            if len(names) == 1:
                raise DataNotFound(f"real: {missing}")
            if verbose:
                print(f"real: skipped, {missing}")
            continue
        t0 = time.perf_counter()
        try:
            res = run_experiment(name, reps=reps, seed=seed, quick=quick)
        except FileNotFoundError as exc:
            if name != "real":
                raise
            # why: a missing data set is the user's setup, not a bug; say where to put it
            if len(names) == 1:
                raise DataNotFound(f"real: {exc}") from None
            if verbose:
                print(f"real: skipped, {exc}")
            continue
        dt = time.perf_counter() - t0
        res["seconds"] = dt
        res["command"] = (f"streamspec paper {name} --reps {reps} --seed {seed}"
                          + (" --quick" if quick else ""))
        paths = write_outputs(res, out)
        done[name] = (res, dt)
        if verbose:
            print(f"{name}: {dt:.1f} s -> " + ", ".join(str(p) for p in paths))
    return done


def register(subparsers) -> None:
    """Add the ``paper`` subcommand."""
    p = subparsers.add_parser("paper", help="reproduce the paper's section 5 experiments",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", nargs="?", default="all", choices=EXPERIMENTS + ("all",))
    p.add_argument("--quick", action="store_true", help="reduced runs (under a minute in all)")
    p.add_argument("--out", default="out/paper", help="output folder (default out/paper)")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions (default 20, or 3 with --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cli)


class DataNotFound(FileNotFoundError):
    """The real data sets of ``run_real`` are not where they were looked for."""


def _cli(args: argparse.Namespace) -> int:
    reps = args.reps if args.reps is not None else (3 if args.quick else 20)
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    try:
        run_all(names, args.out, reps=reps, seed=args.seed, quick=args.quick)
    except DataNotFound as exc:
        print(f"streamspec paper: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``demos/paper.py``."""
    parser = argparse.ArgumentParser(prog="paper")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["paper", *(argv or [])])
    return int(args.func(args))

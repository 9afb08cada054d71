"""The paper's experiments on known HMMs: deterministic sequence, ring, grid, chain, synthetic.

Each ``run_*`` function returns a plain result dict (JSON-ready) that
:mod:`streamspec.experiments.paper_report` turns into tables and plots. The random
stream of each repetition is seeded from ``(seed, experiment, tag, setting, repetition)``,
so that runs are reproducible and independent of one another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from streamspec.core.hmm import HMM
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.experiments import paper_settings
from streamspec.experiments.paper_hmms import (
    chain_hmm,
    deterministic_sequence,
    grid_hmm,
    grid_rank,
    ring_hmm,
    synthetic_hmm,
)
from streamspec.experiments.paper_metrics import relative_error, triple_counts
from streamspec.experiments.paper_settings import (
    CHEAP_VARIANTS,
    EXPERIMENTS,
    FIXED,
    HEADLINE,
    LAMBDA,
    N_TEST,
    PAPER,
    QUICK_VARIANTS,
    SPEC,
    TEST_LENGTH,
    VARIANTS,
    M,
    Variant,
)
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = [
    "run_deterministic",
    "run_toy",
    "run_ring",
    "run_grid",
    "run_chain",
    "run_synthetic",
]


# ---------------------------------------------------------------------------
# Experiment 1: deterministic sequence
# ---------------------------------------------------------------------------


def _b0(model: ObservableOperatorModel) -> float:
    """B_0 as a gauge-invariant number: its trace (for rank 1, its only eigenvalue)."""
    return float(np.trace(model.B[0]))


def run_deterministic(lengths: Sequence[int] = (10, 15, 25, 50), seed: int = 0) -> dict:
    """B_0 of θ_spec and θ_M (rank 1) on ``0^10 1^(L-10)`` for each length L.

    Training data: the one sequence, all its consecutive triples (sliding mode),
    n = 2 symbols. B_0 is reported as its trace. θ_M is reported with the
    headline settings, unshrunk, with the paper's per-symbol weighting, with S = U
    fixed and with W = I; the unshrunk exact weighting restricted to the moments of
    B_0 is returned for the heatmaps.
    """
    del seed  # deterministic: no randomness
    variants = (SPEC, M, Variant("θ_M (W=exact, unshrunk)", params={"shrinkage": 0.0}),
                Variant("θ_M (W=per_symbol)", params={"weighting": "per_symbol"}),
                Variant("θ_M fixed", params={"factorization": "fixed"}),
                Variant("θ_M (W=identity)", params={"weighting": "identity"}))
    rows, heat = [], {}
    for L in lengths:
        acc = MomentAccumulator(n_symbols=2, mode="sliding", window=1)
        acc.learn_many(deterministic_sequence(L))
        row = {"length": int(L), "n_triples": acc.n_triples}
        for v in variants:
            est, model, _ = paper_settings.fit_variant(v, acc, 1, 0.0)
            row[v.name] = _b0(model)
            if v.name == "θ_M (W=exact, unshrunk)":
                heat[int(L)] = _weighting_of_symbol(est, 0).tolist()
        rows.append(row)
    return {"experiment": "deterministic", "variants": [v.name for v in variants], "rows": rows,
            "heatmaps": heat, "paper": {str(k): v for k, v in PAPER["deterministic"].items()}}


def _weighting_of_symbol(est: MEstimator, x: int) -> np.ndarray:
    """W restricted to the moments of B_x, indexed (j, i) -> j * n + i (block diagonal in j)."""
    W = est.weighting_
    n = est.model_.n_symbols
    out = np.zeros((n * n, n * n))
    for j in range(n):
        block = W.dense_block(j)[x * n : (x + 1) * n, x * n : (x + 1) * n]
        out[j * n : (j + 1) * n, j * n : (j + 1) * n] = block
    return out


# ---------------------------------------------------------------------------
# Experiment 2: ring, grid, chain
# ---------------------------------------------------------------------------


def _repetition_errors(hmm: HMM, truth: ObservableOperatorModel, variants: Sequence[Variant],
                       size: int, rank: int, penalty: float,
                       rng: np.random.Generator) -> list[tuple[float, float]]:
    """(error, fit seconds) of each variant on one fresh training and test sample."""
    c3 = triple_counts(hmm.sample_many(size, 3, rng), hmm.n_symbols)
    X_test = hmm.sample_many(N_TEST, TEST_LENGTH, rng)
    p_true = truth.joint_proba_many(X_test)
    out = []
    for v in variants:
        _, model, dt = paper_settings.fit_variant(v, c3, rank, penalty)
        out.append((relative_error(model, X_test, p_true), dt))
    return out


def run_toy(
    name: str,
    settings: Sequence,
    make_hmm: Callable[[object], HMM],
    rank_of: Callable[[object], int],
    n_train: int | Callable[[object], int],
    penalty: float,
    variants: Sequence[Variant] | Callable[[object], Sequence[Variant]],
    reps: int,
    seed: int,
    setting_label: str,
    tag: int = 0,
) -> dict:
    """Errors of each variant on each setting over ``reps`` repetitions.

    ``n_train`` may depend on the setting (learning curves); ``tag`` separates the
    random streams of runs that share an experiment name. Returns a dict with,
    per setting (as a string key) and variant name, the list of per-repetition
    errors and fit times.
    """
    errors: dict = {}
    times: dict = {}
    all_names: list[str] = []
    for si, setting in enumerate(settings):
        hmm = make_hmm(setting)
        truth = hmm.operators()
        k = rank_of(setting)
        vs = variants(setting) if callable(variants) else variants
        for v in vs:
            if v.name not in all_names:
                all_names.append(v.name)
        key = str(setting)
        errors[key] = {v.name: [] for v in vs}
        times[key] = {v.name: [] for v in vs}
        for rep in range(reps):
            rng = np.random.default_rng([seed, EXPERIMENTS.index(name), tag, si, rep])
            size = n_train(setting) if callable(n_train) else n_train
            scores = _repetition_errors(hmm, truth, vs, size, k, penalty, rng)
            for v, (err, dt) in zip(vs, scores, strict=True):
                errors[key][v.name].append(err)
                times[key][v.name].append(dt)
    return {
        "experiment": name, "setting_label": setting_label, "settings": [str(s) for s in settings],
        "ranks": {str(s): rank_of(s) for s in settings},
        "n_train": None if callable(n_train) else n_train, "penalty": penalty,
        "reps": reps, "variants": all_names, "errors": errors, "times": times,
        "paper": {str(k): v for k, v in PAPER.get(name, {}).items()},
    }


def run_ring(reps: int = 20, seed: int = 0, quick: bool = False) -> dict:
    """Ring, ranks 4, 3, 2, 100 training examples, λ = 0.01."""
    return run_toy("ring", (4, 3, 2), lambda k: ring_hmm(), lambda k: int(k), 100, LAMBDA["ring"],
                   HEADLINE + (QUICK_VARIANTS if quick else VARIANTS), reps, seed, "Model rank")


def run_grid(reps: int = 20, seed: int = 0, quick: bool = False) -> dict:
    """Grid 2×2, 3×3, 5×5 (2×2 and 3×3 when quick), 100,000 training examples, λ = 1e-3.

    Model rank: the true rank of the transition matrix (2, 6, 20). On the 5×5 grid
    the per-symbol weighting is skipped there: its dense fits at n = 25 cost the most of
    every variant (``streamspec paper grid`` prints the mean fit time of each variant in
    its table).
    """
    sides = (2, 3) if quick else (2, 3, 5)

    def variants(side):
        if quick:
            return (SPEC, M, FIXED)
        return HEADLINE + (VARIANTS if side < 5 else CHEAP_VARIANTS)

    return run_toy("grid", sides, grid_hmm, grid_rank, 100_000, LAMBDA["grid"], variants, reps,
                   seed, "Grid side")


def run_chain(reps: int = 20, seed: int = 0, quick: bool = False) -> dict:
    """Chain, reset p = 0.1, 0.3, 0.5, 50 training examples, rank 3, λ = 1e-3."""
    return run_toy("chain", (0.1, 0.3, 0.5), chain_hmm, lambda p: 3, 50, LAMBDA["chain"],
                   HEADLINE + (QUICK_VARIANTS if quick else VARIANTS), reps, seed,
                   "Reset probability")


# ---------------------------------------------------------------------------
# Experiment 3: synthetic learning curves
# ---------------------------------------------------------------------------


def run_synthetic(
    reps: int = 20,
    seed: int = 0,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    configs: Sequence[tuple[int, int]] | None = None,
) -> dict:
    """Learning curves: error vs number of training examples, m=5/n=10 and m=10/n=20.

    Full rank (k = m < n). Compared: θ_spec, θ_M (shared S), θ_M with S = U fixed,
    and the paper's per-symbol weighting with S = U fixed. The HMMs are drawn once
    (seeded) and kept across repetitions.
    """
    if sizes is None:
        sizes = (100, 1000, 10_000) if quick else (100, 300, 1000, 3000, 10_000)
    if configs is None:
        configs = ((5, 10),) if quick else ((5, 10), (10, 20))
    variants = (SPEC, M, FIXED,
                Variant("W=per_symbol, fixed",
                        params={"weighting": "per_symbol", "factorization": "fixed"}))
    curves = {}
    for ci, (m, n) in enumerate(configs):
        hmm = synthetic_hmm(m, n, random_state=seed + 100 * ci)
        res = run_toy("synthetic", sizes, lambda _s, h=hmm: h, lambda _s, k=m: k,
                      lambda size: int(size), 0.0, variants, reps, seed, "Training examples",
                      tag=ci)
        curves[f"m={m}, n={n}"] = res
    return {"experiment": "synthetic", "sizes": list(sizes), "variants": [v.name for v in variants],
            "curves": curves, "reps": reps}

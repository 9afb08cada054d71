"""The experiments of section 5 of Tran, Kim & Doshi-Velez (2016), reproduced.

Pure functions: configurations (functions returning :class:`~streamspec.core.hmm.HMM`
objects), metrics, an EM baseline wrapper around ``hmmlearn`` (optional, imported
lazily) and runners that return plain result dicts. Writers turn a result dict
into a Markdown table and, where the paper has a figure, a PNG plot. The command
``streamspec paper [EXPERIMENT] [--quick]`` (and ``demos/paper.py``) runs them.

Choices the paper leaves open, fixed here and used in every experiment
(see :data:`CHOICES`):

- a *training example* of the toy and synthetic experiments is an independent
  sequence drawn from the true HMM started at its stationary distribution, of
  which only the first triple is used (Hsu, Kakade & Zhang's "sequences" setting:
  N training examples give N triples);
- a *test example* is an independent sequence of length :data:`TEST_LENGTH` (5)
  from the same HMM; 100 of them per repetition;
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
  (restart from b1 over the last 2 symbols, math.md section 4), EM uses its exact
  forward filter.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from streamspec.core.hmm import HMM
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.spectral import SpectralEstimator
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = [
    "EXPERIMENTS",
    "CHOICES",
    "TEST_LENGTH",
    "Variant",
    "noisy_emissions",
    "ring_hmm",
    "grid_hmm",
    "chain_hmm",
    "synthetic_hmm",
    "deterministic_sequence",
    "triple_counts",
    "relative_error",
    "fit_em",
    "EMModel",
    "run_deterministic",
    "run_ring",
    "run_grid",
    "run_chain",
    "run_synthetic",
    "run_real",
    "run_experiment",
    "markdown_table",
    "parse_markdown_tables",
    "write_outputs",
    "register",
    "main",
]

EXPERIMENTS = ("deterministic", "ring", "grid", "chain", "synthetic", "real")
TEST_LENGTH = 5
N_TEST = 100
FILTER = {"filter": "window", "window": 2, "min_proba": 1e-6}

CHOICES = {
    "training example": "an independent sequence from the true HMM (stationary start); only "
    "its first triple counts (sequences mode), so N examples = N triples",
    "test example": f"an independent sequence of length {TEST_LENGTH} from the true HMM; "
    f"{N_TEST} per repetition, redrawn every repetition",
    "metric": "relative norm difference ||p_hat - p||_2 / ||p||_2 over the vector of the test "
    "sequences' joint probabilities; p_hat is the raw operator product b_inf' B_xt ... B_x1 b1",
    "lambda": "the paper's value per table, in our loss m'Wm + lambda N^(-1/2) ||R||_1 "
    "(probabilities; W normalised so W = I for identity-like second moments); never tuned",
    "theta_M": "MEstimator(weighting='exact', factorization='shared', shrinkage='auto', "
    "smoothing=0, ridge=1e-6, max_outer=3, max_sweeps=10, tol=1e-6, n_restarts=0, "
    "formulation='dense'), "
    "the paper's Algorithm 2 with one S shared by all symbols (formerly the library "
    "default), passed explicitly; 'theta_M fixed' is the same with S = U fixed",
    "repetitions": "new training and test samples each repetition, the true HMM fixed; "
    "mean and standard error (sd / sqrt(reps)) over repetitions",
}

# The paper's numbers, to print beside ours.
PAPER = {
    "deterministic": {10: (1.0, 1.0), 15: (0.8889, 0.8607), 25: (0.0198, 3.1521e-6),
                      50: (0.0008, 9.9664e-9)},
    "ring": {4: (1.50, 1.25, 1.03), 3: (1.15, 1.03, 0.81), 2: (0.68, 0.65, 0.60)},
    "grid": {2: (0.014, 0.014, 0.014), 3: (0.225, 0.225, 0.212), 5: (0.475, 0.475, 0.458)},
    "chain": {0.1: (0.80, 0.73, 0.72), 0.3: (0.82, 0.80, 0.77), 0.5: (1.24, 0.96, 0.69)},
    "real": {  # predictive test error: spec, M, M + L1 (1e-5), EM
        "alice": (0.22, 0.20, 0.20, 0.14),
        "splice": (0.41, 0.40, 0.35, 0.19),
        "chorales": (0.31, 0.28, 0.25, 0.24),
        "ecoli": (0.14, 0.13, 0.15, 0.12),
        "dodgers": (0.42, 0.38, 0.39, 0.33),
    },
}
LAMBDA = {"ring": 0.01, "grid": 1e-3, "chain": 1e-3, "real": 1e-5}


# ---------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------


def noisy_emissions(m: int, p_correct: float) -> np.ndarray:
    """(m, m) emissions: the true state with ``p_correct``, any other uniformly."""
    emit = np.full((m, m), (1.0 - p_correct) / (m - 1))
    np.fill_diagonal(emit, p_correct)
    return emit


def ring_hmm(p_correct: float = 0.6) -> HMM:
    """The paper's ring (figure 2a), states h1..h5 as indices 0..4.

    h1 goes to h2 or h5 with probability 0.5 each; h2 (h5) returns to h1 with 0.9 and
    goes to h3 (h4) with 0.1; h3 goes to h2 and h4 to h3 with probability 1 (the
    arrows of the figure). The true state is observed with ``p_correct``.
    """
    T = np.zeros((5, 5))  # T[to, from]
    T[1, 0] = T[4, 0] = 0.5
    T[0, 1], T[2, 1] = 0.9, 0.1
    T[0, 4], T[3, 4] = 0.9, 0.1
    T[1, 2] = 1.0
    T[2, 3] = 1.0
    return HMM(T, noisy_emissions(5, p_correct))


def grid_hmm(side: int, p_correct: float = 0.9) -> HMM:
    """The paper's grid (figure 2b): a random walk to a uniformly chosen 4-neighbour."""
    m = side * side
    T = np.zeros((m, m))
    for r in range(side):
        for c in range(side):
            nbrs = [(r + dr, c + dc) for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))
                    if 0 <= r + dr < side and 0 <= c + dc < side]
            for rr, cc in nbrs:
                T[rr * side + cc, r * side + c] = 1.0 / len(nbrs)
    return HMM(T, noisy_emissions(m, p_correct))


def chain_hmm(p_reset: float, n_states: int = 5, p_correct: float = 0.6) -> HMM:
    """The paper's chain (figure 2c): advance with ``1 - p``, reset to h1 with ``p``.

    The last state always resets. The observation model is our choice (the paper
    gives none): the ring's, the true state with ``p_correct``.
    """
    T = np.zeros((n_states, n_states))
    for h in range(n_states - 1):
        T[h + 1, h] = 1.0 - p_reset
        T[0, h] += p_reset
    T[0, n_states - 1] = 1.0
    return HMM(T, noisy_emissions(n_states, p_correct))


def synthetic_hmm(n_states: int, n_symbols: int, random_state: int = 0, draws: int = 20) -> HMM:
    """A random "well-behaving" HMM: the best conditioned of ``draws`` random draws.

    Each draw has sticky transitions ``T = 0.5 I + 0.5 D`` (columns of D from
    Dirichlet(1)) and peaked emissions (columns from Dirichlet(0.3)); the draw with
    the largest ``σ_m(P21) / σ_1(P21)`` is kept. (Plain Dirichlet(1) HMMs have a
    median ratio of 0.003 for m = 5, n = 10 and 0.0005 for m = 10, n = 20.)
    """
    rng = np.random.default_rng(random_state)
    best, best_ratio = None, -1.0
    for _ in range(draws):
        T = 0.5 * np.eye(n_states) + 0.5 * rng.dirichlet(np.ones(n_states), size=n_states).T
        emit = rng.dirichlet(np.full(n_symbols, 0.3), size=n_states).T
        hmm = HMM(T, emit)
        P21 = hmm.O @ hmm.T @ np.diag(hmm.pi) @ hmm.O.T
        sv = np.linalg.svd(P21, compute_uv=False)
        if sv[n_states - 1] / sv[0] > best_ratio:
            best, best_ratio = hmm, sv[n_states - 1] / sv[0]
    return best


def deterministic_sequence(length: int, n_zeros: int = 10) -> np.ndarray:
    """The sequence ``0`` × ``n_zeros`` then ``1`` up to ``length`` symbols."""
    return (np.arange(length) >= n_zeros).astype(np.int64)


# ---------------------------------------------------------------------------
# Data and metrics
# ---------------------------------------------------------------------------


def triple_counts(X: np.ndarray, n: int) -> np.ndarray:
    """Counts ``c3[x2, x3, x1]`` of the first triple of each row of ``X`` (m, t>=3).

    The same as feeding each row to a ``MomentAccumulator(n, mode="sequences")``
    under its own key, vectorised.
    """
    X = np.asarray(X, dtype=np.int64)
    codes = (X[:, 1] * n + X[:, 2]) * n + X[:, 0]
    return np.bincount(codes, minlength=n**3).reshape(n, n, n).astype(np.float64)


def relative_error(model: ObservableOperatorModel, X_test: np.ndarray, p_true: np.ndarray) -> float:
    """``‖p̂ - p‖₂ / ‖p‖₂`` over the test sequences (``inf`` if p̂ overflows)."""
    with np.errstate(all="ignore"):
        p_hat = model.joint_proba_many(X_test)
        err = float(np.linalg.norm(p_hat - p_true) / np.linalg.norm(p_true))
    return err if np.isfinite(err) else math.inf


def _se(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=float)
    if v.size < 2 or not np.isfinite(v).all():
        return math.nan if v.size < 2 else math.inf
    return float(v.std(ddof=1) / np.sqrt(v.size))


def _mean(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=float)
    return float(v.mean()) if np.isfinite(v).all() else math.inf


# ---------------------------------------------------------------------------
# Estimators compared
# ---------------------------------------------------------------------------

HEADLINE_M = {
    "weighting": "exact",
    "factorization": "shared",
    "shrinkage": "auto",
    "smoothing": 0.0,
    "ridge": 1e-6,
    "max_outer": 3,
    "max_sweeps": 10,
    "tol": 1e-6,
    "n_restarts": 0,
    # the paper's formulation (B_x = R_x S_xᵀ, n³ conditions), explicitly: the library's
    # default became the projected formulation, which these experiments do not reproduce
    "formulation": "dense",
    "backoff": None,  # the paper's estimator, without the library's Kneser–Ney backoff
}


@dataclass(frozen=True)
class Variant:
    """One estimator to compare: θ_spec (``kind="spec"``) or θ_M with overrides."""

    name: str
    kind: str = "M"
    params: dict = field(default_factory=dict)
    penalized: bool = False  # use the table's λ

    def build(self, rank: int, penalty: float):
        if self.kind == "spec":
            return SpectralEstimator(rank=rank, **FILTER)
        kw = {**HEADLINE_M, **self.params, **FILTER}
        return MEstimator(rank=rank, penalty=penalty if self.penalized else 0.0, **kw)


SPEC = Variant("θ_spec", kind="spec")
M = Variant("θ_M")
M_L1 = Variant("θ_M + L1", penalized=True)
FIXED = Variant("θ_M fixed", params={"factorization": "fixed"})
FIXED_L1 = Variant("θ_M fixed + L1", params={"factorization": "fixed"}, penalized=True)
HEADLINE = (SPEC, M, M_L1, FIXED, FIXED_L1)
#: θ_M variants of math.md section 6 (all without L1, all else as θ_M).
VARIANTS = (
    Variant("fact=per_symbol", params={"factorization": "per_symbol"}),
    Variant("W=identity", params={"weighting": "identity"}),
    Variant("W=diagonal", params={"weighting": "diagonal"}),
    Variant("W=per_symbol", params={"weighting": "per_symbol"}),
    Variant("W=exact, unshrunk", params={"shrinkage": 0.0}),
    Variant("W=exact, smoothing=2", params={"shrinkage": 0.0, "smoothing": 2.0}),
    Variant("W=identity, fixed", params={"weighting": "identity", "factorization": "fixed"}),
    Variant("W=per_symbol, fixed", params={"weighting": "per_symbol", "factorization": "fixed"}),
    Variant("W=exact, unshrunk, fixed", params={"shrinkage": 0.0, "factorization": "fixed"}),
    Variant("W=exact, smoothing=2, fixed",
            params={"shrinkage": 0.0, "smoothing": 2.0, "factorization": "fixed"}),
)
#: variants cheap enough for the 5x5 grid (n = 25, rank 20) and for --quick
CHEAP_VARIANTS = tuple(v for v in VARIANTS if v.name in ("W=identity", "W=identity, fixed"))
QUICK_VARIANTS = CHEAP_VARIANTS


def _fit(variant: Variant, data, rank: int, penalty: float):
    est = variant.build(rank, penalty)
    t0 = time.perf_counter()
    model = est.fit(data)
    return est, model, time.perf_counter() - t0


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
        acc = MomentAccumulator(n_symbols=2, mode="sliding")
        acc.learn_many(deterministic_sequence(L))
        row = {"length": int(L), "n_triples": acc.n_triples}
        for v in variants:
            est, model, _ = _fit(v, acc, 1, 0.0)
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
            c3 = triple_counts(hmm.sample_many(size, 3, rng), hmm.n_symbols)
            X_test = hmm.sample_many(N_TEST, TEST_LENGTH, rng)
            p_true = truth.joint_proba_many(X_test)
            for v in vs:
                _, model, dt = _fit(v, c3, k, penalty)
                errors[key][v.name].append(relative_error(model, X_test, p_true))
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


def _grid_rank(side: int) -> int:
    return int(np.linalg.matrix_rank(grid_hmm(side).T))


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

    return run_toy("grid", sides, grid_hmm, _grid_rank, 100_000, LAMBDA["grid"], variants, reps,
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


# ---------------------------------------------------------------------------
# Experiment 4: real data, with EM
# ---------------------------------------------------------------------------


@dataclass
class EMModel:
    """A discrete HMM fitted by EM; predicts with the exact forward filter."""

    startprob: np.ndarray  # (k,)
    transmat: np.ndarray  # (k, k), row-stochastic: transmat[a, b] = Pr(b | a)
    emission: np.ndarray  # (k, n), emission[a, x] = Pr(x | a)
    n_restarts: int = 0
    train_loglik: float = math.nan

    def predictive_sequence(self, seq) -> np.ndarray:
        x = np.asarray(seq, dtype=np.int64)
        out = np.empty((x.size, self.emission.shape[1]))
        alpha = self.startprob.copy()
        for t, s in enumerate(x):
            out[t] = alpha @ self.emission
            a = alpha * self.emission[:, s]
            alpha = (a / max(a.sum(), 1e-300)) @ self.transmat
        return out


def fit_em(
    sequences: Sequence[np.ndarray],
    n_states: int,
    n_symbols: int,
    n_restarts: int = 5,
    n_iter: int = 100,
    tol: float = 1e-3,
    chunk: int = 1000,
    random_state: int = 0,
) -> EMModel:
    """``hmmlearn`` CategoricalHMM, best training log-likelihood of ``n_restarts`` random starts.

    Long sequences are cut into chunks of at most ``chunk`` symbols (``lengths=``).
    Raises ``ImportError`` (with a hint) when hmmlearn is not installed.
    """
    try:
        from hmmlearn.hmm import CategoricalHMM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("EM needs hmmlearn: pip install 'streamspec[paper]'") from exc
    import logging

    logging.getLogger("hmmlearn").setLevel(logging.ERROR)
    pieces = []
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        pieces.extend(s[i : i + chunk] for i in range(0, s.size, chunk) if s[i : i + chunk].size)
    X = np.concatenate(pieces)[:, None]
    lengths = [p.size for p in pieces]
    best, best_ll = None, -math.inf
    for r in range(n_restarts):
        hmm = CategoricalHMM(n_components=n_states, n_features=n_symbols, n_iter=n_iter, tol=tol,
                             random_state=random_state + r, init_params="ste", params="ste")
        hmm.fit(X, lengths)
        ll = hmm.score(X, lengths)
        if ll > best_ll:
            best, best_ll = hmm, ll
    return EMModel(best.startprob_.copy(), best.transmat_.copy(), best.emissionprob_.copy(),
                   n_restarts, float(best_ll))


def _scores(model, sequences, min_proba: float = 1e-6) -> tuple[float, float]:
    """(next-symbol accuracy, mean log loss per symbol) over held-out sequences."""
    hits, nll, count = 0, 0.0, 0
    for s in sequences:
        s = np.asarray(s, dtype=np.int64)
        P = model.predictive_sequence(s)
        P = np.maximum(P, min_proba)
        P /= P.sum(axis=1, keepdims=True)
        hits += int((P.argmax(axis=1) == s).sum())
        nll -= float(np.log(P[np.arange(s.size), s]).sum())
        count += s.size
    return hits / count, nll / count


def load_real(name: str, seed: int = 0, path=None) -> dict:
    """Train/test split of one real data set, symbols as indices 0..n-1.

    - ``alice``: ``pg11.txt`` (the 2011 edition), letters a-z; the first 50,000
      letters train, the remaining 57,785 test.
    - ``splice``: the 3,175 sequences without ambiguity codes; a seeded random
      1,667 (100,020 symbols, the paper's "100,000") train, the other 1,508 test.
    - ``chorales``: melody pitch, MIDI 60-79 as 0..19; a seeded random 80 chorales
      train, 20 test (the paper's "4,693" is the whole set).
    - ``dodgers``: 10 quantile bins, runs between missing values; the first 30,000
      symbols (in time order) train, the remaining 17,472 test.
    """
    from streamspec.experiments import datasets, datasets_chorales, datasets_dodgers

    rng = np.random.default_rng([seed, 4242])
    if name == "alice":
        letters = datasets.load_alice_letters(path, filename="pg11.txt")
        x = np.frombuffer(letters.encode("ascii"), dtype=np.uint8).astype(np.int64) - ord("a")
        train, test, n = [x[:50_000]], [x[50_000:]], 26
    elif name == "splice":
        seqs = [np.array(["ACGT".index(c) for c in s]) for s in datasets.load_splice(path)]
        order = rng.permutation(len(seqs))
        train = [seqs[i] for i in order[:1667]]
        test = [seqs[i] for i in order[1667:]]
        n = 4
    elif name == "chorales":
        seqs = [np.asarray(s, dtype=np.int64) - 60 for s in datasets_chorales.load_chorales(path)]
        order = rng.permutation(len(seqs))
        train, test, n = [seqs[i] for i in order[:80]], [seqs[i] for i in order[80:]], 20
    elif name == "dodgers":
        seqs = [np.asarray(s, dtype=np.int64) for s in datasets_dodgers.load_dodgers(path)]
        train, test, used = [], [], 0
        for s in seqs:
            take = max(0, min(s.size, 30_000 - used))
            if take >= 3:
                train.append(s[:take])
            if s.size - take >= 3:
                test.append(s[take:])
            used += take
        n = 10
    else:
        raise ValueError(f"unknown data set {name!r}")
    return {"name": name, "train": train, "test": test, "n": n,
            "n_train": int(sum(s.size for s in train)), "n_test": int(sum(s.size for s in test))}


REAL_SETS = ("alice", "splice", "chorales", "dodgers")


def _first_symbols(sequences: Sequence[np.ndarray], total: int) -> list[np.ndarray]:
    """The leading sequences (the last one cut) holding ``total`` symbols in all."""
    out, used = [], 0
    for s in sequences:
        if used >= total:
            break
        out.append(s[: total - used])
        used += out[-1].size
    return out


def run_real(
    seed: int = 0,
    quick: bool = False,
    sets: Sequence[str] = REAL_SETS,
    em_restarts: int = 5,
    em_iter: int = 100,
    path=None,
) -> dict:
    """θ_spec, θ_M, θ_M + L1 (λ = 1e-5), the θ_M variants and EM on the real data sets.

    Reports next-symbol accuracy (and error = 1 - accuracy, the paper's "predictive
    test error"), held-out log loss per symbol (nats) and fit time. Rank
    ``k = min(8, n - 1)``. With ``quick``: θ_spec, θ_M fixed (with and without L1)
    only, EM with 2 restarts of at most 5 iterations, the first 5,000 test symbols.
    EM is skipped (with a note) when hmmlearn is missing.
    """
    if quick:
        em_restarts, em_iter = 2, 5
    variants = (SPEC, FIXED, FIXED_L1) if quick else HEADLINE + VARIANTS
    rows = {}
    notes = ["Ecoli: the UCI 'Ecoli' data we have is not sequence data (one row of 7 "
             "features per protein); it is left out and nothing is substituted."]
    for name in sets:
        data = load_real(name, seed, path)
        if quick:
            data["test"] = _first_symbols(data["test"], 5000)
            data["n_test"] = int(sum(s.size for s in data["test"]))
        n = data["n"]
        k = min(8, n - 1)
        acc = MomentAccumulator(n_symbols=n, mode="sliding")
        t0 = time.perf_counter()
        for i, s in enumerate(data["train"]):
            acc.learn_many(s, key=i)
        t_count = time.perf_counter() - t0
        row = {"n_symbols": n, "rank": k, "n_train": data["n_train"], "n_test": data["n_test"],
               "count_seconds": t_count, "methods": {}}
        for v in variants:
            _, model, dt = _fit(v, acc, k, LAMBDA["real"])
            accu, ll = _scores(model, data["test"])
            row["methods"][v.name] = {"accuracy": accu, "log_loss": ll, "seconds": dt}
        try:
            t0 = time.perf_counter()
            em = fit_em(data["train"], k, n, n_restarts=em_restarts, n_iter=em_iter,
                        random_state=seed)
            dt = time.perf_counter() - t0
            accu, ll = _scores(em, data["test"])
            row["methods"]["EM"] = {"accuracy": accu, "log_loss": ll, "seconds": dt}
        except ImportError as exc:
            notes.append(f"EM skipped: {exc}")
        rows[name] = row
    return {"experiment": "real", "sets": list(sets), "rows": rows, "notes": sorted(set(notes)),
            "variants": [v.name for v in variants] + ["EM"], "em_restarts": em_restarts,
            "em_iter": em_iter, "penalty": LAMBDA["real"],
            "paper": {k: list(v) for k, v in PAPER["real"].items()}}


# ---------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e4):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def _pm(values: Sequence[float]) -> str:
    m = _mean(values)
    if not math.isfinite(m):
        finite = np.asarray(values, dtype=float)
        bad = int((~np.isfinite(finite)).sum())
        return f"inf ({bad} of {len(values)} overflow)"
    return f"{_fmt(m)} ± {_fmt(_se(values))}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def parse_markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text as a list of rows of cells (header first).

    Examples
    --------
    >>> parse_markdown_tables("x\\n\\n| a | b |\\n| --- | --- |\\n| 1 | 2 |\\n")
    [[['a', 'b'], ['1', '2']]]
    """
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in s[1:-1].split("|")]
            if not all(set(c) <= set("-: ") and c for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def _median_ratio_and_wins(errs: dict, name: str, ref: str = "θ_spec") -> tuple[float, float]:
    a = np.asarray(errs[name], dtype=float)
    b = np.asarray(errs[ref], dtype=float)
    with np.errstate(all="ignore"):
        ratio = float(np.median(a / b))
    return ratio, float(np.mean(a < b))


def toy_markdown(res: dict) -> str:
    """Headline table (ours beside the paper's) and the variants table of a toy result."""
    name = res["experiment"]
    lam = res["penalty"]
    cols = [v.name for v in HEADLINE if v.name in res["variants"]]
    head = [res["setting_label"], "rank"] + [
        f"{c} (λ={lam:g})" if c.endswith("L1") else c for c in cols] + [
        "paper θ_spec", "paper θ_M", "paper θ_M + L1"]
    rows = []
    for s in res["settings"]:
        e = res["errors"][s]
        paper = res["paper"].get(s) or res["paper"].get(str(_num(s))) or ("", "", "")
        rows.append([s, res["ranks"][s]] + [_pm(e[c]) if c in e else "-" for c in cols]
                    + [str(p) for p in paper])
    out = [f"### {name}: relative joint-probability error (mean ± s.e., {res['reps']} reps, "
           f"{res['n_train']:,} training examples)", "", markdown_table(head, rows), "",
           "θ_M: factorization 'shared' (one learned S; the default until 735d93a); θ_M fixed: "
           "S = U fixed (the default since). Same "
           "weighting (exact, shrinkage 'auto') for both.", ""]
    vhead = ["variant"] + [f"{res['setting_label']} {s}" for s in res["settings"]]
    vrows = []
    for v in res["variants"]:
        r = [v]
        for s in res["settings"]:
            e = res["errors"][s]
            if v not in e:
                r.append("skipped")
                continue
            ratio, wins = _median_ratio_and_wins(e, v)
            r.append(f"{_pm(e[v])}; ×{_fmt(ratio, 2)}, {100 * wins:.0f}%")
        vrows.append(r)
    out += [f"Variants of θ_M ({name}): mean ± s.e.; ×median ratio to θ_spec; % of repetitions "
            "with a lower error than θ_spec.", "", markdown_table(vhead, vrows), ""]
    trow = [[v] + [_fmt(float(np.mean(res["times"][s][v])), 3) if v in res["times"][s] else "-"
                   for s in res["settings"]] for v in res["variants"]]
    out += [f"Mean fit time per repetition, seconds ({name}).", "",
            markdown_table(["variant"] + res["settings"], trow), ""]
    return "\n".join(out)


def _num(s: str):
    try:
        return int(s)
    except ValueError:
        return float(s)


def deterministic_markdown(res: dict) -> str:
    head = ["Length", "triples"] + [f"B_0 {v}" for v in res["variants"]] + [
        "paper B_0 spec", "paper B_0 M"]
    rows = []
    for r in res["rows"]:
        paper = res["paper"].get(str(r["length"]), ("", ""))
        rows.append([r["length"], int(r["n_triples"])] + [_fmt(r[v], 4) for v in res["variants"]]
                    + [str(p) for p in paper])
    return "\n".join(["### deterministic: B_0 (its trace; rank 1) on 0^10 1^(L-10)", "",
                      markdown_table(head, rows), ""])


def synthetic_markdown(res: dict) -> str:
    out = []
    for label, c in res["curves"].items():
        head = ["training examples"] + res["variants"]
        rows = []
        for s in c["errors"]:
            e = c["errors"][s]
            cells = [_pm(e[v]) + ("" if v == "θ_spec" else
                                  f"; ×{_fmt(_median_ratio_and_wins(e, v)[0], 2)}, "
                                  f"{100 * _median_ratio_and_wins(e, v)[1]:.0f}%")
                     for v in res["variants"]]
            rows.append([s] + cells)
        out += [f"### synthetic {label} (rank {c['ranks'][str(res['sizes'][0])]}): relative "
                f"joint-probability error, mean ± s.e. over {res['reps']} reps; ×median ratio "
                "to θ_spec, % of reps better than θ_spec", "", markdown_table(head, rows), ""]
    return "\n".join(out)


def real_markdown(res: dict) -> str:
    names = res["variants"]
    out = [f"### real data: next-symbol error (1 - accuracy) | log loss per symbol (nats) | "
           f"fit seconds; λ = {res['penalty']:g}; EM: best of {res['em_restarts']} restarts, "
           f"at most {res['em_iter']} iterations", ""]
    head = ["data set", "n", "rank", "train symbols", "test symbols"]
    rows = []
    for name, r in res["rows"].items():
        rows.append([name, r["n_symbols"], r["rank"], f"{r['n_train']:,}", f"{r['n_test']:,}"])
    out += [markdown_table(head, rows), ""]
    cols = ("θ_spec", "θ_M", "θ_M + L1", "θ_M fixed", "θ_M fixed + L1", "EM")
    head = ["data set"] + [f"{v} error" for v in cols] + [
        "paper θ_spec", "paper θ_M", "paper θ_M + L1", "paper EM"]
    rows = []
    for name in list(res["rows"]) + ["ecoli"]:
        paper = [str(p) for p in res["paper"].get(name, ["", "", "", ""])]
        if name not in res["rows"]:
            rows.append([name, "not sequence data"] + ["-"] * (len(cols) - 1) + paper)
            continue
        ms = res["rows"][name]["methods"]
        rows.append([name] + [_fmt(1 - ms[v]["accuracy"]) if v in ms else "n/a"
                              for v in cols] + paper)
    out += ["Predictive test error (1 - next-symbol accuracy), ours beside the paper's.", "",
            markdown_table(head, rows), ""]
    head = ["method"] + [f"{s} err / logloss / s" for s in res["rows"]]
    rows = []
    for v in names:
        r = [v]
        for s in res["rows"]:
            m = res["rows"][s]["methods"].get(v)
            r.append("n/a" if m is None else
                     f"{_fmt(1 - m['accuracy'])} / {_fmt(m['log_loss'])} / {_fmt(m['seconds'], 2)}")
        rows.append(r)
    out += ["All methods: error / log loss / fit seconds.", "", markdown_table(head, rows), ""]
    out += [f"- {note}" for note in res["notes"]] + [""]
    return "\n".join(out)


def to_markdown(res: dict) -> str:
    """The Markdown report of one result dict."""
    kind = res["experiment"]
    if kind == "deterministic":
        return deterministic_markdown(res)
    if kind == "synthetic":
        return synthetic_markdown(res)
    if kind == "real":
        return real_markdown(res)
    return toy_markdown(res)


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------


def plot_deterministic(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted(res["heatmaps"], key=int)
    fig, axes = plt.subplots(1, len(lengths) + 1, figsize=(3.0 * (len(lengths) + 1), 4.2))
    ax = axes[0]
    Ls = [r["length"] for r in res["rows"]]
    for v, marker in zip(res["variants"], "osd^vx", strict=False):
        ax.semilogy(Ls, [max(abs(r[v]), 1e-12) for r in res["rows"]], marker=marker, label=v)
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("|B_0| (trace, rank 1)")
    ax.set_title("Decay of B_0")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    for ax, L in zip(axes[1:], lengths, strict=True):
        W = np.asarray(res["heatmaps"][L])
        im = ax.imshow(np.log10(np.abs(W) + 1e-12), cmap="viridis")
        ax.set_title(f"log10 |W| for B_0, L={L}")
        ax.set_xlabel("moment (x1, x3)")
        ax.set_ylabel("moment (x1, x3)")
        labels = [f"{j}{i}" for j in range(2) for i in range(2)]
        ax.set_xticks(range(4), labels)
        ax.set_yticks(range(4), labels)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle("Deterministic sequence 0^10 1^(L-10): B_0 of θ_spec and θ_M (left); "
                 "θ_M's weighting (exact, unshrunk) on the moments of B_0 (right)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_synthetic(res: dict, path: Path) -> None:
    """Learning curves (top, mean ± s.e.) and median error ratio to θ_spec (bottom).

    An estimator whose mean is not finite or more than 100 times θ_spec's (the
    shared factorization) is drawn by its median only, dotted, so that the others
    stay readable.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = res["curves"]
    fig, axes = plt.subplots(2, len(curves), figsize=(5.8 * len(curves), 7.0), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    colors = {"θ_spec": "tab:green", "θ_M": "tab:blue", "θ_M fixed": "tab:purple",
              "W=per_symbol, fixed": "tab:orange"}
    for col, (label, c) in enumerate(curves.items()):
        ax, bx = axes[0, col], axes[1, col]
        sizes = sorted(int(s) for s in c["errors"])
        spec = [np.asarray(c["errors"][str(s)]["θ_spec"], dtype=float) for s in sizes]
        for v in res["variants"]:
            vals = [np.asarray(c["errors"][str(s)][v], dtype=float) for s in sizes]
            mean = np.array([_mean(x) for x in vals])
            wild = (not np.isfinite(mean).all()) or (mean > 100 * np.array(
                [_mean(x) for x in spec])).any()
            if wild:
                ax.plot(sizes, [np.median(x) for x in vals], ls=":", marker="x",
                        color=colors.get(v), label=f"{v} (median only; mean explodes)")
            else:
                se = [_se(x) for x in vals]
                ax.errorbar(sizes, mean, yerr=se, marker="o", capsize=3, label=v,
                            color=colors.get(v), lw=2 if v == "θ_spec" else 1.3)
            if v != "θ_spec" and not wild:
                with np.errstate(all="ignore"):
                    ratio = [float(np.median(x / y)) for x, y in zip(vals, spec, strict=True)]
                bx.plot(sizes, ratio, marker="o", color=colors.get(v), label=v)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training examples (one triple each)")
        ax.set_ylabel("relative joint-probability error")
        ax.set_title(f"Synthetic HMM {label}, rank {c['ranks'][str(sizes[0])]}: "
                     f"mean ± s.e., {res['reps']} reps")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        bx.axhline(1.0, color="tab:green", lw=1)
        bx.set_xscale("log")
        bx.set_xlabel("training examples (one triple each)")
        bx.set_ylabel("median error ratio to θ_spec")
        bx.set_title("below 1: better than θ_spec")
        bx.grid(True, which="both", alpha=0.3)
        bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=85)
    plt.close(fig)


def plot_toy(res: dict, path: Path) -> None:
    """Median error per setting for the headline estimators, interquartile bars, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v.name for v in HEADLINE if v.name in res["variants"]]
    colors = ("tab:green", "tab:blue", "tab:cyan", "tab:purple", "tab:red")
    settings = res["settings"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(names)
    for i, v in enumerate(names):
        x = np.arange(len(settings)) + (i - (len(names) - 1) / 2) * width
        stats = []
        for s in settings:
            e = np.asarray(res["errors"][s].get(v, [np.nan]), dtype=float)
            e = np.where(np.isfinite(e), e, 1e30)
            stats.append(np.percentile(e, [25, 50, 75]))
        q = np.array(stats)
        ax.errorbar(x, q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="o",
                    capsize=3, color=colors[i % len(colors)], label=v)
    ax.set_yscale("log")
    ax.set_xticks(range(len(settings)), settings)
    ax.set_xlabel(res["setting_label"])
    ax.set_ylabel("relative joint-probability error")
    ax.set_title(f"{res['experiment']}: {res['n_train']:,} training examples;\n"
                 f"median and interquartile range over {res['reps']} reps", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


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
    from streamspec.experiments.datasets import default_data_path

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

"""The settings shared by the paper's experiments: constants and the estimators compared.

:data:`CHOICES` records the choices the paper leaves open (see the docstring of
:mod:`streamspec.experiments.paper`), :data:`PAPER` the paper's own numbers printed
beside ours, :data:`LAMBDA` its L1 penalty per table. :class:`Variant` names one
estimator configuration; :func:`fit_variant` builds and fits it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.spectral import SpectralEstimator

__all__ = [
    "EXPERIMENTS",
    "TEST_LENGTH",
    "N_TEST",
    "FILTER",
    "CHOICES",
    "PAPER",
    "LAMBDA",
    "HEADLINE_M",
    "Variant",
    "SPEC",
    "M",
    "M_L1",
    "FIXED",
    "FIXED_L1",
    "HEADLINE",
    "VARIANTS",
    "CHEAP_VARIANTS",
    "QUICK_VARIANTS",
    "fit_variant",
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
    """One estimator to compare: θ_spec (``kind="spec"``) or θ_M with overrides.

    Parameters
    ----------
    name
        The label of its row or column in the tables.
    kind
        ``"spec"`` for :class:`~streamspec.core.spectral.SpectralEstimator`, ``"M"`` for
        :class:`~streamspec.core.mestimator.MEstimator` with :data:`HEADLINE_M`.
    params
        Overrides of :data:`HEADLINE_M`.
    penalized
        Whether the table's λ is used (else no L1 penalty).
    """

    name: str
    kind: str = "M"
    params: dict = field(default_factory=dict)
    penalized: bool = False  # use the table's λ

    def build(self, rank: int, penalty: float) -> SpectralEstimator | MEstimator:
        """The unfitted estimator at ``rank``, with ``penalty`` if :attr:`penalized`."""
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
#: θ_M variants of docs/math.md section 6 (all without L1, all else as θ_M).
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


def fit_variant(variant: Variant, data, rank: int, penalty: float
                ) -> tuple[SpectralEstimator | MEstimator, ObservableOperatorModel, float]:
    """Build ``variant`` and fit it on ``data``.

    Every experiment fits through this one function, looked up on this module at
    each call, so that a test can count the fits of a run by replacing it.

    Parameters
    ----------
    variant
        The estimator configuration.
    data
        Triple counts (array ``c3[x2, x3, x1]``) or a ``MomentAccumulator``.
    rank
        The model rank.
    penalty
        The table's λ (used only by penalized variants).

    Returns
    -------
    tuple
        The fitted estimator, its model and the fit time in seconds.
    """
    est = variant.build(rank, penalty)
    t0 = time.perf_counter()
    model = est.fit(data)
    return est, model, time.perf_counter() - t0

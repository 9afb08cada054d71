"""The spectral estimator of Hsu, Kakade & Zhang (θ_spec)."""

from __future__ import annotations

import numpy as np

from streamspec.model import ObservableOperatorModel
from streamspec.moments import probabilities

__all__ = [
    "SpectralEstimator",
    "spectral_operators",
    "top_subspace",
    "counts_of",
    "check_rank",
    "select_rank_by_spectrum",
]


def counts_of(data) -> tuple[np.ndarray, list | None]:
    """``(c3, labels)`` from a MomentAccumulator or a raw ``c3`` array."""
    if hasattr(data, "counts") and hasattr(data, "symbols"):
        c3 = data.counts()
        labels = data.symbols if getattr(data, "n_symbols", None) is None else None
    else:
        c3, labels = np.asarray(data, dtype=np.float64), None
    if c3.ndim != 3 or len(set(c3.shape)) != 1:
        raise ValueError(f"counts must have shape (n, n, n), got {c3.shape}")
    if not np.isfinite(c3).all():
        raise ValueError("counts hold NaN or infinite values")
    if not c3.sum() > 0:
        raise ValueError(
            "cannot fit on an empty accumulator: no triple counted yet (each stream needs 3 symbols)"
        )
    return c3, labels


def check_rank(rank, n: int) -> int:
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise ValueError(f"rank must be a positive integer or 'auto', got {rank!r}")
    if not 1 <= rank <= n:
        raise ValueError(f"rank {rank} must be between 1 and the number of symbols ({n})")
    return int(rank)


def select_rank_by_spectrum(P21: np.ndarray, n_triples: float) -> int:
    """Number of singular values of P21 above the sampling noise level ``N^(-1/2)``.

    The Frobenius norm of the noise in P21 is about ``N^(-1/2)`` (it bounds the
    spectral norm), so smaller singular values cannot be told from noise.
    """
    sv = np.linalg.svd(P21, compute_uv=False)
    return max(1, int((sv > 1.0 / np.sqrt(n_triples)).sum()))



def top_subspace(P21: np.ndarray, k: int) -> np.ndarray:
    """U: the top-k left singular vectors of P21, signs fixed for reproducibility."""
    U = np.linalg.svd(P21)[0][:, :k]
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(k)])
    return U * np.where(signs == 0, 1.0, signs)


def spectral_operators(
    P1: np.ndarray, P21: np.ndarray, P3x1: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hsu et al.: ``b1 = Uᵀ P1``, ``b∞ = (P21ᵀ U)⁺ P1``, ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺``."""
    U = top_subspace(P21, k)
    pinv = np.linalg.pinv(U.T @ P21)
    b1 = U.T @ P1
    binf = np.linalg.pinv(P21.T @ U) @ P1
    B = np.einsum("dk,xkl,lm->xdm", U.T, P3x1, pinv, optimize=True)
    return b1, binf, B


class SpectralEstimator:
    """θ_spec: the spectral estimator of Hsu, Kakade & Zhang (2012).

    Parameters
    ----------
    rank
        Dimension k of the model (1 <= k <= n), or ``"auto"``: the number of
        singular values of P21 above the noise level ``N^(-1/2)``. To choose the
        rank by held-out log loss instead, see :func:`streamspec.selection.select_predictor`.
    filter, window, min_proba
        Passed to the fitted :class:`ObservableOperatorModel`.

    Examples
    --------
    >>> from streamspec import MomentAccumulator
    >>> acc = MomentAccumulator(n_symbols=2)
    >>> acc.learn_many([0, 1] * 50)
    >>> model = SpectralEstimator(rank=2).fit(acc)
    >>> model.predict_proba_next([0, 1, 0]).round(3).tolist()
    [0.0, 1.0]

    References
    ----------
    Hsu, Kakade & Zhang (2012), A spectral algorithm for learning hidden Markov
    models, Journal of Computer and System Sciences 78(5).

    """

    def __init__(self, rank: int = 2, filter: str = "window", window: int = 2, min_proba: float = 1e-6):
        self.rank = rank
        self.filter = filter
        self.window = window
        self.min_proba = min_proba

    def fit(self, data) -> ObservableOperatorModel:
        """Fit on a MomentAccumulator (or counts ``c3[x2, x3, x1]``); returns the model."""
        c3, labels = counts_of(data)
        P1, P21, P3x1 = probabilities(c3)
        if isinstance(self.rank, str) and self.rank == "auto":
            k = select_rank_by_spectrum(P21, float(c3.sum()))
        else:
            k = check_rank(self.rank, c3.shape[0])
        self.rank_ = k
        b1, binf, B = spectral_operators(P1, P21, P3x1, k)
        self.model_ = ObservableOperatorModel(
            b1, binf, B, filter=self.filter, window=self.window, min_proba=self.min_proba,
            symbols=labels,
        )
        return self.model_

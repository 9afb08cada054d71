"""The spectral estimator of Hsu, Kakade & Zhang (θ_spec), from sparse triple counts.

Everything is computed from the distinct triples (:class:`~streamspec.core.triples.Triples`):
the top-k left singular vectors U of the sparse P21, then ``b1 = Uᵀ P1``,
``b∞ = (P21ᵀ U)⁺ P1`` and ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺`` by
:func:`~streamspec.core.subspace.project_triples`. Time O(nnz · k + P · k² + n · k²)
(nnz distinct triples, P distinct pairs (x2, x3)) plus the truncated SVD, memory
O(n · k²): no array of size n² or n³ is formed, so alphabets of 10⁵ symbols fit.

The dense routines (:func:`spectral_operators`, :func:`top_subspace`,
:func:`~streamspec.core.fit_data.counts_of`) are kept for small alphabets and as the reference.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core import defaults
from streamspec.core.backoff_fit import fit_with_backoff
from streamspec.core.fit_data import starts_of, triples_of
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.params import Estimator
from streamspec.core.rank_selection import resolve_rank
from streamspec.core.subspace import DENSE_SVD_MAX, project_triples, top_singular
from streamspec.core.triples import Triples

__all__ = [
    "SpectralEstimator",
    "spectral_operators",
    "sparse_spectral_operators",
    "top_subspace",
    "check_rank",
    "select_rank_by_spectrum",
]

_MAX_AUTO_RANK = 256  # rank="auto" looks at this many singular values at most


def check_rank(rank, n: int) -> int:
    """``rank`` as an int, after checking it is an integer in ``1..n``. O(1).

    Examples
    --------
    >>> check_rank(3, 5)
    3
    """
    if isinstance(rank, bool) or not isinstance(rank, int | np.integer):
        raise ValueError(f"rank must be a positive integer or 'auto', got {rank!r}")
    if not 1 <= rank <= n:
        raise ValueError(f"rank {rank} must be between 1 and the number of symbols ({n})")
    return int(rank)


def select_rank_by_spectrum(P21, n_triples: float, max_rank: int | None = None) -> int:
    """Number of singular values of P21 above the sampling noise level ``N^(-1/2)``.

    The Frobenius norm of the noise in P21 is about ``N^(-1/2)`` (it bounds the
    spectral norm), so smaller singular values cannot be told from noise. ``P21``
    may be dense or sparse. Up to 1,000 symbols all singular values are computed
    (dense SVD, O(n³)); above, the top ``min(n - 1, max_rank)`` (truncated sparse SVD,
    O(nnz · max_rank) per iteration, O(n · max_rank) memory), so the result is at most
    ``max_rank`` (None: 256; the projected M-estimator looks at 100).

    Examples
    --------
    >>> select_rank_by_spectrum(np.diag([0.5, 0.3, 0.001]), 10_000)
    2
    """
    n = P21.shape[0]
    if n <= DENSE_SVD_MAX:
        dense = P21.toarray() if sp.issparse(P21) else np.asarray(P21, dtype=np.float64)
        sv = np.linalg.svd(dense, compute_uv=False)
    else:
        cap = _MAX_AUTO_RANK if max_rank is None else max_rank  # why: read at call time
        sv = top_singular(sp.csr_matrix(P21), min(n - 1, cap))[1]
    return max(1, int((sv > 1.0 / np.sqrt(n_triples)).sum()))


def top_subspace(P21: np.ndarray, k: int) -> np.ndarray:
    """U: the top-k left singular vectors of a dense P21, signs fixed for reproducibility. O(n³).

    Examples
    --------
    >>> top_subspace(np.diag([1.0, 3.0]), 1).ravel().tolist()
    [0.0, 1.0]
    """
    U = np.linalg.svd(P21)[0][:, :k]
    signs = np.sign(U[np.abs(U).argmax(axis=0), np.arange(k)])
    return U * np.where(signs == 0, 1.0, signs)


def spectral_operators(
    P1: np.ndarray, P21: np.ndarray, P3x1: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hsu et al. from dense moments: ``b1 = Uᵀ P1``, ``b∞ = (P21ᵀ U)⁺ P1``, ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺``.

    The dense reference: time O(n³ · k), memory O(n³). See
    :func:`sparse_spectral_operators` for the same from sparse counts.

    Examples
    --------
    >>> from streamspec.core.moments import probabilities
    >>> c3 = np.zeros((2, 2, 2)); c3[0, 1, 1] = 3; c3[1, 0, 0] = 1
    >>> b1, binf, B = spectral_operators(*probabilities(c3), 2)
    >>> B.shape, round(float(binf @ b1), 12)
    ((2, 2, 2), 1.0)
    """
    U = top_subspace(P21, k)
    pinv = np.linalg.pinv(U.T @ P21)
    b1 = U.T @ P1
    binf = np.linalg.pinv(P21.T @ U) @ P1
    B = np.einsum("dk,xkl,lm->xdm", U.T, P3x1, pinv, optimize=True)
    return b1, binf, B


def sparse_spectral_operators(
    triples: Triples, k: int, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(b1, b∞, B)`` of θ_spec from sparse triple counts; equal to :func:`spectral_operators`.

    U is the top-k left singular subspace of the sparse P21
    (:func:`~streamspec.core.subspace.top_singular`: dense SVD up to 1,000 symbols,
    truncated sparse SVD above), ``(Uᵀ P21)⁺`` an n × k matrix, and
    ``B_x = Uᵀ P3x1[x] (Uᵀ P21)⁺`` comes from
    :func:`~streamspec.core.subspace.project_triples` with ``left = U`` and
    ``right = (Uᵀ P21)⁺``. Time O(nnz · k + P · k² + n · k²) plus the SVD; memory
    O(n · k²) for B and O(n · k) besides.

    Examples
    --------
    >>> t = Triples.from_arrays(3, x1=[0, 1, 2, 0], x2=[1, 2, 0, 1], x3=[2, 0, 1, 2])
    >>> b1, binf, B = sparse_spectral_operators(t, 3)
    >>> B.shape, round(float(binf @ b1), 12)
    ((3, 3, 3), 1.0)
    """
    P1, P21 = triples.P1(), triples.P21()
    k = check_rank(k, triples.n)
    U = top_singular(P21, k, random_state=random_state)[0]
    P21tU = np.asarray(P21.T @ U)  # (n, k) = (Uᵀ P21)ᵀ
    pinv = np.linalg.pinv(P21tU.T)  # (n, k) = (Uᵀ P21)⁺
    b1 = U.T @ P1
    binf = np.linalg.pinv(P21tU) @ P1
    B = project_triples(triples, U, pinv)
    return b1, binf, B


class SpectralEstimator(Estimator):
    """θ_spec: the spectral estimator of Hsu, Kakade & Zhang (2012), with a smoothed backoff.

    Parameters
    ----------
    rank
        Dimension k of the model (1 <= k <= n), or ``"auto"`` (default,
        :data:`streamspec.core.defaults.RANK`): the number of singular values of P21
        above the noise level ``N^(-1/2)`` (at most 256 above 1,000 symbols).
        To choose the rank by held-out log loss instead, see
        :func:`streamspec.core.selection.select_predictor`.
    filter, window, min_proba
        Passed to the fitted :class:`ObservableOperatorModel`.
    backoff
        ``"auto"`` (default): mix the model's predictions with an interpolated
        Kneser–Ney trigram and an HMM filter of the same counts, with weights started on
        held-out counts and learned from every symbol read
        (:func:`streamspec.core.backoff_fit.fit_with_backoff`; this fits the model twice).
        ``None``: the model alone.
    random_state
        Seed of the held-out split and of the sparse SVD's start vector.
    hmm_states
        States of the HMM whose forward filter the backoff mixes in: ``"auto"`` (default:
        the rank, clipped to 2..16), an integer, or ``None`` (no HMM component).

    Fitting costs O(nnz · k + P · k² + n · k²) time and O(n · k²) memory (nnz
    distinct triples, P distinct pairs), plus the truncated SVD of P21 above 1,000
    symbols and, with the backoff, O(max_contexts · n · k) for the mixing weights.

    Examples
    --------
    >>> from streamspec import MomentAccumulator
    >>> acc = MomentAccumulator(n_symbols=2)
    >>> acc.learn_many([0, 1] * 50)
    >>> model = SpectralEstimator(rank=2, backoff=None).fit(acc)
    >>> model.predict_proba_next([0, 1, 0]).round(3).tolist()
    [0.0, 1.0]
    >>> SpectralEstimator(rank=2).fit(acc).predict_proba_next([0, 1, 0]).round(2).tolist()
    [0.0, 1.0]

    References
    ----------
    Hsu, Kakade & Zhang (2012), A spectral algorithm for learning hidden Markov
    models, Journal of Computer and System Sciences 78(5).

    """

    def __init__(self, *, rank: int | str = defaults.RANK, filter: str = defaults.FILTER,
                 window: int = defaults.WINDOW, min_proba: float = defaults.MIN_PROBA,
                 backoff: str | None = defaults.BACKOFF, random_state: int = 0,
                 hmm_states: int | str | None = defaults.HMM_STATES):
        self.rank = rank
        self.filter = filter
        self.window = window
        self.min_proba = min_proba
        self.backoff = backoff
        self.random_state = random_state
        self.hmm_states = hmm_states
        self._validate()  # why: a bad setting is refused before anything is fitted

    def _validate(self) -> None:
        defaults.check_settings(rank=self.rank, filter=self.filter, window=self.window,
                                min_proba=self.min_proba, backoff=self.backoff,
                                random_state=self.random_state, hmm_states=self.hmm_states)

    def _fit_hmm(self, triples: Triples, labels, k: int) -> ObservableOperatorModel:
        k = check_rank(k, triples.n)
        b1, binf, B = sparse_spectral_operators(triples, k, random_state=self.random_state)
        return ObservableOperatorModel(
            b1, binf, B, filter=self.filter, window=self.window, min_proba=self.min_proba,
            symbols=labels, rank=k,
        )

    def fit(self, data, init: ObservableOperatorModel | None = None) -> ObservableOperatorModel:
        """Fit on a MomentAccumulator, :class:`Triples` or dense counts ``c3[x2, x3, x1]``.

        ``init``: a previous model of this estimator (a refit): its rank is kept when the
        rank is ``"auto"``, its backoff's weights are kept (they were learned from the
        stream) and its HMM warm-starts the new one. Returns the model (also kept as
        ``model_``; the rank used is ``rank_``, and with ``rank="auto"`` every candidate's
        held-out loss ``rank_scores_``). Time and memory: see the class docstring.
        """
        self._validate()  # the settings may have been changed since construction
        triples, labels = triples_of(data)
        k, scores, meta = resolve_rank(self, triples, init)
        if self.backoff is None:
            model = self._fit_hmm(triples, labels, k)
        else:
            model = fit_with_backoff(lambda t: self._fit_hmm(t, labels, k), triples,
                                     starts_of(data, triples.n), random_state=self.random_state,
                                     hmm_states=self.hmm_states, previous=init)
        if meta:
            model = model.replace(metadata={**model.metadata, **meta})
        self.model_, self.rank_, self.rank_scores_ = model, k, scores
        return self.model_

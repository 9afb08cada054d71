"""θ_M: the spectral M-estimator (Tran, Kim & Doshi-Velez, AISTATS 2016), Algorithms 1 and 2."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streamspec.model import ObservableOperatorModel
from streamspec.moments import probabilities
from streamspec.solvers import conjugate_gradient, fista, lasso_groups, solve_groups
from streamspec.spectral import (
    check_rank,
    counts_of,
    select_rank_by_spectrum,
    spectral_operators,
    top_subspace,
)
from streamspec.weighting import WEIGHTINGS, Weighting, build_weighting

__all__ = ["MEstimator", "MFactors", "FACTORIZATIONS"]

FACTORIZATIONS = ("shared", "fixed", "per_symbol")
_DENSE_MAX = 2500  # largest coupled group (parameters) solved with an explicit Hessian


@dataclass
class MFactors:
    """The fitted factors ``B_x = R_x S_xᵀ``, kept on the model for warm starts."""

    R: np.ndarray  # (n, n, k): R[x, i, w]
    S: np.ndarray  # (n, k) shared/fixed, or (n, n, k) per symbol
    factorization: str
    loss: float = float("nan")
    history: list = field(default_factory=list)

    def operators(self) -> np.ndarray:
        return _operators(self.R, self.S)

    def padded(self, n: int) -> MFactors:
        """The same factors for a larger alphabet (new symbols: zero rows)."""
        m = self.R.shape[0]
        if n == m:
            return self
        if n < m:
            raise ValueError(f"cannot warm-start from a model with {m} symbols on {n} symbols")
        k = self.R.shape[2]
        R = np.zeros((n, n, k))
        R[:m, :m] = self.R
        if self.S.ndim == 2:
            S = np.zeros((n, k))
            S[:m] = self.S
        else:
            S = np.zeros((n, n, k))
            S[:m, :m] = self.S
            S[m:, :, :] = np.eye(n, k)
        return MFactors(R, S, self.factorization, self.loss, list(self.history))


class MEstimator:
    """θ_M: generalised-method-of-moments spectral estimator with low rank and L1.

    Minimises ``L(R, S) = mᵀ W m + λ N^(-1/2) ‖R‖₁`` with moment conditions
    ``m_xij = P3x1[x]_ij - [R_x S_xᵀ P21]_ij``, ``b1 = P1`` and ``b∞ = 1``, by
    alternating minimisation over R and S (Algorithm 2) inside an outer loop that
    re-estimates W at the current operators (Algorithm 1), starting from W = I.

    Parameters
    ----------
    rank
        k, the rank of every ``B_x`` (1 <= k <= n), or ``"auto"``: the number of
        singular values of P21 above the noise level ``N^(-1/2)``.
    penalty
        λ of the L1 term ``λ N^(-1/2) ‖R‖₁`` (0 = none). Solved by coordinate
        descent to a tight tolerance, so small entries become exact zeros.
    weighting
        ``"per_symbol"`` (default; the paper's per-x blocks), ``"exact"`` (math.md's
        j-blocks, with their coupling across x), ``"diagonal"`` or ``"identity"``.
        See :mod:`streamspec.weighting` for what each costs. The default follows
        ``docs/results.md``: with S = U and ``shrinkage="auto"`` the two tie on the
        ring, chain and grids (5×5 grid: both ×0.89 of θ_spec's error), and
        per-symbol is ahead on the 10-state, 20-symbol learning curve (×0.92–0.97
        against ×0.97–1.06) and in held-out log loss on Alice and the chorales; it
        is also much cheaper for large alphabets (its R-step splits by symbol).
        "exact" did better when counts are plentiful (26 symbols, 10⁶ triples:
        joint error 0.035 against 0.043).
    factorization
        ``"fixed"`` (default): S = U (the top-k left singular vectors of P21) for
        every symbol and only R is solved, a convex weighted lasso.
        ``"shared"``: one S for all symbols, ``B_x = R_x Sᵀ``, learned by
        alternating minimisation from S = U. Measured (``docs/results.md``): on a
        random 5-state, 26-symbol HMM with 2·10⁵ symbols, learning S lowered the
        training loss but raised the held-out log loss from 3.167 (fixed, and
        θ_spec) to 3.32: S fits the noise in P21, so "fixed" is the default.
        ``"per_symbol"``: independent ``R_x, S_x`` per symbol, the paper read
        literally; below full rank its products share no subspace and its joint
        probabilities can blow up (math.md section 6), so it is kept for
        reproduction only.
    max_outer
        Outer iterations (re-estimations of W) at most; 1 means W = I only.
    max_sweeps
        Alternating sweeps (S-step then R-step) per outer iteration, at most.
    tol
        Relative decrease of the loss under which the sweeps stop, and relative
        change of the operators under which the outer loop stops.
    n_restarts
        Random starts tried besides the spectral start; the fit with the lowest
        training loss (under the weighting of the spectral start's solution) wins.
    random_state
        Seed of the random starts.
    smoothing, shrinkage, ridge
        Regularisation of W, see :func:`streamspec.weighting.build_weighting`.
    filter, window, min_proba
        Passed to the fitted :class:`ObservableOperatorModel`.

    Attributes
    ----------
    factors_
        The fitted :class:`MFactors` (R, S, loss history, and ``loss``: the
        criterion at the solution with W re-estimated there, comparable across fits).
    weighting_
        The :class:`~streamspec.weighting.Weighting` re-estimated at the solution.
    loss_history_
        Per outer iteration, the training loss after each sweep (W fixed within one).
    model_
        The fitted model (also returned by :meth:`fit`).

    Notes
    -----
    Gauge: ``R_x Sᵀ`` is unchanged by ``R → R T, S → S T⁻ᵀ``, which would let
    ``‖R‖₁`` shrink for free. S is therefore kept orthonormal (``Sᵀ S = I``, as U
    is), re-orthonormalised after each S-step by a QR factorisation.

    A sweep that would raise the loss is rejected, so with W held fixed the
    training loss never increases. Costs per sweep, n symbols and rank k: the
    R-step is n² independent k × k problems under ``"identity"``/``"diagonal"``,
    n problems of size nk under ``"per_symbol"``, and one coupled problem of size
    n²k under ``"exact"`` (an explicit Hessian up to 2,500 parameters, beyond that
    preconditioned conjugate gradients, or accelerated proximal gradient with L1);
    the shared S-step is one nk × nk system.

    Examples
    --------
    >>> from streamspec import MomentAccumulator
    >>> from streamspec.hmm import HMM
    >>> hmm = HMM.random(n_states=2, n_symbols=3, random_state=0)
    >>> acc = MomentAccumulator(n_symbols=3)
    >>> acc.learn_many(hmm.sample(20_000, random_state=1))
    >>> model = MEstimator(rank=2, weighting="exact").fit(acc)
    >>> p = model.predict_proba_next([0, 1])
    >>> bool(abs(p.sum() - 1) < 1e-12 and (p >= 0).all())
    True

    References
    ----------
    Tran, Kim & Doshi-Velez (2016), Spectral M-estimation with applications to
    hidden Markov models, AISTATS.

    """

    def __init__(
        self,
        rank: int | str = 2,
        penalty: float = 0.0,
        weighting: str = "per_symbol",
        factorization: str = "fixed",
        max_outer: int = 3,
        max_sweeps: int = 10,
        tol: float = 1e-6,
        n_restarts: int = 0,
        random_state: int | None = None,
        smoothing: float = 0.0,
        shrinkage: float | str = "auto",
        ridge: float = 1e-6,
        filter: str = "window",
        window: int = 2,
        min_proba: float = 1e-6,
    ):
        self.rank = rank
        self.penalty = penalty
        self.weighting = weighting
        self.factorization = factorization
        self.max_outer = max_outer
        self.max_sweeps = max_sweeps
        self.tol = tol
        self.n_restarts = n_restarts
        self.random_state = random_state
        self.smoothing = smoothing
        self.shrinkage = shrinkage
        self.ridge = ridge
        self.filter = filter
        self.window = window
        self.min_proba = min_proba

    # ------------------------------------------------------------------ public

    def _validate(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        if self.factorization not in FACTORIZATIONS:
            raise ValueError(
                f"factorization must be one of {FACTORIZATIONS}, got {self.factorization!r}"
            )
        if not (isinstance(self.penalty, int | float) and self.penalty >= 0):
            raise ValueError(f"penalty must be a number >= 0, got {self.penalty!r}")
        for name in ("max_outer", "max_sweeps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.n_restarts, bool) or not isinstance(self.n_restarts, int) or self.n_restarts < 0:
            raise ValueError(f"n_restarts must be an integer >= 0, got {self.n_restarts!r}")
        if not (isinstance(self.tol, int | float) and self.tol > 0):
            raise ValueError(f"tol must be a positive number, got {self.tol!r}")

    def fit(self, data, init=None) -> ObservableOperatorModel:
        """Fit on a MomentAccumulator (or counts ``c3[x2, x3, x1]``); returns the model.

        ``init`` warm-starts from a previous solution: a model returned by an
        earlier ``fit`` (it carries its factors), an :class:`MFactors`, or a fitted
        MEstimator. W is then re-estimated at the previous operators (with the
        current counts) before the first sweep, instead of starting from W = I;
        a grown alphabet is handled by padding the factors with zeros.
        """
        self._validate()
        c3, labels = counts_of(data)
        n = c3.shape[0]
        P1, P21, P3x1 = probabilities(c3)
        N = float(c3.sum())
        k = (
            select_rank_by_spectrum(P21, N)
            if isinstance(self.rank, str) and self.rank == "auto"
            else check_rank(self.rank, n)
        )
        self._P21, self._P3j, self._c3 = P21, P3x1.transpose(2, 0, 1).copy(), c3
        self._mu = self.penalty / np.sqrt(N)
        warm = _factors_of(init)
        if warm is not None:
            warm = warm.padded(n)
            if warm.R.shape[2] != k or warm.factorization != self.factorization:
                warm = None  # a different rank or factorization: start afresh
        if warm is not None:
            B_prev = warm.operators()
            R, S = warm.R.copy(), warm.S.copy()
            if self.factorization == "fixed":  # S follows the counts: re-express B in the new U
                S = top_subspace(P21, k)
                R = B_prev @ S
            best, W = self._run(R, S, self._weighting_at(B_prev))
        else:
            U = top_subspace(P21, k)
            R0, S0 = self._spectral_start(P1, P21, P3x1, U)
            best, W = self._run(R0, S0, None)
            rng = np.random.default_rng(self.random_state)
            for _ in range(self.n_restarts):
                candidate, _ = self._run(*self._random_start(rng, n, k), None)
                if self._loss(candidate.R, candidate.S, W) < self._loss(best.R, best.S, W):
                    best = candidate
        # report the loss under W re-estimated at the solution itself, so that fits
        # reached by different paths (cold, warm, restarts) are comparable
        W = self._weighting_at(best.operators())
        best.loss = self._loss(best.R, best.S, W)
        self.factors_ = best
        self.weighting_ = W
        self.loss_history_ = best.history
        self.rank_ = k
        model = ObservableOperatorModel(
            P1, np.ones(n), best.operators(), filter=self.filter, window=self.window,
            min_proba=self.min_proba, symbols=labels,
        )
        model.factors = best
        self.model_ = model
        return model

    # ------------------------------------------------------------------ starts

    def _spectral_start(self, P1, P21, P3x1, U):
        """θ_spec in M-form: S = U, R_x = U Uᵀ P3x1[x] (Uᵀ P21)⁺ (math.md section 6)."""
        k = U.shape[1]
        _, _, Bk = spectral_operators(P1, P21, P3x1, k)
        R = np.einsum("dk,xkl->xdl", U, Bk, optimize=True)
        S = U if self.factorization != "per_symbol" else np.broadcast_to(U, (len(P1),) + U.shape).copy()
        return R, S.copy()

    def _random_start(self, rng, n, k):
        if self.factorization == "per_symbol":
            S = np.stack([np.linalg.qr(rng.normal(size=(n, k)))[0] for _ in range(n)])
        elif self.factorization == "fixed":
            S = top_subspace(self._P21, k)
        else:
            S = np.linalg.qr(rng.normal(size=(n, k)))[0]
        R = self._r_step(np.zeros((n, n, k)), S, build_weighting("identity", self._c3))
        return R, S

    # ------------------------------------------------------------------ Algorithm 1

    def _weighting_at(self, B: np.ndarray) -> Weighting:
        return build_weighting(
            self.weighting, self._c3, B, smoothing=self.smoothing, shrinkage=self.shrinkage,
            ridge=self.ridge,
        )

    def _run(self, R, S, W0):
        """Outer loop: alternate under W, re-estimate W at the new operators, repeat."""
        W = W0 if W0 is not None else build_weighting("identity", self._c3)
        history = []
        B_old = None
        outer_budget = self.max_outer if self.weighting != "identity" else 1
        for outer in range(outer_budget):
            if outer > 0:
                W = self._weighting_at(B_old)
            R, S, losses = self._alternate(R, S, W)
            history.append(losses)
            B = _operators(R, S)
            converged = B_old is not None and (
                np.linalg.norm(B - B_old) < self.tol * max(np.linalg.norm(B_old), 1e-300)
            )
            B_old = B
            if converged:
                break
        return MFactors(R, S, self.factorization, history=history), W

    # ------------------------------------------------------------------ Algorithm 2

    def _alternate(self, R, S, W):
        loss = self._loss(R, S, W)
        losses = [loss]
        for _ in range(self.max_sweeps):
            R_new, S_new = R, S
            if self.factorization != "fixed":
                S_new = self._s_step(R_new, S_new, W)
                R_new, S_new = _regauge(R_new, S_new)
            R_new = self._r_step(R_new, S_new, W)
            new = self._loss(R_new, S_new, W)
            if not np.isfinite(new) or new > loss:
                break  # reject: with W fixed the loss never increases
            R, S = R_new, S_new
            improvement = loss - new
            loss = new
            losses.append(loss)
            if improvement <= self.tol * max(loss, 1e-300):
                break
        return R, S, losses

    def _z(self, S):
        """Z[x, j, w] = (S_xᵀ P21)[w, j]."""
        n = self._P21.shape[0]
        if S.ndim == 2:
            return np.broadcast_to((S.T @ self._P21).T, (n, n, S.shape[1]))
        return np.einsum("xsw,sj->xjw", S, self._P21, optimize=True)

    def _loss(self, R, S, W) -> float:
        Z = self._z(S)
        m = self._P3j - np.einsum("xiw,xjw->jxi", R, Z, optimize=True)
        return W.quad(m) + self._mu * float(np.abs(R).sum())

    def _r_step(self, R, S, W) -> np.ndarray:
        """argmin over R of mᵀWm + μ‖R‖₁ (halved: ½θᵀHθ - cᵀθ + μ/2 ‖θ‖₁)."""
        n, _, k = R.shape
        Z = self._z(S)
        WP = W.apply(self._P3j)
        c = np.einsum("jxi,xjw->xiw", WP, Z, optimize=True)
        mu = self._mu / 2
        if W.blocks is None and W.K is None:  # rows (x, i) decouple
            H = np.einsum("jxi,xjw,xjv->xiwv", W.lam, Z, Z, optimize=True).reshape(n * n, k, k)
            groups, shape = (H, c.reshape(n * n, k)), (n * n, k)
        elif W.blocks is not None:  # symbols x decouple
            H = np.einsum("jxab,xjw,xjv->xawbv", W.blocks, Z, Z, optimize=True)
            groups, shape = (H.reshape(n, n * k, n * k), c.reshape(n, n * k)), (n, n * k)
        elif n * n * k <= _DENSE_MAX:
            Wd = np.stack([W.dense_block(j) for j in range(n)]).reshape(n, n, n, n, n)
            H = np.einsum("jxiyl,xjw,yjv->xiwylv", Wd, Z, Z, optimize=True)
            p = n * n * k
            groups, shape = (H.reshape(1, p, p), c.reshape(1, p)), (1, p)
        else:
            return self._r_step_iterative(R, Z, W, c)
        H, cg = groups
        if mu > 0:
            theta = lasso_groups(H, cg, mu, theta0=R.reshape(shape))
        else:
            theta = solve_groups(H, cg)
        return theta.reshape(n, n, k)

    def _r_step_iterative(self, R, Z, W, c):
        def matvec(theta):
            m = np.einsum("xiw,xjw->jxi", theta, Z, optimize=True)
            return np.einsum("jxi,xjw->xiw", W.apply(m), Z, optimize=True)

        if self._mu > 0:
            return fista(matvec, c, self._mu / 2, R)
        diag = np.einsum("jxi,xjw->xiw", W.diagonal(), Z**2, optimize=True)
        return conjugate_gradient(matvec, c, R, precond=np.maximum(diag, 1e-300))

    def _s_step(self, R, S, W) -> np.ndarray:
        """argmin over S of mᵀWm (the penalty does not involve S)."""
        n, _, k = R.shape
        P21 = self._P21
        WP = W.apply(self._P3j)
        if S.ndim == 2:
            # m = P - R̃ (Sᵀ q_j): H[(s,w),(t,v)] = Σ_j q_j[s] q_j[t] (R̃ᵀ W_j R̃)[w, v]
            WR = np.stack([W.apply(np.broadcast_to(R[:, :, v], (n, n, n))) for v in range(k)])
            RWR = np.einsum("xiw,vjxi->jwv", R, WR, optimize=True)
            H = np.einsum("sj,tj,jwv->swtv", P21, P21, RWR, optimize=True).reshape(n * k, n * k)
            c = np.einsum("sj,xiw,jxi->sw", P21, R, WP, optimize=True).reshape(n * k)
            return solve_groups(H[None], c[None])[0].reshape(n, k)

        def matvec(theta):
            T = np.einsum("xsw,sj->xjw", theta, P21, optimize=True)
            m = np.einsum("xiw,xjw->jxi", R, T, optimize=True)
            Y = np.einsum("jxi,xiw->xjw", W.apply(m), R, optimize=True)
            return np.einsum("sj,xjw->xsw", P21, Y, optimize=True)

        Y = np.einsum("jxi,xiw->xjw", WP, R, optimize=True)
        c = np.einsum("sj,xjw->xsw", P21, Y, optimize=True)
        return conjugate_gradient(matvec, c, S, max_iter=200)


def _operators(R: np.ndarray, S: np.ndarray) -> np.ndarray:
    """``B_x = R_x S_xᵀ`` for a shared (n, k) or per-symbol (n, n, k) S."""
    if S.ndim == 2:
        return np.einsum("xiw,sw->xis", R, S, optimize=True)
    return np.einsum("xiw,xsw->xis", R, S, optimize=True)


def _regauge(R, S):
    """Make S orthonormal (QR), moving its triangular factor into R: B is unchanged."""
    if S.ndim == 2:
        Q, T = np.linalg.qr(S)
        return R @ T.T, Q
    Q, T = np.linalg.qr(S)  # batched over x
    return np.einsum("xiw,xvw->xiv", R, T), Q


def _factors_of(init) -> MFactors | None:
    if init is None:
        return None
    if isinstance(init, MFactors):
        return init
    if isinstance(init, MEstimator):
        return getattr(init, "factors_", None)
    return getattr(init, "factors", None)

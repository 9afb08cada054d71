"""Learn a discrete HMM from triple counts: method of moments, then EM on the counted triples.

:class:`HMMEstimator` turns the sufficient statistics kept by
:class:`~streamspec.streaming.accumulator.MomentAccumulator` (the counts of consecutive
triples ``(x1, x2, x3)``) into a :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel`
with transition and emission matrices, without ever revisiting the stream.

Two stages, both linear in the number of *distinct* triples ``nnz`` and
independent of the stream's length:

1. **Method of moments** (Anandkumar, Hsu & Kakade 2012). Given the hidden state of
   the middle symbol, x1, x2 and x3 are independent. With ``P31[i, j] = Pr(x3=i, x1=j)``
   (sparse), ``U3, U1`` its top-m singular vectors and ``K = U3ᵀ P31 U1``, every
   ``B(x) = (U3ᵀ P31,x U1) K⁻¹ = R diag(O[x, :]) R⁻¹`` with ``R = U3ᵀ M3``. The
   eigenvectors of a random combination ``Σ η_x B(x)`` give R; then
   ``O[x, h] = (R⁻¹ B(x) R)[h, h]`` for all x at once, as one weighted sum over the
   distinct triples; ``M3 = U3 R`` and ``T`` from ``M3 = O T``; ``π`` from ``P1 = O π``.
   Cost O(nnz · m + n · m²) plus the top-m SVD of P31.
2. **Refinement**: EM maximising the likelihood of the counted triples, each
   distinct triple a sample of a three-step HMM (start distribution π of the first
   hidden state, then T, emissions O), weighted by its count. The E-step is
   vectorised over the distinct triples, O(nnz · m²) per iteration. The triple
   log-likelihood never decreases (``log_likelihood_history_``).

Moments give a consistent, start-free estimate; EM then removes most of its
finite-sample error (see ``docs/math.md``, section 8).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import scipy.sparse as sp

from streamspec.core import defaults
from streamspec.core.fit_data import triples_of
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.params import Estimator
from streamspec.core.progress import Progress
from streamspec.core.subspace import top_singular
from streamspec.core.triples import Triples

__all__ = ["HMMEstimator", "moment_estimate", "refine", "triple_log_likelihood", "exact_triples"]

_CHUNK = 1 << 16  # distinct triples per block of the E-step: bounds its scratch memory
_FLOOR = 1e-6  # mass mixed into the emissions/transitions of a start, so no triple is impossible
_N_ETA = 16  # seeded candidate combinations η tried for the eigen-decomposition


# ---------------------------------------------------------------------- input


def _one_blas_thread():
    """Limit BLAS to one thread while EM runs (its products are (chunk × m)·(m × m): threads only
    add overhead, 3-7× on a loaded machine); a no-op when threadpoolctl is not installed."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


# ---------------------------------------------------------------------- method of moments


def _normalise_columns(a: np.ndarray, floor: float = 0.0) -> np.ndarray:
    a = np.clip(np.real(a), 0.0, None) + floor
    s = a.sum(axis=0, keepdims=True)
    s[s == 0] = 1.0
    return a / s


def moment_estimate(
    triples: Triples, n_states: int, random_state=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pi, T, O)`` by the method of moments, column-stochastic like :class:`streamspec.core.hmm.HMM`.

    ``T[h2, h1]`` (m, m), ``O[x, h]`` (n, m), ``pi`` the distribution of the first
    hidden state of a triple (m,). Exact, up to a permutation of the states, when
    the triples are the population probabilities of an HMM whose O and M3 = O T
    have full column rank. Negative estimates are clipped to 0 and columns
    renormalised. Raises ``np.linalg.LinAlgError`` when ``U3ᵀ P31 U1`` is singular
    or the eigenvectors are degenerate.

    Cost: the top-m SVD of the sparse n × n matrix P31, then
    O(nnz · m · n_eta + n · m²); memory O(nnz + n · m).

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> truth = HMM(T=[[0.9, 0.2], [0.1, 0.8]], O=[[0.7, 0.1], [0.2, 0.3], [0.1, 0.6]])
    >>> pi, T, O = moment_estimate(exact_triples(truth), 2)
    >>> order = np.argsort(O[0])[::-1]
    >>> O[:, order].round(6).tolist()
    [[0.7, 0.1], [0.2, 0.3], [0.1, 0.6]]
    >>> T[np.ix_(order, order)].round(6).tolist()
    [[0.9, 0.2], [0.1, 0.8]]
    """
    n, m = triples.n, int(n_states)
    total = triples.total
    if not total > 0:
        raise ValueError("no triples counted: cannot estimate an HMM from empty counts")
    x1, x2, x3 = triples.x1, triples.x2, triples.x3
    w = triples.weights / total
    U3, L3, R1 = _whitened_p31(x1, x3, w, n, m)
    rng = np.random.default_rng(random_state)
    R = _eigenvectors(L3, R1, w, x2, U3, m, rng)  # columns: eigenvectors, complex under noise
    Rinv = np.linalg.inv(R)
    # O[x, h] = Σ_{triples with x2 = x} w · (R⁻¹ U3ᵀ)[h, x3] · (U1 K⁻¹ R)[x1, h]
    terms = (L3 @ Rinv.T) * (R1 @ R) * w[:, None]  # (nnz, m), complex
    O = np.empty((n, m))
    for h in range(m):
        O[:, h] = np.bincount(x2, weights=np.real(terms[:, h]), minlength=n)
    O = _split_duplicates(_normalise_columns(O), rng)
    # M3 = U3 R, each column a distribution over x3 (its complex scale removed by its sum)
    M3 = U3 @ R
    M3 = M3 / M3.sum(axis=0, keepdims=True)
    M3 = _normalise_columns(M3)
    T = _normalise_columns(np.linalg.lstsq(O, M3, rcond=None)[0])
    P1 = np.bincount(x1, weights=w, minlength=n)
    pi = np.linalg.lstsq(O, P1, rcond=None)[0]
    pi = np.clip(pi, 0.0, None)
    pi = pi / pi.sum() if pi.sum() > 0 else np.full(m, 1.0 / m)
    return pi, T, O


def _whitened_p31(x1, x3, w, n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(U3, L3, R1)``: the top-m left singular vectors U3 of P31, and per distinct triple the
    rows ``U3[x3]`` and ``(U1 K⁻¹)[x1]`` with ``K = U3ᵀ P31 U1`` (both (nnz, m)).

    Raises ``np.linalg.LinAlgError`` when P31 has numerical rank below m. Cost: the
    top-m SVD of the sparse P31 and O(nnz · m²).
    """
    P31 = sp.csr_matrix((w, (x3, x1)), shape=(n, n))
    U3, s, U1 = top_singular(P31, m, random_state=0)
    if not s[-1] > s[0] * 1e-12:
        raise np.linalg.LinAlgError(
            f"P31 has numerical rank below {m} (singular values {s.tolist()}): too many states"
        )
    K = U3.T @ (P31 @ U1)  # (m, m)
    Kinv = np.linalg.inv(K)
    return U3, U3[x3], U1[x1] @ Kinv


def _eigenvectors(L3, R1, w, x2, U3, m: int, rng: np.random.Generator) -> np.ndarray:
    """The eigenvectors (columns) of the best of :data:`_N_ETA` combinations ``Σ_x η_x B(x)``.

    Candidates η: the one whose combination has the fewest complex eigenvalues wins,
    then the largest smallest gap between the real parts of its eigenvalues, less their
    largest imaginary part. Why: under noise a pair of close eigenvalues becomes a
    complex-conjugate pair, whose |λ_i - λ_j| is twice the imaginary part (large) but
    whose real parts, all we keep, are one state twice. O(_N_ETA · nnz · m²).
    """
    best = None
    for _ in range(_N_ETA):
        # η = U3 θ, θ uniform on the sphere (Anandkumar, Hsu & Kakade): the eigenvalues
        # θᵀ U3ᵀ O[:, h] are then separated by the emissions seen in the top subspace
        theta = rng.standard_normal(m)
        eta = U3 @ (theta / np.linalg.norm(theta))
        # Σ_x η_x B(x) = U3ᵀ (Σ_x η_x P31,x) U1 K⁻¹, summed over the distinct triples
        Bm = (L3 * (w * eta[x2])[:, None]).T @ R1
        lam, V = np.linalg.eig(Bm)
        re = np.real(lam)
        gaps = np.abs(re[:, None] - re[None, :]) + np.diag(np.full(m, np.inf))
        gap = (float(gaps.min()) if m > 1 else 1.0) - float(np.abs(np.imag(lam)).max())
        scale = float(np.abs(lam).max()) or 1.0
        score = (-int((np.abs(np.imag(lam)) > 1e-9 * scale).sum()), gap / scale)
        if best is None or score > best[0]:
            best = (score, V)
    return best[1]


def _split_duplicates(O: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Emission columns that equal an earlier one (a complex pair kept by its real part):
    each such copy is perturbed (log-normal factors, σ = 0.5, seeded), so that the
    refinement can pull the two states apart; EM cannot separate identical states."""
    O = O.copy()
    for h in range(1, O.shape[1]):
        if any(np.abs(O[:, h] - O[:, g]).sum() < 1e-6 for g in range(h)):
            col = O[:, h] * rng.lognormal(0.0, 0.5, size=O.shape[0]) + 1e-12
            O[:, h] = col / col.sum()
    return O


def exact_triples(hmm, scale: float = 1e12) -> Triples:
    """Population triple probabilities of an HMM (``pi`` for the first state) as weights × ``scale``.

    For tests and examples; dense in n³, so small alphabets only. O(n³ · m).
    """
    T, O, pi = np.asarray(hmm.T), np.asarray(hmm.O), np.asarray(hmm.pi)
    a1 = O * pi  # (n, m): Pr(x1, h1)
    a2 = np.einsum("jg,hg,ih->jih", a1, T, O)  # Pr(x1=j, x2=i, h2=h)
    b3 = O @ T  # Pr(x3 | h2)
    P = np.einsum("jih,kh->jik", a2, b3)  # Pr(x1, x2, x3)
    n = O.shape[0]
    j, i, k = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    return Triples.from_arrays(n, j.ravel(), i.ravel(), k.ravel(), P.ravel() * scale)


# ---------------------------------------------------------------------- EM on triples


def _estep(triples: Triples, pi, T, O, stats: bool = True):
    """Triple log-likelihood (per unit weight) and, if ``stats``, expected sufficient statistics.

    O(nnz · m²) time, O(chunk · m + n · m) memory.
    """
    n, m = O.shape
    total = triples.total
    x1a, x2a, x3a, wa = triples.x1, triples.x2, triples.x3, triples.weights / total
    ll = 0.0
    s_pi = np.zeros(m)
    s_T = np.zeros((m, m))
    s_O = np.zeros((n, m))
    for lo in range(0, triples.nnz, _CHUNK):
        sl = slice(lo, lo + _CHUNK)
        x1, x2, x3, w = x1a[sl], x2a[sl], x3a[sl], wa[sl]
        e1, e2, e3 = O[x1], O[x2], O[x3]  # (c, m)
        a1 = e1 * pi  # Pr(x1, h1)
        f2 = (a1 @ T.T) * e2  # Pr(x1, x2, h2)
        b3 = e3 @ T  # Pr(x3 | h2)
        p = (f2 * b3).sum(axis=1)
        with np.errstate(divide="ignore"):
            ll += float(w @ np.log(p))
        if not stats:
            continue
        r = np.divide(w, p, out=np.zeros_like(p), where=p > 0)
        g2 = f2 * b3 * r[:, None]
        b2 = (e2 * b3) @ T  # Pr(x2, x3 | h1)
        g1 = a1 * b2 * r[:, None]
        f3 = f2 @ T.T  # Pr(x1, x2, h3)
        g3 = f3 * e3 * r[:, None]
        s_pi += g1.sum(axis=0)
        s_T += T * (((e2 * b3) * r[:, None]).T @ a1)  # ξ12[h2, h1]
        s_T += T * ((e3 * r[:, None]).T @ f2)  # ξ23[h3, h2]
        # one bincount over (symbol, state) cells for all three positions (3m would cost ~3x)
        cells = (np.concatenate([x1, x2, x3])[:, None] * m + np.arange(m)).ravel()
        s_O += np.bincount(cells, weights=np.concatenate([g1, g2, g3]).ravel(),
                           minlength=n * m).reshape(n, m)
    return ll, (s_pi, s_T, s_O)


def triple_log_likelihood(triples: Triples, model: HiddenMarkovModel) -> float:
    """Mean log-likelihood per counted triple of ``triples`` under ``model``. O(nnz · m²).

    Each triple is scored as three consecutive symbols whose first hidden state is
    drawn from ``model.startprob_``.

    Examples
    --------
    >>> model = HiddenMarkovModel([1.0], [[1.0]], [[0.5, 0.5]])
    >>> t = Triples.from_arrays(2, x1=[0, 1], x2=[1, 1], x3=[0, 0])
    >>> round(triple_log_likelihood(t, model), 6), round(3 * float(np.log(0.5)), 6)
    (-2.079442, -2.079442)
    """
    if triples.n != model.n_symbols:
        raise ValueError(f"triples over {triples.n} symbols, model over {model.n_symbols}")
    return _estep(triples, model.startprob_, model.transmat_.T, model.emissionprob_.T, stats=False)[0]


def refine(triples: Triples, pi, T, O, n_iter: int, tol: float):
    """EM on the counted triples from ``(pi, T, O)`` (column-stochastic); O(nnz · m²) per iteration.

    Returns ``(pi, T, O, history, converged)``: ``history[k]`` is the mean triple
    log-likelihood of the parameters after k iterations (non-decreasing).
    Stops early when an iteration gains less than ``tol``.
    """
    ll, st = _estep(triples, pi, T, O)
    history = [ll]
    converged = False
    progress = Progress("hmm-em", O.shape[0], O.shape[1])  # a long fit says where it is
    for it in range(int(n_iter)):
        s_pi, s_T, s_O = st
        pi = s_pi / s_pi.sum()
        colT = s_T.sum(axis=0, keepdims=True)
        T = np.where(colT > 0, s_T / np.where(colT > 0, colT, 1.0), T)
        colO = s_O.sum(axis=0, keepdims=True)
        O = np.where(colO > 0, s_O / np.where(colO > 0, colO, 1.0), O)
        ll, st = _estep(triples, pi, T, O)
        history.append(ll)
        progress.line(f"iteration={it + 1}/{int(n_iter)}", -ll)
        if ll - history[-2] < tol:
            converged = True
            break
    return pi, T, O, history, converged


# ---------------------------------------------------------------------- the estimator


class HMMEstimator(Estimator):
    """Fit a :class:`~streamspec.core.hidden_markov_model.HiddenMarkovModel` to triple counts.

    Parameters
    ----------
    n_states
        Number of hidden states m; at most the number of symbols.
    n_iter
        Iterations of the refinement (EM on the counted triples); 0 keeps the
        method-of-moments estimate.
    tol
        The refinement stops when an iteration raises the mean triple
        log-likelihood by less than this.
    n_restarts
        Additional refinements from seeded random starts; the start whose refined
        triple log-likelihood is highest wins.
    random_state
        Seed of the moment step's random combination and of the random starts.
    init
        ``"moments"`` (default): start the refinement from the method of moments;
        ``"random"``: from a seeded random model (Dirichlet rows).

    Attributes (after :meth:`fit`)
    -------------------------------
    model_
        The fitted :class:`HiddenMarkovModel` (also returned by :meth:`fit`).
    log_likelihood_history_
        Mean triple log-likelihood after each refinement iteration of the winning start.
    loss_history_
        Its negative (mean log loss per triple).
    n_iter_, converged_
        Iterations run by the winning start and whether it met ``tol``.
    start_
        How the winning start was obtained: ``"moments"``, ``"random"``, ``"warm"``
        or ``"restart k"``.

    Costs: the top-m SVD of the sparse P31, O(nnz · m + n · m²) for the moments,
    O(nnz · m²) per refinement iteration and per start, for nnz distinct triples;
    memory O(nnz + n · m). Nothing depends on the stream's length.

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> truth = HMM(T=[[0.95, 0.1], [0.05, 0.9]], O=[[0.6, 0.1], [0.3, 0.2], [0.1, 0.7]])
    >>> est = HMMEstimator(n_states=2, n_iter=0, random_state=0)
    >>> hmm = est.fit(exact_triples(truth))
    >>> order = np.argsort(-hmm.emissionprob_[:, 0])
    >>> hmm.emissionprob_[order].round(6).tolist()
    [[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]]
    >>> hmm.transmat_[np.ix_(order, order)].round(6).tolist()
    [[0.95, 0.05], [0.1, 0.9]]
    """

    def __init__(
        self,
        *,
        n_states: int,
        n_iter: int = defaults.HMM_N_ITER,
        tol: float = defaults.HMM_TOL,
        n_restarts: int = 0,
        random_state=None,
        init: str = defaults.HMM_INIT,
    ):
        self.n_states = n_states
        self.n_iter = n_iter
        self.tol = tol
        self.n_restarts = n_restarts
        self.random_state = random_state
        self.init = init

    def _validate(self, n_symbols: int | None = None) -> None:
        """Check the settings (:func:`streamspec.core.defaults.check_hmm_settings`) and, given
        the alphabet size, that the states can be told apart. O(1)."""
        defaults.check_hmm_settings(n_states=self.n_states, n_iter=self.n_iter, tol=self.tol,
                                    n_restarts=self.n_restarts, init=self.init)
        if n_symbols is not None and self.n_states > n_symbols:
            raise ValueError(
                f"n_states={self.n_states} is larger than the alphabet ({n_symbols} symbols): "
                "the states of a discrete HMM cannot be told apart from fewer symbols"
            )

    def _random_start(self, rng, n: int):
        m = self.n_states
        pi = rng.dirichlet(np.ones(m))
        T = rng.dirichlet(np.ones(m), size=m).T + 2.0 * np.eye(m)  # mildly sticky
        T /= T.sum(axis=0, keepdims=True)
        O = rng.dirichlet(np.ones(n), size=m).T
        return pi, T, O

    def _warm_start(self, init: HiddenMarkovModel, n: int, labels: list | None):
        m = self.n_states
        if init.n_states != m:
            raise ValueError(f"init has {init.n_states} states, the estimator {m}")
        E = init.emissionprob_.T  # (n_old, m)
        if labels is not None and init.symbols is not None:
            O = np.zeros((n, m))
            where = {s: i for i, s in enumerate(labels)}
            for j, s in enumerate(init.symbols):
                if s in where:
                    O[where[s]] = E[j]
        else:
            if init.n_symbols > n:
                raise ValueError(f"init knows {init.n_symbols} symbols, the counts only {n}")
            O = np.zeros((n, m))
            O[: init.n_symbols] = E
        # symbols new to the model get a small mass, so that no triple is impossible
        O = _normalise_columns(O, floor=_FLOOR / n)
        T = _normalise_columns(init.transmat_.T, floor=_FLOOR)
        pi = init.startprob_ + _FLOOR
        return pi / pi.sum(), T, O

    def fit(self, data, *, init: HiddenMarkovModel | None = None) -> HiddenMarkovModel:
        """Fit to the triple counts of ``data`` and return the :class:`HiddenMarkovModel`.

        Parameters
        ----------
        data
            A :class:`~streamspec.streaming.accumulator.MomentAccumulator` (its labels become the
            model's ``symbols`` when it has them), a :class:`~streamspec.core.triples.Triples`,
            or dense counts ``c3[x2, x3, x1]``.
        init
            A previous model to start the refinement from (warm start) instead of the
            method of moments; symbols it does not know get a small emission mass.

        Cost: see the class docstring; O(nnz · m² · n_iter · (1 + n_restarts)) dominates.

        The model's ``startprob_`` is the distribution of the first hidden state of a
        counted triple: for triples counted along long streams, close to the stationary
        distribution, not the distribution at the start of a stream.
        """
        self._validate()
        triples, labels = triples_of(data)  # refuses empty counts
        n = triples.n
        self._validate(n)
        rng = np.random.default_rng(self.random_state)
        m = self.n_states
        starts = []
        if init is not None:
            if not isinstance(init, HiddenMarkovModel):
                raise TypeError(f"init must be a HiddenMarkovModel, got {type(init).__name__}")
            starts.append(("warm", self._warm_start(init, n, labels)))
        elif self.init == "moments":
            try:
                pi, T, O = moment_estimate(triples, m, random_state=rng.integers(2**32))
                starts.append(("moments", (pi, T, O)))
            except np.linalg.LinAlgError as exc:
                warnings.warn(
                    f"method of moments failed ({exc}); starting from a random model", stacklevel=2
                )
        if not starts:
            starts.append(("random", self._random_start(rng, n)))
        for k in range(self.n_restarts):
            starts.append((f"restart {k + 1}", self._random_start(rng, n)))

        with _one_blas_thread():
            best = self._refine_all(triples, starts)
        name, hist, conv, (pi, T, O) = best
        self.start_ = name
        self.log_likelihood_history_ = list(hist)
        self.loss_history_ = [-v for v in hist]
        self.n_iter_ = len(hist) - 1
        self.converged_ = conv
        self.n_symbols_ = n
        self.model_ = HiddenMarkovModel(pi, T.T, O.T, symbols=labels)
        return self.model_

    def _refine_all(self, triples: Triples, starts: list):
        """Refine every start; ``(name, history, converged, (pi, T, O))`` of the best."""
        n = triples.n
        best = None
        for name, (pi, T, O) in starts:
            if self.n_iter > 0 and name != "warm":
                # a floor keeps every counted triple possible, so EM's log-likelihood is finite
                O = _normalise_columns(O, floor=_FLOOR / n)
                T = _normalise_columns(T, floor=_FLOOR)
                pi = (pi + _FLOOR) / (pi + _FLOOR).sum()
            pi, T, O, hist, conv = refine(triples, pi, T, O, self.n_iter, self.tol)
            if best is None or hist[-1] > best[1][-1]:
                best = (name, hist, conv, (pi, T, O))
        return best

    def __repr__(self) -> str:
        return (
            f"HMMEstimator(n_states={self.n_states!r}, n_iter={self.n_iter!r}, tol={self.tol!r}, "
            f"n_restarts={self.n_restarts!r}, random_state={self.random_state!r}, init={self.init!r})"
        )

"""The method of moments for HMMs (Anandkumar, Hsu & Kakade 2012), over triples or windows.

Given the hidden state of the middle symbol of a triple (x1, x2, x3) — or of a gram
(past, x, future) — the three views are independent. With ``P31[i, j] = Pr(x3 = i, x1 = j)``
(sparse; futures × pasts for windows), ``U3, U1`` its top-m singular vectors and ``K =
U3ᵀ P31 U1``, every ``C(x) = (U3ᵀ P31,x U1) K⁻¹ = R diag(O[x, :]) R⁻¹`` with ``R = U3ᵀ M3``
(``M3[f, h] = Pr(future = f | h)``). The eigenvectors of a random combination ``Σ η_x C(x)``
give R; then ``O[x, h] = (R⁻¹ C(x) R)[h, h]`` for all x at once, as one weighted sum over
the distinct triples; ``M3 = U3 R``; T from ``M3 = F T``, where ``F[w, h] = Pr(window w
starting at h)`` is O for single symbols and, for windows, ``O[w_1, h]`` times M3 summed
over its last symbol (section 11 of ``docs/math.md``: x and the future are independent given
h); π from ``P1 = F π``. With windows the number of states may exceed the alphabet: it is
bounded by the rank of P31, at most the number of distinct windows.

Cost: the top-m SVD of the sparse P31, then O(nnz · m · n_eta + (n + W) · m²) for nnz
distinct triples or grams and W windows; memory O(nnz + W · m).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamspec.core.subspace import top_singular
from streamspec.core.triples import Triples
from streamspec.core.window_triples import WindowTriples
from streamspec.core.windows import WindowCounts

__all__ = ["moment_estimate", "normalise_columns", "exact_triples", "exact_windows", "window_emissions",
           "SharedMoments"]

_N_ETA = 16  # seeded candidate combinations η tried for the eigen-decomposition
# floats of the per-symbol sums A(x) (n × m²) SharedMoments keeps at most; above, it keeps the
# triples' rows instead (as moment_estimate alone), e.g. 10⁵ symbols at 64 states (3 GB)
_AGGREGATE_MAX_FLOATS = 1 << 25


def normalise_columns(a: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Columns clipped at 0 (real parts), ``floor`` added, scaled to sum to 1 (zero columns kept). O(size).

    Examples
    --------
    >>> normalise_columns(np.array([[1.0, -1.0], [3.0, 0.0]])).tolist()
    [[0.25, 0.0], [0.75, 0.0]]
    """
    a = np.clip(np.real(a), 0.0, None) + floor
    s = a.sum(axis=0, keepdims=True)
    s[s == 0] = 1.0
    return a / s


def moment_estimate(
    counts: Triples | WindowTriples, n_states: int, random_state=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pi, T, O)`` by the method of moments, column-stochastic like :class:`streamspec.core.hmm.HMM`.

    ``T[h2, h1]`` (m, m), ``O[x, h]`` (n, m), ``pi`` the distribution of the first
    hidden state of a triple — or of a gram, for :class:`WindowTriples` (m,). Exact, up
    to a permutation of the states, when the counts are the population probabilities
    of an HMM whose M3 and M1 (future and past given the middle state) have full
    column rank and whose emission columns are distinct; with windows m may exceed n.
    Negative estimates are clipped to 0 and columns renormalised. Raises
    ``np.linalg.LinAlgError`` when ``U3ᵀ P31 U1`` is singular or the eigenvectors are
    degenerate.

    Cost: the top-m SVD of the sparse P31, then O(nnz · m · n_eta + (n + W) · m²);
    memory O(nnz + W · m).

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
    windows = counts if isinstance(counts, WindowTriples) else None
    triples = windows.triples if windows is not None else counts
    n = windows.n if windows is not None else triples.n
    size, m = triples.n, int(n_states)
    total = triples.total
    if not total > 0:
        raise ValueError("no triples counted: cannot estimate an HMM from empty counts")
    x1, x2, x3 = triples.x1, triples.x2, triples.x3
    w = triples.weights / total
    U3, L3, R1 = _whitened_p31(x1, x3, w, size, m)
    rng = np.random.default_rng(random_state)
    # η weighs the middle symbols: U3's rows are futures, so take their one-step marginal
    symbol_U3 = U3 if windows is None else windows.one_step() @ U3
    R = _eigenvectors(L3, R1, w, x2, symbol_U3, m, rng)  # columns: eigenvectors, complex under noise
    Rinv = np.linalg.inv(R)
    # O[x, h] = Σ_{triples with x2 = x} w · (R⁻¹ U3ᵀ)[h, x3] · (U1 K⁻¹ R)[x1, h]
    terms = (L3 @ Rinv.T) * (R1 @ R) * w[:, None]  # (nnz, m), complex
    O = np.empty((n, m))
    for h in range(m):
        O[:, h] = np.bincount(x2, weights=np.real(terms[:, h]), minlength=n)
    O = _split_duplicates(normalise_columns(O), rng)
    # M3 = U3 R, each column a distribution over futures (its complex scale removed by its sum)
    M3 = U3 @ R
    M3 = M3 / M3.sum(axis=0, keepdims=True)
    M3 = normalise_columns(M3)
    F = O if windows is None else window_emissions(windows, O, M3)
    T = normalise_columns(np.linalg.lstsq(F, M3, rcond=None)[0])
    P1 = np.bincount(x1, weights=w, minlength=size if windows is not None else n)
    pi = np.linalg.lstsq(F, P1, rcond=None)[0]
    pi = np.clip(pi, 0.0, None)
    pi = pi / pi.sum() if pi.sum() > 0 else np.full(m, 1.0 / m)
    return pi, T, O


def window_emissions(windows: WindowTriples, O: np.ndarray, M3: np.ndarray) -> np.ndarray:
    """``F[w, h] = Pr(window w | h at its first symbol) = O[w_1, h] · Σ_f 1[f_{1..L-1} = w_{2..L}]
    M3[f, h]`` (size × m): x and the future are independent given the middle state, and the
    current window is x followed by the future without its last symbol. O(W · L · m)."""
    S, D = windows.prefix_matrix()
    first = windows.windows[:, 0]
    E = np.zeros((windows.size, O.shape[1]))
    real = np.flatnonzero(first >= 0)
    E[real] = O[first[real]]
    return E * (D.T @ (S @ M3))


def _whitened_p31(x1, x3, w, n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(U3, L3, R1)``: the top-m left singular vectors U3 of P31, and per distinct triple the
    rows ``U3[x3]`` and ``(U1 K⁻¹)[x1]`` with ``K = U3ᵀ P31 U1`` (both (nnz, m)).

    Raises ``np.linalg.LinAlgError`` when P31 has numerical rank below m. Cost: the
    top-m SVD of the sparse P31 and O(nnz · m²).
    """
    P31 = sp.csr_matrix((w, (x3, x1)), shape=(n, n))
    if m > n:
        raise np.linalg.LinAlgError(f"{m} states from a P31 of size {n}: too many states")
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
    whose real parts, all we keep, are one state twice. ``U3`` is over the middle
    symbols (n × m). O(_N_ETA · nnz · m²).
    """
    best = None
    for _ in range(_N_ETA):
        # η = U3 θ, θ uniform on the sphere (Anandkumar, Hsu & Kakade): the eigenvalues
        # θᵀ U3ᵀ O[:, h] are then separated by the emissions seen in the top subspace
        theta = rng.standard_normal(m)
        eta = U3 @ (theta / np.linalg.norm(theta))
        # Σ_x η_x B(x) = U3ᵀ (Σ_x η_x P31,x) U1 K⁻¹, summed over the distinct triples
        Bm = (L3 * (w * eta[x2])[:, None]).T @ R1
        score, V = _score_eigen(Bm, m)
        if best is None or score > best[0]:
            best = (score, V)
    return best[1]


def _score_eigen(Bm: np.ndarray, m: int) -> tuple[tuple[int, float], np.ndarray]:
    """The eigenvectors of ``Bm`` and their score in :func:`_eigenvectors` (fewest complex
    eigenvalues, then the largest gap between real parts less the largest imaginary part). O(m³)."""
    lam, V = np.linalg.eig(Bm)
    re = np.real(lam)
    gaps = np.abs(re[:, None] - re[None, :]) + np.diag(np.full(m, np.inf))
    gap = (float(gaps.min()) if m > 1 else 1.0) - float(np.abs(np.imag(lam)).max())
    scale = float(np.abs(lam).max()) or 1.0
    return (-int((np.abs(np.imag(lam)) > 1e-9 * scale).sum()), gap / scale), V


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


class SharedMoments:
    """The method of moments on one set of triples for every number of states up to
    ``max_states``: what the sizes share is computed once.

    The top-``max_states`` singular vectors of P31 serve every smaller m (the top m of them
    are the top-m subspace), ``K = U3ᵀ P31 U1`` of a smaller m is its leading block, and the
    per-middle-symbol sums ``A(x) = Σ_{x2 = x} w · U3[x3]ᵀ U1[x1]`` (n × m × m) hold all that
    the eigen-step and the emissions need of the triples: ``B(x) = A(x)[:m, :m] K_m⁻¹``.
    :meth:`estimate` then costs O(_N_ETA · n · m² + n · m³) per size instead of
    O(_N_ETA · nnz · m²) and an SVD. Where ``A`` would exceed :data:`_AGGREGATE_MAX_FLOATS`
    floats, the triples' rows are kept and each size costs what :func:`moment_estimate` does
    without its SVD.

    Cost: one top-``max_states`` SVD of the sparse P31 and O(nnz · max_states²) for A;
    memory O(nnz + n · max_states²).

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> truth = HMM(T=[[0.9, 0.2], [0.1, 0.8]], O=[[0.7, 0.1], [0.2, 0.3], [0.1, 0.6]])
    >>> t = exact_triples(truth)
    >>> shared = SharedMoments(t, 3)
    >>> all(np.allclose(a, b) for a, b in zip(shared.estimate(2, 0), moment_estimate(t, 2, 0)))
    True
    """

    def __init__(self, triples: Triples, max_states: int):
        n = triples.n
        if not triples.total > 0:
            raise ValueError("no triples counted: cannot estimate an HMM from empty counts")
        self.n, self.max_states = n, int(min(max_states, n))
        x1, x2, x3 = triples.x1, triples.x2, triples.x3
        w = triples.weights / triples.total
        P31 = sp.csr_matrix((w, (x3, x1)), shape=(n, n))
        self.U3, self.s, self.U1 = top_singular(P31, self.max_states, random_state=0)
        self.K = self.U3.T @ (P31 @ self.U1)
        self.P1 = np.bincount(x1, weights=w, minlength=n)
        m = self.max_states
        if n * m * m <= _AGGREGATE_MAX_FLOATS:
            self.A, self.rows = _symbol_sums(x1, x2, x3, w, self.U3, self.U1, n), None
        else:
            self.A, self.rows = None, (x1, x2, x3, w)

    def estimate(self, n_states: int, random_state=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(pi, T, O)`` of ``n_states`` ≤ ``max_states`` states, as :func:`moment_estimate` on
        the same triples (the same seeded combinations η; equal up to rounding). Raises
        ``np.linalg.LinAlgError`` as it does. O(_N_ETA · n · m² + n · m³)."""
        m = int(n_states)
        if m > self.max_states:
            raise np.linalg.LinAlgError(f"{m} states from moments shared up to {self.max_states}")
        s = self.s[:m]
        if not s[-1] > s[0] * 1e-12:
            raise np.linalg.LinAlgError(
                f"P31 has numerical rank below {m} (singular values {s.tolist()}): too many states")
        U3, U1 = self.U3[:, :m], self.U1[:, :m]
        Kinv = np.linalg.inv(self.K[:m, :m])
        rng = np.random.default_rng(random_state)
        if self.A is None:  # the triples' rows, as moment_estimate
            x1, x2, x3, w = self.rows
            L3, R1 = U3[x3], U1[x1] @ Kinv
            R = _eigenvectors(L3, R1, w, x2, U3, m, rng)
            Rinv = np.linalg.inv(R)
            terms = (L3 @ Rinv.T) * (R1 @ R) * w[:, None]
            O = np.empty((self.n, m))
            for h in range(m):
                O[:, h] = np.bincount(x2, weights=np.real(terms[:, h]), minlength=self.n)
        else:
            A = self.A[:, :m, :m]
            R = _eigenvectors_of_sums(A, Kinv, U3, m, rng)
            Rinv = np.linalg.inv(R)
            # O[x, h] = (R⁻¹ A(x) K⁻¹ R)[h, h]
            O = np.real(np.einsum("ha,xah->xh", Rinv, A @ (Kinv @ R)))
        O = _split_duplicates(normalise_columns(O), rng)
        M3 = U3 @ R
        M3 = normalise_columns(M3 / M3.sum(axis=0, keepdims=True))
        T = normalise_columns(np.linalg.lstsq(O, M3, rcond=None)[0])
        pi = np.clip(np.linalg.lstsq(O, self.P1, rcond=None)[0], 0.0, None)
        pi = pi / pi.sum() if pi.sum() > 0 else np.full(m, 1.0 / m)
        return pi, T, O


def _symbol_sums(x1, x2, x3, w, U3, U1, n: int) -> np.ndarray:
    """``A[x] = Σ_{triples with x2 = x} w · U3[x3]ᵀ U1[x1]`` (n × m × m): one product per block of
    triples sorted by their middle symbol. O(nnz · m²) time, O(block · m + n · m²) memory."""
    m = U3.shape[1]
    order = np.argsort(x2, kind="stable")
    xs = x2[order]
    bounds = np.flatnonzero(np.diff(xs)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [xs.size]))
    A = np.zeros((n, m, m))
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        rows = order[a:b]
        A[xs[a]] = (U3[x3[rows]] * w[rows, None]).T @ U1[x1[rows]]
    return A


def _eigenvectors_of_sums(A: np.ndarray, Kinv: np.ndarray, U3: np.ndarray, m: int,
                          rng: np.random.Generator) -> np.ndarray:
    """:func:`_eigenvectors` from the per-symbol sums ``A`` (n × m × m): the combination
    ``Σ_x η_x B(x) = (Σ_x η_x A(x)) K⁻¹``, the same η drawn in the same order.
    O(_N_ETA · (n · m² + m³))."""
    best = None
    for _ in range(_N_ETA):
        theta = rng.standard_normal(m)
        eta = U3 @ (theta / np.linalg.norm(theta))
        Bm = np.tensordot(eta, A, axes=1) @ Kinv
        score, V = _score_eigen(Bm, m)
        if best is None or score > best[0]:
            best = (score, V)
    return best[1]


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


def exact_windows(hmm, window: int, scale: float = 1e12) -> WindowCounts:
    """Population probabilities of every (2L+1)-gram of an HMM (``pi`` for the first state), as
    weights × ``scale``: the counts of an infinitely long stream, without pads.

    For tests and examples; dense in n^(2L+1) (all grams), so small n and L only. Forward
    recursion over the grams: O(n^(2L+1) · m²).

    Examples
    --------
    >>> from streamspec.core.hmm import HMM
    >>> truth = HMM(T=[[0.9, 0.2], [0.1, 0.8]], O=[[0.7, 0.1], [0.3, 0.9]])
    >>> g = exact_windows(truth, 2, scale=1.0)
    >>> g.nnz, round(g.total, 12)
    (32, 1.0)
    >>> t = exact_triples(truth, scale=1.0)              # its marginal: the triples
    >>> bool(np.array_equal(g.triples().codes, t.codes) and np.allclose(g.triples().weights, t.weights))
    True
    """
    T, O, pi = np.asarray(hmm.T), np.asarray(hmm.O), np.asarray(hmm.pi)
    n, m = O.shape
    span = 2 * int(window) + 1
    alpha = (O * pi)[:, None, :]  # (grams so far, 1 position, m): Pr(prefix, h_t)
    digits = np.arange(n)[:, None]
    for _ in range(span - 1):
        nxt = (alpha[:, 0, :] @ T.T)  # Pr(prefix, h_{t+1})
        alpha = (nxt[:, None, :] * O[None, :, :]).reshape(-1, 1, m)
        digits = np.concatenate([np.repeat(digits, n, axis=0),
                                 np.tile(np.arange(n), digits.shape[0])[:, None]], axis=1)
    return WindowCounts.from_digits(n, int(window), digits, alpha[:, 0, :].sum(axis=1) * scale)

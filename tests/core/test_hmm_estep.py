"""The triples' E-step (blocked, emission counts by one sparse product) against forward-backward."""

import numpy as np
import pytest

from streamspec.core import hmm_em
from streamspec.core.triples import Triples


@pytest.mark.parametrize("chunk", [7, 1 << 16])  # several blocks, and one
def test_triple_estep_equals_forward_backward_of_runs(monkeypatch, chunk):
    rng = np.random.default_rng(3)
    n, m, c = 11, 4, 60
    x = rng.integers(0, n, (3, c))
    t = Triples.from_arrays(n, x[0], x[1], x[2], rng.integers(1, 5, c).astype(float))
    pi = rng.random(m)
    pi /= pi.sum()
    T = rng.random((m, m))
    T /= T.sum(axis=0)
    O = rng.random((n, m))
    O /= O.sum(axis=0)
    monkeypatch.setattr(hmm_em, "_CHUNK", chunk)
    ll, (s_pi, s_T, s_O) = hmm_em._estep(t, pi, T, O)
    X = np.stack([t.x1, t.x2, t.x3], axis=1)
    ref_ll, (r_pi, r_T, r_O) = hmm_em.forward_backward(X, t.weights / t.total, pi, T, O)
    assert ll == pytest.approx(ref_ll, rel=1e-12)
    np.testing.assert_allclose(s_pi, r_pi, rtol=1e-10)
    np.testing.assert_allclose(s_T, r_T, rtol=1e-10)
    np.testing.assert_allclose(s_O, r_O, rtol=1e-10, atol=1e-15)
    assert s_O.sum() == pytest.approx(3.0)  # every position's posterior counted once


def _params(rng, n, m):
    pi = rng.random(m)
    T = rng.random((m, m))
    O = rng.random((n, m))
    return pi / pi.sum(), T / T.sum(axis=0), O / O.sum(axis=0)


# blocks over their own symbols (7 < 13 symbols), over the alphabet, and both in one E-step
# (14: three blocks of 14 triples over the alphabet, a last one of 8 over its own symbols)
@pytest.mark.parametrize("chunk", [7, 1 << 16, 14])
def test_reused_blocks_and_scratch_give_each_estep_its_own_answer(monkeypatch, chunk):
    # one _Chunks serves every E-step of an EM run (its scratch arrays reused): an E-step must
    # not read what the last one left there, whatever its number of states
    rng = np.random.default_rng(8)
    n, c = 13, 50
    x = rng.integers(0, n, (3, c))
    t = Triples.from_arrays(n, x[0], x[1], x[2], rng.integers(1, 4, c).astype(float))
    monkeypatch.setattr(hmm_em, "_CHUNK", chunk)
    chunks = hmm_em._Chunks(t)
    if chunk == 14:
        assert [b[-1] is None for b in chunks.blocks] == [True, True, True, False]
    X = np.stack([t.x1, t.x2, t.x3], axis=1)
    for m in (3, 3, 5, 2):
        pi, T, O = _params(rng, n, m)
        ll, stats = hmm_em._estep(chunks, pi, T, O)
        ref_ll, ref = hmm_em.forward_backward(X, t.weights / t.total, pi, T, O)
        assert ll == pytest.approx(ref_ll, rel=1e-12)
        for a, b in zip(stats, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-15)


def test_an_impossible_triple_adds_no_counts():
    rng = np.random.default_rng(2)
    n, m = 6, 3
    pi, T, O = _params(rng, n, m)
    O[5] = 0.0  # symbol 5 is never emitted
    O /= O.sum(axis=0)
    t = Triples.from_arrays(n, [0, 1, 5], [2, 3, 0], [4, 4, 1], [2.0, 1.0, 1.0])
    chunks = hmm_em._Chunks(t)
    # every triple possible first: the scratch then holds finite ratios for all three, which the
    # impossible triple's zero probability must not carry into the counts (nor turn into NaN)
    hmm_em._estep(chunks, *_params(rng, n, m))
    ll, (s_pi, s_T, s_O) = hmm_em._estep(chunks, pi, T, O)
    assert ll == -np.inf
    possible = Triples.from_arrays(n, [0, 1], [2, 3], [4, 4], [2.0, 1.0])
    _, (p_pi, p_T, p_O) = hmm_em._estep(possible, pi, T, O)
    # the same counts as without the impossible triple, per unit of the total weight (4 vs 3)
    np.testing.assert_allclose(s_O * 4 / 3, p_O, rtol=1e-12)
    np.testing.assert_allclose(s_T * 4 / 3, p_T, rtol=1e-12)
    assert np.isfinite(s_O).all() and s_O[5].sum() == 0.0

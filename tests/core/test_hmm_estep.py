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

"""A model held as ``B[x] @ right`` (what θ_spec's warm refits write) against the same model
written out: every method, checkpoints, the online predictor, and the refits themselves."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.checkpoint import read_checkpoint
from streamspec.core.model import ObservableOperatorModel
from streamspec.core.projected_state import ProjectedState
from streamspec.core.subspace import project_triples
from streamspec.streaming.online_predictor import OnlinePredictor


def _counts(n: int, x) -> MomentAccumulator:
    acc = MomentAccumulator(n)
    acc.learn_many(x)
    return acc


def _pair(seed: int = 0, n: int = 7, d: int = 3, **kw):
    """A factored model and the same model with its operators written out."""
    rng = np.random.default_rng(seed)
    true = HMM.random(d, n, random_state=seed)
    plain = SpectralEstimator(rank=d, backoff=None).fit(
        _counts(n, true.sample(20_000, random_state=seed + 1)))
    right = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    base = plain.B @ np.linalg.inv(right)
    factored = ObservableOperatorModel(plain.b1, plain.binf, base, right=right, rank=d, **kw)
    written = ObservableOperatorModel(plain.b1, plain.binf, base @ right, rank=d, **kw)
    return factored, written, true.sample(3_000, random_state=seed + 2)


@pytest.mark.parametrize("filter", ["window", "recursive"])
def test_a_factored_model_predicts_what_its_written_out_operators_do(filter):
    factored, written, x = _pair(filter=filter, window=3)
    assert factored.operator_factors[1] is not None
    np.testing.assert_allclose(factored.log_loss([x]), written.log_loss([x]), rtol=1e-12)
    np.testing.assert_allclose(factored.predict_proba_next(x[:50]), written.predict_proba_next(x[:50]),
                               rtol=1e-10, atol=1e-14)
    contexts = np.stack([x[:-2], x[1:-1]], axis=1)[:200]
    np.testing.assert_allclose(factored.window_states(contexts), written.window_states(contexts),
                               rtol=1e-10, atol=1e-13)
    states = written.window_states(contexts[:4])
    np.testing.assert_allclose(factored.extend_states(states), written.extend_states(states),
                               rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(factored.state_for(x[:20]), written.state_for(x[:20]), rtol=1e-10)
    np.testing.assert_allclose(factored.joint_proba(x[:12]), written.joint_proba(x[:12]), rtol=1e-10)
    np.testing.assert_allclose(factored.joint_proba_many(contexts), written.joint_proba_many(contexts),
                               rtol=1e-10)
    # another filter keeps the factors (no product formed); B forms it, once, and keeps it
    assert factored.with_filter(window=1).operator_factors[1] is not None
    np.testing.assert_allclose(factored.B, written.B, rtol=1e-12, atol=1e-15)
    assert factored.operator_factors[1] is None and factored.operator_factors[0] is factored.B
    np.testing.assert_allclose(factored.log_loss([x]), written.log_loss([x]), rtol=1e-12)


def test_a_factored_checkpoint_keeps_the_factors_and_is_version_4(tmp_path):
    factored, written, x = _pair(1)
    factored.save(tmp_path / "f.ckpt")
    written.save(tmp_path / "w.ckpt")
    header, arrays = read_checkpoint(tmp_path / "f.ckpt", ObservableOperatorModel._FORMAT, 4)
    assert header["version"] == 4 and "B_right" in arrays
    assert read_checkpoint(tmp_path / "w.ckpt", ObservableOperatorModel._FORMAT, 4)[0]["version"] == 1
    back = ObservableOperatorModel.load(tmp_path / "f.ckpt")
    assert back.operator_factors[1] is not None
    np.testing.assert_allclose(back.log_loss([x]), written.log_loss([x]), rtol=1e-12)
    again = ObservableOperatorModel.from_bytes(factored.to_bytes())
    np.testing.assert_allclose(again.log_loss([x]), written.log_loss([x]), rtol=1e-12)


def test_a_bad_right_factor_is_refused():
    factored, _, _ = _pair(2)
    base, right = factored.operator_factors
    with pytest.raises(ValueError, match="right must have shape"):
        ObservableOperatorModel(factored.b1, factored.binf, base, right=right[:2])
    bad = right.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="right holds NaN"):
        ObservableOperatorModel(factored.b1, factored.binf, base, right=bad)


def test_the_online_predictor_reads_a_factored_model_as_its_written_out_operators():
    factored, written, x = _pair(3)
    a, b = OnlinePredictor(window=2), OnlinePredictor(window=2)
    a.set_model(factored)
    b.set_model(written)
    for i, s in enumerate(x[:300].tolist()):
        key = i % 3
        np.testing.assert_allclose(a.row(key), b.row(key), rtol=1e-10, atol=1e-14)
        assert a.observe(key, s) == pytest.approx(b.observe(key, s), rel=1e-10)
    assert factored.operator_factors[1] is not None  # read through its factors, never written out


# ---------------------------------------------------------------------- the refits


@pytest.fixture(scope="module")
def stream() -> np.ndarray:
    return HMM.random(4, 30, random_state=3).sample(140_000, random_state=4)


def test_spectral_refits_keep_the_operators_factored_and_exact(stream):
    """Three warm θ_spec refits in a row: each model is factored (its right factor carried from
    the previous state), and its operators are θ_spec's of all the counts in the kept bases,
    ``(Uᵀ c3[x] V)(Uᵀ c21 V)⁻¹``, to rounding."""
    acc = _counts(30, stream[:100_000])
    _, state = SpectralEstimator(rank=4, backoff=None).fit_with_state(acc)
    assert state.right is None  # a cold fit writes its operators out
    for part in range(3):
        acc.learn_many(stream[100_000 + 10_000 * part : 110_000 + 10_000 * part])
        est = SpectralEstimator(rank=4, backoff=None, basis_tol=1e9)
        model, new = est.fit_with_state(acc, init=state)
        assert est.refit_.path == "warm" and isinstance(new, ProjectedState)
        ops, right = model.operator_factors
        assert right is not None and new.right is right and new.ops is ops
        t, U, V = acc.triples(), new.U[:, :4], new.Q[:, :4]
        M1 = U.T @ (t.c21() @ V)
        want = project_triples(t, U, V @ np.linalg.inv(M1), total=1.0)
        np.testing.assert_allclose(ops @ right, want, rtol=0, atol=1e-10 * np.abs(want).max())
        state = new


def test_a_refit_with_the_backoff_keeps_its_model_factored_and_as_good_as_cold(stream):
    acc = _counts(30, stream[:118_000])
    _, state = SpectralEstimator(rank=4).fit_with_state(acc)
    acc.learn_many(stream[118_000:120_000])
    est = SpectralEstimator(rank=4)
    model = est.fit(acc, init=state)
    assert est.refit_.path == "warm" and model.operator_factors[1] is not None
    cold = SpectralEstimator(rank=4).fit(acc)
    test = stream[120_000:]
    # (at the same window filter: a refit keeps the window "auto" chose, a cold fit chooses again)
    cold = cold.with_filter(window=model.window)
    assert abs(model.without_backoff().log_loss([test]) - cold.without_backoff().log_loss([test])) <= 1e-4


def test_an_ill_conditioned_right_factor_is_written_out(stream, monkeypatch):
    import streamspec.core.projected_warm as warm_module

    acc = _counts(30, stream[:100_000])
    _, state = SpectralEstimator(rank=4, backoff=None).fit_with_state(acc)
    acc.learn_many(stream[100_000:110_000])
    factored = SpectralEstimator(rank=4, backoff=None).fit(acc, init=state)
    monkeypatch.setattr(warm_module, "FACTORED_COND_MAX", 1.0)  # every right factor too large
    est = SpectralEstimator(rank=4, backoff=None)
    written = est.fit(acc, init=state)
    assert est.refit_.path == "warm" and written.operator_factors[1] is None
    np.testing.assert_allclose(written.B, factored.B, rtol=0, atol=1e-12 * np.abs(written.B).max())


def test_the_m_estimators_refits_are_factored_too_and_equal_to_written_out_ones(stream, monkeypatch,
                                                                              tmp_path):
    """θ_M's GLS steps read and write the weighted symbols' operators during the refit; the
    refit's model is then factored like θ_spec's, and equal to the refit written out (the
    right factor's condition capped at 1), over two refits; its factors (a warm start from the
    saved model) keep the right factor through a checkpoint."""
    import streamspec.core.projected_warm as warm_module

    def refits(cap: float):
        monkeypatch.setattr(warm_module, "FACTORED_COND_MAX", cap)
        acc = _counts(30, stream[:100_000])
        _, state = MEstimator(rank=4, backoff=None).fit_with_state(acc)
        models = []
        for end in (110_000, 120_000):
            acc.learn_many(stream[end - 10_000 : end])
            est = MEstimator(rank=4, backoff=None, basis_tol=1e9)
            model, state = est.fit_with_state(acc, init=state)
            assert est.refit_.path == "warm" and est.refit_.reused + est.refit_.rebuilt > 0
            models.append(model)
        return models

    factored, written = refits(1e6), refits(1.0)
    for f, w in zip(factored, written, strict=True):
        assert f.operator_factors[1] is not None and w.operator_factors[1] is None
        np.testing.assert_allclose(f.B, w.B, rtol=0, atol=1e-10 * np.abs(w.B).max())
    last = refits(1e6)[-1]
    last.save(tmp_path / "m.ckpt")
    back = ObservableOperatorModel.load(tmp_path / "m.ckpt")
    np.testing.assert_allclose(back.factors.operators(), written[-1].B, rtol=0,
                               atol=1e-10 * np.abs(written[-1].B).max())


def test_a_model_pickled_with_its_operators_as_B_still_loads():
    """River models are pickled by their users: a model pickled before the factors existed held
    ``B`` in its ``__dict__``; it unpickles to the same model."""
    import pickle

    _, written, x = _pair(4)
    old = pickle.loads(pickle.dumps(written))
    old.__dict__["B"] = old.__dict__.pop("_parts")[0]  # the attribute layout of before
    back = pickle.loads(pickle.dumps(old))
    np.testing.assert_allclose(back.log_loss([x]), written.log_loss([x]), rtol=1e-12)
    factored, _, _ = _pair(4)
    again = pickle.loads(pickle.dumps(factored))
    assert again.operator_factors[1] is not None
    np.testing.assert_allclose(again.log_loss([x]), written.log_loss([x]), rtol=1e-12)

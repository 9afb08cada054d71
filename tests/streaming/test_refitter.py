"""Tests of streamspec.streaming.refitter: triggers, warm starts, background fits, failures."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest

from streamspec import (
    HMM,
    HMMEstimator,
    MEstimator,
    MomentAccumulator,
    Refitter,
    SpectralEstimator,
    WithHMM,
)


@pytest.fixture(scope="module")
def hmm_symbols() -> np.ndarray:
    return HMM.random(n_states=4, n_symbols=8, random_state=0).sample(60_000, random_state=1)


def feed(refitter: Refitter, acc: MomentAccumulator, symbols) -> None:
    for s in symbols:
        acc.learn_one(s)
        refitter.observe(1, acc)


class GatedEstimator:
    """A SpectralEstimator whose fit waits for an event (to hold a background fit open)."""

    def __init__(self, rank: int = 2, gate: threading.Event | None = None, fail_on: int = 0):
        self.rank = rank
        self.gate = gate
        self.fail_on = fail_on

    def fit(self, acc):
        if self.gate is not None:
            assert self.gate.wait(30), "test gate never opened"
        if self.fail_on and acc.n_triples >= self.fail_on:
            raise np.linalg.LinAlgError("boom")
        return SpectralEstimator(rank=self.rank).fit(acc)


# ---------------------------------------------------------------------- triggers


def test_count_trigger_fits_every_refit_every_symbols():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=2), refit_every=100)
    feed(r, acc, ("abc" * 200)[:350])
    assert r.n_fits == 3
    assert [rec.n_seen for rec in r.records] == [100, 200, 300]
    assert r.fitted_on_symbols == 300
    assert r.fitted_on_triples == 298.0
    assert r.n_seen == 350
    assert r.last_fit_seconds is not None and r.last_fit_seconds >= 0


def test_no_fit_before_the_first_triple():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=1), refit_every=1)
    feed(r, acc, "ab")
    assert r.n_fits == 0 and r.model is None and r.n_failures == 0
    feed(r, acc, "c")
    assert r.n_fits == 1 and r.model is not None


def test_time_trigger_only_with_new_symbols(fake_refitter_time):
    fake = fake_refitter_time
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=2), refit_every=None, refit_interval=10.0)
    for t, s in enumerate("abcabcabca"):  # t = 0..9: the interval has not elapsed
        fake.now = float(t)
        acc.learn_one(s)
        assert not r.observe(1, acc)
    fake.now = 10.0
    acc.learn_one("b")
    assert r.observe(1, acc) and r.n_fits == 1
    fake.now = 30.0
    assert not r.observe(0, acc)  # no new symbol since the last fit: nothing to refit
    acc.learn_one("c")
    assert r.observe(1, acc) and r.n_fits == 2


def test_until_due_counts_down():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=2), refit_every=10)
    assert r.until_due() == 10
    feed(r, acc, "abcab")
    assert r.until_due() == 5
    assert Refitter(SpectralEstimator(), refit_every=None).until_due() > 10**6


@pytest.mark.parametrize(
    "kwargs",
    [
        {"refit_every": 0},
        {"refit_every": 2.5},
        {"refit_interval": -1.0},
        {"sweeps": 0},
        {"sweeps": True},
        {"max_records": 0},
    ],
)
def test_invalid_parameters(kwargs):
    with pytest.raises(ValueError):
        Refitter(SpectralEstimator(), **kwargs)


def test_estimator_without_fit_is_rejected():
    with pytest.raises(TypeError):
        Refitter(object())


# ---------------------------------------------------------------------- fitting


def test_rank_and_floor_are_clamped_to_the_alphabet():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=10, min_proba=0.4), refit_every=50)
    feed(r, acc, "abc" * 20)
    assert r.last_error is None and r.n_fits == 1
    assert r.records[-1].rank == 3
    assert r.model.min_proba < 1 / 3
    assert r.model.n_symbols == 3


def test_warm_refit_reaches_the_cold_loss_in_fewer_sweeps(hmm_symbols):
    """Identity weighting: the same objective for both, so the losses compare exactly."""
    est = MEstimator(
        rank=4, weighting="identity", factorization="shared", max_sweeps=50, tol=1e-9
    )
    acc = MomentAccumulator(n_symbols=8, window=1)
    r = Refitter(est, refit_every=None, sweeps=3)
    acc.learn_many(hmm_symbols[:40_000])
    r.observe(40_000, acc)
    assert r.fit_now(acc)
    acc.learn_many(hmm_symbols[40_000:])
    r.observe(20_000, acc)
    assert r.fit_now(acc)
    first, second = r.records
    assert not first.warm and second.warm
    assert r.model.factors is not None
    # the same data fitted cold, for comparison
    cold = MEstimator(
        rank=4, weighting="identity", factorization="shared", max_sweeps=50, tol=1e-9
    )
    cold.fit(acc)
    cold_sweeps = sum(len(h) - 1 for h in cold.loss_history_)
    cold_loss = cold.factors_.loss
    assert second.sweeps <= 3 < cold_sweeps
    assert second.loss <= cold_loss * 1.05
    assert r.loss_history == [first.loss, second.loss]
    assert r.last_loss_history == list(second.losses)


def test_warm_refit_after_the_alphabet_grew():
    acc = MomentAccumulator(window=1)
    r = Refitter(MEstimator(rank=2, weighting="identity"), refit_every=300, sweeps=2)
    rng = np.random.default_rng(0)
    feed(r, acc, rng.choice(list("abc"), size=300).tolist())
    feed(r, acc, rng.choice(list("abcd"), size=300).tolist())
    assert [rec.warm for rec in r.records] == [False, True]
    assert r.last_error is None
    assert r.model.n_symbols == 4 and r.model.symbols == acc.symbols


def test_with_hmm_refits_are_warm_for_both_models(hmm_symbols):
    """WithHMM warm-starts the operator model and the HMM; the refitter's records say so."""
    template = WithHMM(MEstimator(rank=3, weighting="identity", max_sweeps=30), n_states=3)
    acc = MomentAccumulator(n_symbols=8, window=1)
    r = Refitter(template, refit_every=None, sweeps=2)
    acc.learn_many(hmm_symbols[:20_000])
    assert r.fit_now(acc)
    first_hmm = r.model.hmm
    acc.learn_many(hmm_symbols[20_000:])
    assert r.fit_now(acc)
    assert [rec.warm for rec in r.records] == [False, True]
    assert r.records[1].sweeps <= 2  # the warm operator fit ran the refitter's sweeps only
    assert r.model.hmm is not first_hmm and r.model.hmm.n_states == 3
    assert template.last.hmm is r.model.hmm  # shared by the refitter's copies of the template
    assert template.last.warm_hmm  # the HMM's refinement started from the previous HMM
    # and got as far as a cold fit (moments + EM) on all the counts
    cold = HMMEstimator(n_states=3, random_state=0).fit(acc)
    assert r.model.hmm.score(hmm_symbols) >= cold.score(hmm_symbols) - 1e-3 * len(hmm_symbols)


def test_spectral_refits_are_warm_from_the_previous_state_with_or_without_backoff():
    """θ_spec keeps a state too: the second fit starts from it (docs/math.md section 10), and
    with the backoff it also carries the first's backoff over (learned weights, HMM)."""
    for backoff in ("auto", None):
        acc = MomentAccumulator(window=1)
        r = Refitter(SpectralEstimator(rank=2, backoff=backoff), refit_every=30)
        feed(r, acc, "abcb" * 20)
        assert r.n_fits == 2 and [rec.warm for rec in r.records] == [False, True]
        assert r.records[0].path == "cold" and r.records[1].path in ("warm", "rebased")
        assert all(rec.sweeps is None and rec.losses == () for rec in r.records)
        assert r.model.factors is None  # θ_spec's model carries no factors: the state is the refitter's
        assert (r.model.backoff is not None) == (backoff == "auto")


def test_failed_inline_fit_keeps_the_old_model():
    acc = MomentAccumulator(window=1)
    r = Refitter(GatedEstimator(rank=2, fail_on=100), refit_every=60)
    feed(r, acc, "abcab" * 12)
    good = r.model
    assert good is not None and r.n_fits == 1
    feed(r, acc, "abcab" * 12)  # the second fit raises inside the estimator
    assert r.model is good
    assert r.n_failures == 1 and r.n_fits == 1
    assert r.last_error.startswith("LinAlgError")
    assert r.records[-1].error == r.last_error
    assert r.fitted_on_symbols == 60


# ---------------------------------------------------------------------- background


def test_background_fit_uses_a_snapshot_and_swaps_when_done():
    gate = threading.Event()
    acc = MomentAccumulator(window=1)
    r = Refitter(GatedEstimator(rank=2, gate=gate), refit_every=50, background=True)
    try:
        feed(r, acc, "abcd" * 12 + "ab")  # 50 symbols: the fit starts and blocks on the gate
        assert r.busy and r.model is None
        feed(r, acc, "cd" * 100)  # learning goes on; triggers coalesce while the fit runs
        assert not r.fit_now(acc)  # never two fits at once, nor a forced one beside it
        assert r.model is None and r.n_fits == 0 and len(r.records) == 0
        gate.set()
        assert r.wait(30)
        assert r.n_fits == 1 and r.model is not None
        assert r.fitted_on_symbols == 50  # the snapshot, not the live counts
        assert r.fitted_on_triples == 48.0
        r.observe(0, acc)  # the coalesced trigger fires at the next observe
        assert r.wait(30)
        assert r.n_fits == 2 and r.fitted_on_symbols == 250
    finally:
        gate.set()
        r.close()


def test_background_failure_is_recorded_not_raised():
    acc = MomentAccumulator(window=1)
    r = Refitter(GatedEstimator(rank=2, fail_on=1), refit_every=20, background=True)
    feed(r, acc, "abc" * 7)
    assert r.wait(30)
    assert r.model is None and r.n_failures == 1 and r.last_error.startswith("LinAlgError")
    r.close()
    assert not r.fit_now(acc)  # closed: no more fits


def test_prepare_runs_with_each_fit_and_swaps_with_the_model():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=2), refit_every=40, background=True, prepare=id)
    feed(r, acc, "abca" * 10)
    assert r.wait(30)
    model, prepared = r.current
    assert prepared == id(model)


def test_pickle_keeps_the_model_and_statistics():
    acc = MomentAccumulator(window=1)
    r = Refitter(SpectralEstimator(rank=2), refit_every=40, background=True)
    feed(r, acc, "abca" * 10)
    assert r.wait(30)
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.n_fits == 1 and r2.fitted_on_symbols == 40 and not r2.busy
    np.testing.assert_allclose(
        r2.model.predict_proba_next([0, 1]), r.model.predict_proba_next([0, 1])
    )
    feed(r2, acc, "abca" * 10)
    assert r2.wait(30) and r2.n_fits == 2


def test_adopted_model_makes_the_next_fit_warm(tmp_path):
    from streamspec import HMM, MEstimator, MomentAccumulator, ObservableOperatorModel

    hmm = HMM.random(3, 5, random_state=11)
    acc = MomentAccumulator(5, window=1)
    acc.learn_many(hmm.sample(20_000, random_state=12))
    # an earlier process's model
    MEstimator(rank=3, backoff=None, max_outer=3).fit(acc).save(tmp_path / "m.ckpt")
    restarted = Refitter(MEstimator(rank=3, backoff=None, max_outer=3), refit_every=10, sweeps=2)
    restarted.adopt(ObservableOperatorModel.load(tmp_path / "m.ckpt"))
    assert restarted.model is not None and restarted.n_fits == 0
    acc.learn_many(hmm.sample(5_000, random_state=13))
    assert restarted.fit_now(acc)
    assert restarted.records[-1].warm and restarted.records[-1].error is None
    cold = Refitter(MEstimator(rank=3, backoff=None, max_outer=3), refit_every=10, sweeps=2)
    cold.fit_now(acc)
    assert not cold.records[-1].warm
    assert restarted.records[-1].sweeps < cold.records[-1].sweeps


def test_refits_start_from_the_previous_state_and_a_pickle_drops_it(hmm_symbols):
    """The refitter keeps each fit's state and hands it to the next fit (docs/math.md section
    9); a pickled refitter keeps the model, not the state (as large as the counts)."""
    acc = MomentAccumulator(n_symbols=8, window=1)
    r = Refitter(MEstimator(rank=4, backoff=None), refit_every=None)
    acc.learn_many(hmm_symbols[:50_000])
    assert r.fit_now(acc)
    acc.learn_many(hmm_symbols[50_000:50_500])
    assert r.fit_now(acc)
    assert [(rec.warm, rec.path) for rec in r.records] == [(False, "cold"), (True, "warm")]
    cold = MEstimator(rank=4, backoff=None).fit(acc)
    test = hmm_symbols[50_500:]
    assert abs(r.model.log_loss([test]) - cold.log_loss([test])) <= 1e-4
    copy = pickle.loads(pickle.dumps(r))
    acc.learn_many(hmm_symbols[50_500:51_000])
    assert copy.fit_now(acc)
    assert copy.records[-1].path == "model"  # from the model's factors: no state was pickled


def test_an_estimator_whose_fit_is_overridden_is_not_given_a_state(hmm_symbols):
    """A subclass that fits elsewhere (the daemon's worker-process estimator) keeps its own
    ``fit``: the refitter never routes it through the parent's ``fit_with_state``."""
    calls = []

    class Elsewhere(MEstimator):
        def fit(self, data, init=None):
            calls.append(init is not None)
            return super().fit(data, init=init)

    acc = MomentAccumulator(n_symbols=8, window=1)
    r = Refitter(Elsewhere(rank=4, backoff=None), refit_every=None)
    acc.learn_many(hmm_symbols[:20_000])
    r.fit_now(acc)
    acc.learn_many(hmm_symbols[20_000:21_000])
    r.fit_now(acc)
    assert calls == [False, True]  # its own fit, warm from the factors the second time
    assert [rec.path for rec in r.records] == ["cold", "model"]


@pytest.mark.parametrize("estimator", [SpectralEstimator, MEstimator])
def test_refits_over_windows_keep_a_rank_above_the_alphabet(estimator):
    # 4 hidden states over 2 symbols: only windows of 2 symbols hold rank 4; a refit must
    # neither clamp the rank to the alphabet nor fail on it
    ring = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),
               O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])
    x = ring.sample(12_000, random_state=3)
    acc = MomentAccumulator(n_symbols=2, window=2)
    r = Refitter(estimator(rank=4, backoff=None), refit_every=4_000)
    for s in x:
        acc.learn_one(int(s))
        r.observe(1, acc)
    assert r.last_error is None and r.n_fits == 3
    assert [rec.rank for rec in r.records] == [4, 4, 4]
    assert r.model.rank == 4

"""The daemon's refits (issue 21): warm from the state the worker kept, the duty counted in CPU
seconds, the worker's niceness, a model too large to publish."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from kafka.errors import MessageSizeTooLargeError

from connectors.config import DaemonConfig
from connectors.kafka.outputs import Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.metrics import DaemonMetrics
from connectors.process_fit import ProcessMEstimator, shutdown_worker, start_worker
from connectors.refit_start import RefitStart
from streamspec.core.hmm import HMM
from streamspec.core.mestimator import MEstimator
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator
from streamspec.streaming.refitter import Refitter


@pytest.fixture(autouse=True)
def _worker():
    yield
    shutdown_worker()


def _counts(length: int, extra: int) -> tuple[MomentAccumulator, MomentAccumulator]:
    """Counts of 12 HMM streams, and the same with ``extra`` more symbols per stream."""
    hmm = HMM.random(n_states=3, n_symbols=8, random_state=4)
    seqs = [hmm.sample(length + extra, random_state=10 + k) for k in range(12)]
    before, after = MomentAccumulator(), MomentAccumulator()
    for k, seq in enumerate(seqs):
        for t, x in enumerate(seq):
            after.learn_one(int(x), k)
            if t < length:
                before.learn_one(int(x), k)
    return before, after


def test_a_refit_from_the_last_model_is_the_warm_refit_from_the_workers_state():
    before, after = _counts(3000, 30)
    params = dict(rank=3)
    first = ProcessMEstimator(**params).fit(before)
    est = ProcessMEstimator(**params)
    warm = est.fit(after, init=first)
    # what the same refit gives in this process, from the first fit's state
    _, state = MEstimator(**params).fit_with_state(before)
    local = MEstimator(**params)
    expected, _ = local.fit_with_state(after, init=state)
    assert est.refit_.path == local.refit_.path == "warm"
    np.testing.assert_allclose(warm.B, expected.B, rtol=1e-9, atol=1e-12)
    # a copy of the model (as read back at a restart) is not the worker's: it warm-starts
    # from its factors, as before
    copy = ObservableOperatorModel.from_bytes(first.to_bytes())
    other = ProcessMEstimator(**params)
    from_factors = other.fit(after, init=copy)
    assert getattr(other, "refit_", None) is None or other.refit_.path != "warm"
    reference = MEstimator(**params).fit(after, init=RefitStart.of(first))
    np.testing.assert_allclose(from_factors.B, reference.B, rtol=1e-9, atol=1e-12)



def test_a_refit_start_carries_the_counts_the_hmm_size_was_chosen_at():
    """A worker's refit reads a :class:`RefitStart`; it must choose the HMM size again at the
    same point as a refit from the model itself (once the counts have doubled), so the start
    says when the size was chosen. Without it the refit would count from its own counts."""
    before, after = _counts(3000, 300)
    first = MEstimator(rank=3).fit(before)
    chosen_at = first.backoff.states_chosen_at
    assert chosen_at == before.triples().total
    start = RefitStart.of(first)
    assert start.backoff.states_chosen_at == chosen_at
    refit = MEstimator(rank=3).fit(after, init=start)
    assert refit.backoff.states_chosen_at == chosen_at < after.triples().total

def test_the_warm_refit_keeps_the_weights_learned_since():
    before, after = _counts(3000, 30)
    first = ProcessMEstimator(rank=3).fit(before)
    mixture = first.backoff.mixture.copy()
    # the partitions' learned weights, merged into the served model before the refit: the
    # stream said the first component predicts well in bucket 0
    learned = mixture.copy()
    probs = np.full(mixture.n_components, 1e-3)
    probs[0] = 0.9
    for _ in range(200):
        learned.observe(0, probs)
    first.backoff.mixture = learned
    est = ProcessMEstimator(rank=3)
    refit = est.fit(after, init=first)
    assert est.refit_.path == "warm"
    np.testing.assert_allclose(refit.backoff.mixture.log_weights(), learned.log_weights())
    assert not np.allclose(refit.backoff.mixture.log_weights(), mixture.log_weights())


def test_a_fit_in_the_worker_records_the_workers_cpu_time():
    before, _ = _counts(3000, 0)
    refitter = Refitter(ProcessMEstimator(rank=3), refit_every=10**9)
    refitter.fit_now(before)
    record = refitter.records[-1]
    assert record.error is None
    # the worker's CPU time is counted (this thread only waited for it)
    assert 0 < record.cpu_seconds
    assert np.isfinite(record.cpu_seconds)


class _Outputs:
    model, version = None, 0


def test_the_refit_duty_counts_the_fits_cpu_seconds_not_its_wall_time():
    metrics = DaemonMetrics()
    policy = RefitPolicy(DaemonConfig(topic="t", refit_duty=0.5), MEstimator(rank=2),
                         _Outputs(), metrics)
    now = time.monotonic()
    policy.fit_taken_at = now - 5.0
    # a fit that took 30 s on busy cores but used 2 s of CPU: its 2 s wait is over
    metrics.last_fit_seconds, metrics.last_fit_cpu_seconds = 30.0, 2.0
    assert not policy._duty_waits(now)
    policy.fit_taken_at = now - 1.0
    assert policy._duty_waits(now)
    # without a CPU time, the wall time is what it has
    metrics.last_fit_cpu_seconds = float("nan")
    policy.fit_taken_at = now - 5.0
    assert policy._duty_waits(now)


@pytest.mark.parametrize("bad", [-1, 20, 2.5, True])
def test_refit_nice_is_checked(bad):
    with pytest.raises(ValueError, match="refit_nice"):
        DaemonConfig(topic="t", refit_nice=bad)


def test_the_worker_runs_at_the_niceness_asked():
    base = os.nice(0)
    for nice in (3, 0):
        start_worker(nice).result(timeout=120)
        est = ProcessMEstimator(rank=2)
        est.fit(_counts(300, 0)[0])
        assert est.worker_niceness_ == min(19, base + nice)


class _TooLarge:
    def send(self, *args, **kwargs):
        raise MessageSizeTooLargeError("The message is 70370658 bytes when serialized")


def test_a_model_too_large_to_publish_is_logged_and_the_daemon_goes_on(caplog):
    metrics = DaemonMetrics()
    outputs = Outputs(DaemonConfig(topic="t", models_topic="t.models"), metrics, "d1", 1 << 20)
    outputs.producer = _TooLarge()
    model = MEstimator(rank=2).fit(_counts(300, 0)[0])
    outputs.publish_model(model, 3, 100, 0.5)  # raised out of the poll loop before
    assert metrics.model_publish_failures == 1
    assert "event=model-publish-failed version=3" in caplog.text


def test_the_refitter_refits_in_the_worker_as_it_does_in_process():
    before, after = _counts(3000, 30)
    models = []
    for est in (ProcessMEstimator(rank=3), MEstimator(rank=3)):
        refitter = Refitter(est, refit_every=10**9)
        refitter.fit_now(before)
        refitter.fit_now(after)
        assert [r.path for r in refitter.records] == ["cold", "warm"]
        models.append(refitter.model)
    np.testing.assert_allclose(models[0].B, models[1].B, rtol=1e-9, atol=1e-12)

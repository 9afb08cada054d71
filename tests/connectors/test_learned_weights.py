"""A partition's learned weights and prequential loss: checkpointed, restored, merged for a refit.

No broker: the checkpoint files and state-topic snapshots are written and read as the
daemon does (:class:`~connectors.state.files.StateStore`, :func:`encode_snapshot`), and a
partition's scorer (:class:`~connectors.kafka.scoring.PartitionScorer`) is driven by
hand. The daemon-level tests (real broker, real daemon) are in ``test_kafka_scoring.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("kafka")

from connectors.kafka.scoring import PartitionScorer  # noqa: E402
from connectors.records import Record  # noqa: E402
from connectors.state import LearnedWeights, PartitionState, StateStore, merge_weights  # noqa: E402
from connectors.state.snapshots import Snapshot, encode_snapshot  # noqa: E402
from streamspec import MEstimator  # noqa: E402
from streamspec.core.checkpoint import CheckpointError, write_checkpoint  # noqa: E402
from streamspec.core.hmm import HMM  # noqa: E402
from streamspec.core.mixture import ExpertMixture  # noqa: E402


def _state_with_records(n: int = 6000, seed: int = 0) -> tuple[PartitionState, list[Record]]:
    x = HMM.random(3, 5, random_state=seed, concentration=0.3).sample(n, random_state=seed + 1)
    records = [Record(f"k{t % 7}", "abcde"[s]) for t, s in enumerate(x.tolist())]
    state = PartitionState("clicks", 0)
    for r in records[: n // 2]:
        state.acc.learn_one(r.symbol, r.key)
    state.offset = state.records = n // 2
    return state, records


def _scored(state: PartitionState, model, records: list[Record], every: int = 1) -> PartitionScorer:
    """The partition's scorer after reading ``records`` (learned first, as the daemon does)."""
    scorer = state.scorer = PartitionScorer(state, every, predictions=False)
    scorer.follow(model)
    for r in records:
        state.acc.learn_one(r.symbol, r.key)
        scorer.add([r], state.records)
        state.records += 1
    scorer.flush()
    return scorer


def test_checkpoint_keeps_the_weights_and_the_loss_and_a_restore_goes_on_from_them(tmp_path):
    state, records = _state_with_records()
    model = MEstimator(rank=2).fit(state.acc)
    scorer = _scored(state, model, records[3000:4000])
    assert scorer.online.n_scored == 1000
    store = StateStore(tmp_path)
    store.save(state)
    back = store.load("clicks", 0)
    saved = back.weights
    assert saved.components == model.backoff.components
    assert saved.scored == 1000 and saved.loss == pytest.approx(scorer.online.loss)
    assert np.allclose(saved.mixture.blends(range(6)), scorer.online.mixture.blends(range(6)),
                       rtol=0, atol=1e-12)
    assert np.array_equal(saved.mixture.n_observed, scorer.online.mixture.n_observed)
    # the restored partition's predictor starts from them, not from the model's weights
    assert not np.allclose(saved.mixture.blends(range(6)), model.backoff.mixture.blends(range(6)))
    again = PartitionScorer(back, 1, predictions=False)
    again.follow(model)
    assert np.allclose(again.online.mixture.blends(range(6)), saved.mixture.blends(range(6)),
                       rtol=0, atol=1e-12)
    assert (again.online.loss, again.online.n_scored) == (saved.loss, 1000)
    # and the state topic's snapshot carries the same
    key, value, headers = encode_snapshot(state, owner="d1")
    snap = Snapshot.from_message(key, value, headers).state().weights
    assert snap.scored == 1000 and np.allclose(snap.mixture.log_weights(),
                                               saved.mixture.log_weights())


def test_checkpoints_written_before_weights_were_kept_still_load(tmp_path):
    state, _ = _state_with_records()
    header, arrays = state.checkpoint_parts()  # no scorer, no weights: today's parts
    assert "predictor" not in header
    path = StateStore(tmp_path).path("clicks", 0)
    path.parent.mkdir(parents=True)
    write_checkpoint(path, "streamspec.PartitionState", 2, header, arrays)  # version 2
    back = StateStore(tmp_path).load("clicks", 0)
    assert back.weights is None and back.offset == state.offset
    model = MEstimator(rank=2).fit(back.acc)
    scorer = PartitionScorer(back, 1, predictions=False)
    scorer.follow(model)  # no weights: the model's, nothing learned on this partition yet
    assert np.allclose(scorer.online.mixture.blends(range(6)),
                       model.backoff.mixture.blends(range(6)))
    assert scorer.online.mixture.n_observed.sum() == 0 and scorer.online.n_scored == 0


def test_the_rates_half_life_is_kept_and_an_older_checkpoint_keeps_a_constant_rate():
    mix = ExpertMixture(2, switching_half_life=777.0)
    header, arrays = LearnedWeights(("trigram", "hmm"), mix, 1.0, 2).to_parts()
    assert LearnedWeights.from_parts(header, arrays, "test").mixture.switching_half_life == 777.0
    older = {k: v for k, v in header.items() if k != "switching_half_life"}
    assert LearnedWeights.from_parts(older, arrays, "test").mixture.switching_half_life is None
    mix.observe(0, np.array([0.9, 0.1]))
    merged = merge_weights([LearnedWeights(("trigram", "hmm"), mix)], mix, ("trigram", "hmm"))
    assert merged.switching_half_life == 777.0


def test_malformed_weights_are_a_checkpoint_error():
    mix = ExpertMixture(2)
    header, arrays = LearnedWeights(("trigram", "hmm"), mix, 1.0, 2).to_parts()
    bad = dict(header, components=["trigram", "bigram"])
    with pytest.raises(CheckpointError, match="unknown components"):
        LearnedWeights.from_parts(bad, arrays, "test")
    with pytest.raises(CheckpointError, match="malformed learned weights"):
        LearnedWeights.from_parts(dict(header, loss=float("nan")), arrays, "test")
    with pytest.raises(CheckpointError, match="malformed learned weights"):
        LearnedWeights.from_parts(header, {"predictor_log_weights": np.zeros((2, 2))}, "test")


def test_merge_weighs_each_partition_by_the_symbols_it_learned_from_per_bucket():
    base = ExpertMixture(2, resolution=4)
    a, b = base.copy(), base.copy()
    for _ in range(30):
        a.observe(2, np.array([0.9, 0.1]))  # a: the first part, in bucket 2 only
    for _ in range(10):
        b.observe(2, np.array([0.1, 0.9]))
        b.observe(4, np.array([0.1, 0.9]))
    parts = ("trigram", "hmm")
    merged = merge_weights([LearnedWeights(parts, a), LearnedWeights(parts, b), None], base, parts)
    post = {name: np.exp(m.log_weights()) for name, m in (("a", a), ("b", b), ("base", base))}
    assert np.allclose(np.exp(merged.log_weights())[2], (30 * post["a"][2] + 10 * post["b"][2]) / 40)
    assert np.allclose(merged.blends([4]), b.blends([4]))  # only b learned in bucket 4
    assert np.allclose(merged.blends([0, 5]), base.blends([0, 5]))  # nobody: the base's
    assert merged.n_observed.tolist() == [0, 0, 40, 0, 10, 0]
    # weights over other parts (or another grid) do not count
    other = merge_weights([LearnedWeights(("model", "trigram"), a)], base, parts)
    assert other is None
    assert merge_weights([LearnedWeights(parts, ExpertMixture(2, resolution=10))], base,
                         parts) is None


def test_scoring_a_sample_scores_every_nth_symbol_and_moves_every_stream():
    state, records = _state_with_records(seed=4)
    model = MEstimator(rank=2).fit(state.acc)
    every = _scored(state, model, records[3000:3800], every=1)
    sampled_state, _ = _state_with_records(seed=4)
    sampled = _scored(sampled_state, model, records[3000:3800], every=8)
    assert sampled.online.n_scored == 100  # symbols numbered 3000, 3008, ... of the partition
    # every symbol moved its stream: the same hidden states as when every one is scored
    assert model.backoff.hmm is not None
    for k in range(7):
        assert np.allclose(every.online.posterior(f"k{k}"), sampled.online.posterior(f"k{k}"),
                           rtol=0, atol=1e-12)
    assert abs(sampled.online.log_loss - every.online.log_loss) < 0.15


def test_malformed_observed_counts_are_a_checkpoint_error_naming_them():
    """The buckets' symbols learned (the switching rate's clock) are checked on reading: a
    negative count, or one count too few, is refused with what it is, never loaded."""
    mix = ExpertMixture(2)
    mix.observe(1, np.array([0.9, 0.1]))
    header, arrays = LearnedWeights(("trigram", "hmm"), mix, 1.0, 1).to_parts()
    assert LearnedWeights.from_parts(header, arrays, "ok").mixture.n_observed[1] == 1
    for bad in ([-1.0] + header["observed"][1:], header["observed"][1:]):
        with pytest.raises(CheckpointError, match="observed counts"):
            LearnedWeights.from_parts(dict(header, observed=bad), arrays, "bad.ckpt")

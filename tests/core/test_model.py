"""ObservableOperatorModel: valid predictions, long sequences, sampling, persistence, selection."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamspec import (
    HMM,
    CheckpointError,
    MEstimator,
    MomentAccumulator,
    ObservableOperatorModel,
    SpectralEstimator,
)
from streamspec.core.rank_selection import max_rank, rank_candidates
from streamspec.core.selection import select_predictor
from streamspec.experiments.baselines import NGramModel


@pytest.fixture(scope="module")
def hmm_and_acc():
    hmm = HMM.random(3, 5, random_state=0)
    acc = MomentAccumulator(5, window=1)
    acc.learn_many(hmm.sample(50_000, random_state=1))
    return hmm, acc


@settings(max_examples=50, deadline=None)
@given(
    hnp.arrays(np.float64, (3, 2, 2), elements=st.floats(-3, 3)),
    hnp.arrays(np.float64, (2,), elements=st.floats(-3, 3)),
    st.lists(st.integers(0, 2), max_size=12),
    st.sampled_from(["window", "recursive"]),
)
def test_any_operators_give_valid_distributions(B, b1, history, filt):
    model = ObservableOperatorModel(b1, np.ones(2), B, filter=filt, window=3)
    p = model.predict_proba_next(history)
    assert p.shape == (3,) and (p >= 0).all() and abs(p.sum() - 1) < 1e-12
    P = model.predictive_sequence(history)
    assert np.isfinite(P).all() and np.allclose(P.sum(axis=1), 1)
    assert np.isfinite(model.log_proba(history))


def test_window_and_recursive_filters_agree_with_the_stepwise_filter(hmm_and_acc):
    _, acc = hmm_and_acc
    model = SpectralEstimator(rank=3).fit(acc)
    seq = np.random.default_rng(0).integers(0, 5, size=300)
    for filt, w in [("window", 0), ("window", 1), ("window", 3), ("recursive", 2)]:
        m = model.with_filter(filt, w)
        P = m.predictive_sequence(seq)
        for t in (0, 1, 2, 5, 150, 299):
            np.testing.assert_allclose(P[t], m.predict_proba_next(seq[:t]), atol=1e-12)


def test_true_model_probabilities_and_log_proba(hmm_and_acc):
    hmm, _ = hmm_and_acc
    exact = hmm.operators().with_filter("recursive")
    seqs = hmm.sample_many(50, 3, random_state=2)
    # the joint probabilities of all sequences of length 2 sum to 1
    grid = np.array([[a, b] for a in range(5) for b in range(5)])
    assert abs(exact.joint_proba_many(grid).sum() - 1) < 1e-12
    for s in seqs[:5]:
        assert abs(exact.log_proba(s) - np.log(exact.joint_proba(s))) < 1e-6


def test_log_proba_of_a_very_long_sequence_does_not_underflow(hmm_and_acc):
    hmm, acc = hmm_and_acc
    seq = hmm.sample(100_000, random_state=3)
    for model in (hmm.operators().with_filter("recursive"), MEstimator(rank=3).fit(acc)):
        lp = model.log_proba(seq)
        assert np.isfinite(lp) and -100_000 * np.log(5) * 1.5 < lp < -1000


def test_estimated_models_approach_the_truth(hmm_and_acc):
    hmm, acc = hmm_and_acc
    test = [hmm.sample(20_000, random_state=4)]
    truth = hmm.operators().log_loss(test)
    for est in (SpectralEstimator(rank=3), MEstimator(rank=3)):
        assert est.fit(acc).log_loss(test) < truth + 0.02


def test_sampling_reproduces_the_model_statistics(hmm_and_acc):
    hmm, _ = hmm_and_acc
    exact = hmm.operators().with_filter("recursive")
    a = exact.sample(3000, random_state=5)
    assert np.array_equal(a, exact.sample(3000, random_state=5))
    freq = np.bincount(a, minlength=5) / a.size
    np.testing.assert_allclose(freq, hmm.O @ hmm.pi, atol=0.04)


def test_save_load_and_bytes_round_trip(tmp_path, hmm_and_acc):
    _, acc = hmm_and_acc
    model = MEstimator(rank=2, window=3).fit(acc)
    model.save(tmp_path / "m.npz")
    back = ObservableOperatorModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.B, model.B)
    assert (back.filter, back.window) == ("window", 3)
    again = ObservableOperatorModel.from_bytes(model.to_bytes())
    np.testing.assert_allclose(again.predict_proba_next([1, 2]), model.predict_proba_next([1, 2]), rtol=1e-13)
    data = bytearray(model.to_bytes())
    at = bytes(data).find(model.B.tobytes())  # corrupt the operators themselves
    assert at > 0
    data[at + model.B.nbytes // 2] ^= 0x55
    with pytest.raises(CheckpointError):
        ObservableOperatorModel.from_bytes(bytes(data))


def test_metadata_is_kept_by_copies_and_saved_and_old_checkpoints_load_with_none(tmp_path, hmm_and_acc):
    from streamspec.core.checkpoint import dump_checkpoint
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    _, acc = hmm_and_acc
    plain = SpectralEstimator(rank=2).fit(acc)
    assert plain.metadata == {}
    meta = {"encoding": "utf-8", "note": "é"}
    model = plain.replace(metadata=meta)
    meta["encoding"] = "latin-1"  # the model holds its own copy
    assert model.metadata == {"encoding": "utf-8", "note": "é"}
    for copy in (model.with_filter("recursive"), model.with_filter(window=4), model.replace(min_proba=0.0),
                 model.without_backoff()):
        assert copy.metadata == model.metadata
    model.save(tmp_path / "m.npz")
    assert ObservableOperatorModel.load(tmp_path / "m.npz").metadata == model.metadata
    assert ObservableOperatorModel.from_bytes(model.to_bytes()).metadata == model.metadata
    # a checkpoint written before metadata was kept: no header entry, version 1
    header, arrays = plain.without_backoff()._header_arrays()
    assert "metadata" not in header
    old_bytes = dump_checkpoint(ObservableOperatorModel._FORMAT, 1, header, arrays)
    old = ObservableOperatorModel.from_bytes(old_bytes)
    assert old.metadata == {}
    for bad in ({"encoding": 8}, ["encoding"], {1: "utf-8"}):
        with pytest.raises(ValueError, match="metadata"):
            plain.replace(metadata=bad)
    # the hidden Markov model keeps its metadata through its checkpoint too
    hmm = HiddenMarkovModel([0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]], [[0.8, 0.2], [0.1, 0.9]],
                            symbols=["a", "b"], metadata={"encoding": "utf-8"})
    back = HiddenMarkovModel.from_bytes(hmm.to_bytes())
    assert back == hmm and back.metadata == {"encoding": "utf-8"}
    bare = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)
    assert HiddenMarkovModel.from_bytes(bare.to_bytes()).metadata == {} and bare != hmm.__class__(
        hmm.startprob_, hmm.transmat_, hmm.emissionprob_, metadata={"encoding": "utf-8"})

def test_labels_travel_with_the_model(tmp_path):
    acc = MomentAccumulator()
    acc.learn_many(list("abcabcabcacb" * 20))
    model = SpectralEstimator(rank=2).fit(acc)
    assert model.symbols == ["a", "b", "c"]
    model.save(tmp_path / "m.npz")
    assert ObservableOperatorModel.load(tmp_path / "m.npz").symbols == ["a", "b", "c"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"B": np.zeros((2, 2, 3))}, "shape"),
        ({"b1": np.zeros(3)}, "b1 and binf"),
        ({"B": np.full((2, 2, 2), np.nan)}, "NaN"),
        ({"filter": "kalman"}, "filter"),
        ({"window": -1}, "window"),
        ({"min_proba": 0.9}, "min_proba"),
    ],
)
def test_bad_models(kwargs, message):
    args = {"b1": np.ones(2) / 2, "binf": np.ones(2), "B": np.full((2, 2, 2), 0.25)} | kwargs
    with pytest.raises(ValueError, match=message):
        ObservableOperatorModel(**args)


def test_bad_sequences(hmm_and_acc):
    _, acc = hmm_and_acc
    model = SpectralEstimator(rank=2).fit(acc)
    with pytest.raises(ValueError, match="unknown symbol 9"):
        model.predict_proba_next([0, 9])
    with pytest.raises(ValueError, match="integer"):
        model.log_proba([0.5, 1.0])


def test_select_predictor_picks_the_best_of_independently_scored_candidates(hmm_and_acc):
    hmm, acc = hmm_and_acc
    validation = [hmm.sample(5000, random_state=6)]
    # the plain model: with the default backoff, the mixture makes every choice nearly as good
    best = select_predictor(MEstimator(backoff=None), acc, validation, ranks=[1, 3, 5], windows=(0, 2))
    # every candidate fitted and scored here, outside select_predictor
    scores = {}
    for k in (1, 3, 5):
        model = MEstimator(rank=k, backoff=None).fit(acc)
        for filt, w in (("window", 0), ("window", 2), ("recursive", 0)):
            candidate = model.with_filter(filt, w if filt == "window" else None)
            scores[(k, filt, w)] = candidate.log_loss(validation)
    chosen = min(scores, key=scores.get)
    assert max(scores.values()) - scores[chosen] > 0.005  # the choice matters
    assert (best.rank, best.filter, best.window) == chosen
    assert best.log_loss == pytest.approx(scores[chosen], abs=1e-12)
    assert best.model.rank == best.rank
    assert abs(best.model.log_loss(validation) - best.log_loss) < 1e-12
    assert rank_candidates(26) == sorted(set(rank_candidates(26))) and rank_candidates(26)[-1] == 26


def test_select_predictor_on_a_large_alphabet_stays_linear_in_memory():
    """15,000 symbols: the old grid up to n asked for an array of (15000, 315, 315) floats."""
    rng = np.random.default_rng(0)
    n = 15_000
    p = 1.0 / np.arange(1, n + 1) ** 1.1
    x = rng.choice(n, size=120_000, p=p / p.sum())
    acc = MomentAccumulator(n, window=1)
    acc.learn_many(x[:100_000])
    best = select_predictor(SpectralEstimator(backoff=None), acc, [x[100_000:102_000]], windows=(2,),
                            recursive=False)
    assert {row["rank"] for row in best.table} == set(rank_candidates(max_rank(n)))
    assert max_rank(n) * max_rank(n) * n <= 2**23 and best.rank <= max_rank(n)
    with pytest.raises(ValueError, match=r"rank 315 on 15000 symbols: .* GB"):
        select_predictor(SpectralEstimator(), acc, [x[:10]], ranks=[4, 315])


def test_windowed_full_rank_beats_bigram_on_a_second_order_source():
    # a source whose next symbol depends on the last two: bigram cannot see it
    rng = np.random.default_rng(0)
    n = 4
    table = rng.dirichlet(np.full(n, 0.3), size=(n, n))
    x = [0, 1]
    for _ in range(60_000):
        x.append(rng.choice(n, p=table[x[-2], x[-1]]))
    x = np.array(x)
    acc = MomentAccumulator(n, window=1)  # the filter over triples
    acc.learn_many(x[:50_000])
    held_out = [x[50_000:]]
    best = select_predictor(SpectralEstimator(backoff=None), acc, held_out, ranks=[n])
    bigram = NGramModel(n, order=1).fit([x[:50_000]]).log_loss(held_out)
    assert best.window >= 2 and best.log_loss < bigram - 0.05


def test_saved_m_estimator_model_keeps_its_factors_for_warm_starts(tmp_path, hmm_and_acc):
    _, acc = hmm_and_acc
    model = MEstimator(rank=3).fit(acc)
    model.save(tmp_path / "m.npz")
    back = ObservableOperatorModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.factors.R, model.factors.R)
    warm = MEstimator(rank=3, max_outer=1)
    warm.fit(acc, init=back)
    assert len(warm.loss_history_) == 1 and np.isfinite(warm.factors_.loss)
    assert ObservableOperatorModel.from_bytes(
        SpectralEstimator(rank=2).fit(acc).to_bytes()).factors is None


def test_large_alphabets_predict_in_bounded_chunks(monkeypatch):
    import streamspec.core.model as model_module

    rng = np.random.default_rng(0)
    n, d = 5000, 3
    B = rng.random((n, d, d)) / n
    model = ObservableOperatorModel(rng.random(d), np.ones(d), B, window=2, min_proba=1e-7)
    assert model._chunk() * n <= 2**22 and model._chunk() < 4096
    seq = rng.integers(0, n, size=2000)  # several chunks
    for m in (model, model.with_filter("recursive")):
        P = m.predictive_sequence(seq)
        for t in (0, 1, 2, 838, 839, 1999):
            np.testing.assert_allclose(P[t], m.predict_proba_next(seq[:t]), rtol=1e-12)
        np.testing.assert_allclose(m.proba_sequence(seq), P[np.arange(seq.size), seq], rtol=1e-13)
        assert m.log_proba(seq) == pytest.approx(np.log(P[np.arange(seq.size), seq]).sum(), rel=1e-12)
        assert m.accuracy([seq]) == np.mean(P.argmax(axis=1) == seq)
    # no scratch of (4096, n) floats: every product of states with C is of a bounded chunk
    seen = []
    cls = model_module.ObservableOperatorModel
    rows_chunk, chunks = cls._rows_chunk, cls._chunks

    def spy_rows(self, V):
        seen.append(V.shape[0])
        return rows_chunk(self, V)

    def spy_chunks(self, x):  # the states every (c, n) product of the scores is made of
        for start, stop, V, lasts in chunks(self, x):
            seen.append(V.shape[0])
            yield start, stop, V, lasts

    monkeypatch.setattr(cls, "_rows_chunk", spy_rows)
    monkeypatch.setattr(cls, "_chunks", spy_chunks)
    model.log_loss([seq])
    model.predictive_sequence(seq)
    model.predict_from_state(np.ones((3000, d)))
    assert len(seen) >= 3 * 3 and max(seen) * n <= 2**22


@pytest.mark.parametrize("order", [0, 1, 2])
def test_ngram_baseline_matches_its_definition_and_stays_sparse(order):
    rng = np.random.default_rng(order)
    n, alpha = 4, 0.3
    train = [rng.integers(0, n, size=s) for s in (200, 1, 3)]
    test = rng.integers(0, n, size=30)
    model = NGramModel(n, order=order, alpha=alpha).fit(train)
    from collections import Counter

    grams = [Counter() for _ in range(order + 1)]
    for x in train:
        for o in range(order + 1):
            for t in range(len(x) - o):
                grams[o][tuple(x[t : t + o + 1])] += 1
    expected = 0.0
    for t in range(len(test)):
        ctx = tuple(test[max(0, t - order) : t])
        o = len(ctx)
        c_ctx = sum(c for g, c in grams[o].items() if g[:o] == ctx)
        expected -= np.log((grams[o][(*ctx, test[t])] + alpha) / (c_ctx + alpha * n))
    assert model.log_loss([test]) == pytest.approx(expected / len(test), rel=1e-12)
    p = model.predict_proba_next(test[:5])
    assert abs(p.sum() - 1) < 1e-12
    # a large alphabet: memory follows the n-grams seen, not n^(order+1)
    big = NGramModel(100_000, order=order).fit([rng.integers(0, 100_000, size=5000)])
    assert sum(c.size for c in big.counts_) <= 5000 * (order + 1)
    assert np.isfinite(big.log_loss([rng.integers(0, 100_000, size=100)]))


def test_a_warm_start_from_a_copy_of_the_model_is_warm(hmm_and_acc):
    """The factors are part of the model: ``with_filter`` and ``replace`` keep them."""
    _, acc = hmm_and_acc
    model = MEstimator(rank=3, backoff=None).fit(acc)
    copy = model.with_filter("recursive")
    assert copy.factors is model.factors and copy.replace(window=4).factors is model.factors

    def refit(init):
        est = MEstimator(rank=3, backoff=None, max_outer=1)
        return est.fit(acc, init=init)

    from_model, from_copy, cold = refit(model), refit(copy), refit(None)
    np.testing.assert_array_equal(from_copy.B, from_model.B)
    assert np.abs(from_copy.B - cold.B).max() > 1e-6  # one cold iteration is θ_spec, not θ_M


def test_a_checkpoint_holding_python_objects_is_refused_without_numpy_s_wording(tmp_path):
    import io
    import json

    buf = io.BytesIO()  # an npz with a header, as ours, and one pickled (object) array
    np.savez(buf, __header__=np.array(json.dumps({"format": "streamspec.ObservableOperatorModel",
                                                  "version": 2})),
             B=np.array([{"evil": 1}], dtype=object))
    path = tmp_path / "objects.ckpt"
    path.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointError) as info:
        ObservableOperatorModel.load(path)
    assert "Python objects" in str(info.value) and "allow_pickle" not in str(info.value)


def test_replace_shares_unchanged_operators_and_still_checks_the_rest():
    rng = np.random.default_rng(0)
    B = rng.random((5, 3, 3)) / 10
    m = ObservableOperatorModel(rng.random(3), rng.random(3), B, rank=2)
    r = m.replace(window=4)
    assert r.B is m.B and r._C is m._C and r.window == 4 and r.rank == 2
    assert np.allclose(r._C, np.einsum("d,xde->xe", r.binf, r.B))
    with pytest.raises(ValueError, match="window"):
        m.replace(window=-1)
    with pytest.raises(ValueError, match="NaN"):  # new operators are checked in full
        m.replace(B=np.full((5, 3, 3), np.nan))
    new = m.replace(B=2 * B)
    assert np.allclose(new._C, 2 * m._C) and new.rank == 2

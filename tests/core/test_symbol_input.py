"""One input convention for every model (issue 20, items 1, 4 and 12).

Labels wherever the model has labels, indices always, hmmlearn's (T, 1) arrays and
``lengths=``; unknown labels never stop a call: ``"<other>"`` when the model has it,
else skipped (operator model) or unobserved (HMM), said once.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from streamspec import HiddenMarkovModel, HMMEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.symbol_input import (
    UnknownSymbolsWarning,
    collect_unknown,
    encode_labels,
    split_lengths,
    to_indices,
)


@pytest.fixture(scope="module")
def text_acc():
    acc = MomentAccumulator()
    acc.learn_many(list("abracadabra alice and the rabbit " * 60))
    return acc


@pytest.fixture(scope="module")
def hmm(text_acc):
    return HMMEstimator(n_states=3, random_state=0).fit(text_acc)


@pytest.fixture(scope="module")
def oom(text_acc):
    return SpectralEstimator(rank=3).fit(text_acc)


def test_operator_model_takes_labels_indices_and_hmmlearn_columns(oom, text_acc):
    idx = np.array([text_acc.symbols.index(c) for c in "alice"])
    ref = oom.log_proba(idx)
    assert oom.log_proba(list("alice")) == pytest.approx(ref)  # was: "must be integer indices"
    assert oom.log_proba("alice") == pytest.approx(ref)
    assert oom.log_proba(idx.reshape(-1, 1)) == pytest.approx(ref)
    assert oom.log_proba(idx.tolist()) == pytest.approx(ref)
    np.testing.assert_allclose(oom.predict_proba_next(list("ali")), oom.predict_proba_next(idx[:3]))


def test_operator_model_skips_unknown_labels_and_says_so_once(oom):
    with pytest.warns(UnknownSymbolsWarning, match=r"2 unknown symbols .* skipped: 'Z', '\?'"):
        got = oom.log_proba(list("aZli?ce"))
    assert got == pytest.approx(oom.log_proba(list("alice")))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        oom.predict_proba_next(list("QQQQ"))
    assert len(seen) == 1 and "4 unknown symbols" in str(seen[0].message)


def test_other_symbol_takes_unknown_labels():
    acc = MomentAccumulator(max_symbols=3)
    acc.learn_many(list("abcabdabe" * 50))
    assert "<other>" in acc.symbols
    model = SpectralEstimator(rank=2).fit(acc)
    with pytest.warns(UnknownSymbolsWarning, match="read as '<other>'"):
        p = model.predict_proba_next(list("abz"))
    np.testing.assert_allclose(p, model.predict_proba_next(["a", "b", "<other>"]))


def test_hmm_takes_indices_even_with_labels_and_hmmlearn_lengths(hmm, text_acc):
    seq = list("alice and")
    idx = np.array([text_acc.symbols.index(c) for c in seq])
    ref = hmm.score(seq)
    assert hmm.score(idx) == pytest.approx(ref)  # was: unknown symbol 0 (labels only)
    assert hmm.score(idx.reshape(-1, 1)) == pytest.approx(ref)
    X = np.concatenate([idx, idx]).reshape(-1, 1)
    assert hmm.score(X, lengths=[len(idx), len(idx)]) == pytest.approx(2 * ref)
    logp, path = hmm.decode(X, lengths=[len(idx), len(idx)])
    one = hmm.decode(seq)
    assert logp == pytest.approx(2 * one[0]) and path.tolist() == 2 * one[1].tolist()
    assert hmm.predict(X, [len(idx), len(idx)]).tolist() == path.tolist()
    P = hmm.predict_proba(X, lengths=[3, len(X) - 3])
    assert P.shape == (len(X), 3)
    np.testing.assert_allclose(P[:3], hmm.predict_proba(seq[:3]))
    with pytest.raises(ValueError, match="lengths add up to 5"):
        hmm.score(X, lengths=[2, 3])


def test_hmm_sample_with_lengths_reads_back(hmm):
    x, z = hmm.sample(random_state=1, lengths=[5, 7])
    assert len(x) == 12 and z.shape == (12,)
    both = hmm.score(x, lengths=[5, 7])
    assert both == pytest.approx(hmm.score(x[:5]) + hmm.score(x[5:]))
    assert hmm.sample(n_samples=4, random_state=2)[0] == hmm.sample(4, random_state=2)[0]


def test_hmm_unknown_label_is_unobserved_and_decode_keeps_positions(hmm):
    seq = list("alice") + ["TREASURE"] + list("and")
    with pytest.warns(UnknownSymbolsWarning, match="1 unknown symbol .*'TREASURE'"):
        logp, path = hmm.decode(seq)
    assert path.shape == (len(seq),) and np.isfinite(logp)
    with pytest.warns(UnknownSymbolsWarning):
        post = hmm.predict_proba(seq)
    assert post.shape == (len(seq), 3) and np.allclose(post.sum(axis=1), 1)
    # no evidence at the unknown position: the probability of the known symbols around a
    # gap, i.e. the sum over every symbol the gap could hold
    filled = [hmm.score(seq[:5] + [y] + seq[6:]) for y in hmm.symbols]
    with pytest.warns(UnknownSymbolsWarning):
        assert hmm.score(seq) == pytest.approx(np.logaddexp.reduce(filled))


def test_empty_sequence_has_log_probability_zero(hmm, oom):
    assert hmm.score([]) == 0.0  # was: ValueError "the sequence is empty"
    assert hmm.decode([])[1].shape == (0,)
    assert hmm.predict_proba([]).shape == (0, 3)
    assert oom.log_proba([]) == 0.0


def test_programming_errors_stay_errors(hmm, oom):
    with pytest.raises(ValueError, match="unknown symbol 99"):
        hmm.score([0, 99])
    bare = HiddenMarkovModel(hmm.startprob_, hmm.transmat_, hmm.emissionprob_)
    with pytest.raises(ValueError, match="no symbol labels"):
        bare.score(["a"])
    with pytest.raises(ValueError, match="1-D"):
        oom.log_proba(np.zeros((2, 2), dtype=int))


def test_collect_unknown_tallies_instead_of_warning(oom):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with collect_unknown() as tally:
            oom.log_proba(list("aXb"))
            oom.log_proba(list("YY"))
    assert tally.count == 3 and tally.first == ["X", "Y"]


def test_integer_labels_need_encode_labels():
    assert encode_labels([17, 4], [4, 17]).tolist() == [1, 0]
    assert to_indices([1, 0], 2, [4, 17]).tolist() == [1, 0]  # integers are indices
    assert [len(s) for s in split_lengths(list("abc"), [0, 3])] == [0, 3]

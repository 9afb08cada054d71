"""The trigram's discounts chosen on held-out counts: modified, or one fixed discount (chosen_trigram)."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MEstimator, MomentAccumulator
from streamspec.core.backoff import contexts_of
from streamspec.core.fit_data import starts_of
from streamspec.core.trigram import KneserNeyTrigram
from streamspec.experiments.baselines import KneserNeyNGram
from streamspec.experiments.markov_chains import short_sessions


@pytest.fixture(scope="module")
def sessions():
    """20,000 short sessions (mean length 2.5) of a sparse bigram over 2,000 symbols; 4,000 held out."""
    s = short_sessions(2000, 24_000, seed=8)
    acc = MomentAccumulator(n_symbols=2000, window=1)
    for i, q in enumerate(s[:20_000]):
        acc.learn_many(q, key=i)
        acc.end(i)
    return acc, s[:20_000], s[20_000:]


def _loss(trigram: KneserNeyTrigram, test) -> float:
    total = count = 0.0
    for q in test:
        u, v = contexts_of(q)
        total -= np.log(trigram.proba_of(u[:-1], v[:-1], q)).sum()
        count += len(q)
    return total / count


def test_the_default_is_no_worse_than_the_textbook_trigram_where_modified_discounts_fail(sessions):
    acc, train, test = sessions
    t = acc.triples()
    textbook = KneserNeyNGram(2000, order=2, discount=0.75).fit(train).log_loss(test)
    modified = _loss(KneserNeyTrigram(t, starts_of(acc, t.n)), test)
    assert modified > textbook + 0.02  # what chosen_trigram is for
    model = MEstimator().fit(acc)
    assert model.backoff.trigram.discount is not None
    assert _loss(model.backoff.trigram, test) < textbook
    assert model.log_loss(test) <= textbook


def test_a_fixed_discount_is_one_discount_at_every_level_and_rows_sum_to_one(sessions):
    acc, _, _ = sessions
    t = acc.triples()
    tri = KneserNeyTrigram(t, starts_of(acc, t.n), 0.6)
    assert tri.discounts.tolist() == [0.6] * 3 and tri.start_discounts.tolist() == [0.6] * 3
    rows = tri.predict_many([-1, -1, 5, -2, 7], [-1, 3, 9, 4, -2])
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (rows > 0).all()


def test_the_discount_survives_checkpoints_and_refits(sessions):
    acc, _, _ = sessions
    t, starts = acc.triples(), starts_of(acc, acc.triples().n)
    tri = KneserNeyTrigram(t, starts, 0.75)
    back = KneserNeyTrigram.from_arrays(t.n, tri.to_arrays())
    assert back.discount == 0.75
    u, v, x = np.array([-1, 3, 5]), np.array([-1, 9, 4]), np.array([1, 2, 3])
    np.testing.assert_allclose(back.proba_of(u, v, x), tri.proba_of(u, v, x), rtol=1e-13)
    older = {k: a for k, a in tri.to_arrays().items() if k != "discount"}  # a file from before
    assert KneserNeyTrigram.from_arrays(t.n, older).discount is None
    grown = t + t.scaled(0.01)
    assert KneserNeyTrigram.updated(tri, grown, starts).discount == 0.75
    with pytest.raises(ValueError, match="discount"):
        KneserNeyTrigram(t, starts, 1.5)
    with pytest.raises(ValueError, match="discount"):
        KneserNeyTrigram.from_arrays(t.n, {**tri.to_arrays(), "discount": np.array([2.0])})

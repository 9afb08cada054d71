"""OnlinePredictor's fast paths against the backoff's batch definition, on a large alphabet.

The online predictor computes each stream's mixed row from cached pieces (own rows from
cached prefix states, the trigram's terms added in place, weights folded into the HMM's
state) and its argmax from candidates and a bound; these tests recompute every row from
the model's public batch methods (:meth:`Backoff.walk` for the weights learned along the
stream, :meth:`Backoff.rows`, :meth:`ObservableOperatorModel.predict_from_state`) and hold
the fast paths to it, symbol by symbol, for random streams.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MomentAccumulator, SpectralEstimator
from streamspec.core.backoff import Backoff, contexts_of
from streamspec.core.hmm import HMM
from streamspec.core.mixture import ExpertMixture
from streamspec.streaming import dense_row
from streamspec.streaming import online_predictor as op
from streamspec.streaming.online_predictor import OnlinePredictor

N = 3 * 4 * op.TOP  # above 4 · TOP symbols: the pruned argmax is used


@pytest.fixture(scope="module")
def fitted():
    x = HMM.random(6, N, random_state=4, concentration=0.05).sample(60_000, random_state=5)
    acc = MomentAccumulator(n_symbols=N)
    for t in range(0, x.size, 200):
        acc.learn_many(x[t:t + 200].tolist(), key=t % 7)
    return SpectralEstimator(rank=4).fit(acc), x


def _with_model_part(model):
    """The same model with its own rows a component (the held-out choice may drop them)."""
    b = model.backoff
    if b.use_model:
        return model
    return model.with_backoff(Backoff(b.trigram, ExpertMixture(len(b.components) + 1), b.hmm,
                                      use_model=True))


@pytest.mark.parametrize("stacked", [True, False])
@pytest.mark.parametrize("prune", [True, False])
@pytest.mark.parametrize("own_part", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_rows_and_argmax_equal_the_batch_definition(fitted, own_part, seed, prune, stacked, monkeypatch):
    model, x = fitted
    # stacked: the dense parts in one GEMV (dense_row.StackedRows, the default on this
    # alphabet); else the part-by-part sum, as on alphabets too large for the stack
    if not stacked:
        monkeypatch.setattr(dense_row, "STACK_MAX_FLOATS", 0)
    gemvs = []
    real_row = dense_row.StackedRows.row
    monkeypatch.setattr(dense_row.StackedRows, "row",
                        lambda self, *a: gemvs.append(1) or real_row(self, *a))
    # prune: the pruned argmax forced (PRUNE_RATIO 0: from 4 · TOP symbols on); else the
    # default rule, which takes the whole row on this alphabet (N < PRUNE_RATIO · K · TOP)
    if prune:
        monkeypatch.setattr(op, "PRUNE_RATIO", 0)
    settled, real = [], op._pruned_argmax
    monkeypatch.setattr(op, "_pruned_argmax", lambda *a, **k: settled.append(real(*a, **k)) or settled[-1])
    model = _with_model_part(model) if own_part else model
    b = model.backoff
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, x.size - 400))
    seq = x[start:start + 300].copy()
    seq = np.where(rng.random(seq.size) < 0.2, rng.integers(0, N, seq.size), seq)
    online = OnlinePredictor(window=model.window)
    online.set_model(model)
    # the definition: the weights learned along the sequence, the rows from the batch methods
    own = np.array([model.predict_from_state(model.state_for(seq[max(0, t - model.window):t]))
                    for t in range(seq.size + 1)])
    walk = b.walk(seq, own[np.arange(seq.size), seq] if b.use_model else None)
    u, v = contexts_of(seq)
    states = b.hmm_states(seq)
    ref = b.rows(u, v, states, own, walk.blends)
    for t in range(seq.size + 1):
        row = online.row("s")
        np.testing.assert_allclose(row, ref[t], rtol=1e-9, atol=1e-15)
        best = online.argmax("s")
        assert best[0] == int(ref[t].argmax()) and best[1] == pytest.approx(ref[t].max(), rel=1e-9)
        if t < seq.size:
            p = online.observe("s", int(seq[t]))
            assert p == pytest.approx(walk.probs[t], rel=1e-9)
    if prune:
        assert len(settled) == seq.size + 1 and sum(r is not None for r in settled) > seq.size // 2
    else:
        assert not settled and N < op.PRUNE_RATIO * b.hmm.n_states * op.TOP
    assert online.loss == pytest.approx(-np.log(walk.probs).sum(), rel=1e-9)
    # every row() above went through the stack, or none did
    assert len(gemvs) == (2 * (seq.size + 1) - (len(settled) - settled.count(None)) if stacked else 0)


def test_cached_prefix_states_do_not_leak_between_contexts(fitted):
    """The own row of (a, b) must not reuse the state cached for another prefix: every
    context's row equals the model's own, whatever order the contexts are met in."""
    model, _ = fitted
    rows = op._Rows(_with_model_part(model), model.window, 1 << 20)
    rng = np.random.default_rng(7)
    pairs = [tuple(int(s) for s in rng.integers(0, N, 2)) for _ in range(60)] + [(3,), ()]
    for digits in pairs + pairs[::-1]:
        want = model.predict_from_state(model.state_for(np.array(digits, dtype=np.int64)))
        np.testing.assert_allclose(rows.own(digits), want, rtol=1e-10, atol=1e-15)
        row, idx, bound = rows.own_top(digits)
        rest = np.setdiff1d(np.arange(N), idx)
        assert row[idx].min() >= bound >= row[rest].max()  # the top and its bound are exact


def test_a_stream_learns_its_own_row_not_the_one_last_stacked(fitted):
    """The own row in the stack's buffer is the last one made: a stream learning after another
    stream's prediction must score its symbol under its own context's row, not that one."""
    model, x = fitted
    model = _with_model_part(model)
    a, b = x[:40].tolist(), x[1000:1040].tolist()
    both, alone = OnlinePredictor(window=model.window), OnlinePredictor(window=model.window)
    both.set_model(model)
    alone.set_model(model)
    for t in range(len(a)):  # the same symbols learned in the same order (the weights are shared)
        want = alone.row("a")
        np.testing.assert_allclose(both.row("a"), want, rtol=1e-12)
        both.row("b")  # the buffer now holds b's own row (its context differs from a's)
        assert both.observe("a", a[t]) == pytest.approx(alone.observe("a", a[t]), rel=1e-12)
        assert both.observe("b", b[t]) == pytest.approx(alone.observe("b", b[t]), rel=1e-12)
    assert both._rows.stack() is not None and both._rows.stack().last is not None


def test_a_row_cache_pickled_before_the_stack_goes_on_with_the_same_rows(fitted):
    """A predictor pickled by the previous version (its row cache without the stack, the
    decoded contexts, and with the scratch row under its old name) predicts as a new one."""
    import pickle

    model, x = fitted
    model = _with_model_part(model)
    new, old = OnlinePredictor(window=model.window), OnlinePredictor(window=model.window)
    for p in (new, old):
        p.set_model(model)
        p.observe("s", int(x[0]))
    old._rows.tops()  # made the scratch row
    old._rows.scratch.fill(0.0)
    state = old._rows.__dict__
    state["_scratch"] = state.pop("scratch")
    del state["_stack"], state["decoded"]
    old = pickle.loads(pickle.dumps(old))
    for t in x[1:30].tolist():
        np.testing.assert_allclose(old.row("s"), new.row("s"), rtol=1e-12)
        assert old.argmax("s") == new.argmax("s")
        assert old.observe("s", t) == pytest.approx(new.observe("s", t), rel=1e-12)
    assert old._rows.stack() is not None and old._rows.scratch is not None
    # a pickle leaves the stack out (remade on first use), and the copy predicts the same
    assert new._rows.stack() is not None
    copy = pickle.loads(pickle.dumps(new))
    assert copy._rows._stack is False and not copy._rows.decoded
    np.testing.assert_allclose(copy.row("s"), new.row("s"), rtol=1e-12)
    assert copy._rows.stack() is not None

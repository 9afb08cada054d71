"""The accumulator's count log (core/count_log.py): a warm refit's change read from what the
accumulator merged since the previous snapshot, equal to the change recounting finds."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamspec import MomentAccumulator
from streamspec.core.count_log import logged_delta
from streamspec.core.triples_change import triples_change


def logged_change(old, new):
    """:func:`triples_change` as read from the log, ``None`` where the log cannot answer."""
    return triples_change(old, new) if logged_delta(old, new) is not None else None


def _as_dict(t) -> dict:
    return dict(zip(t.codes.tolist(), t.weights.tolist(), strict=True))


def _check(old, new, change, exact: bool = True) -> None:
    """``new = scale · old + delta`` (exactly for whole counts, to 10⁻¹² under forgetting),
    delta without zeros, its middle symbols listed."""
    got = {c: change.scale * w for c, w in _as_dict(old).items()}
    for c, w in _as_dict(change.delta).items():
        assert w != 0
        got[c] = got.get(c, 0.0) + w
    got, want = {c: w for c, w in got.items() if abs(w) > 1e-9}, _as_dict(new)
    if exact:
        assert got == want
    else:
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[c] for c in want], list(want.values()), rtol=1e-12)
    np.testing.assert_array_equal(change.changed_middle, np.unique(change.delta.codes >> 42))
    assert change.new_nnz == new.nnz and change.delta.n == new.n


_STEP = st.one_of(
    st.tuples(st.just("one"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("many"), st.lists(st.integers(0, 5), max_size=40), st.integers(0, 2)),
    st.tuples(st.just("end"), st.integers(0, 2)),
    st.tuples(st.just("snapshot")),
)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=30), mode=st.sampled_from(["sliding", "sequences"]),
       labels=st.booleans())
def test_the_logged_change_between_any_two_snapshots_is_the_counted_one(steps, mode, labels):
    acc = MomentAccumulator(None if labels else 6, mode=mode, window=1)
    snaps = [acc.triples()]
    for step in steps:
        kind = step[0]
        if kind == "one":
            acc.learn_one(f"s{step[1]}" if labels else step[1], key=step[2])
        elif kind == "many":
            acc.learn_many([f"s{x}" for x in step[1]] if labels else step[1], key=step[2])
        elif kind == "end":
            acc.end(key=step[1])
        else:
            snaps.append(acc.triples())
    snaps.append(acc.triples())
    for i, old in enumerate(snaps):
        for new in snaps[i:]:
            change = logged_change(old, new)
            assert change is not None  # every snapshot alive: the log holds all it needs
            assert change.scale == 1.0
            _check(old, new, change)


def test_large_batches_and_forgetting_and_an_undone_call_fall_back_to_the_comparison():
    rng = np.random.default_rng(0)
    acc = MomentAccumulator(50, window=1)
    acc.learn_many(rng.integers(0, 50, 200_000))
    old = acc.triples()
    acc.learn_many(rng.integers(0, 50, 2_000))  # merged through the buffers
    new = acc.triples()
    change = logged_change(old, new)
    assert change is not None and change.delta.nnz > 0
    _check(old, new, change)
    # a batch larger than a quarter of the counts: the log is dropped, the comparison answers
    acc.learn_many(rng.integers(0, 50, 400_000))
    later = acc.triples()
    assert logged_change(new, later) is None and logged_change(old, later) is None
    _check(new, later, triples_change(new, later))
    # an undone call (learn_all: 70,000 symbols merged into the counts, then one outside the
    # fixed alphabet, and everything undone): the log's batches are not in the counts any more
    from streamspec.streaming.count_buffer import _LOGS
    acc.learn_many(rng.integers(0, 50, 100))
    epoch = _LOGS[acc]._epoch
    items = [("k", int(x), False) for x in rng.integers(0, 50, 70_000)] + [("k", 99, False)]
    with pytest.raises(ValueError):
        acc.learn_all(items)
    after = acc.triples()
    assert _LOGS[acc]._epoch > epoch and logged_change(later, after) is None
    _check(later, after, triples_change(later, after))
    assert after.total == later.total + 100
    # forgetting: snapshots are never marked
    f = MomentAccumulator(5, forgetting=0.99, window=1)
    f.learn_many(rng.integers(0, 5, 300))
    a = f.triples()
    f.learn_many(rng.integers(0, 5, 30))
    b = f.triples()
    assert logged_change(a, b) is None
    _check(a, b, triples_change(a, b), exact=False)


def test_the_log_keeps_only_what_live_snapshots_need():
    rng = np.random.default_rng(1)
    acc = MomentAccumulator(30, window=1)
    acc.learn_many(rng.integers(0, 30, 50_000))
    first = acc.triples()
    for _ in range(3):
        acc.learn_many(rng.integers(0, 30, 500))
        acc.triples()  # dropped at once: only `first` is alive
    from streamspec.streaming.count_buffer import _LOGS
    held = _LOGS[acc]
    assert held._entries > 0 and len(held._live) == 1
    assert held.nbytes == 16 * held._entries > 0
    second = acc.triples()
    _check(first, second, logged_change(first, second))
    del first
    gc.collect()
    acc.learn_many(rng.integers(0, 30, 500))
    third = acc.triples()  # marking it drops the batches before `second`
    assert len(held._live) == 2 and held._entries <= 500
    _check(second, third, logged_change(second, third))
    del second, third
    gc.collect()
    acc.learn_many(rng.integers(0, 30, 500))
    acc.triples()
    assert held._entries == 0 and not held._live  # no snapshot alive: nothing kept
    fourth = acc.triples()
    acc.learn_many(rng.integers(0, 30, 500))
    acc.triples()  # (merged: logged since `fourth`)
    before, logged = acc.memory_bytes(), held.nbytes
    held.invalidate()
    assert logged > 0 and acc.memory_bytes() == before - logged  # counted in its memory
    assert logged_change(fourth, acc.triples()) is None


def test_a_warm_refit_reads_its_change_from_the_log(monkeypatch):
    """The refit's path uses the log (the comparison is not called) and fits what it fits
    from the comparison."""
    import streamspec.core.triples_change as tc
    from streamspec import HMM, SpectralEstimator

    x = HMM.random(3, 12, random_state=1).sample(21_000, random_state=2)
    acc = MomentAccumulator(12, window=1)
    acc.learn_many(x[:20_000])
    _, state = SpectralEstimator(rank=3, backoff=None, basis_tol=1e9).fit_with_state(acc)
    acc.learn_many(x[20_000:])
    est = SpectralEstimator(rank=3, backoff=None, basis_tol=1e9)
    calls = []
    real = tc.logged_delta
    monkeypatch.setattr(tc, "logged_delta", lambda a, b: calls.append(real(a, b)) or calls[-1])
    logged = est.fit(acc, init=state)
    assert est.refit_.path == "warm" and calls and calls[0] is not None
    monkeypatch.setattr(tc, "logged_delta", lambda a, b: None)
    est2 = SpectralEstimator(rank=3, backoff=None, basis_tol=1e9)
    compared = est2.fit(acc, init=state)
    assert est2.refit_.path == "warm"
    np.testing.assert_allclose(logged.B, compared.B, rtol=1e-10, atol=1e-12)


def test_a_copy_marks_its_snapshots_where_the_original_was_until_it_changes():
    """The background refitter fits a copy of the accumulator each time: the change between
    two copies' snapshots is read from the original's log; a copy that learns has its own."""
    rng = np.random.default_rng(2)
    acc = MomentAccumulator(40, window=1)
    acc.learn_many(rng.integers(0, 40, 30_000))
    first = acc.copy()
    acc.learn_many(rng.integers(0, 40, 300), key="a")
    a = first.triples()  # marked where `acc` was at the copy, not where it is now
    second = acc.copy()
    acc.learn_many(rng.integers(0, 40, 300), key="b")
    b = second.triples()
    change = logged_change(a, b)
    assert change is not None and change.delta.total == 300 - 2
    _check(a, b, change)
    mine = acc.triples()
    _check(b, mine, logged_change(b, mine))
    second.learn_many(rng.integers(0, 40, 50), key="c")  # the copy changed: its own log
    c = second.triples()
    assert logged_change(b, c) is None and logged_change(a, c) is None
    _check(b, c, triples_change(b, c))


def test_a_background_refitter_reads_its_change_from_the_log(monkeypatch):
    import streamspec.core.triples_change as tc
    from streamspec import HMM, SpectralEstimator
    from streamspec.streaming.refitter import Refitter

    x = HMM.random(3, 12, random_state=1).sample(24_000, random_state=2)
    acc = MomentAccumulator(12, window=1)
    refitter = Refitter(SpectralEstimator(rank=3, backoff=None, basis_tol=1e9), refit_every=None,
                        background=True)
    calls = []
    real = tc.logged_delta
    monkeypatch.setattr(tc, "logged_delta", lambda a, b: calls.append(real(a, b)) or calls[-1])
    for end in (20_000, 22_000, 24_000):
        acc.learn_many(x[end - (20_000 if end == 20_000 else 2_000) : end])
        assert refitter.fit_now(acc)
        refitter.wait()
    refitter.close()
    assert len(calls) == 2 and all(c is not None for c in calls)

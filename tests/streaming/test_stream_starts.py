"""Stream starts: the accumulator counts the first symbol and pair of every stream, exactly."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_events import replay, sequences_so_far

from streamspec import MomentAccumulator
from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import BITS

# an event: (key, symbol) learns a symbol, (key, None) ends the key's sequence
events_st = st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 4))), max_size=60)


def reference(events, mode="sliding"):
    """Counters of first symbols and first pairs of every sequence, by replaying the events."""
    firsts, pairs = Counter(), Counter()
    for seq in sequences_so_far(events):
        if len(seq) == 1:
            firsts[seq[0]] += 1
        elif len(seq) == 2:
            pairs[(seq[0], seq[1])] += 1
    return firsts, pairs


def counters(acc: MomentAccumulator):
    s = acc.starts()
    labels = acc.symbols
    firsts = Counter({labels[int(c)]: w for c, w in zip(s.first_codes, s.first_weights, strict=True)})
    a, b, w = s.pair_arrays()
    pairs = Counter({(labels[int(i)], labels[int(j)]): v for i, j, v in zip(a, b, w, strict=True)})
    return firsts, pairs


def feed(acc: MomentAccumulator, events, runs: bool):
    """learn_one per event, or learn_many over runs of one key's symbols (ends between)."""
    replay(events, acc, "runs" if runs else "one")


@settings(max_examples=80, deadline=None)
@given(events_st, st.booleans(), st.sampled_from(["sliding", "sequences"]))
def test_starts_equal_a_recount_of_the_sequences(events, runs, mode):
    acc = MomentAccumulator(mode=mode, window=1)
    feed(acc, events, runs)
    assert counters(acc) == reference(events)


@settings(max_examples=60, deadline=None)
@given(events_st)
def test_merging_accumulators_of_disjoint_streams_adds_their_starts(events):
    left, right = MomentAccumulator(window=1), MomentAccumulator(window=1)
    feed(left, [e for e in events if e[0] % 2 == 0], runs=False)
    feed(right, [e for e in events if e[0] % 2 == 1], runs=True)
    assert counters(left.merge(right)) == reference(events)


@settings(max_examples=80, deadline=None)
@given(events_st, st.integers(0, 60))
def test_concat_of_consecutive_pieces_counts_only_real_starts(events, cut):
    first, second = (MomentAccumulator(track_heads=True, window=1) for _ in range(2))
    feed(first, events[:cut], runs=False)
    feed(second, events[cut:], runs=True)
    joined = first.concat(second)
    assert counters(joined) == reference(events)
    whole = MomentAccumulator(window=1)
    feed(whole, events, runs=False)
    assert joined.starts() == whole.starts().remapped(
        [joined.symbols.index(s) for s in whole.symbols], joined.n) or counters(joined) == counters(whole)


@settings(max_examples=40, deadline=None)
@given(events_st, st.sampled_from([0.5, 0.9]))
def test_forgetting_weighs_a_start_like_the_triples_counted_with_it(events, g):
    acc = MomentAccumulator(forgetting=g, window=1)
    feed(acc, events, runs=False)
    # reference: a start made when t triples had been counted weighs g ** (total - t)
    firsts, triples = Counter(), 0
    stamps = []
    for seq in sequences_so_far(events):
        if len(seq) >= 3:
            triples += 1
        if len(seq) == 1:
            stamps.append((seq[0], triples))
    for x, t in stamps:
        firsts[x] += g ** (triples - t)
    got = counters(acc)[0]
    assert set(got) == set(firsts)
    for x in firsts:
        assert got[x] == pytest.approx(firsts[x], rel=1e-9)


def test_a_checkpoint_keeps_the_starts_and_old_checkpoints_load_without_them(tmp_path):
    acc = MomentAccumulator(window=1)
    acc.learn_many("abcab", key="u")
    acc.learn_many("ba", key="v")
    acc.save(tmp_path / "c.ckpt")
    back = MomentAccumulator.load(tmp_path / "c.ckpt")
    assert back.starts() == acc.starts() and back.starts().n_streams == 2
    fmt, _, header, arrays = acc.to_checkpoint()
    for name in ("start_first", "start_first_w", "start_pair", "start_pair_w"):
        arrays.pop(name)
    old = MomentAccumulator.from_checkpoint(header, arrays)  # a version-2 file: no starts kept
    assert old.starts().n_streams == 0 and old.triples() == acc.triples()


def test_a_failed_learning_call_leaves_the_starts_as_they_were():
    acc = MomentAccumulator(n_symbols=3, window=1)
    acc.learn_one(0, key="a")
    before = acc.starts()
    with pytest.raises(ValueError):
        acc.learn_many([1, 2, 7], key="b")  # 7 is not a symbol: nothing of the call is kept
    assert acc.starts() == before


def test_stream_starts_validate_their_arrays():
    with pytest.raises(ValueError, match="out of range"):
        StreamStarts(2, [5], [1.0])
    with pytest.raises(ValueError, match="out of range"):
        StreamStarts(2, [], [], [1 << BITS | 7], [1.0])
    with pytest.raises(ValueError, match="finite and non-negative"):
        StreamStarts(2, [0], [np.nan])

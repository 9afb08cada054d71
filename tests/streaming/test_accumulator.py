"""Count invariants of MomentAccumulator (property-based), persistence and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamspec import CheckpointError, MomentAccumulator
from streamspec.core.checkpoint import dump_checkpoint

N = 4
streams_st = st.dictionaries(
    st.sampled_from(["a", "b", "c", None, 7]),
    st.lists(st.integers(0, N - 1), max_size=30),
    max_size=4,
)


def brute_counts(streams: dict, n: int = N, mode: str = "sliding") -> np.ndarray:
    c3 = np.zeros((n, n, n))
    for seq in streams.values():
        triples = range(len(seq) - 2) if mode == "sliding" else range(min(1, len(seq) - 2))
        for t in triples:
            c3[seq[t + 1], seq[t + 2], seq[t]] += 1
    return c3


def feed(streams: dict, acc: MomentAccumulator, how: str = "one") -> MomentAccumulator:
    for key, seq in streams.items():
        if how == "one":
            for x in seq:
                acc.learn_one(x, key=key)
        else:
            acc.learn_many(seq, key=key)
    return acc


@settings(max_examples=60, deadline=None)
@given(streams_st, st.sampled_from(["sliding", "sequences"]))
def test_counts_match_brute_force_and_totals(streams, mode):
    acc = feed(streams, MomentAccumulator(N, mode=mode, window=1))
    c3 = acc.counts()
    np.testing.assert_array_equal(c3, brute_counts(streams, mode=mode))
    if mode == "sliding":
        expected = sum(max(len(s) - 2, 0) for s in streams.values())
    else:
        expected = sum(len(s) >= 3 for s in streams.values())
    assert c3.sum() == acc.n_triples == expected


@settings(max_examples=60, deadline=None)
@given(streams_st)
def test_sliding_marginals(streams):
    acc = feed(streams, MomentAccumulator(N, window=1))
    if acc.n_triples == 0:
        return
    # both sides computed independently from the raw sequences
    pairs, firsts = np.zeros((N, N)), np.zeros(N)
    for seq in streams.values():
        for t in range(len(seq) - 2):
            pairs[seq[t + 1], seq[t]] += 1
            firsts[seq[t]] += 1
    np.testing.assert_allclose(acc.c21, pairs)
    np.testing.assert_allclose(acc.c1, firsts)
    # the probabilities against the raw counts, not against each other
    total = sum(max(len(s) - 2, 0) for s in streams.values())
    np.testing.assert_allclose(acc.P21, pairs / total, atol=1e-15)
    np.testing.assert_allclose(acc.P1, firsts / total, atol=1e-15)
    np.testing.assert_allclose(acc.P3x1, brute_counts(streams) / total, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(streams_st, st.data())
def test_learn_many_equals_learn_one_in_any_chunks(streams, data):
    one = feed(streams, MomentAccumulator(N, window=1))
    many = MomentAccumulator(N, window=1)
    for key, seq in streams.items():
        cuts = sorted(data.draw(st.lists(st.integers(0, len(seq)), max_size=4)))
        for a, b in zip([0, *cuts], [*cuts, len(seq)], strict=True):
            many.learn_many(np.asarray(seq[a:b], dtype=np.int64), key=key)
    np.testing.assert_array_equal(one.counts(), many.counts())


@settings(max_examples=60, deadline=None)
@given(streams_st, st.randoms(use_true_random=False))
def test_interleaving_does_not_change_counts(streams, rnd):
    events = [(key, x) for key, seq in streams.items() for x in seq]
    # a random interleaving that keeps each stream's own order
    queues = {k: list(s) for k, s in streams.items()}
    acc = MomentAccumulator(N, window=1)
    remaining = len(events)
    while remaining:
        key = rnd.choice([k for k, q in queues.items() if q])
        acc.learn_one(queues[key].pop(0), key=key)
        remaining -= 1
    np.testing.assert_array_equal(acc.counts(), brute_counts(streams))


@settings(max_examples=40, deadline=None)
@given(streams_st, streams_st, streams_st)
def test_merge_is_exact_associative_commutative(s1, s2, s3):
    s2 = {("2", k): v for k, v in s2.items()}
    s3 = {("3", k): v for k, v in s3.items()}
    a, b, c = (feed(s, MomentAccumulator(N, window=1)) for s in (s1, s2, s3))
    everything = feed({**s1, **s2, **s3}, MomentAccumulator(N, window=1))
    left, right = (a + b) + c, a + (b + c)
    np.testing.assert_array_equal(left.counts(), everything.counts())
    np.testing.assert_array_equal(right.counts(), everything.counts())
    np.testing.assert_array_equal((b + a).counts(), (a + b).counts())
    assert set(left.keys) == set(everything.keys)
    # merged tails continue the streams exactly
    for acc in (left, everything):
        for key in everything.keys:
            acc.learn_one(1, key=key)
    np.testing.assert_array_equal(left.counts(), everything.counts())


def test_merge_matches_labels_across_alphabets():
    a, b = MomentAccumulator(window=1), MomentAccumulator(window=1)
    a.learn_many("abcab", key=1)
    b.learn_many("cbacb", key=2)
    both = MomentAccumulator(window=1)
    both.learn_many("abcab", key=1)
    both.learn_many("cbacb", key=2)
    merged = a.merge(b)
    order = [merged.symbols.index(s) for s in both.symbols]
    np.testing.assert_array_equal(merged.counts()[np.ix_(order, order, order)], both.counts())


@settings(max_examples=30, deadline=None)
@given(streams_st, st.sampled_from([1.0, 0.97]))
def test_save_load_round_trip(tmp_path_factory, streams, forgetting):
    acc = feed(streams, MomentAccumulator(N, forgetting=forgetting, window=1))
    path = tmp_path_factory.mktemp("ckpt") / "acc.npz"
    acc.save(path)
    back = MomentAccumulator.load(path)
    np.testing.assert_array_equal(back.counts(), acc.counts())
    assert back.n_triples == acc.n_triples and back.forgetting == forgetting
    for x in (0, 1, 2):  # the streams resume where they were
        for key in list(streams):
            acc.learn_one(x, key=key)
            back.learn_one(x, key=key)
    np.testing.assert_allclose(back.counts(), acc.counts(), rtol=1e-12)


def test_save_load_labels_and_keys(tmp_path):
    acc = MomentAccumulator(window=1)
    acc.learn_many(["x", 3, b"z", ("t", 1), 2.5, "x"], key=("user", 9))
    acc.learn_one("x", key=b"raw")
    acc.save(tmp_path / "a.npz")
    back = MomentAccumulator.load(tmp_path / "a.npz")
    assert back.symbols == acc.symbols
    assert set(back.keys) == {("user", 9), b"raw"}
    np.testing.assert_array_equal(back.counts(), acc.counts())


@settings(max_examples=40, deadline=None)
@given(streams_st)
def test_forgetting_one_counts_every_triple_fully_and_below_one_does_not(streams):
    # against brute-force counts (forgetting=1 is also the default, so comparing with a
    # default accumulator would compare a configuration with itself)
    f1 = feed(streams, MomentAccumulator(N, forgetting=1.0, window=1), how="one")
    plain = brute_counts(streams)
    np.testing.assert_array_equal(f1.counts(), plain)
    decayed = feed(streams, MomentAccumulator(N, forgetting=0.5, window=1), how="one")
    if plain.sum() >= 2:  # the older triples weigh less than 1
        assert decayed.n_triples < plain.sum()


@pytest.mark.parametrize("how", ["one", "many"])
def test_forgetting_weights_triples_geometrically(how):
    rng = np.random.default_rng(0)
    seq = rng.integers(0, N, size=3000).tolist()
    g = 0.99
    acc = feed({None: seq}, MomentAccumulator(N, forgetting=g, window=1), how=how)
    expected = np.zeros((N, N, N))
    T = len(seq) - 2
    for t in range(T):
        expected[seq[t + 1], seq[t + 2], seq[t]] += g ** (T - 1 - t)
    np.testing.assert_allclose(acc.counts(), expected, rtol=1e-9)
    assert abs(acc.n_triples - expected.sum()) < 1e-9 * expected.sum()


def test_growing_alphabet_keeps_counts():
    acc = MomentAccumulator(window=1)
    text = "the quick brown fox jumps over the lazy dog" * 3
    acc.learn_many(text[:20])
    for ch in text[20:]:
        acc.learn_one(ch)
    assert acc.n == len(set(text)) and acc.symbols[0] == "t"
    ref = MomentAccumulator(window=1)
    ref.learn_many(list(text))
    np.testing.assert_array_equal(acc.counts(), ref.counts())
    assert acc.n_triples == len(text) - 2


def test_sequences_mode_uses_first_triple_and_end_restarts():
    acc = MomentAccumulator(3, mode="sequences", window=1)
    acc.learn_many([0, 1, 2, 2, 2])
    acc.learn_one(1)  # ignored: the sequence's triple is counted
    acc.end()
    for x in [2, 1, 0]:
        acc.learn_one(x)
    c3 = acc.counts()
    assert acc.n_triples == 2 and c3[1, 2, 0] == 1 and c3[1, 0, 2] == 1


@pytest.mark.parametrize(
    "bad, message",
    [(5, "unknown symbol 5"), (-1, "unknown symbol -1"), (1.5, "not an integer"),
     ("a", "not an integer"), (True, "not an integer")],
)
def test_bad_symbols_raise_and_keep_state(bad, message):
    acc = MomentAccumulator(3, window=1)
    acc.learn_many([0, 1, 2, 0])
    before = acc.counts()
    with pytest.raises(ValueError, match=message):
        acc.learn_one(bad)
    with pytest.raises(ValueError, match=message):
        acc.learn_many([0, 1, bad, 2])
    np.testing.assert_array_equal(acc.counts(), before)
    acc.learn_one(1)  # still usable, and the stream continues from its tail
    assert acc.n_triples == 3 and acc.counts()[0, 1, 2] == 1


def test_bad_parameters():
    with pytest.raises(ValueError, match="mode"):
        MomentAccumulator(3, mode="windows")
    with pytest.raises(ValueError, match="forgetting"):
        MomentAccumulator(3, forgetting=0, window=1)
    with pytest.raises(ValueError, match="n_symbols"):
        MomentAccumulator(0, window=1)
    with pytest.raises(ValueError, match="1-D"):
        MomentAccumulator(3, window=1).learn_many(np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="no triple"):
        _ = MomentAccumulator(3, window=1).P1


def test_corrupt_foreign_and_nan_checkpoints(tmp_path):
    acc = MomentAccumulator(3, window=1)
    acc.learn_many([0, 1, 2, 1, 0])
    path = tmp_path / "a.npz"
    acc.save(path)
    original = path.read_bytes()
    detected = 0
    for pos in range(0, len(original), 7):  # a flipped byte is caught or is harmless
        data = bytearray(original)
        data[pos] ^= 0xFF
        (tmp_path / "flipped.npz").write_bytes(bytes(data))
        try:
            back = MomentAccumulator.load(tmp_path / "flipped.npz")
        except CheckpointError as exc:
            assert "flipped.npz" in str(exc)
            detected += 1
            continue
        np.testing.assert_array_equal(back.counts(), acc.counts())
        assert back._tails == acc._tails
    assert detected > len(original) // 7 // 2
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        MomentAccumulator.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "foreign.npz", x=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a streamspec checkpoint"):
        MomentAccumulator.load(tmp_path / "foreign.npz")
    kind, version, header, arrays = acc.to_checkpoint()
    arrays["c3"] = np.full((3, 3, 3), np.nan)
    (tmp_path / "nan.npz").write_bytes(dump_checkpoint(kind, version, header, arrays))
    with pytest.raises(CheckpointError, match="NaN"):
        MomentAccumulator.load(tmp_path / "nan.npz")
    (tmp_path / "newer.npz").write_bytes(dump_checkpoint(kind, 99, header, acc.to_checkpoint()[3]))
    with pytest.raises(CheckpointError, match="version 99"):
        MomentAccumulator.load(tmp_path / "newer.npz")
    with pytest.raises(CheckpointError, match="no such"):
        MomentAccumulator.load(tmp_path / "missing.npz")
    np.testing.assert_array_equal(MomentAccumulator.load(path).counts(), acc.counts())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("one"), st.integers(0, N - 1), st.sampled_from([None, "k"])),
    st.tuples(st.just("many"), st.lists(st.integers(0, N - 1), max_size=6),
              st.sampled_from([None, "k"])),
    st.tuples(st.just("end"), st.none(), st.sampled_from([None, "k"])),
    st.tuples(st.just("read"), st.none(), st.none()),
), max_size=40))
def test_any_mix_of_operations_matches_brute_force(ops):
    acc = MomentAccumulator(N, window=1)
    streams: dict = {}  # key -> list of finished and current sequences
    for op, arg, key in ops:
        if op == "read":
            acc.counts()
            continue
        seqs = streams.setdefault(key, [[]])
        if op == "one":
            acc.learn_one(arg, key=key)
            seqs[-1].append(arg)
        elif op == "many":
            acc.learn_many(arg, key=key)
            seqs[-1].extend(arg)
        else:
            acc.end(key)
            seqs.append([])
    flat = {(k, i): s for k, seqs in streams.items() for i, s in enumerate(seqs)}
    np.testing.assert_array_equal(acc.counts(), brute_counts(flat))


events_st = st.lists(
    st.tuples(st.sampled_from(["a", "b", None]),
              st.one_of(st.integers(0, N - 1), st.just("end"))),
    max_size=40,
)


def replay(events, acc):
    for key, ev in events:
        if ev == "end":
            acc.end(key)
        else:
            acc.learn_one(ev, key=key)
    return acc


@settings(max_examples=150, deadline=None)
@given(events_st, st.data())
def test_concat_of_consecutive_pieces_is_exact_and_associative(events, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=2, max_size=2)))
    pieces = [events[: cuts[0]], events[cuts[0] : cuts[1]], events[cuts[1] :]]
    whole = replay(events, MomentAccumulator(N, track_heads=True, window=1))
    a, b, c = (replay(p, MomentAccumulator(N, track_heads=True, window=1)) for p in pieces)
    for joined in (a.concat(b).concat(c), a.concat(b.concat(c))):
        np.testing.assert_array_equal(joined.counts(), whole.counts())
        assert joined._tails == whole._tails and joined._heads == whole._heads
    # the joined accumulator continues the streams exactly
    joined = a.concat(b.concat(c))
    for key in ("a", "b", None):
        for acc in (joined, whole):
            acc.learn_many([1, 2], key=key)
    np.testing.assert_array_equal(joined.counts(), whole.counts())


def test_concat_with_labels_and_checkpoint(tmp_path):
    first, second = (MomentAccumulator(track_heads=True, window=1) for _ in range(2))
    first.learn_many(list("abra"), key="s")
    second.learn_many(list("cadabra"), key="s")
    second.save(tmp_path / "second.npz")
    whole = MomentAccumulator(window=1)
    whole.learn_many(list("abracadabra"), key="s")
    joined = first.concat(MomentAccumulator.load(tmp_path / "second.npz"))
    order = [joined.symbols.index(x) for x in whole.symbols]
    np.testing.assert_array_equal(joined.counts()[np.ix_(order, order, order)], whole.counts())
    with pytest.raises(ValueError, match="track_heads"):
        whole.concat(first)
    with pytest.raises(ValueError, match="track_heads needs"):
        MomentAccumulator(3, mode="sequences", track_heads=True, window=1)


def test_learn_all_undoes_every_item_when_one_fails(monkeypatch):
    acc = MomentAccumulator(window=1)
    acc.learn_many(list("abcab"), key="s")
    before = (acc.symbols, acc.keys, acc.n_triples, acc.counts().copy())
    real = acc.learn_one
    calls = []

    def failing(symbol, key=None):
        calls.append(symbol)
        if len(calls) == 3:
            raise MemoryError("no room")
        return real(symbol, key)

    monkeypatch.setattr(acc, "learn_one", failing)
    with pytest.raises(MemoryError):
        acc.learn_all([("s", "new", False), ("t", "x", True), ("s", "y", False)])
    monkeypatch.undo()
    assert (acc.symbols, acc.keys, acc.n_triples) == before[:3]
    np.testing.assert_array_equal(acc.counts(), before[3])
    assert acc.learn_all([("s", "c", False), ("s", None, True)]) == 1
    assert acc.keys == [] and acc.n_triples == before[2] + 1

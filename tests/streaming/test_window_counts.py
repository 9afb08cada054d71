"""Window counts of MomentAccumulator against brute-force recounting (docs/math.md section 11)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_events import replay

from streamspec import CheckpointError, MomentAccumulator
from streamspec.core.checkpoint import dump_checkpoint, load_checkpoint_bytes
from streamspec.core.triples import pack
from streamspec.core.windows import WindowCounts

N = 3
KEYS = ["a", "b", 7, None]
# events: (key, symbol) or (key, None) for an end
events_st = st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, N - 1),
                                                                 st.integers(0, N - 1))), max_size=60)


def brute_grams(events, L: int, mode: str = "sliding") -> list[list[int]]:
    """The grams, in the order they are counted, recounted from the raw events."""
    seqs, done, out = {}, set(), []
    for key, x in events:
        if x is None:
            d = seqs.pop(key, None)
            done.discard(key)
            if d is not None and mode == "sliding":
                first = max(0, len(d) - 2 * L)  # the grams not counted yet
                d = d + [-1] * (L - 1)
                out += [d[s : s + 2 * L + 1] for s in range(first, len(d) - 2 * L)]
            continue
        if mode == "sequences":
            if key not in done:
                d = seqs.setdefault(key, [])
                d.append(x)
                if len(d) == 2 * L + 1:
                    out.append(list(d))
                    done.add(key)
            continue
        d = seqs.setdefault(key, [-1] * (L - 1))
        d.append(x)
        if len(d) >= 2 * L + 1:
            out.append(d[-2 * L - 1 :])
    return out


def brute(events, L: int, mode: str = "sliding", n: int = N, forgetting: float = 1.0) -> WindowCounts:
    grams = brute_grams(events, L, mode)
    w = forgetting ** np.arange(len(grams))[::-1].astype(float)
    if not grams:
        return WindowCounts(n, L, np.empty(0, dtype=np.int64), np.empty(0))
    return WindowCounts.from_digits(n, L, grams, w)


def ended(events) -> list:
    """The events, then an end of every key (so that every gram is complete)."""
    return list(events) + [(k, None) for k in KEYS]


@settings(max_examples=80, deadline=None)
@given(events_st, st.sampled_from([1, 2, 3]), st.sampled_from(["sliding", "sequences"]),
       st.sampled_from(["one", "many"]))
def test_window_counts_equal_brute_force(events, L, mode, how):
    acc = replay(events, MomentAccumulator(N, mode=mode, window=L), how)
    expected = brute(events, L, mode)
    assert acc.windows() == expected
    assert acc.n_triples == expected.total
    assert acc.current_window == L


@settings(max_examples=60, deadline=None)
@given(events_st, st.sampled_from(["one", "many"]))
def test_window_one_is_the_triples_bit_for_bit(events, how):
    acc = replay(events, MomentAccumulator(N, window=1), how)
    triples = [g for g in brute_grams(events, 1)]
    t = acc.triples()
    assert np.array_equal(acc.windows().codes, t.codes)
    if triples:
        x1, x2, x3 = np.array(triples).T
        codes = np.unique(pack(x1, x2, x3))  # the triple codes of before windows existed
        assert np.array_equal(t.codes, codes)
        assert t.weights.sum() == len(triples)
    # and the triples of longer windows, every stream ended, are the same
    for L in (2, 3):
        longer = replay(ended(events), MomentAccumulator(N, window=L), how)
        assert longer.triples() == replay(ended(events), MomentAccumulator(N), how).triples()


@settings(max_examples=60, deadline=None)
@given(events_st)
def test_marginals_are_the_counts_of_shorter_windows(events):
    events = ended(events)
    g3 = replay(events, MomentAccumulator(N, window=3)).windows()
    for l in (1, 2):
        assert g3.marginal(l) == replay(events, MomentAccumulator(N, window=l)).windows()
    assert g3.full() == WindowCounts(N, 3, *_without_pads(g3))


def _without_pads(g: WindowCounts):
    keep = [i for i, row in enumerate(g.digits()) if min(row) >= 0]
    return g.codes[keep], g.weights[keep]


@settings(max_examples=40, deadline=None)
@given(events_st, st.sampled_from([1, 2, 3]), st.sampled_from(["one", "many"]))
def test_forgetting_weighs_each_gram_by_when_it_was_counted(events, L, how):
    acc = replay(events, MomentAccumulator(N, window=L, forgetting=0.9), how)
    expected = brute(events, L, forgetting=0.9)
    got = acc.windows()
    assert np.array_equal(got.codes, expected.codes)
    np.testing.assert_allclose(got.weights, expected.weights, rtol=1e-12)
    assert acc.n_triples == pytest.approx(expected.total, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(events_st, events_st, st.sampled_from([1, 2, 3]))
def test_merge_of_disjoint_streams_equals_one_accumulator(first, second, L):
    second = [(("2", k), x) for k, x in second]  # other keys
    labels = {0: "x", 1: "y", 2: "z"}

    def labelled(events, acc):
        return replay([(k, None if x is None else labels[(x + len(k or "")) % 3] if isinstance(k, tuple)
                        else labels[x]) for k, x in events], acc)
    a = labelled(first, MomentAccumulator(window=L))
    b = labelled(second, MomentAccumulator(window=L))
    whole = labelled(first + second, MomentAccumulator(window=L))
    merged = a.merge(b)
    mapping = np.array([merged.symbols.index(s) for s in whole.symbols])
    g = whole.windows()
    d = g.digits()
    d[d >= 0] = mapping[d[d >= 0]]
    assert merged.windows() == WindowCounts.from_digits(merged.n, L, d, g.weights)
    assert merged.n_triples == whole.n_triples
    assert sorted(map(str, merged.keys)) == sorted(map(str, whole.keys))


@settings(max_examples=60, deadline=None)
@given(events_st, st.data(), st.sampled_from([1, 2, 3]))
def test_concat_of_consecutive_pieces_equals_the_whole(events, data, L):
    cut = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=2, max_size=2)))
    pieces = [events[: cut[0]], events[cut[0] : cut[1]], events[cut[1] :]]
    whole = replay(events, MomentAccumulator(N, track_heads=True, window=L))
    a, b, c = (replay(p, MomentAccumulator(N, track_heads=True, window=L)) for p in pieces)
    for joined in (a.concat(b).concat(c), a.concat(b.concat(c))):
        assert joined.windows() == whole.windows()
        assert joined._tails == whole._tails and joined._heads == whole._heads
        assert joined.n_triples == whole.n_triples
        assert joined.starts() == whole.starts()


@settings(max_examples=30, deadline=None)
@given(events_st, events_st, st.sampled_from([2, 3]), st.sampled_from(["sliding", "sequences"]))
def test_checkpoints_keep_windows_and_streams(events, more, L, mode):
    acc = replay(events, MomentAccumulator(N, mode=mode, window=L))
    fmt, version, header, arrays = acc.to_checkpoint()
    assert version == 4 and header["window"] == L
    h, a = load_checkpoint_bytes(dump_checkpoint(fmt, version, header, arrays), fmt, version)
    back = MomentAccumulator.from_checkpoint(h, a)
    assert back.windows() == acc.windows() and back._tails == acc._tails
    # it goes on exactly as the original would
    assert replay(more, back).windows() == replay(more, acc).windows()


def test_version_3_checkpoints_still_load():
    header = {"n_symbols": None, "mode": "sliding", "forgetting": 1.0, "labels": ["a", "b", "c"],
              "keys": ["s", "t", "u"], "track_heads": False, "heads": [], "max_symbols": None}
    codes = pack(np.array([0]), np.array([1]), np.array([2]))  # "a b c"
    arrays = {"codes": codes, "weights": np.array([2.0]), "n_triples": np.array(2.0),
              "tail_a": np.array([1, -1, -2]), "tail_b": np.array([2, 0, -2])}
    data = dump_checkpoint(MomentAccumulator._FORMAT, 3, header, arrays)
    h, a = load_checkpoint_bytes(data, MomentAccumulator._FORMAT, MomentAccumulator._VERSION)
    acc = MomentAccumulator.from_checkpoint(h, a)
    assert acc.current_window == 1 and acc.windows().codes.tolist() == codes.tolist()
    acc.learn_one("a", key="s")  # "b c" + "a"
    acc.learn_many(["b", "c"], key="t")  # "a" + "b c"
    acc.learn_one("a", key="u")  # done in a v3 sliding file cannot happen; read as a fresh one
    t = acc.triples()
    assert sorted(zip(t.x1.tolist(), t.x2.tolist(), t.x3.tolist(), t.weights.tolist(), strict=True)) == [
        (0, 1, 2, 3.0), (1, 2, 0, 1.0)]
    bad = dict(arrays, tail_b=np.array([2, 9, -2]))
    data = dump_checkpoint(MomentAccumulator._FORMAT, 3, header, bad)
    with pytest.raises(CheckpointError, match="out of range"):
        MomentAccumulator.from_checkpoint(*load_checkpoint_bytes(data, MomentAccumulator._FORMAT, 4))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 30))), max_size=120),
       st.sampled_from(["one", "many"]))
def test_auto_window_shortens_exactly_as_the_alphabet_grows(events, how):
    events = [(k, None if x is None else f"s{x}") for k, x in events]
    auto = replay(events, MomentAccumulator(window="auto", track_heads=True), how)
    n = auto.n
    L = auto.current_window
    assert L == (7 if n <= 2 else 5 if n == 3 else 4 if n <= 5 else 3 if n <= 11 else 2)
    fixed = replay(events, MomentAccumulator(window=L, track_heads=True), how)
    assert auto.windows() == fixed.windows() and auto._tails == fixed._tails
    assert auto._heads == fixed._heads and auto.n_triples == fixed.n_triples


def test_auto_merges_keep_the_shorter_window_and_large_alphabets_count_triples():
    small = MomentAccumulator(window="auto")
    small.learn_many(list("abab"), key=1)
    large = MomentAccumulator(window="auto")
    large.learn_many([f"w{i % 40}" for i in range(100)], key=2)
    assert (small.current_window, large.current_window) == (7, 2)
    merged = small + large
    assert merged.current_window == 2
    fixed = MomentAccumulator(window=2)
    fixed.learn_many(list("abab"), key=1)
    fixed.learn_many([f"w{i % 40}" for i in range(100)], key=2)
    assert merged.windows() == fixed.windows()
    words = MomentAccumulator(window="auto")
    words.learn_many([f"w{i}" for i in range(300)])
    plain = MomentAccumulator()
    plain.learn_many([f"w{i}" for i in range(300)])
    assert words.current_window == 1 and words.triples() == plain.triples()


def test_windows_refuse_what_they_cannot_hold():
    for bad in (0, 11, "long", 2.0, True):
        with pytest.raises(ValueError, match="window must be"):
            MomentAccumulator(window=bad)
    with pytest.raises(ValueError, match="holds at most 511 symbols"):
        MomentAccumulator(n_symbols=600, window=3)
    with pytest.raises(ValueError, match="holds at most 511"):
        MomentAccumulator(max_symbols=1000, window=3)
    # sequences mode counts one gram a sequence: "auto" counts triples, whatever the alphabet,
    # so that sequences shorter than 2L + 1 (the paper's triples) are not dropped
    seq = MomentAccumulator(window="auto", mode="sequences")
    seq.learn_many("abcde", key="k")
    assert seq.current_window == 1 and seq.n_triples == 1.0
    fixed = MomentAccumulator(n_symbols=4, window="auto", mode="sequences")
    fixed.learn_many([0, 1, 2], key="k")
    assert fixed.current_window == 1 and fixed.n_triples == 1.0
    assert MomentAccumulator(n_symbols=4, window=4, mode="sequences").current_window == 4
    acc = MomentAccumulator(window=3)
    acc.learn_many([f"s{i}" for i in range(511)], key="k")
    before = (acc.windows(), dict(acc._tails), acc.symbols)
    with pytest.raises(ValueError, match="holds at most 511 symbols"):
        acc.learn_one("new", key="k")
    with pytest.raises(ValueError, match="holds at most 511 symbols"):
        acc.learn_many(["s1", "new"], key="k")
    assert (acc.windows(), dict(acc._tails), acc.symbols) == before


def test_memory_follows_the_distinct_grams():
    rng = np.random.default_rng(0)
    acc = MomentAccumulator(n_symbols=20, window=3)  # 20⁷ = 1.3·10⁹ possible grams
    acc.learn_many(rng.integers(0, 20, 20_000))
    g = acc.windows()
    assert g.nnz <= g.total == 20_000 - 4  # centres 2 .. T - 3 of the open stream
    assert acc.memory_bytes() < 40 * 20_000

"""MomentAccumulator on large alphabets: sparse counts, alphabet cap, all-or-nothing, memory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamspec.streaming.accumulator as accmod
import streamspec.streaming.count_buffer as bufmod
import streamspec.streaming.count_kernels as kernmod
from streamspec import CheckpointError, MomentAccumulator
from streamspec.core.alphabet import Alphabet
from streamspec.core.checkpoint import dump_checkpoint, load_checkpoint_bytes
from streamspec.core.triples import DenseTooLarge, Triples
from streamspec.streaming.accumulator import OTHER

BIG = 3000
big_streams_st = st.dictionaries(
    st.sampled_from(["a", "b", None, 7]),
    st.lists(st.integers(0, BIG), max_size=60),
    max_size=4,
)


def brute(streams: dict, mode: str = "sliding") -> Counter:
    """Counter of label triples (x1, x2, x3)."""
    out: Counter = Counter()
    for seq in streams.values():
        stop = len(seq) - 2 if mode == "sliding" else min(1, len(seq) - 2)
        for t in range(stop):
            out[seq[t], seq[t + 1], seq[t + 2]] += 1
    return out


def as_counter(acc: MomentAccumulator) -> Counter:
    t = acc.triples()
    labels = acc.symbols
    return Counter({(labels[a], labels[b], labels[c]): w
                    for a, b, c, w in zip(t.x1.tolist(), t.x2.tolist(), t.x3.tolist(),
                                          t.weights.tolist(), strict=True)})


def state(acc: MomentAccumulator) -> tuple:
    """Everything observable of an accumulator (reading flushes buffers, which changes nothing)."""
    t = acc.triples()
    return (acc.symbols, dict(acc._tails), dict(acc._heads), t.n, t.codes.tolist(),
            t.weights.tolist(), acc.n_triples)


@settings(max_examples=60, deadline=None)
@given(big_streams_st, st.sampled_from(["sliding", "sequences"]), st.data())
def test_large_growing_alphabet_matches_brute_force(streams, mode, data):
    how = data.draw(st.sampled_from(["one", "many", "mixed"]))
    acc = MomentAccumulator(mode=mode, window=1)
    for key, seq in streams.items():
        if how == "one":
            for x in seq:
                acc.learn_one(x, key=key)
        elif how == "many":
            acc.learn_many(seq, key=key)
        else:
            cut = data.draw(st.integers(0, len(seq)))
            for x in seq[:cut]:
                acc.learn_one(x, key=key)
            acc.learn_many(np.asarray(seq[cut:], dtype=np.int64), key=key)
    expected = brute(streams, mode)
    assert as_counter(acc) == expected
    assert acc.n_triples == sum(expected.values())
    # labels get indices in order of first appearance
    order = list(dict.fromkeys(x for seq in streams.values() for x in seq))
    assert acc.symbols == order


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, BIG), min_size=3, max_size=40), st.integers(0, 40))
def test_large_merge_and_concat_match_one_accumulator(seq, cut):
    whole = MomentAccumulator(track_heads=True, window=1)
    whole.learn_many(seq, key="s")
    left, right = MomentAccumulator(track_heads=True, window=1), MomentAccumulator(track_heads=True, window=1)
    left.learn_many(seq[:cut], key="s")
    right.learn_many(seq[cut:], key="s")
    assert as_counter(left.concat(right)) == as_counter(whole) == brute({0: seq})
    other = MomentAccumulator(track_heads=True, window=1)
    other.learn_many(seq[::-1], key="r")
    assert as_counter(whole + other) == brute({0: seq, 1: seq[::-1]})


def long_letters(size: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [chr(ord("a") + int(i)) for i in rng.integers(0, 26, size)]


@pytest.mark.parametrize("how", ["many", "one"])
def test_sparse_path_equals_small_alphabet_fast_path(how):
    seq = long_letters(40_000)
    small = MomentAccumulator(window=1)  # 26 symbols: bincount of compact codes
    big = MomentAccumulator(window=1)  # 3,000 earlier symbols (no triples): sorted packed codes
    for i in range(BIG):
        big.learn_one(f"rare{i}", key=("warm", i))
    for acc in (small, big):
        if how == "many":
            acc.learn_many(seq, key="s")
        else:
            for x in seq:
                acc.learn_one(x, key="s")
    assert big.n == BIG + 26 and small.n == 26
    mapping = np.array([small.symbols.index(s) if s in small.symbols else 0 for s in big.symbols])
    remapped = big.triples().remapped(mapping, small.n)
    assert remapped == small.triples()
    assert small.triples().total == len(seq) - 2


@pytest.mark.parametrize("n", [30, 60])
def test_dense_buffer_compact_and_sort_counting_kernels_agree(monkeypatch, n):
    x = np.random.default_rng(3).integers(0, n, 100_000)
    results = []
    for dense_cells, compact_cells in [(1 << 16, 1 << 22), (0, 1 << 22), (0, 0)]:
        monkeypatch.setattr(bufmod, "_DENSE_CELLS", dense_cells)
        monkeypatch.setattr(kernmod, "_COMPACT_CELLS", compact_cells)
        acc = MomentAccumulator(n, window=1)
        acc.learn_many(x[:50_000], key="a")
        for s in x[50_000:60_000].tolist():
            acc.learn_one(s, key="a")
        acc.learn_many(x[60_000:], key="a")
        results.append(acc.triples())
    assert results[0] == results[1] == results[2]
    expected = brute({0: x.tolist()})
    got = Counter({(a, b, c): w for a, b, c, w in zip(*(v.tolist() for v in results[0]._xs()),
                                                      results[0].weights.tolist(), strict=True)})
    assert got == expected


def test_growing_alphabet_in_long_runs_matches_brute_force():
    rng = np.random.default_rng(5)
    pieces = [rng.integers(0, k, 20_000) for k in (10, 20, 35, 300)]  # the alphabet grows per run
    acc = MomentAccumulator(window=1)
    for p in pieces:
        acc.learn_many(p, key="s")
        acc.learn_many(p[:100] + 1000, key="t")  # another stream, short runs
    expected = brute({"s": np.concatenate(pieces).tolist(),
                      "t": np.concatenate([p[:100] + 1000 for p in pieces]).tolist()})
    assert as_counter(acc) == expected and acc.n_triples == sum(expected.values())


def test_triples_snapshot_is_independent_and_matches_counts():
    acc = MomentAccumulator(5, window=1)
    acc.learn_many([0, 1, 2, 3, 4, 0, 1])
    t = acc.triples()
    codes, weights = t.codes.copy(), t.weights.copy()
    acc.learn_many([2, 3, 4, 4, 4])
    assert np.array_equal(t.codes, codes) and np.array_equal(t.weights, weights)
    np.testing.assert_array_equal(acc.triples().to_dense(), acc.counts())
    assert acc.triples().total == 10


def test_dense_views_refuse_large_alphabets_but_sparse_ones_work():
    acc = MomentAccumulator(400, window=1)  # 400³ = 6.4e7 cells > DENSE_LIMIT
    acc.learn_many(np.arange(400).repeat(2))
    for view in ("counts", "c3", "probabilities", "P3x1"):
        with pytest.raises(DenseTooLarge, match=r"\(400, 400, 400\)"):
            attr = getattr(acc, view)
            attr() if callable(attr) else None
    assert acc.P1.shape == (400,) and abs(acc.P1.sum() - 1) < 1e-12
    assert acc.c21.shape == (400, 400) and acc.c21.sum() == 798
    assert acc.triples().nnz == 798


def test_forgetting_on_a_large_alphabet():
    rng = np.random.default_rng(1)
    seq = rng.integers(0, 2000, 5000).tolist()
    g = 0.999
    acc = MomentAccumulator(forgetting=g, window=1)
    acc.learn_many(seq[:2000])
    for x in seq[2000:]:
        acc.learn_one(x)
    T = len(seq) - 2
    expected: Counter = Counter()
    for t in range(T):
        expected[seq[t], seq[t + 1], seq[t + 2]] += g ** (T - 1 - t)
    got = as_counter(acc)
    assert got.keys() == expected.keys()
    np.testing.assert_allclose([got[k] for k in expected], list(expected.values()), rtol=1e-9)


# ---------------------------------------------------------------------------- alphabet cap


def test_max_symbols_counts_new_labels_as_other():
    acc = MomentAccumulator(max_symbols=4, window=1)
    got = [acc.learn_one(w) for w in "abcdefa"]
    assert got == [0, 1, 2, 3, 3, 3, 0]
    assert acc.symbols == ["a", "b", "c", OTHER] and acc.n == 4
    many = MomentAccumulator(max_symbols=4, window=1)
    many.learn_many(list("abcdefa"))
    assert many.symbols == acc.symbols and many.triples() == acc.triples()
    assert as_counter(acc) == brute({0: ["a", "b", "c", OTHER, OTHER, OTHER, "a"]})


def test_max_symbols_bounds_memory_and_merges():
    a, b = MomentAccumulator(max_symbols=100, window=1), MomentAccumulator(max_symbols=100, window=1)
    a.learn_many([f"w{i}" for i in range(10_000)])
    for i in range(10_000):
        b.learn_one(f"v{i}", key=i % 3)
    assert a.n == b.n == 100 and a.symbols[-1] == OTHER and a.symbols[98] == "w98"
    assert a.triples().nnz <= 100**3
    merged = a + b
    assert merged.n == 100 and merged.n_triples == a.n_triples + b.n_triples
    assert merged.symbols[:99] == a.symbols[:99]
    with pytest.raises(ValueError, match="max_symbols"):
        MomentAccumulator(n_symbols=5, max_symbols=3, window=1)
    with pytest.raises(ValueError, match="max_symbols"):
        MomentAccumulator(max_symbols=0, window=1)
    with pytest.raises(ValueError, match="max_symbols=100"):
        a.merge(MomentAccumulator(max_symbols=50, window=1))


def test_max_symbols_survives_a_checkpoint(tmp_path):
    acc = MomentAccumulator(max_symbols=3, window=1)
    acc.learn_many(list("abcdcd"), key="k")
    acc.save(tmp_path / "a.npz")
    back = MomentAccumulator.load(tmp_path / "a.npz")
    assert back.max_symbols == 3 and back.symbols == ["a", "b", OTHER]
    assert back.learn_one("zzz", key="k") == 2 and acc.learn_one("zzz", key="k") == 2
    assert back.triples() == acc.triples()


# ---------------------------------------------------------------------------- all-or-nothing


def fail_on(monkeypatch, target, name: str, after: int = 0) -> None:
    """Make ``target.name`` raise MemoryError from its ``after+1``-th call on."""
    real = getattr(target, name)
    calls = [0]

    def failing(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise MemoryError("simulated")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, failing)


def test_learn_many_is_all_or_nothing_when_counting_fails(monkeypatch):
    acc = MomentAccumulator(track_heads=True, window=1)
    acc.learn_many(list(range(50)), key="s")
    for x in (3, 4, 5):
        acc.learn_one(x, key="t")  # some buffered triples
    before = acc.copy()
    fail_on(monkeypatch, bufmod, "merge_sorted")
    new = np.arange(100, 100 + 100_000) % 5000  # new labels, a long run: merged at once
    with pytest.raises(MemoryError):
        acc.learn_many(new, key="t")
    monkeypatch.undo()
    assert state(acc) == state(before)
    for a in (acc, before):  # and it carries on exactly
        a.learn_many(new, key="t")
    assert state(acc) == state(before)


def test_learn_many_is_all_or_nothing_when_the_alphabet_cannot_grow(monkeypatch):
    acc = MomentAccumulator(window=1)
    acc.learn_many(["a", "b", "c"], key="s")
    before = acc.copy()
    fail_on(monkeypatch, Alphabet, "_add", after=2)  # two new labels, then MemoryError
    with pytest.raises(MemoryError):
        acc.learn_many(["d", "e", ("t",), "g"], key="s")  # objects: one label at a time
    with pytest.raises(MemoryError):
        acc.learn_one("d", key="s")
    assert state(acc) == state(before)
    real = Alphabet._add_many

    def half_then_fail(self, labels):  # the bulk growth step adds some labels, then fails
        real(self, labels[: len(labels) // 2])
        raise MemoryError("simulated")

    monkeypatch.setattr(Alphabet, "_add_many", half_then_fail)
    with pytest.raises(MemoryError):
        acc.learn_many(["d", "e", "f", "g"] * 100, key="s")  # strings: vectorised
    with pytest.raises(MemoryError):
        acc.learn_many(np.arange(1000), key="s")  # the integer-range path
    assert state(acc) == state(before) and acc.symbols == ["a", "b", "c"]
    monkeypatch.undo()
    acc.learn_many(["d", "e"], key="s")
    assert acc.symbols == ["a", "b", "c", "d", "e"] and acc.n_triples == 3


def test_learn_one_is_all_or_nothing_at_the_flush(monkeypatch):
    acc, ref = MomentAccumulator(window=1), MomentAccumulator(window=1)
    xs = [f"w{i}" for i in range(accmod.FLUSH_AT + 10)]  # all new labels
    for x in xs[:10]:  # the first two symbols of a stream buffer no triple
        acc.learn_one(x, key="k")
        ref.learn_one(x, key="k")
    fail_on(monkeypatch, bufmod, "to_packed")
    done = 10
    with pytest.raises(MemoryError):
        for x in xs[10:]:
            acc.learn_one(x, key="k")
            done += 1
    monkeypatch.undo()
    for x in xs[10:done]:
        ref.learn_one(x, key="k")
    assert done < len(xs) and state(acc) == state(ref)
    assert acc.symbols == ref.symbols and len(acc.symbols) == done  # the failed label is gone


def test_bad_symbol_in_a_large_alphabet_keeps_state():
    acc = MomentAccumulator(window=1)
    acc.learn_many(list(range(2000)), key="s")
    before = acc.copy()
    with pytest.raises(ValueError, match="not hashable"):
        acc.learn_many([5000, 5001, [1, 2]], key="s")
    with pytest.raises(ValueError, match="not hashable"):
        acc.learn_one({"a": 1}, key="s")
    assert state(acc) == state(before)


# ---------------------------------------------------------------------------- checkpoints


def test_version_1_dense_checkpoints_still_load():
    c3 = np.zeros((3, 3, 3))
    c3[1, 2, 0] = 2.0  # x1=0, x2=1, x3=2
    c3[2, 0, 1] = 1.0
    header = {"n_symbols": None, "mode": "sliding", "forgetting": 1.0, "labels": ["a", "b", "c"],
              "keys": ["s"], "track_heads": False, "heads": []}
    arrays = {"c3": c3, "n_triples": np.array(3.0), "tail_a": np.array([1]), "tail_b": np.array([2])}
    data = dump_checkpoint(MomentAccumulator._FORMAT, 1, header, arrays)
    h, a = load_checkpoint_bytes(data, MomentAccumulator._FORMAT, MomentAccumulator._VERSION)
    acc = MomentAccumulator.from_checkpoint(h, a)
    np.testing.assert_array_equal(acc.counts(), c3)
    assert acc.n_triples == 3 and acc.symbols == ["a", "b", "c"] and acc.keys == ["s"]
    acc.learn_one("a", key="s")  # continues "b c" -> "b c a"
    assert acc.counts()[2, 0, 1] == 2


def v2_parts():
    acc = MomentAccumulator(window=1)
    acc.learn_many(list("abcabd"), key="s")
    _, _, header, arrays = acc.to_checkpoint()
    return header, {k: np.array(v) for k, v in arrays.items()}


@pytest.mark.parametrize("damage, message", [
    (lambda h, a: a.update(codes=a["codes"][::-1].copy()), "not sorted"),
    (lambda h, a: a.update(codes=a["codes"] + (7 << 42)), "out of range"),
    (lambda h, a: a.update(weights=-a["weights"]), "negative"),
    (lambda h, a: a.update(weights=a["weights"][:-1]), "shape"),
    (lambda h, a: a.update(tails=np.array([[0, 99]])), "tail"),
    (lambda h, a: a.update(tails=np.array([[-1, -2]])), "out of range"),  # a pad at window 1
    (lambda h, a: a.update(tails=np.array([[0, -1]])), "gap"),
    (lambda h, a: a.update(tails=np.array([[1, 2], [0, 1]])), "tails of shape"),
    (lambda h, a: h.update(heads=[["s", [0, 9], False]]), "head"),
    (lambda h, a: h.update(labels=["a", "a", "b", "c"]), "distinct"),
    (lambda h, a: a.pop("codes"), "no counts"),
    (lambda h, a: a.update(n_triples=np.array(-1.0)), "n_triples"),
])
def test_from_checkpoint_validates(damage, message):
    header, arrays = v2_parts()
    MomentAccumulator.from_checkpoint(header, arrays)  # undamaged: fine
    damage(header, arrays)
    with pytest.raises(CheckpointError, match=message):
        MomentAccumulator.from_checkpoint(header, arrays, source="x.npz")


def test_labels_that_cannot_be_read_back_are_never_written(tmp_path):
    acc = MomentAccumulator(window=1)
    acc.learn_many([object()])
    with pytest.raises(CheckpointError, match="cannot store"):
        acc.save(tmp_path / "a.npz")
    assert not (tmp_path / "a.npz").exists()


def test_memory_grows_with_distinct_triples_not_alphabet_cubed():
    acc = MomentAccumulator(100_000, window=1)
    acc.learn_many(np.arange(100_000))
    size = acc.memory_bytes()
    assert 16 * 99_998 <= size < 10 * 16 * 100_000  # far below 8e15 bytes of n³ float64
    before = acc.memory_bytes()
    acc.learn_many(np.arange(100_000))  # the same triples again (plus two at the join)
    assert acc.memory_bytes() < before + 1000
    assert acc.triples().nnz == 100_000 and acc.n_triples == 2 * 100_000 - 2


# ---------------------------------------------------------------------------- memory limit


SCRIPT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, resource.RLIM_INFINITY))
    import numpy as np
    from streamspec import MomentAccumulator
    rng = np.random.default_rng(0)
    n = 6000
    acc = MomentAccumulator(window=1)
    words = [f"w{i}" for i in range(n)]
    for t in range(30_000):  # learn_one, 5 interleaved keyed streams
        acc.learn_one(words[int(rng.integers(0, n))], key=t % 5)
    for k in range(3):  # learn_many, keyed
        acc.learn_many(rng.integers(0, n, 100_000), key=("many", k))
    fixed = MomentAccumulator(n_symbols=n, window=1)
    fixed.learn_many(rng.integers(0, n, 200_000), key="a")
    assert acc.n >= 5000 and fixed.n == n
    for a in (acc, fixed):
        a.save(sys.argv[1])
        b = MomentAccumulator.load(sys.argv[1])
        assert b.triples() == a.triples(), "counts differ after load"
        assert b.symbols == a.symbols and b._tails == a._tails and b.n_triples == a.n_triples
        for x in (0, 1, 2):
            a.learn_one(x, key="a")
            b.learn_one(x, key="a")
        assert b.triples() == a.triples()
    try:
        acc.counts()
    except ValueError as exc:
        print("dense refused:", type(exc).__name__)
    print("ok", acc.n, acc.triples().nnz)
""")


def test_large_alphabet_under_a_memory_limit(tmp_path):
    # the dense code needed (6000+)³ float64 = 1.7 TB of counts; 1.5 GB of address space here
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "big.npz")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dense refused: DenseTooLarge" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("ok ")


def test_triples_remapping_round_trip_helper_is_exact():
    # the remapping the fast-path test relies on maps codes, not just totals
    t = Triples.from_arrays(5, x1=[4, 0], x2=[3, 1], x3=[2, 2])
    back = t.remapped(np.array([0, 1, 2, 3, 4]), 5)
    assert back == t and t.remapped(np.array([1, 0, 2, 3, 4]), 5) != t

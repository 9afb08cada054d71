"""Windows of symbols by default (issue 19): ``window="auto"`` everywhere, and what it resolves to."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MEstimator, MomentAccumulator
from streamspec.core import defaults
from streamspec.core.checkpoint import dump_checkpoint, load_checkpoint_bytes
from streamspec.core.hmm import HMM
from streamspec.core.triples import pack


def automaton(K: int = 8, n: int = 4, seed: int = 3) -> HMM:
    """A sparse 8-state HMM over 4 symbols: each state 3 successors (one on a cycle), 2 symbols."""
    rng = np.random.default_rng(seed)
    T, O = np.zeros((K, K)), np.zeros((n, K))
    for h in range(K):
        others = rng.choice(np.setdiff1d(np.arange(K), [(h + 1) % K]), size=2, replace=False)
        T[np.concatenate([[(h + 1) % K], others]), h] = rng.dirichlet(np.ones(3))
        O[rng.choice(n, size=2, replace=False), h] = rng.dirichlet(np.ones(2))
    return HMM(T, O)


def counted(acc: MomentAccumulator, truth: HMM, size: int, seed: int) -> MomentAccumulator:
    for k, s in enumerate(truth.sample_many(size // 20, 20, random_state=seed)):
        acc.learn_many(s, key=k % 8)
        acc.end(k % 8)
    return acc


def test_the_default_is_auto_in_every_place_that_builds_counts():
    from connectors.config import DaemonConfig
    from connectors.kafka.learning import new_accumulator
    from streamspec import SpectralHMM

    assert defaults.COUNT_WINDOW == "auto"
    assert MomentAccumulator().window == "auto"
    assert SpectralHMM().count_window == "auto" and SpectralHMM().accumulator.window == "auto"
    assert DaemonConfig(topic="t").window == "auto"
    assert new_accumulator(DaemonConfig(topic="t")).window == "auto"
    # a fixed alphabet resolves at once: 4, 3, 2 for 4, 8, 20 symbols, 1 from 128 on
    assert [MomentAccumulator(n_symbols=n).current_window for n in (4, 8, 20, 127, 128, 5000)] == [
        4, 3, 2, 2, 1, 1]


def test_a_default_model_on_four_symbols_of_eight_states_uses_windows_and_predicts_better():
    truth = automaton()
    test = list(truth.sample_many(300, 20, random_state=99))
    default = counted(MomentAccumulator(n_symbols=4), truth, 60_000, 1)
    triples = counted(MomentAccumulator(n_symbols=4, window=1), truth, 60_000, 1)
    assert default.current_window == 4 and triples.current_window == 1
    # the same triples underneath: the windows only add to them
    assert default.triples() == triples.triples()
    wide, plain = MEstimator().fit(default), MEstimator().fit(triples)
    assert wide.backoff.hmm.n_states > 4 >= plain.backoff.hmm.n_states
    gain = plain.log_loss(test) - wide.log_loss(test)
    assert gain > 0.005, (plain.log_loss(test), wide.log_loss(test))


def test_a_word_sized_alphabet_ends_at_triples_with_the_same_counts():
    rng = np.random.default_rng(4)
    words = [f"w{int(i)}" for i in rng.zipf(1.3, 20_000) % 3000]
    auto, plain = MomentAccumulator(), MomentAccumulator(window=1)
    for t, w in enumerate(words[:10_000]):  # one at a time, three interleaved streams
        for acc in (auto, plain):
            acc.learn_one(w, key=t % 3)
    assert auto.n >= 128 and auto.current_window == 1 and auto.window == "auto"
    assert auto.triples() == plain.triples() and auto.n_triples == plain.n_triples
    assert auto.symbols == plain.symbols
    for acc in (auto, plain):  # they go on alike: the open streams' tails were kept
        acc.learn_many(words[10_000:], key=1)
        acc.end(2)
    assert auto.triples() == plain.triples() and auto.starts() == plain.starts()
    # the same from a checkpoint
    back = MomentAccumulator.from_checkpoint(*auto.to_checkpoint()[2:])
    assert back.window == "auto" and back.current_window == 1 and back.triples() == plain.triples()


def test_a_growing_small_alphabet_keeps_every_count_as_its_window_shrinks():
    text = "abcd" * 50 + "efghijklmnopqrst" * 20  # 4 symbols (L = 4), then 20 (L = 2)
    auto, two = MomentAccumulator(), MomentAccumulator(window=2)
    for acc in (auto, two):
        for t, c in enumerate(text):
            acc.learn_one(c, key=t % 2)
    assert auto.current_window == 2 and auto.windows() == two.windows()
    for acc in (auto, two):
        acc.end(0)
        acc.end(1)
    assert auto.windows() == two.windows()


def _old_triples_checkpoint() -> MomentAccumulator:
    """A version-3 file, from before windows: triples of "a b c" twice, stream "s" open at "b c"."""
    header = {"n_symbols": None, "mode": "sliding", "forgetting": 1.0, "labels": ["a", "b", "c"],
              "keys": ["s"], "track_heads": False, "heads": [], "max_symbols": None}
    arrays = {"codes": pack(np.array([0]), np.array([1]), np.array([2])), "weights": np.array([2.0]),
              "n_triples": np.array(2.0), "tail_a": np.array([1]), "tail_b": np.array([2])}
    data = dump_checkpoint(MomentAccumulator._FORMAT, 3, header, arrays)
    return MomentAccumulator.from_checkpoint(
        *load_checkpoint_bytes(data, MomentAccumulator._FORMAT, MomentAccumulator._VERSION))


def test_old_triple_checkpoints_merge_with_default_counts_at_window_one():
    from connectors.state import merge_accumulators

    old = _old_triples_checkpoint()
    assert old.window == 1 and old.current_window == 1
    new = MomentAccumulator()
    new.learn_many("abcdabcadbca", key="t")  # open: its last grams are not counted yet at L = 4
    assert new.current_window == 4
    reference = _old_triples_checkpoint()
    reference.learn_many("abcdabcadbca", key="t")
    for merged in (old.merge(new), new.merge(old), merge_accumulators([new, old]),
                   merge_accumulators([old, new])):
        assert merged.window == 1 and merged.current_window == 1
        assert merged.triples() == reference.triples()  # nothing lost, the open stream's too
        merged.learn_many("da", key="t")  # and both streams go on
        merged.learn_one("a", key="s")
    more = reference.copy()
    more.learn_many("da", key="t")
    more.learn_one("a", key="s")
    assert merged.triples() == more.triples()


def test_different_windows_merge_at_the_shorter_exactly_and_sequences_refuse():
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 3, 500), rng.integers(0, 3, 400)
    three, two = MomentAccumulator(n_symbols=3, window=3), MomentAccumulator(n_symbols=3, window=2)
    three.learn_many(x, key="x")
    two.learn_many(y, key="y")
    reference = MomentAccumulator(n_symbols=3, window=2)
    reference.learn_many(x, key="x")
    reference.learn_many(y, key="y")
    merged = three.merge(two)
    assert merged.window == 2 and merged.windows() == reference.windows()
    assert two.merge(three).windows() == reference.windows()
    with pytest.raises(ValueError, match="mode 'sequences'.*count both at one window"):
        MomentAccumulator(n_symbols=3, mode="sequences", window=2).merge(
            MomentAccumulator(n_symbols=3, mode="sequences", window=1))


def test_auto_merged_with_a_longer_integer_window_keeps_the_shorter_as_an_integer():
    a = MomentAccumulator()  # 60 labels: auto is L = 2
    a.learn_many([f"w{i % 60}" for i in range(300)], key=1)
    b = MomentAccumulator(window=3)
    b.learn_many([f"v{i % 100}" for i in range(300)], key=2)
    merged = a.merge(b)  # 160 symbols: auto alone would go to L = 1, the integer 2 stays
    assert (a.current_window, b.current_window) == (2, 3)
    assert merged.window == 2 and merged.current_window == 2 and merged.n == 160
    two = MomentAccumulator(window=2)  # b's stream counted at 2 from the start
    two.learn_many([f"v{i % 100}" for i in range(300)], key=2)
    # one gram more than b's marginal: the one window 2 completes on the open stream's end
    assert two.windows().total == b.windows().marginal(2).total + 1
    assert merged.windows().total == a.windows().total + two.windows().total

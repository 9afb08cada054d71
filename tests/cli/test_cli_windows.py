"""``--window``: learn, consume's settings and inspect count windows of symbols (issue 19)."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pytest

from streamspec.cli import main
from streamspec.cli.consume import config_from_args
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator


def ring_text(n_symbols: int = 20_000, seed: int = 1) -> str:
    """A 6-state ring over the 4 letters ACGT (each state emits two of them)."""
    K, n = 6, 4
    T = 0.3 * np.eye(K) + 0.7 * np.roll(np.eye(K), 1, axis=0)
    O = np.zeros((n, K))
    for j in range(K):
        O[j % n, j], O[(j + 1 + j // n) % n, j] = 0.8, 0.2
    x = HMM(T=T, O=O).sample(n_symbols, random_state=seed)
    return "".join("ACGT"[i] for i in x)


@pytest.fixture
def dna(tmp_path):
    path = tmp_path / "dna.txt"
    path.write_text(ring_text())
    return path


def test_learn_window_fits_more_states_than_symbols_and_inspect_shows_it(dna, tmp_path, capsys):
    model, counts = tmp_path / "m.ckpt", tmp_path / "c.ckpt"
    assert main(["learn", str(dna), "--window", "2", "--states", "6", "--out", str(model),
                 "--counts", str(counts)]) == 0
    acc = MomentAccumulator.load(counts)
    assert acc.window == 2 and acc.current_window == 2 and acc.n == 4
    assert acc.windows().total == acc.n_triples  # one gram per counted triple
    hmm = HiddenMarkovModel.load(str(model) + ".hmm")
    assert hmm.n_states == 6 and hmm.n_symbols == 4
    assert ObservableOperatorModel.load(model).metadata["count_window"] == "2"
    capsys.readouterr()
    assert main(["inspect", str(counts), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["window"] == 2 and info["count_window"] == 2
    assert info["distinct_grams"] == acc.windows().nnz
    assert len(info["supported_ranks"]) == 2 and info["rank"] == max(info["supported_ranks"])
    assert info["supported_ranks"][1] > 4  # pairs of symbols tell more than 4 states apart
    assert main(["inspect", str(model), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["count_window"] == 2


def test_learn_window_auto_is_the_default_and_window_one_counts_triples(dna, tmp_path, capsys):
    auto, plain = tmp_path / "auto.ckpt", tmp_path / "plain.ckpt"
    assert main(["learn", str(dna), "--counts", str(auto)]) == 0  # the default: "auto"
    assert main(["learn", str(dna), "--window", "1", "--counts", str(plain)]) == 0
    a, p = MomentAccumulator.load(auto), MomentAccumulator.load(plain)
    assert a.window == "auto" and a.current_window == 4  # 4^4 >= 128 > 4^3
    assert p.window == 1 and p.current_window == 1
    # the triples are a marginal of the windows, but for those centred on the last L - 1 = 3
    # symbols of the file's stream: it stays open (a later learn --state goes on with it)
    assert a.n_triples == p.n_triples - 3 and a.triples().nnz == p.triples().nnz
    capsys.readouterr()
    assert main(["inspect", str(plain), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["count_window"] == 1 and "distinct_grams" not in info and info["rank"] <= 4


@pytest.mark.parametrize("flags, message", [
    (["--window", "11"], "window must be an integer in 1..10"),
    (["--window", "0"], "window must be an integer in 1..10"),
    (["--window", "1", "--states", "6"], "--window auto"),  # more states than symbols, as triples
])
def test_learn_refuses_bad_windows_in_one_line(dna, tmp_path, capsys, flags, message):
    out = tmp_path / "m.ckpt"
    try:
        code = main(["learn", str(dna), "--out", str(out), *flags])
    except SystemExit as exc:  # argparse's own: a usage and one error line
        code = exc.code
    err = capsys.readouterr().err
    assert code != 0 and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_resumed_state_keeps_its_window(dna, tmp_path, caplog):
    state = tmp_path / "s.ckpt"
    assert main(["learn", str(dna), "--window", "3", "--state", str(state), "--no-fit"]) == 0
    more = tmp_path / "more.txt"
    more.write_text(ring_text(2_000, seed=2))
    with caplog.at_level(logging.WARNING, logger="streamspec.learn"):
        assert main(["learn", str(dna), str(more), "--window", "2", "--state", str(state),
                     "--no-fit"]) == 0
    assert "event=window-ignored" in caplog.text
    from connectors.state import SourceState

    acc = SourceState.load(state).acc
    assert acc.window == 3 and acc.current_window == 3
    assert acc.n_triples == pytest.approx(len(ring_text()) - 2 + 2_000 - 2)


def test_consume_and_the_daemon_config_take_the_window(tmp_path):
    from connectors.config import DaemonConfig
    from connectors.kafka.learning import new_accumulator
    from connectors.state import merge_accumulators
    from streamspec.cli.consume import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    cfg = config_from_args(parser.parse_args(["consume", "--topic", "t", "--window", "auto"]))
    assert cfg.window == "auto"
    acc = new_accumulator(cfg)
    assert acc.window == "auto" and acc.current_window == 7  # nothing seen yet: the longest
    toml = tmp_path / "d.toml"
    toml.write_text('topic = "t"\nwindow = 3\n')
    cfg = config_from_args(parser.parse_args(["consume", "--config", str(toml)]))
    a, b = new_accumulator(cfg), new_accumulator(cfg)
    a.learn_many("ACGTTGCA", key=1)
    b.learn_many("TTGCAACG", key=2)
    merged = merge_accumulators([a, b])
    assert merged.current_window == 3 and merged.windows().total == a.n_triples + b.n_triples
    default = new_accumulator(DaemonConfig(topic="t"))  # the default: "auto"
    assert default.window == "auto" and default.current_window == 7
    for bad in (0, 11, "two", True):
        with pytest.raises(ValueError, match="window must be"):
            DaemonConfig(topic="t", window=bad)
    # sequences mode cannot reduce a growing alphabet's windows exactly: "auto" counts triples
    assert new_accumulator(DaemonConfig(topic="t", mode="sequences")).current_window == 1


def test_the_daemon_s_worker_process_refits_over_the_windows():
    from connectors.process_fit import ProcessMEstimator, shutdown_worker, sparse_counts
    from streamspec.core.windows import WindowCounts

    acc = MomentAccumulator(window=2)
    acc.learn_many(ring_text(20_000), key="dna")
    counts, labels = sparse_counts(acc)
    assert isinstance(counts, WindowCounts) and counts == acc.windows() and len(labels) == 4
    assert not isinstance(sparse_counts(_plain("ACGTACG"))[0], WindowCounts)  # triples stay
    try:
        model = ProcessMEstimator().fit(acc)
    finally:
        shutdown_worker()
    assert model.backoff.hmm.n_states > 4 and model.symbols == acc.symbols


def _plain(text: str) -> MomentAccumulator:
    acc = MomentAccumulator(window=1)
    acc.learn_many(text)
    return acc


def test_learn_by_chunks_counts_the_auto_window_exactly(dna, tmp_path, caplog):
    # the default (auto) by chunks, with --workers or without: the first pass counts triples,
    # a 4-symbol alphabet is then counted again with windows of 4, every chunk with the alphabet
    serial = tmp_path / "serial.ckpt"
    assert main(["learn", str(dna), "--state", str(serial), "--no-fit"]) == 0  # record by record
    from connectors.state import SourceState

    want = SourceState.load(serial).acc
    assert want.window == "auto" and want.current_window == 4
    for flags in ([], ["--workers", "2", "--chunk-mb", "1"]):
        out = tmp_path / "chunks.ckpt"
        with caplog.at_level(logging.INFO, logger="streamspec.learn"):
            assert main(["learn", str(dna), "--counts", str(out), "--no-fit", *flags]) == 0
        assert "event=window-pass symbols=4 window=4" in caplog.text
        got = MomentAccumulator.load(out)
        assert got.window == "auto" and got.current_window == 4 and got.symbols == want.symbols
        assert got.windows() == want.windows() and got.n_triples == want.n_triples
        caplog.clear()


@pytest.mark.parametrize("L", [2, 3])
def test_learn_by_chunks_counts_an_explicit_window_exactly(dna, tmp_path, caplog, L):
    # --window L >= 2 by chunks (--workers, or a plain one-pass learn): triples first for the
    # alphabet, then the windows, equal to counting record by record
    serial = tmp_path / "serial.ckpt"
    assert main(["learn", str(dna), "--window", str(L), "--state", str(serial), "--no-fit"]) == 0
    from connectors.state import SourceState

    want = SourceState.load(serial).acc
    assert want.window == L and want.current_window == L
    for flags in ([], ["--workers", "2", "--chunk-mb", "1"]):
        out = tmp_path / "chunks.ckpt"
        with caplog.at_level(logging.INFO, logger="streamspec.learn"):
            assert main(["learn", str(dna), "--window", str(L), "--counts", str(out), "--no-fit",
                         *flags]) == 0
        assert f"event=window-pass symbols=4 window={L}" in caplog.text
        got = MomentAccumulator.load(out)
        assert got.window == L and got.current_window == L and got.symbols == want.symbols
        assert got.windows() == want.windows() and got.n_triples == want.n_triples
        caplog.clear()


def test_learn_by_chunks_keeps_triples_for_a_large_alphabet(tmp_path, caplog):
    rng = np.random.default_rng(3)
    words = tmp_path / "words.txt"
    words.write_text("\n".join(" ".join(f"w{int(i)}" for i in rng.zipf(1.5, 12) % 400)
                               for _ in range(2_000)) + "\n")
    auto, plain = tmp_path / "auto.ckpt", tmp_path / "plain.ckpt"
    with caplog.at_level(logging.INFO, logger="streamspec.learn"):
        assert main(["learn", str(words), "--encoding", "tokens", "--workers", "2", "--counts",
                     str(auto), "--no-fit"]) == 0
    assert "event=window-pass" not in caplog.text  # one pass: auto is L = 1 here
    assert main(["learn", str(words), "--encoding", "tokens", "--window", "1", "--workers", "2",
                 "--counts", str(plain),
                 "--no-fit"]) == 0
    a, p = MomentAccumulator.load(auto), MomentAccumulator.load(plain)
    assert a.n >= 128 and a.window == "auto" and a.current_window == 1 and p.window == 1
    assert a.triples() == p.triples() and a.symbols == p.symbols

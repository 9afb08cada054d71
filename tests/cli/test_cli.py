"""The ``consume``, ``learn``, ``predict`` and ``inspect`` commands (no broker needed).

``learn`` is also the files connector's resumable runner: it is killed with
SIGKILL while following a file that is being written and rotated, and must
resume without losing or repeating a symbol.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from streamspec import cli
from streamspec.cli import main
from streamspec.cli.consume import config_from_args
from streamspec.cli.inspect import describe_checkpoint
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120


def by_label(acc: MomentAccumulator) -> dict[tuple, float]:
    c3, s = acc.counts(), acc.symbols
    return {(s[x1], s[x2], s[x3]): float(c3[x2, x3, x1])
            for x2, x3, x1 in zip(*np.nonzero(c3), strict=True)}


def token_lines(n_lines: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["red", "green", "blue", "cyan"]
    return [" ".join(words[i] for i in rng.integers(0, 4, size=rng.integers(1, 8)))
            for _ in range(n_lines)]


def direct(lines: list[str]) -> MomentAccumulator:
    acc = MomentAccumulator()
    for line in lines:
        acc.learn_many(line.split())
    return acc


def wait_until(condition, what: str, proc=None) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


# ---------------------------------------------------------------------------- help and wiring


def test_commands_are_registered_in_the_cli():
    for command in ("consume", "learn", "predict", "inspect", "decode"):
        assert (f"streamspec.cli.{command}", "register") in cli._COMMANDS


def test_building_the_parser_imports_neither_connectors_nor_kafka():
    """``streamspec --help`` must work without kafka-python: connectors load when a command runs."""
    code = ("from streamspec.cli import build_parser; build_parser(); import sys; "
            "loaded = sorted(m for m in sys.modules if m.startswith(('connectors', 'kafka'))); "
            "assert not loaded, loaded")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr


def test_the_backfill_options_show_the_defaults_of_connectors_backfill():
    """The literals the parser shows (it cannot import connectors) are the backfill's own."""
    import argparse

    import connectors.backfill as bf
    from streamspec.cli.options import CHUNK_MB, PARALLEL_MIN_MB, add_backfill_options

    assert CHUNK_MB == bf.DEFAULT_CHUNK_BYTES >> 20
    assert PARALLEL_MIN_MB == bf.PARALLEL_MIN_BYTES >> 20
    p = argparse.ArgumentParser()
    add_backfill_options(p)
    assert p.parse_args([]).chunk_mb == bf.DEFAULT_CHUNK_BYTES >> 20


def test_backfill_result_from_args_counts_and_refuses_what_it_cannot_honour(tmp_path):
    import argparse

    from connectors.backfill import backfill, serial_count
    from connectors.records import RecordFormat
    from streamspec.cli.options import add_backfill_options, backfill_result_from_args

    path = tmp_path / "t.txt"
    path.write_bytes(b"abcabcabc\n" * 50)
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--mode", default="sliding")
    add_backfill_options(p)
    acc = backfill_result_from_args(p.parse_args([str(path), "--workers", "1", "--chunk-mb", "1"]),
                                    RecordFormat()).acc
    ref = serial_count([path], RecordFormat())
    assert acc.symbols == ref.symbols and acc.n_triples == ref.n_triples > 0
    np.testing.assert_array_equal(acc.counts(), ref.counts())
    for argv, message in [(["--workers", "0"], "--workers"), (["--chunk-mb", "0"], "--chunk-mb"),
                          (["--workers", "2", "--mode", "sequences"], "sliding")]:
        with pytest.raises(ValueError, match=message):
            backfill_result_from_args(p.parse_args([str(path), *argv]), RecordFormat())
    with pytest.raises(FileNotFoundError):
        backfill([tmp_path / "missing.txt"], RecordFormat(), n_workers=1)


@pytest.mark.parametrize(
    "command, flags",
    [
        ("consume", ["--bootstrap", "--topic", "--group", "--state-dir", "--rank", "--penalty",
                     "--refit-every", "--config", "--dead-letter-topic", "--metrics-port"]),
        ("learn", ["FILE", "--out", "--state", "--follow", "--encoding", "--rank", "--states"]),
        ("predict", ["--model", "HISTORY", "--top"]),
        ("inspect", ["CKPT", "--json", "--top"]),
        ("decode", ["--model", "FILE", "--posterior", "--encoding", "MODEL.hmm"]),
    ],
)
def test_help_describes_every_command(command, flags, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for flag in flags:
        assert flag in text, f"{command} --help does not mention {flag}"
    assert "example:" in text


def test_settings_come_from_toml_then_flags(tmp_path):
    toml = tmp_path / "daemon.toml"
    toml.write_text(
        'bootstrap = "10.0.0.1:9092"\ntopic = "clicks"\nrank = 3\nrefit_every = 777\n'
        '[format]\nvalue_format = "json"\nsymbol_field = "page"\n'
    )
    import argparse

    parser = argparse.ArgumentParser()
    from streamspec.cli.consume import register

    register(parser.add_subparsers())
    args = parser.parse_args(["consume", "--config", str(toml), "--rank", "4",
                              "--symbol-field", "item", "--alphabet", "a,b,c"])
    cfg = config_from_args(args)
    assert cfg.bootstrap == "10.0.0.1:9092" and cfg.topic == "clicks"
    assert cfg.rank == 4  # the flag wins over the file
    assert cfg.refit_every == 777  # the file wins over the default
    assert cfg.format == {"value_format": "json", "symbol_field": "item"}
    assert cfg.alphabet == ("a", "b", "c")
    bad = tmp_path / "bad.toml"
    bad.write_text('topic = "t"\nrefit_evry = 5\n')
    args = parser.parse_args(["consume", "--config", str(bad)])
    with pytest.raises(ValueError, match="refit_evry"):
        config_from_args(args)


def test_consume_rejects_missing_topic(capsys):
    assert main(["consume", "--bootstrap", "127.0.0.1:1"]) == 2
    assert "no topic" in capsys.readouterr().err


# ---------------------------------------------------------------------------- learn and friends


def test_learn_predict_inspect_round_trip(tmp_path, capsys, monkeypatch):
    lines = token_lines(300, seed=1)
    data = tmp_path / "colors.txt"
    data.write_text("\n".join(lines) + "\n")
    model_path, counts_path = tmp_path / "m.ckpt", tmp_path / "c.ckpt"
    code = main(["learn", str(data), "--encoding", "tokens", "--rank", "2", "--out",
                 str(model_path), "--counts", str(counts_path), "--progress", "always"])
    assert code == 0
    err = capsys.readouterr().err
    assert "100.0%" in err  # the progress bar reached the end
    counts = MomentAccumulator.load(counts_path)
    assert by_label(counts) == by_label(direct(lines))
    model = ObservableOperatorModel.load(model_path)
    assert sorted(model.symbols) == ["blue", "cyan", "green", "red"]

    monkeypatch.setattr(sys, "stdin", io.StringIO("red green\nblue purple\n"))
    assert main(["predict", "--model", str(model_path), "--top", "2"]) == 0  # a history a line
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(out) == 2
    assert len(out[0]["next"]) == 2 and out[0]["top"] in model.symbols
    assert out[1]["unknown"] == ["purple"]
    full = model.predict_proba_next([model.symbols.index("red"), model.symbols.index("green")])
    assert out[0]["next"][out[0]["top"]] == pytest.approx(full.max(), abs=1e-6)

    assert main(["inspect", str(model_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "streamspec.ObservableOperatorModel" and info["n_symbols"] == 4
    assert main(["inspect", str(counts_path)]) == 0
    text = capsys.readouterr().out
    assert f"n_triples: {counts.n_triples}" in text


def test_learn_takes_settings_from_toml(tmp_path):
    data = tmp_path / "words.txt"
    data.write_text("A b a B c a b\n")
    toml = tmp_path / "learn.toml"
    toml.write_text('no-fit = true\nwindow = 1\ncounts = "%s"\n[format]\nencoding = "tokens"\n'
                    'lowercase = true\n' % (tmp_path / "c.ckpt"))
    assert main(["learn", str(data), "--config", str(toml), "--progress", "never"]) == 0
    acc = MomentAccumulator.load(tmp_path / "c.ckpt")
    assert sorted(acc.symbols) == ["a", "b", "c"] and acc.n_triples == 5
    toml.write_text("rnak = 3\n")
    assert main(["learn", str(data), "--config", str(toml)]) == 2


def test_inspect_rejects_a_file_that_is_no_checkpoint(tmp_path, capsys):
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    assert main(["inspect", str(junk)]) == 1
    assert "not a streamspec checkpoint" in capsys.readouterr().err


def test_learn_resumes_from_its_state_without_loss_or_duplication(tmp_path):
    lines = token_lines(400, seed=2)
    data, state = tmp_path / "log.txt", tmp_path / "state.ckpt"
    data.write_text("\n".join(lines[:150]) + "\n")
    assert main(["learn", str(data), "--encoding", "tokens", "--state", str(state),
                 "--no-fit", "--progress", "never"]) == 0
    with data.open("a") as f:
        f.write("\n".join(lines[150:]) + "\n")
    assert main(["learn", str(data), "--encoding", "tokens", "--state", str(state),
                 "--no-fit", "--progress", "never"]) == 0
    info = describe_checkpoint(state)
    assert info["format"] == "streamspec.SourceState"
    assert info["records"] == sum(len(line.split()) for line in lines)
    from connectors.state import SourceState

    assert by_label(SourceState.load(state).acc) == by_label(direct(lines))


def _learner(data: Path, state: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streamspec", "learn", str(data), "--follow",
           "--encoding", "tokens", "--state", str(state), "--no-fit", "--progress", "never",
           "--checkpoint-interval", "0.05", "--poll-interval", "0.02"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env,
                            cwd=ROOT)


def _records(state: Path) -> int:
    if not state.exists():
        return 0
    from connectors.state import SourceState

    return SourceState.load(state).records


def test_follow_mode_survives_sigkill_and_rotation(tmp_path):
    """Kill the follower at random moments while lines are appended and the file rotates."""
    import threading

    lines = token_lines(1500, seed=3)
    data, state, log = tmp_path / "app.log", tmp_path / "state.ckpt", tmp_path / "learn.log"
    done = threading.Event()

    def writer():  # appends lines steadily; rotates the file twice on the way
        f = data.open("w")
        for i, line in enumerate(lines):
            if i in (400, 900):
                f.close()
                data.rename(tmp_path / f"app.log.{i}")
                f = data.open("w")
            f.write(line + "\n")
            if i % 5 == 0:
                f.flush()
                time.sleep(0.03)
        f.close()
        done.set()

    rng = random.Random(5)
    feeding = threading.Thread(target=writer)
    proc = _learner(data, state, log)
    feeding.start()
    busy_kills, base = 0, 0

    def started():  # the last learner has installed its signal handlers
        # (counted from the log as it was before that learner started: a learner killed
        # while it was still importing never logs, so a running total would never be reached)
        return log.read_text().count("event=following") > base

    try:
        for _ in range(6):
            target = _records(state)
            wait_until(lambda t=target: _records(state) > t or done.is_set(), "progress",
                       proc=proc)
            time.sleep(rng.uniform(0.0, 0.3))
            busy_kills += not done.is_set()
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            base = log.read_text().count("event=following")
            proc = _learner(data, state, log)
        feeding.join()
        total = sum(len(line.split()) for line in lines)
        wait_until(lambda: _records(state) == total and started(), "every record", proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        feeding.join()
    assert code == 0
    assert busy_kills >= 5, f"only {busy_kills} kills came while the file was being written"
    assert sorted(p.name for p in tmp_path.glob("app.log*")) == [
        "app.log", "app.log.400", "app.log.900"]
    from connectors.state import SourceState

    assert by_label(SourceState.load(state).acc) == by_label(direct(lines))


# ---------------------------------------------------------------------------- hidden states


def sticky_file(path: Path, length: int = 4_000, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Characters of a sticky 2-state HMM (state 0: a/b, state 1: c/d), on one line.

    One line: ``chars`` reads a line break as a space, which is no symbol of the HMM.
    """
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    truth = HiddenMarkovModel([0.5, 0.5], [[0.95, 0.05], [0.05, 0.95]],
                              [[0.6, 0.4, 0.0, 0.0], [0.0, 0.0, 0.3, 0.7]], symbols=list("abcd"))
    symbols, states = truth.sample(length, random_state=seed)
    path.write_text("".join(symbols))
    return symbols, states


def test_learn_states_inspect_and_decode(tmp_path, capsys):
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    data = tmp_path / "hmm.txt"
    symbols, states = sticky_file(data)
    model_path = tmp_path / "m.ckpt"
    assert main(["learn", str(data), "--rank", "2", "--states", "2", "--out", str(model_path),
                 "--progress", "never"]) == 0
    assert ObservableOperatorModel.load(model_path).n_symbols == 4  # the operator model as before
    hmm_path = tmp_path / "m.ckpt.hmm"
    hmm = HiddenMarkovModel.load(hmm_path)
    assert hmm.n_states == 2 and sorted(hmm.symbols) == list("abcd")
    capsys.readouterr()

    assert main(["inspect", str(hmm_path)]) == 0
    text = capsys.readouterr().out
    assert "streamspec.HiddenMarkovModel" in text and "transmat (2x2" in text
    assert "startprob:" in text and "state 0:" in text and "state 1:" in text
    rows = text.split("transmat")[1].splitlines()[2:4]  # the two rows after the header
    assert [len(r.split()) for r in rows] == [3, 3]  # a state number and two probabilities
    assert main(["inspect", str(hmm_path), "--json", "--top", "2"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert np.asarray(info["transmat"]).shape == (2, 2)
    assert np.allclose(info["transmat"], hmm.transmat_, atol=1e-6)
    assert [len(e) for e in info["emissions"]] == [2, 2]
    tops = {frozenset(s for s, _ in e) for e in info["emissions"]}
    assert tops == {frozenset("ab"), frozenset("cd")}  # each state's own symbols

    assert main(["decode", "--model", str(hmm_path), str(data)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(symbols)
    cells = [line.split("\t") for line in lines]
    assert [c[0] for c in cells] == symbols
    decoded = np.array([int(c[1]) for c in cells])
    assert decoded.tolist() == hmm.decode(symbols)[1].tolist()
    assert max((decoded == states).mean(), (decoded == 1 - states).mean()) >= 0.9

    assert main(["decode", "--model", str(hmm_path), str(data), "--posterior"]) == 0
    post = np.array([[float(v) for v in line.split("\t")[1:]]
                     for line in capsys.readouterr().out.splitlines()])
    assert post.shape == (len(symbols), 2)
    assert np.allclose(post, hmm.predict_proba(symbols), atol=1e-6)


def test_decode_splits_sequences_and_prints_keys(tmp_path, capsys):
    from streamspec.core.hidden_markov_model import HiddenMarkovModel

    data = tmp_path / "hmm.txt"
    sticky_file(data, length=2_000, seed=1)
    model_path = tmp_path / "m.ckpt"
    assert main(["learn", str(data), "--states", "2", "--out", str(model_path),
                 "--progress", "never"]) == 0
    hmm = HiddenMarkovModel.load(str(model_path) + ".hmm")
    lines = ["abab", "cdcc", "aacd"]
    short = tmp_path / "short.txt"
    short.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["decode", "--model", str(model_path) + ".hmm", str(short), "--end-each-line"]) == 0
    got = [int(line.split("\t")[1]) for line in capsys.readouterr().out.splitlines()]
    want = [h for line in lines for h in hmm.decode(list(line))[1].tolist()]
    assert got == want

    jsonl = tmp_path / "events.jsonl"
    events = [("u1", "a"), ("u2", "c"), ("u1", "b"), ("u2", "d"), ("u1", "a"), ("u2", "c")]
    jsonl.write_text("".join(json.dumps({"user": k, "s": s}) + "\n" for k, s in events))
    assert main(["decode", "--model", str(model_path) + ".hmm", str(jsonl), "--encoding", "jsonl",
                 "--key-field", "user", "--symbol-field", "s"]) == 0
    cells = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(c[0], c[1]) for c in cells] == events  # file order, the key first
    u1 = hmm.decode(["a", "b", "a"])[1].tolist()
    u2 = hmm.decode(["c", "d", "c"])[1].tolist()
    assert [int(c[2]) for c in cells] == [u1[0], u2[0], u1[1], u2[1], u1[2], u2[2]]


def test_hmm_commands_reject_bad_input_without_traceback(tmp_path, capsys):
    data = tmp_path / "hmm.txt"
    sticky_file(data, length=1_000)
    model_path = tmp_path / "m.ckpt"
    assert main(["learn", str(data), "--states", "5", "--window", "1", "--out", str(model_path),
                 "--progress", "never"]) == 1
    err = capsys.readouterr().err
    assert "--states 5" in err and "Traceback" not in err
    assert not model_path.exists()
    assert main(["learn", str(data), "--states", "2", "--out", str(model_path),
                 "--progress", "never"]) == 0
    hmm_path = str(model_path) + ".hmm"
    capsys.readouterr()

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"abcd\xff\n")  # half the lines looked at are not UTF-8: no text file
    assert main(["decode", "--model", hmm_path, str(bad)]) == 1
    err = capsys.readouterr().err
    assert "not UTF-8" in err and "Traceback" not in err
    assert main(["decode", "--model", str(model_path), str(data)]) == 1  # the operator model
    assert "MODEL.hmm" in capsys.readouterr().err
    assert main(["decode", "--model", str(tmp_path / "missing.hmm"), str(data)]) == 1
    assert main(["decode", "--model", hmm_path, str(tmp_path / "missing.txt")]) == 1
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["decode", "--model", hmm_path, str(empty)]) == 1
    assert "no symbol" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["learn", str(data), "--states", "0"])
    assert exc.value.code == 2

    # as a process: a clear message, a non-zero status, no traceback
    proc = subprocess.run([sys.executable, "-m", "streamspec", "decode", "--model", hmm_path,
                           str(bad)], capture_output=True, text=True, cwd=ROOT, timeout=WAIT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("streamspec decode:")


# ---------------------------------------------------------------------------- trust on first use


def test_version_names_the_package_version(capsys):
    from streamspec import __version__

    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamspec {cli.version()}"
    assert cli.version() == __version__  # pyproject and the package agree


def test_every_subcommand_takes_log_level_and_quiet(tmp_path, capsys):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"learn", "predict", "inspect", "decode", "consume", "paper", "demo"} <= set(sub.choices)
    for name, p in sub.choices.items():
        assert "--log-level" in p._option_string_actions, name
        assert "-q" in p._option_string_actions and "--quiet" in p._option_string_actions, name
    with pytest.raises(SystemExit):
        cli.main(["inspect", "x", "--log-level", "LOUD"])
    assert "unknown log level 'LOUD'" in capsys.readouterr().err
    data = tmp_path / "t.txt"
    data.write_text("abcabcabd\n" * 50)
    loud = subprocess.run([sys.executable, "-m", "streamspec", "learn", str(data), "--no-fit",
                           "--log-level", "debug"], capture_output=True, text=True, cwd=ROOT,
                          timeout=WAIT)
    quiet = subprocess.run([sys.executable, "-m", "streamspec", "learn", str(data), "--no-fit",
                            "-q"], capture_output=True, text=True, cwd=ROOT, timeout=WAIT)
    assert loud.returncode == quiet.returncode == 0
    assert "event=counted" in loud.stderr
    assert quiet.stderr == ""


def _png(path: Path) -> Path:
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return path


def test_bad_input_gives_one_clear_line_and_learns_nothing(tmp_path, capsys):
    good = tmp_path / "good.txt"
    good.write_text("abcabcabd\n" * 50)
    elf = tmp_path / "prog"
    elf.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    png = _png(tmp_path / "x.png")
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "a.txt").write_text("abc\n")
    csv = tmp_path / "a.csv"
    csv.write_text("user,page\nu1,home\nu2,cart\nu1,home\n")
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"user": "u1", "item": "a"}\n' * 5)
    random_bytes = tmp_path / "r.bin"
    random_bytes.write_bytes(np.random.default_rng(0).bytes(3000))
    state, out = tmp_path / "state.ckpt", tmp_path / "m.ckpt"
    assert main(["learn", str(good), "--state", str(state), "--no-fit", "-q"]) == 0
    before = state.read_bytes()
    capsys.readouterr()
    cases = [
        (["learn", str(elf)], ["prog", "not a text file", "ELF"]),
        (["learn", str(good), str(png)], ["x.png", "not a text file", "PNG"]),
        (["learn", str(folder)], ["logs", "is a directory"]),
        (["learn", str(folder), "--workers", "2"], ["logs", "is a directory"]),
        (["learn", str(csv), "--encoding", "csv", "--symbol-field", "item"],
         ["no field 'item' (--symbol-field)", "user, page"]),
        (["learn", str(csv), "--encoding", "csv", "--symbol-field", "page", "--key-field",
          "usr"], ["no field 'usr' (--key-field)", "user, page"]),
        (["learn", str(jsonl), "--encoding", "jsonl", "--symbol-field", "item", "--key-field",
          "session"], ["no field 'session' (--key-field)", "user, item"]),
        (["decode", "--model", str(png), str(good)], ["not a streamspec HMM checkpoint", "PNG"]),
        (["predict", "--model", str(png), "a"], ["not a streamspec model checkpoint", "PNG"]),
        (["predict", "--model", str(random_bytes), "a"], ["not a streamspec model checkpoint"]),
        (["predict", "--model", str(folder), "a"], ["not a streamspec model", "a directory"]),
        (["inspect", str(png)], ["not a streamspec checkpoint", "PNG"]),
    ]
    for argv, words in cases:
        flags = ["--out", str(out), "--state", str(state)] if argv[0] == "learn" else []
        if "--workers" in argv:
            flags = ["--out", str(out)]
        code = main([*argv, *flags])
        err = capsys.readouterr().err
        assert code != 0, argv
        assert err.startswith(f"streamspec {argv[0]}:") and len(err.splitlines()) == 1, err
        for word in words:
            assert word in err, (argv, err)
        assert "Traceback" not in err and "allow_pickle" not in err, err
        assert not out.exists(), argv  # no model learned from it
        assert state.read_bytes() == before, argv  # nothing learned lost

    # outputs that cannot be written are refused before counting, not after
    for argv, words in [(["--out", str(folder)], ["--out", "is a directory"]),
                        (["--counts", str(folder), "--no-fit"], ["--counts", "is a directory"]),
                        (["--state", str(png)], ["not a streamspec learn state", "PNG"])]:
        assert main(["learn", str(good), *argv]) != 0
        err = capsys.readouterr().err
        assert err.startswith("streamspec learn:") and "Traceback" not in err
        for word in words:
            assert word in err, (argv, err)
    assert sorted(p.name for p in folder.iterdir()) == ["a.txt"]

    # as processes: the same, with the exit status of the command
    for argv in (["learn", str(folder)], ["predict", "--model", str(folder), "a"],
                 ["learn", str(elf)], ["inspect", str(png)]):
        proc = subprocess.run([sys.executable, "-m", "streamspec", *argv], capture_output=True,
                              text=True, cwd=ROOT, timeout=WAIT)
        assert proc.returncode != 0 and proc.stderr.startswith(f"streamspec {argv[0]}:")
        assert "Traceback" not in proc.stderr, proc.stderr


def test_an_unexpected_error_is_one_line_with_a_hint(monkeypatch, capsys):
    from streamspec.cli import inspect as inspect_command

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(inspect_command, "_inspect", broken)
    assert cli.main(["inspect", "x"]) == 1
    err = capsys.readouterr().err
    assert err == ("streamspec inspect: error: unexpected RuntimeError: boom (rerun with "
                   "--log-level DEBUG for the traceback)\n")
    assert cli.main(["inspect", "x", "--log-level", "DEBUG"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_predict_reads_its_arguments_as_one_history(tmp_path, capsys, monkeypatch):
    chars = tmp_path / "alice.txt"
    chars.write_text("Alice was beginning to get very tired of sitting by her sister\n" * 30)
    model_path = tmp_path / "chars.ckpt"
    # learn and predict agree on characters by default
    assert main(["learn", str(chars), "--rank", "3", "--out", str(model_path), "-q"]) == 0
    model = ObservableOperatorModel.load(model_path)
    capsys.readouterr()
    assert main(["predict", "--model", str(model_path), "Alic"]) == 0
    (one,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert one["history"] == ["A", "l", "i", "c"] and "unknown" not in one
    expected = model.predict_proba_next([model.symbols.index(c) for c in "Alic"])
    assert one["next"][one["top"]] == pytest.approx(expected.max(), abs=1e-6)
    assert main(["predict", "--model", str(model_path), "to", "get"]) == 0
    (two,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert two["history"] == list("to get")

    tokens = tmp_path / "colors.txt"
    tokens.write_text("\n".join(token_lines(200, seed=4)) + "\n")
    tok_path = tmp_path / "tokens.ckpt"
    assert main(["learn", str(tokens), "--encoding", "tokens", "--rank", "2", "--out",
                 str(tok_path), "-q"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(tok_path), "red", "green"]) == 0
    args_out = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(sys, "stdin", io.StringIO("red green\n"))
    assert main(["predict", "--model", str(tok_path)]) == 0
    stdin_out = capsys.readouterr().out.splitlines()
    assert len(args_out) == 1 and args_out == stdin_out
    assert json.loads(args_out[0])["history"] == ["red", "green"]


def test_learn_and_inspect_report_the_rank_used(tmp_path, capsys, caplog):
    import logging
    import re

    data = tmp_path / "t.txt"
    data.write_text("\n".join(token_lines(300, seed=2)) + "\n")
    out = tmp_path / "m.ckpt"
    with caplog.at_level(logging.INFO):
        assert main(["learn", str(data), "--encoding", "tokens", "--rank", "auto", "--out",
                     str(out)]) == 0
    model = ObservableOperatorModel.load(out)
    found = re.search(r"event=fitted rank=(\d+) requested_rank=auto", caplog.text)
    assert found, caplog.text
    assert int(found.group(1)) == model.dim
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    assert f"  rank: {model.dim}\n" in capsys.readouterr().out


def _load_symbols(path: Path) -> set:
    try:
        return set(ObservableOperatorModel.load(path).symbols)
    except Exception:  # not written yet
        return set()


def test_follow_saves_the_model_periodically_and_on_sigterm_or_sigint(tmp_path):
    data, state, log = tmp_path / "app.log", tmp_path / "state.ckpt", tmp_path / "learn.log"
    lines = token_lines(200, seed=6)
    data.write_text("\n".join(lines) + "\n")
    total = sum(len(line.split()) for line in lines)

    def follower(out: Path, save_interval: str) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "streamspec", "learn", str(data), "--follow",
               "--encoding", "tokens", "--rank", "2", "--out", str(out), "--state", str(state),
               "--save-interval", save_interval, "--poll-interval", "0.02",
               "--checkpoint-interval", "0.05", "--progress", "never"]
        return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})

    # 1. saved every 0.2 s while following: new symbols reach the model without a stop
    out = tmp_path / "m.ckpt"
    proc = follower(out, "0.2")
    try:
        wait_until(lambda: out.exists(), "the first periodic save", proc=proc)
        with data.open("a") as f:
            f.write("orange orange red orange green\n" * 5)
        total += 25
        wait_until(lambda: "orange" in _load_symbols(out), "a later periodic save", proc=proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _records(state) == total

    # 2. no periodic save within the run (1 h): SIGINT (Ctrl-C) alone saves the model, with
    # the records appended while it followed
    out = tmp_path / "m2.ckpt"
    proc = follower(out, "3600")
    try:
        with data.open("a") as f:
            f.write("violet blue violet violet\n" * 5)
        total += 20
        wait_until(lambda: _records(state) == total, "the appended records", proc=proc)
        assert not out.exists()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(WAIT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert {"orange", "violet", "red"} <= _load_symbols(out)
    text = log.read_text()
    assert "event=stopped signal=SIGTERM" in text and "event=stopped signal=SIGINT" in text
    assert "Traceback" not in text


def test_predict_reads_a_history_as_learn_read_the_model_s_symbols(tmp_path, capsys):
    # tokens that are single characters: without the model's record of how learn read
    # them, predict would take "a b" as three characters (the space unknown)
    text = tmp_path / "letters.txt"
    rng = np.random.default_rng(5)
    text.write_text("\n".join(" ".join(rng.choice(list("ABC"), 12)) for _ in range(300)) + "\n")
    model_path = tmp_path / "letters.ckpt"
    assert main(["learn", str(text), "--encoding", "tokens", "--lowercase", "--rank", "2",
                 "--out", str(model_path), "-q"]) == 0
    model = ObservableOperatorModel.load(model_path)
    # and the window the default ("auto") counted for 3 symbols: 3^5 >= 128
    assert model.metadata == {"encoding": "tokens", "lowercase": "true", "count_window": "5"}
    assert sorted(model.symbols) == ["a", "b", "c"]
    capsys.readouterr()
    assert main(["predict", "--model", str(model_path), "A B"]) == 0
    (out,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out["history"] == ["a", "b"] and "unknown" not in out
    # an explicit --encoding still wins over the record
    assert main(["predict", "--model", str(model_path), "--encoding", "chars", "ab"]) == 0
    (chars,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert chars["history"] == ["a", "b"]


def test_consume_takes_the_fetch_size_that_interleaves_partitions():
    import argparse

    from streamspec.cli.consume import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    given = config_from_args(parser.parse_args(["consume", "--topic", "t",
                                                "--fetch-max-bytes", "65536"]))
    default = config_from_args(parser.parse_args(["consume", "--topic", "t"]))
    assert (given.fetch_max_bytes, default.fetch_max_bytes) == (65536, 1 << 20)


def test_learn_without_memory_for_the_operators_says_so(tmp_path, capsys, monkeypatch):
    """The kernel refusing the operators' memory (ENOMEM from ``mmap``) is reported as the fit
    running out of memory, with what to try, exit code 1 and no model written: it is a
    MemoryError (core/fresh_memory.py), not an OSError's bare line."""
    import errno

    import streamspec.core.fresh_memory as fresh_memory

    data = tmp_path / "colors.txt"
    data.write_text("\n".join(token_lines(300, seed=1)) + "\n")

    def refuse(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(fresh_memory, "MAPPED_BYTES", 0)  # every operator array mapped
    monkeypatch.setattr(fresh_memory.mmap, "mmap", refuse)
    out = tmp_path / "m.ckpt"
    code = main(["learn", str(data), "--encoding", "tokens", "--window", "1", "--rank", "2",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert "cannot fit: out of memory" in err and "try a smaller --rank" in err, err

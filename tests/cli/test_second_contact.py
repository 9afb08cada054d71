"""What a new user hit on second contact (issue 20): each test failed before its fix.

Unknown words in ``decode``/``predict`` (1), malformed lines reported alike wherever
they are (2), line breaks of ``chars`` (3), nothing fitted for nothing (5), flags that
contradict each other (7), one error format (8), and the small ones (12).
"""

from __future__ import annotations

import ast
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamspec.cli import build_parser, main
from streamspec.core.model import ObservableOperatorModel
from streamspec.streaming.accumulator import MomentAccumulator

ROOT = Path(__file__).resolve().parents[2]
ERROR_LINE = re.compile(r"^streamspec [a-z]+: error: \S")
TEXT = ("Alice was beginning to get very tired of sitting by her sister on the bank, and of\n"
        "having nothing to do: once or twice she had peeped into the book her sister was\n"
        "reading, but it had no pictures or conversations in it, and what is the use of a\n"
        "book, thought Alice, without pictures or conversations?\n\n") * 40


@pytest.fixture(scope="module")
def word_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("words")
    book = folder / "book.txt"
    book.write_text(TEXT)
    out = folder / "m.ckpt"
    assert main(["learn", str(book), "--encoding", "tokens", "--states", "3", "--rank", "3",
                 "--out", str(out), "--progress", "never"]) == 0
    return folder, out


# ------------------------------------------------------------------ 1: unknown symbols


def test_decode_labels_every_word_of_another_text_and_warns_once(word_model, capsys, caplog):
    folder, out = word_model
    other = folder / "other.txt"
    other.write_text("TREASURE Alice was tired of the island\n")
    caplog.set_level(logging.WARNING)
    assert main(["decode", "--model", f"{out}.hmm", str(other), "--encoding", "tokens"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # was: exit 1, "line 1: symbol 'TREASURE' is not one of the model's symbols"
    assert [ln.split("\t")[0] for ln in lines] == "TREASURE Alice was tired of the island".split()
    assert all(ln.split("\t")[1].isdigit() for ln in lines)
    warnings = [r.getMessage() for r in caplog.records if "unknown-symbols" in r.getMessage()]
    assert len(warnings) == 1 and "2 unknown symbols" in warnings[0] and "'TREASURE'" in warnings[0]


def test_predict_unknown_words_and_utf8_output(word_model, capsys, caplog):
    _, out = word_model
    caplog.set_level(logging.WARNING)
    assert main(["predict", "--model", str(out), "the Dantès sister"]) == 0
    text = capsys.readouterr().out
    assert '"Dantès"' in text and "\\u00e8" not in text  # was: "Dant\u00e8s"
    assert json.loads(text)["unknown"] == ["Dantès"]
    assert any("1 unknown symbol" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ 2: malformed input


def latin1_book(path: Path, at: int) -> int:
    """TEXT with one Latin-1 line inserted after byte ``at``; the 1-based number of that line."""
    data = TEXT.encode() * (1 + at // len(TEXT.encode()))
    cut = data.index(b"\n", at) + 1
    path.write_bytes(data[:cut] + "Café crème\n".encode("latin-1") + data[cut:])
    return data[:cut].count(b"\n") + 1


@pytest.mark.parametrize("at", [20_003, 300_000])
@pytest.mark.parametrize("flags", [[], ["--state", "STATE"]])
def test_a_bad_line_is_a_warning_wherever_it_is(tmp_path, caplog, at, flags):
    book = tmp_path / "book.txt"
    number = latin1_book(book, at)
    flags = [str(tmp_path / "s.ckpt") if f == "STATE" else f for f in flags]
    caplog.set_level(logging.WARNING)
    # was: refused whole at byte 20,003 (first 64 KiB), an INFO malformed=1 further on
    assert main(["learn", str(book), "--out", str(tmp_path / "m.ckpt"), "--rank", "2",
                 "--progress", "never", *flags]) == 0
    skipped = [r.getMessage() for r in caplog.records if "event=skipped" in r.getMessage()]
    assert len(skipped) == 1
    assert f"{book}, line {number}: undecodable" in skipped[0] and "iconv" in skipped[0]
    assert any("event=malformed-summary 1 of" in r.getMessage() for r in caplog.records)


def test_wrong_encoding_and_one_huge_line_fail_naming_the_cause(tmp_path, capsys):
    events = tmp_path / "events.csv"
    events.write_text("user,page\n" + "".join(f"u{i % 7},p{i % 13}\n" for i in range(500)))
    assert main(["learn", str(events), "--encoding", "jsonl", "--out", str(tmp_path / "m")]) == 1
    err = capsys.readouterr().err
    assert ERROR_LINE.match(err) and len(err.splitlines()) == 1
    assert "skipped as malformed (bad-json" in err and "--encoding csv" in err  # was: no triple
    big = tmp_path / "one-line.txt"
    big.write_bytes(b"x" * (2 << 20))
    for flags in ([], ["--state", str(tmp_path / "s.ckpt")]):
        assert main(["learn", str(big), "--out", str(tmp_path / "m"), *flags]) == 1
        err = capsys.readouterr().err
        assert ERROR_LINE.match(err) and "line 1: oversized" in err and "--max-bytes" in err
    assert not (tmp_path / "m").exists()


def test_max_malformed_is_the_policy(tmp_path, capsys):
    lines = [f"{'abcd' * 5}\n".encode()] * 300
    for i in range(0, 300, 60):
        lines[i] = b"caf\xe9\n"  # 5 of 300 lines: 1.7 %
    path = tmp_path / "t.txt"
    path.write_bytes(b"".join(lines))
    out = tmp_path / "m.ckpt"
    assert main(["learn", str(path), "--out", str(out), "--rank", "2"]) == 1  # default: 1 %
    assert "more than --max-malformed 1%" in capsys.readouterr().err and not out.exists()
    assert main(["learn", str(path), "--out", str(out), "--rank", "2",
                 "--max-malformed", "5"]) == 0
    assert main(["learn", str(path), "--out", str(out), "--rank", "2",
                 "--max-malformed", "4"]) == 1
    with pytest.raises(SystemExit):
        main(["learn", str(path), "--out", str(out), "--max-malformed", "lots"])


# ------------------------------------------------------------------ 3: line breaks of chars


def test_chars_line_break_is_whitespace(tmp_path):
    path = tmp_path / "wrapped.txt"
    path.write_text("the end\ncame\n\nnext\n")
    counts = tmp_path / "c.npz"
    for flags in ([], ["--state", str(tmp_path / "s.ckpt")]):
        assert main(["learn", str(path), "--no-fit", "--counts", str(counts), *flags]) == 0
        acc = MomentAccumulator.load(counts)
        t = acc.triples()
        seen = {tuple(acc.symbols[i] for i in xs) for xs in zip(t.x1, t.x2, t.x3, strict=True)}
        assert ("n", "d", " ") in seen and ("d", " ", "c") in seen  # was: ("n", "d", "c")
        assert ("e", " ", "n") in seen and (" ", " ", "n") not in seen  # a blank line: nothing
        assert ("n", "d", "c") not in seen


# ------------------------------------------------------------------ 5: nothing thrown away


def test_learn_refuses_work_that_would_be_thrown_away(tmp_path, capsys):
    book = tmp_path / "b.txt"
    book.write_text(TEXT)
    for argv, word in [([], "--out MODEL"), (["--states", "3"], "MODEL.hmm")]:
        assert main(["learn", str(book), *argv]) == 2  # was: 0, fitted and saved nothing
        err = capsys.readouterr().err
        assert ERROR_LINE.match(err) and word in err
        assert "event=counted" not in err  # refused before counting
    counts = tmp_path / "c.npz"
    assert main(["learn", str(book), "--counts", str(counts)]) == 0  # counting is kept
    assert counts.exists()


# ------------------------------------------------------------------ 7: contradictions


def test_contradictory_flags_in_cli_spelling_without_a_circle(tmp_path, capsys):
    book = tmp_path / "b.txt"
    book.write_text(" ".join(f"w{i % 400}" for i in range(20_000)))
    out = tmp_path / "m.ckpt"
    assert main(["learn", str(book), "--encoding", "tokens", "--weighting", "exact",
                 "--formulation", "projected", "--out", str(out)]) == 2
    first = capsys.readouterr().err
    assert ERROR_LINE.match(first) and "event=counted" not in first  # before counting
    assert "--weighting exact needs --formulation dense" in first and "formulation='" not in first
    assert main(["learn", str(book), "--encoding", "tokens", "--weighting", "exact",
                 "--out", str(out)]) == 1
    second = capsys.readouterr().err.strip().splitlines()[-1]
    assert ERROR_LINE.match(second) and "drop --weighting exact" in second
    # was: "use formulation='projected'", which the first message forbids
    assert "use --formulation projected" not in second and "formulation='" not in second


# ------------------------------------------------------------------ 8: one error format


def test_every_error_is_one_line_in_one_format(tmp_path, capsys):
    book = tmp_path / "b.txt"
    book.write_text("a\n")  # counts ("a", then its line break: a space), but no triple to fit
    cases = [
        ["learn", str(book), "--out", str(tmp_path / "m")],  # after counting: was no "error:"
        ["learn", str(book), "--encoding", "tokens", "--rank", "2", "--out", str(tmp_path / "m")],
        ["consume"],  # was: "streamspec consume: no topic given"
        ["inspect", str(tmp_path)],
        ["decode", "--model", str(tmp_path / "none.hmm"), str(book)],
        ["predict", "--model", str(book), "a"],
    ]
    for argv in cases:
        assert main(argv) != 0, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err and ERROR_LINE.match(err[-1]), (argv, err)
        assert all(not ln.startswith("streamspec ") or ERROR_LINE.match(ln) for ln in err), err


def test_fit_failure_after_counting_has_the_prefix(tmp_path, capsys):
    book = tmp_path / "b.txt"
    book.write_text(" ".join(f"w{i % 400}" for i in range(20_000)))
    # a dense fit over the memory limit fails after counting
    assert main(["learn", str(book), "--encoding", "tokens", "--formulation", "dense",
                 "--out", str(tmp_path / "m")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    # was: "streamspec learn: cannot fit: ValueError: ... use formulation='projected'"
    assert ERROR_LINE.match(err[-1]) and "cannot fit: the dense formulation" in err[-1]
    assert "ValueError" not in err[-1] and "use --formulation projected" in err[-1]


def test_no_cli_module_prints_its_own_error_line():
    """Errors go through CommandError/error_line: no module writes "streamspec X:" itself."""
    for path in (ROOT / "streamspec" / "cli").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr | ast.Constant) and path.name != "errors.py":
                text = ast.unparse(node)
                assert not re.search(r"streamspec (learn|decode|predict|inspect|consume)\b:",
                                     text), (path.name, text)


# ------------------------------------------------------------------ 12: the small ones


def test_consume_help_has_one_record_format_group():
    parser = build_parser()
    consume = parser._subparsers._group_actions[0].choices["consume"]
    titles = [g.title for g in consume._action_groups]
    assert titles.count("record format") == 1  # was: two
    assert "--alphabet" in consume.format_help().split("record format:")[1].split("estimator")[0]


def test_words_encoding_splits_punctuation(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("Alice, don't go! said the well-known Cat.\n" * 30)
    counts = tmp_path / "c.npz"
    assert main(["learn", str(path), "--encoding", "words", "--no-fit", "--counts",
                 str(counts)]) == 0
    symbols = MomentAccumulator.load(counts).symbols
    assert {"Alice", ",", "don't", "!", "well-known", "Cat", "."} <= set(symbols)
    assert "Alice," not in symbols


def test_no_data_message_is_one_sentence(monkeypatch):
    from streamspec.experiments import datasets

    monkeypatch.setattr(datasets, "default_data_path", lambda: None)
    with pytest.raises(FileNotFoundError) as info:
        datasets.load_alice_letters()
    text = str(info.value)
    # was: "expected the data file 11-0.txt or pg11.txt no data folder was found; ..."
    assert "pg11.txt no data" not in text and "but no data folder was found" in text


def test_predict_reads_words_as_learned(tmp_path, capsys):
    path = tmp_path / "w.txt"
    path.write_text("the cat, the dog. the cat, the bird.\n" * 50)
    out = tmp_path / "m.ckpt"
    assert main(["learn", str(path), "--encoding", "words", "--rank", "2",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "the cat,"]) == 0
    assert json.loads(capsys.readouterr().out)["history"] == ["the", "cat", ","]


def test_quiet_learn_prints_no_progress_but_warnings(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"abcabcabd\n" * 200 + b"caf\xe9\n")
    proc = subprocess.run([sys.executable, "-m", "streamspec", "learn", str(path), "-q",
                           "--out", str(tmp_path / "m.ckpt"), "--rank", "2"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" in proc.stderr and "line 201: undecodable" in proc.stderr
    assert "INFO" not in proc.stderr and "\r" not in proc.stderr
    assert np.isfinite(ObservableOperatorModel.load(tmp_path / "m.ckpt").log_proba("abc"))


def test_dask_local_quiet_prints_nothing_of_distributed(tmp_path):
    pytest.importorskip("distributed")
    path = tmp_path / "t.txt"
    path.write_text("abcabcabd\n" * 500)
    proc = subprocess.run([sys.executable, "-m", "streamspec", "learn", str(path), "--dask",
                           "local", "--workers", "1", "-q", "--out", str(tmp_path / "m.ckpt")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "distributed" not in proc.stderr and "INFO" not in proc.stderr  # was: ~33 lines


# ------------------------------------------------------------------ 6: progress of every step


def test_every_long_step_shows_progress_and_the_fit_line_has_no_meaningless_loss(
        tmp_path, capsys, caplog, monkeypatch):
    from streamspec.cli import progress_bar

    monkeypatch.setattr(progress_bar, "SHOW_AFTER", 0.0)  # every step counts as long here
    monkeypatch.setattr(progress_bar, "_REDRAW", 0.01)
    book = tmp_path / "b.txt"
    book.write_text(TEXT)
    caplog.set_level(logging.INFO)
    assert main(["learn", str(book), "--encoding", "tokens", "--states", "2", "--rank", "2",
                 "--out", str(tmp_path / "m.ckpt"), "--progress", "always"]) == 0
    err = capsys.readouterr().err
    # was: a bar for the counting only
    assert "[#" in err  # counting
    assert re.search(r"fitting the model \(\d+ symbols, rank 2\): done in", err)
    assert re.search(r"fitting a 2-state HMM \(\d+ symbols\): done in", err)
    fitted = [r.getMessage() for r in caplog.records if "event=fitted " in r.getMessage()]
    assert fitted and "loss=" not in fitted[0] and "predictor=trigram" in fitted[0]
    quality = [r.getMessage() for r in caplog.records if "event=quality " in r.getMessage()]
    assert quality and all(f" {k}=" in quality[0] for k in ("log_loss", "perplexity", "unigram", "trigram"))
    assert main(["learn", str(book), "--out", str(tmp_path / "m.ckpt"), "--rank", "2",
                 "--progress", "never"]) == 0
    assert "fitting" not in capsys.readouterr().err  # no terminal, no bar: nothing drawn

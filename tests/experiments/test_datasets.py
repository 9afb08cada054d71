"""Tests for streamspec.experiments.datasets: parsers on inline samples, file handling, real data."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from streamspec.experiments import datasets
from streamspec.experiments.datasets import (
    default_data_path,
    letters_only,
    load_alice,
    load_alice_letters,
    load_splice,
    parse_splice,
    parse_splice_records,
    strip_gutenberg,
)
from streamspec.experiments.datasets_chorales import (
    load_chorales,
    parse_chorale_events,
    parse_chorales,
    parse_sexpr,
    tokenize_sexpr,
)
from streamspec.experiments.datasets_dodgers import (
    discretise_counts,
    load_dodgers,
    load_dodgers_counts,
    load_dodgers_events,
    parse_dodgers,
    parse_dodgers_counts,
    parse_dodgers_events,
    parse_dodgers_rows,
    quantile_edges,
    split_at_missing,
)

# ---------------------------------------------------------------------------
# Inline samples
# ---------------------------------------------------------------------------

GUTENBERG_BYTES = (
    b"\xef\xbb\xbfProject Gutenberg's Alice, by Lewis Carroll\r\n"
    b"\r\n"
    b"*** START OF THIS PROJECT GUTENBERG EBOOK ALICE'S ADVENTURES IN WONDERLAND ***\r\n"
    b"\r\n"
    b"CHAPTER I. Down the Rabbit-Hole\r\n"
    b"Alice was 'very' tired--of sitting.\r\n"
    b"*** END OF THIS PROJECT GUTENBERG EBOOK ALICE'S ADVENTURES IN WONDERLAND ***\r\n"
    b"\r\n"
    b"*** START: FULL LICENSE ***\r\n"
    b"Zebra licence text\r\n"
)

SPLICE_TEXT = (
    "EI,    ATRINS-DONOR-521,               CCAGCTGCAT\n"
    "IE,    HUMA1GLY2-ACCEPTOR-1,           ccagDtgcat\n"
    "N,     HUMZNF-NEG-1,                   GGGGAAAATT\n"
)

CHORALES_TEXT = """\
(1 ((st 8) (pitch 67) (dur 4) (keysig 1) (timesig 12) (fermata 0))((st 12) (pitch 69)
 (dur 8) (keysig 1) (timesig 12) (fermata 1)))

; a comment (with parentheses) that the parser must ignore
(17 ((st 0) (pitch 60) (dur 2) (keysig -2) (timesig 16) (fermata 0))
    ((st 2) (pitch 62) (dur 2) (keysig -2) (timesig 16) (fermata 0))
    ((st 4) (pitch 64) (dur 16) (keysig -2) (timesig 16) (fermata 1)))
"""

DODGERS_TEXT = (
    "4/10/2005 0:00,-1\n"
    "4/10/2005 0:05,-1\n"
    "4/10/2005 0:10,0\n"
    "4/10/2005 0:15,10\n"
    "4/10/2005 0:20,20\n"
    "4/10/2005 0:25,-1\n"
    "4/10/2005 0:30,30\n"
    "4/10/2005 0:35,40\n"
    "4/10/2005 0:40,-1\n"
    "4/10/2005 0:45,5\n"
    "4/10/2005 0:50,15\n"
    "4/10/2005 0:55,25\n"
    "4/10/2005 1:00,35"  # no trailing newline, like the real file
)

EVENTS_BYTES = (
    b"04/12/05,13:10:00,16:23:00,55892,San Francisco,W 9-8\xa0\n"
    b"05/17/05,19:10:00,21:52:00,37481,Florida,W 14-5\xa0\n"
    b"09/29/05,19:10:00,22:24:00,45053,Arizona,L 3-2\xa0"
)


# ---------------------------------------------------------------------------
# Alice
# ---------------------------------------------------------------------------


def test_strip_gutenberg_bom_crlf_header_footer():
    text = GUTENBERG_BYTES.decode("utf-8")  # BOM kept as U+FEFF on purpose
    assert text.startswith("\ufeff")
    body = strip_gutenberg(text)
    assert body == "\nCHAPTER I. Down the Rabbit-Hole\nAlice was 'very' tired--of sitting."
    assert "\r" not in body and "\ufeff" not in body
    assert letters_only(body) == "chapteridowntherabbitholealicewasverytiredofsitting"


def test_strip_gutenberg_without_markers_returns_whole_text():
    assert strip_gutenberg("\ufeffNo header\r\nat all\r\n") == "No header\nat all\n"


def test_strip_gutenberg_without_end_marker_runs_to_end():
    assert strip_gutenberg("head\n*** START OF X ***\nbody\nmore") == "body\nmore"


def test_letters_only_drops_non_ascii_digits_and_punctuation():
    assert letters_only("Où est 42, “Alice’s” CAT—ù?") == "oestalicescat"


def test_load_alice_reads_file_and_prefers_11_0(tmp_path: Path):
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "pg11.txt").write_bytes(GUTENBERG_BYTES)
    # Only pg11.txt: falls back to it, from the data root and from the folder itself.
    expected = "chapteridowntherabbitholealicewasverytiredofsitting"
    assert load_alice_letters(tmp_path) == expected
    assert load_alice(folder) == [expected]
    # With 11-0.txt present (UTF-8, no header, a ù), it is preferred.
    (folder / "11-0.txt").write_text("[Illustration]\nAlice’s sœur ù Bé\n", encoding="utf-8")
    assert load_alice(tmp_path) == ["illustrationalicessurb"]
    assert load_alice(tmp_path, filename="pg11.txt") == [expected]


# ---------------------------------------------------------------------------
# Splice
# ---------------------------------------------------------------------------


def test_parse_splice_records_strips_padding_and_upper_cases():
    records = parse_splice_records(SPLICE_TEXT)
    assert records[0] == ("EI", "ATRINS-DONOR-521", "CCAGCTGCAT")
    assert records[1] == ("IE", "HUMA1GLY2-ACCEPTOR-1", "CCAGDTGCAT")
    assert len(records) == 3


def test_parse_splice_ambiguity_drop_and_keep():
    assert parse_splice(SPLICE_TEXT) == ["CCAGCTGCAT", "GGGGAAAATT"]
    assert parse_splice(SPLICE_TEXT, ambiguous="keep") == [
        "CCAGCTGCAT",
        "CCAGDTGCAT",
        "GGGGAAAATT",
    ]


def test_parse_splice_rejects_bad_input():
    with pytest.raises(ValueError, match="ambiguous"):
        parse_splice(SPLICE_TEXT, ambiguous="map")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="line 2: expected 3"):
        parse_splice("EI, X, ACGT\nEI ACGT\n")


def test_load_splice_from_folder(tmp_path: Path):
    (tmp_path / "splice.data").write_text(SPLICE_TEXT, encoding="ascii")
    assert load_splice(tmp_path, ambiguous="keep")[1] == "CCAGDTGCAT"
    assert len(load_splice(tmp_path)) == 2


# ---------------------------------------------------------------------------
# Chorales
# ---------------------------------------------------------------------------


def test_tokenize_and_parse_sexpr_nesting():
    assert tokenize_sexpr("((a 1)(b -2));x y)\n(c)") == [
        "(", "(", "a", "1", ")", "(", "b", "-2", ")", ")", "(", "c", ")",
    ]  # fmt: skip
    assert parse_sexpr("(1 ((st 8) (x (y (z 2.5)))))") == [
        [1, [["st", 8], ["x", ["y", ["z", 2.5]]]]]
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [("(1 ((st 8))", "1 unclosed"), ("(1))", "unexpected"), ("((", "2 unclosed")],
)
def test_parse_sexpr_unbalanced(text: str, message: str):
    with pytest.raises(ValueError, match=message):
        parse_sexpr(text)


def test_parse_chorales_fields():
    assert parse_chorales(CHORALES_TEXT) == [[67, 69], [60, 62, 64]]
    assert parse_chorales(CHORALES_TEXT, field="dur") == [[4, 8], [2, 2, 16]]
    assert parse_chorales(CHORALES_TEXT, field="keysig") == [[1, 1], [-2, -2, -2]]
    assert parse_chorales(CHORALES_TEXT, field="fermata") == [[0, 1], [0, 0, 1]]
    chorales = parse_chorale_events(CHORALES_TEXT)
    assert [ident for ident, _ in chorales] == [1, 17]
    assert chorales[1][1][2] == {
        "st": 4, "pitch": 64, "dur": 16, "keysig": -2, "timesig": 16, "fermata": 1,
    }  # fmt: skip


def test_parse_chorales_errors():
    with pytest.raises(KeyError, match="no field 'velocity'"):
        parse_chorales(CHORALES_TEXT, field="velocity")
    with pytest.raises(ValueError, match="pair"):
        parse_chorales("(1 ((st 8) (pitch 60 61)))")
    with pytest.raises(ValueError, match="expected \\(ID event"):
        parse_chorales("stray-atom")


def test_load_chorales_from_root(tmp_path: Path):
    folder = tmp_path / "bach-chorales"
    folder.mkdir()
    (folder / "chorales.lisp").write_text(CHORALES_TEXT, encoding="ascii")
    assert load_chorales(tmp_path) == [[67, 69], [60, 62, 64]]
    assert load_chorales(folder, field="st") == [[8, 12], [0, 2, 4]]


# ---------------------------------------------------------------------------
# Dodgers
# ---------------------------------------------------------------------------


def test_parse_dodgers_rows_and_counts():
    rows = parse_dodgers_rows(DODGERS_TEXT)
    assert rows[0] == (dt.datetime(2005, 4, 10, 0, 0), -1)
    assert rows[-1] == (dt.datetime(2005, 4, 10, 1, 0), 35)
    assert parse_dodgers_counts(DODGERS_TEXT) == [-1, -1, 0, 10, 20, -1, 30, 40, -1, 5, 15, 25, 35]
    with pytest.raises(ValueError, match="line 2"):
        parse_dodgers_rows("4/10/2005 0:00,1\n4/10/2005 0:05;2\n")


def test_quantile_edges_ignore_missing():
    counts = parse_dodgers_counts(DODGERS_TEXT)
    edges = quantile_edges(counts, n_bins=2)
    # median of 0, 5, 10, 15, 20, 25, 30, 35, 40 (the -1 values must not count)
    np.testing.assert_allclose(edges, [20.0])
    assert len(quantile_edges(counts, n_bins=10)) == 9
    with pytest.raises(ValueError, match="no non-missing"):
        quantile_edges([-1, -1])


def test_discretise_and_split():
    assert discretise_counts([-1, 0, 19, 20, 40], np.array([20.0])) == [-1, 0, 0, 1, 1]
    assert split_at_missing([0, 1, -1, 2, 3, 4, -1, -1, 5]) == [[2, 3, 4]]
    assert split_at_missing([0, 1, -1, 2], min_length=1) == [[0, 1], [2]]


def test_parse_dodgers_bins_and_splits_at_missing():
    seqs = parse_dodgers(DODGERS_TEXT, n_bins=2)
    # runs of non-missing values: [0, 10, 20], [30, 40] (too short, dropped), [5, 15, 25, 35]
    assert seqs == [[0, 0, 1], [0, 0, 1, 1]]
    seqs10 = parse_dodgers(DODGERS_TEXT, n_bins=10)
    # deciles of 0, 5, ..., 40 are 4, 8, ..., 36; a count equal to an edge goes up (20 -> 5)
    assert seqs10 == [[0, 2, 5], [1, 3, 6, 8]]


def test_parse_dodgers_events_latin1():
    with pytest.raises(UnicodeDecodeError):
        EVENTS_BYTES.decode("utf-8")  # the sample, like the real file, is not UTF-8
    events = parse_dodgers_events(EVENTS_BYTES.decode("latin-1"))
    assert len(events) == 3
    assert events[0] == {
        "date": dt.date(2005, 4, 12),
        "begin": dt.time(13, 10),
        "end": dt.time(16, 23),
        "attendance": 55892,
        "away_team": "San Francisco",
        "result": "W",
        "score": "9-8",
    }
    assert events[1]["score"] == "14-5"
    assert events[2]["result"] == "L" and events[2]["date"] == dt.date(2005, 9, 29)
    with pytest.raises(ValueError, match="6 comma-separated"):
        parse_dodgers_events("04/12/05,13:10:00,55892,San Francisco,W 9-8")


def test_load_dodgers_files(tmp_path: Path):
    folder = tmp_path / "dodgers"
    folder.mkdir()
    (folder / "Dodgers.data").write_text(DODGERS_TEXT, encoding="ascii")
    (folder / "Dodgers.events").write_bytes(EVENTS_BYTES)
    assert load_dodgers(tmp_path, n_bins=2) == [[0, 0, 1], [0, 0, 1, 1]]
    assert load_dodgers_counts(folder).count(-1) == 4
    events = load_dodgers_events(tmp_path)
    assert [e["away_team"] for e in events] == ["San Francisco", "Florida", "Arizona"]


# ---------------------------------------------------------------------------
# Locating the data, missing files
# ---------------------------------------------------------------------------

LOADERS = [
    (load_alice, "11-0.txt or pg11.txt"),
    (load_alice_letters, "11-0.txt or pg11.txt"),
    (load_splice, "splice.data"),
    (load_chorales, "chorales.lisp"),
    (load_dodgers, "Dodgers.data"),
    (load_dodgers_counts, "Dodgers.data"),
    (load_dodgers_events, "Dodgers.events"),
]


@pytest.mark.parametrize(("loader", "expected"), LOADERS)
def test_missing_file_message(tmp_path: Path, loader, expected: str):
    with pytest.raises(FileNotFoundError) as info:
        loader(tmp_path)
    message = str(info.value)
    assert expected in message
    assert str(tmp_path) in message
    assert "path=" in message and "STREAMSPEC_DATA" in message


def test_missing_file_in_dataset_subfolder_names_subfolder(tmp_path: Path):
    (tmp_path / "splice").mkdir()
    with pytest.raises(FileNotFoundError, match="splice.data") as info:
        load_splice(tmp_path)
    assert str(tmp_path / "splice") in str(info.value)


def test_missing_data_root_message(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(datasets, "default_data_path", lambda: None)
    with pytest.raises(FileNotFoundError, match="no data folder was found") as info:
        load_chorales()
    assert "bach-chorales/chorales.lisp" in str(info.value)


def test_default_data_path_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("STREAMSPEC_DATA", str(tmp_path))
    assert default_data_path() == tmp_path
    # The loaders honour it.
    (tmp_path / "splice").mkdir()
    (tmp_path / "splice" / "splice.data").write_text(SPLICE_TEXT, encoding="ascii")
    assert load_splice() == ["CCAGCTGCAT", "GGGGAAAATT"]


def test_default_data_path_walks_up_from_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("STREAMSPEC_DATA", raising=False)
    data = tmp_path / "work" / "shared" / "data"
    data.mkdir(parents=True)
    deep = tmp_path / "work" / "main" / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert default_data_path() == data


def test_default_data_path_from_module_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("STREAMSPEC_DATA", raising=False)
    data = tmp_path / "work" / "shared" / "data"
    data.mkdir(parents=True)
    package = tmp_path / "work" / "main" / "streamspec"
    package.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(datasets, "__file__", str(package / "datasets.py"))
    assert default_data_path() == data


def test_default_data_path_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    if any((p / "shared" / "data").is_dir() for p in (tmp_path, *tmp_path.parents)):
        pytest.skip("a shared/data folder exists above the temporary directory")
    monkeypatch.delenv("STREAMSPEC_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets, "__file__", str(tmp_path / "pkg" / "datasets.py"))
    assert default_data_path() is None


# ---------------------------------------------------------------------------
# Real data (counts from each folder's SOURCE.md)
# ---------------------------------------------------------------------------

DATA = default_data_path()
_SEARCHED = ("STREAMSPEC_DATA (unset) and every shared/data or ../shared/data above the "
             "working directory and the package")


def _real(folder: str):
    present = DATA is not None and (DATA / folder).is_dir()
    return pytest.mark.skipif(
        not present,
        reason=f"real data folder '{folder}' not found (looked in {DATA or _SEARCHED}); "
        "set STREAMSPEC_DATA or place the data in shared/data beside the repository",
    )


@_real("alice")
def test_real_alice():
    letters = load_alice_letters()
    assert len(letters) == 108_083  # 11-0.txt; its single "ù" is dropped
    current = strip_gutenberg((DATA / "alice" / "11-0.txt").read_text(encoding="utf-8"))
    assert len(letters_only(current[:50_000])) == 37_425
    assert set(letters) == set("abcdefghijklmnopqrstuvwxyz")
    pg = load_alice(filename="pg11.txt")
    assert len(pg) == 1 and len(pg[0]) == 107_785
    assert pg[0].startswith("alicesadventuresinwonderland")
    body = strip_gutenberg((DATA / "alice" / "pg11.txt").read_bytes().decode("utf-8"))
    assert len(body) == 144_524
    assert len(letters_only(body[:50_000])) == 37_225


@_real("splice")
def test_real_splice():
    keep = load_splice(ambiguous="keep")
    assert len(keep) == 3190
    assert {len(s) for s in keep} == {60}
    counts = Counter("".join(keep))
    assert counts == {
        "C": 50_300, "G": 50_245, "T": 46_308, "A": 44_487, "N": 56, "D": 2, "R": 1, "S": 1,
    }  # fmt: skip
    drop = load_splice()
    assert len(drop) == 3190 - 15
    assert set("".join(drop)) == set("ACGT")


@_real("bach-chorales")
def test_real_chorales():
    pitches = load_chorales()
    assert len(pitches) == 100
    assert sum(len(c) for c in pitches) == 4693
    assert min(len(c) for c in pitches) == 26 and max(len(c) for c in pitches) == 86
    flat = Counter(p for c in pitches for p in c)
    assert sorted(flat) == list(range(60, 80))
    assert flat[69] == 785 and flat[60] == 16
    durs = {d for c in load_chorales(field="dur") for d in c}
    assert durs == {1, 2, 3, 4, 6, 8, 12, 16}
    text = (DATA / "bach-chorales" / "chorales.lisp").read_text(encoding="ascii")
    ids = [ident for ident, _ in parse_chorale_events(text)]
    assert ids[0] == 1 and ids[-1] == 285 and len(set(ids)) == 100


@_real("dodgers")
def test_real_dodgers():
    counts = load_dodgers_counts()
    assert len(counts) == 50_400
    assert counts.count(-1) == 2903
    present = [c for c in counts if c >= 0]
    assert min(present) == 0 and max(present) == 90
    np.testing.assert_array_equal(quantile_edges(counts, 10), [3, 6, 11, 17, 22, 26, 29, 33, 38])
    seqs = load_dodgers()
    assert all(len(s) >= 3 for s in seqs)
    assert {x for s in seqs for x in s} == set(range(10))
    assert len(seqs) == 34 and sum(len(s) for s in seqs) == 47_472
    assert len({x for s in load_dodgers(n_bins=4) for x in s}) == 4


@_real("dodgers")
def test_real_dodgers_events():
    events = load_dodgers_events()
    assert len(events) == 81
    assert events[0]["date"] == dt.date(2005, 4, 12)
    assert events[0]["attendance"] == 55_892
    assert all(e["result"] in ("W", "L") for e in events)
    assert all(not str(e["score"]).endswith("\xa0") for e in events)


@pytest.mark.parametrize("argv", [["-m", "streamspec", "paper", "real", "--quick"],
                                  ["demos/paper.py", "real", "--quick"]])
def test_paper_real_without_data_says_where_it_looked_in_one_line(argv, tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    missing = tmp_path / "no-data-here"
    env = {**os.environ, "STREAMSPEC_DATA": str(missing)}
    proc = subprocess.run([sys.executable, *argv, "--out", str(tmp_path / "out")], cwd=root,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "STREAMSPEC_DATA" in lines[0]
    assert not (tmp_path / "out").exists()

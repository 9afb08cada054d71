"""Parallel backfills (connectors.backfill): chunking, exact reduction, executors."""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.backfill import (
    Chunk,
    backfill,
    backfill_result,
    chunk_bounds,
    count_chunk,
    file_chunks,
    reduce_in_order,
    serial_count,
)
from connectors.files import FileSource
from connectors.records import RecordFormat
from streamspec.streaming.accumulator import MomentAccumulator

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(acc: MomentAccumulator, ref: MomentAccumulator) -> None:
    """Same labels in the same order, same counts, and the same open stream tails."""
    assert acc.symbols == ref.symbols
    assert acc.n_triples == ref.n_triples
    assert np.array_equal(acc.counts(), ref.counts())
    assert sorted(map(repr, acc.keys)) == sorted(map(repr, ref.keys))
    # the tails agree if continuing every open stream gives the same counts
    acc, ref = acc.copy(), ref.copy()
    for key in ref.keys:
        for x in ("a", "b"):
            acc.learn_one(x, key)
            ref.learn_one(x, key)
    assert np.array_equal(acc.counts(), ref.counts())


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    if name.endswith(".gz"):
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------- chunking


@FAST
@given(data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\n\n", b"\r\n", b"xyz"]), max_size=40)
       .map(b"".join), chunk_bytes=st.integers(1, 24))
def test_every_line_is_in_exactly_one_chunk(data: bytes, chunk_bytes: int) -> None:
    bounds = chunk_bounds(data, chunk_bytes)
    # contiguous, non-empty, covering the data
    assert [s for s, _ in bounds[:1]] == ([0] if data else [])
    assert all(s < e for s, e in bounds)
    assert all(e == s2 for (_, e), (s2, _) in zip(bounds, bounds[1:], strict=False))
    assert (bounds[-1][1] if bounds else 0) == len(data)
    # every cut is a line start, so the lines of the chunks are the lines of the data
    assert all(data[s - 1:s] == b"\n" for s, _ in bounds[1:])
    assert [ln for s, e in bounds for ln in data[s:e].splitlines(keepends=True)] == \
        data.splitlines(keepends=True)
    # a chunk starts after the first line break at or after its nominal start
    starts = {s for s, _ in bounds}
    for nominal in range(chunk_bytes, len(data), chunk_bytes):
        nl = data.find(b"\n", nominal)
        assert (len(data) if nl < 0 else nl + 1) in starts | {len(data)}
    # the file version reads only around the cuts and agrees
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "f.txt", data)
        assert [(c.start, c.end) for c in file_chunks([path], chunk_bytes)] == bounds


def test_gzip_and_empty_files_are_chunked_whole(tmp_path: Path) -> None:
    gz = write(tmp_path, "a.txt.gz", b"abc\n" * 100)
    empty = write(tmp_path, "e.txt", b"")
    plain = write(tmp_path, "p.txt", b"abc\n" * 10)
    chunks = file_chunks([gz, empty, plain], 8)
    assert chunks[0] == Chunk(str(gz))
    assert [c.path for c in chunks[1:]] == [str(plain)] * 5
    with pytest.raises(ValueError, match="chunk_bytes"):
        file_chunks([plain], 0)


def test_reduce_in_order_is_a_balanced_ordered_tree() -> None:
    calls = []

    def join(a, b):
        calls.append((a, b))
        return a + b

    assert reduce_in_order(list("abcdefg"), join) == "abcdefg"
    assert len(calls) == 6
    assert ("ab", "cd") in calls  # pairs are joined level by level, not left to right
    with pytest.raises(ValueError):
        reduce_in_order([])


# ----------------------------------------------------------------------------- exactness

KEYS = st.sampled_from(["u1", "u2", "u3", "7"])
SYMBOLS = st.sampled_from(["a", "b", "c", "d", "e", "é"])
ROW = st.tuples(KEYS, st.one_of(SYMBOLS, st.just("")), st.booleans())


def csv_bytes(rows, header: bool) -> bytes:
    lines = ["key,symbol,ts,end"] if header else []
    for key, symbol, end in rows:
        lines.append(f"{key},{symbol},,{int(end or not symbol)}")
    return ("\n".join(lines) + "\n").encode()


@FAST
@given(files=st.lists(st.lists(ROW, max_size=30), min_size=1, max_size=3),
       chunk_bytes=st.integers(1, 64), header=st.booleans())
def test_keyed_backfill_equals_one_accumulator_fed_in_order(files, chunk_bytes, header) -> None:
    fmt = RecordFormat("csv")
    with tempfile.TemporaryDirectory() as folder:
        paths = [write(Path(folder), f"f{i}.csv", csv_bytes(rows, header))
                 for i, rows in enumerate(files)]
        result = backfill_result(paths, fmt, n_workers=1, chunk_bytes=chunk_bytes)
        ref = serial_count(paths, fmt)
    assert_same(result.acc, ref)
    assert result.records == sum(1 for rows in files for _, s, _ in rows if s)
    assert result.errors == {}


TEXT = st.lists(st.sampled_from(["a", "B", "c", " ", "\n", "\r\n", "\r", "é", "\ufeff", "xyzw", "7",
                                "'", ",", "-", "Σ"]),
                max_size=60).map("".join)


@FAST
@given(texts=st.lists(TEXT, min_size=1, max_size=2), chunk_bytes=st.integers(1, 40),
       lowercase=st.booleans(), keep=st.sampled_from([None, "abc", "aBc \r"]),
       end_each_line=st.booleans(), max_bytes=st.sampled_from([3, 5, 1 << 20]),
       encoding=st.sampled_from(["chars", "chars", "tokens", "words"]), int_symbols=st.booleans(),
       key=st.sampled_from([None, "doc", ("doc", 1)]))
def test_text_backfill_equals_the_parser(texts, chunk_bytes, lowercase, keep, end_each_line,
                                         max_bytes, encoding, int_symbols, key) -> None:
    fmt = RecordFormat(encoding, lowercase=lowercase, keep=keep if encoding == "chars" else None,
                       end_each_line=end_each_line, max_bytes=max_bytes,
                       int_symbols=int_symbols, key=key)
    with tempfile.TemporaryDirectory() as folder:
        paths = [write(Path(folder), f"t{i}.txt", t.encode()) for i, t in enumerate(texts)]
        acc = backfill(paths, fmt, n_workers=1, chunk_bytes=chunk_bytes)
        ref = serial_count(paths, fmt)
    assert_same(acc, ref)


def test_chars_fast_path_counts_like_the_parser(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    letters = rng.choice(list(b"abcdXYZ \r"), size=50_000).astype(np.uint8)
    letters[rng.random(letters.size) < 0.02] = ord("\n")
    path = write(tmp_path, "big.txt", letters.tobytes())
    fmt = RecordFormat("chars", lowercase=True, keep="abcdxy \r")
    result = backfill_result([path, path], fmt, n_workers=1, chunk_bytes=4096)
    ref = serial_count([path], fmt)
    ref_twice = ref.copy()
    for rec, _ in FileSource([str(path)], fmt):  # the same file again, continuing the stream
        ref_twice.learn_one(rec.symbol, rec.key)
    assert_same(result.acc, ref_twice)
    # every line break of a line with characters is read as a space (kept by keep)
    spaces = sum(1 for line in letters.tobytes().split(b"\n")[:-1] if line.strip(b"\r"))
    assert result.records == 2 * (int(np.isin(letters, list(b"abcdXY ")).sum()) + spaces)
    assert result.lines > 0


def test_alphabet_fixes_the_first_labels(tmp_path: Path) -> None:
    path = write(tmp_path, "t.txt", b"cabbage\nbad cab\n")
    acc = backfill([path], RecordFormat("chars", keep="abcdeg"), n_workers=1, chunk_bytes=5,
                   alphabet="abcdefg")
    assert acc.symbols == list("abcdefg")
    ref = MomentAccumulator(window=1)  # the chunks count triples
    ref.alphabet.add_labels("abcdefg")
    ref.learn_many(list("cabbagebadcab"))
    assert np.array_equal(acc.counts(), ref.counts())


def test_csv_header_is_found_by_every_chunk_and_bad_lines_are_skipped(tmp_path: Path) -> None:
    rows = "".join(f"{t},{'xyz'[t % 3]},k{t % 4}\n" for t in range(200))
    path = write(tmp_path, "h.csv", ("ts,symbol,key\n" + rows + "oops,\"\n" + rows).encode())
    gz = write(tmp_path, "h.csv.gz", ("ts,symbol,key\n" + rows).encode())
    fmt = RecordFormat("csv")
    result = backfill_result([path, gz], fmt, n_workers=1, chunk_bytes=100)
    assert_same(result.acc, serial_count([path, gz], fmt))
    assert result.records == 600
    assert result.errors == {"bad-csv": 1}
    assert sorted(result.acc.keys) == ["k0", "k1", "k2", "k3"]


def test_jsonl_keys_recurring_across_files_continue(tmp_path: Path) -> None:
    lines = [json.dumps({"key": f"s{i % 3}", "symbol": i % 5, **({"end": 1} if i % 17 == 0 else {})})
             for i in range(300)]
    a = write(tmp_path, "a.jsonl", "\n".join(lines[:150]).encode())  # no final line break
    b = write(tmp_path, "b.jsonl", ("\n".join(lines[150:]) + "\n").encode())
    fmt = RecordFormat("jsonl")
    acc = backfill([a, b], fmt, n_workers=1, chunk_bytes=200)
    assert_same(acc, serial_count([a, b], fmt))
    assert acc.n_triples > 0


# ----------------------------------------------------------------------------- executors


def keyed_files(folder: Path) -> list[Path]:
    """Two CSV files and a chars file whose streams run across many chunk borders."""
    rng = np.random.default_rng(1)
    paths = []
    for i in range(2):
        rows = [(f"user{rng.integers(5)}", "abcdef"[rng.integers(6)], rng.random() < 0.02)
                for _ in range(3000)]
        paths.append(write(folder, f"k{i}.csv", csv_bytes(rows, header=True)))
    text = "".join(rng.choice(list("abcde\n"), size=20_000))
    paths.append(write(folder, "c.txt", text.encode()))
    return paths


def test_process_pool_equals_serial(tmp_path: Path, monkeypatch, caplog) -> None:
    import logging

    import connectors.backfill as bf

    # a pool even for this small input on any machine (it would count serially otherwise)
    monkeypatch.setattr(bf, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(bf, "_cpus", lambda: 2)
    monkeypatch.setattr(bf, "_load", lambda: 0.0)
    paths = keyed_files(tmp_path)[:2]
    fmt = RecordFormat("csv")
    seen: list[tuple[int, int]] = []
    with caplog.at_level(logging.INFO, logger="streamspec.backfill"):
        result = backfill_result(paths, fmt, n_workers=2, chunk_bytes=4096,
                                 progress=lambda done, total: seen.append((done, total)))
    assert "path=2 processes" in caplog.text
    total = sum(p.stat().st_size for p in paths)
    assert seen[-1] == (total, total) and len(seen) > 10
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)  # the bar only moves forward
    assert len(file_chunks(paths, 4096)) > 10
    assert_same(result.acc, serial_count(paths, fmt))
    assert result.records == sum(1 for rec, _ in FileSource([str(p) for p in paths], fmt)
                                 if rec.symbol is not None)


def test_dask_local_cluster_equals_serial(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    paths = keyed_files(tmp_path)
    csv_fmt, chars_fmt = RecordFormat("csv"), RecordFormat("chars")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        # a LocalCluster object, then a scheduler address (what --dask passes)
        keyed = backfill(paths[:2], csv_fmt, scheduler=cluster, chunk_bytes=3000)
        chars = backfill(paths[2:], chars_fmt, scheduler=cluster.scheduler_address, chunk_bytes=1000)
        with distributed.Client(cluster) as client:
            assert len(client.scheduler_info()["workers"]) == 2
            # and a Client: the merges run as tasks on the workers too
            again = backfill(paths[:1], csv_fmt, scheduler=client, chunk_bytes=2000)
    assert len(file_chunks(paths[:2], 3000)) > 10 and len(file_chunks(paths[2:], 1000)) > 10
    assert_same(keyed, serial_count(paths[:2], csv_fmt))
    assert_same(chars, serial_count(paths[2:], chars_fmt))
    assert_same(again, serial_count(paths[:1], csv_fmt))


def test_dask_local_starts_and_stops_its_own_cluster(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = keyed_files(tmp_path)[2]
    acc = backfill([path], RecordFormat("chars"), scheduler="local", n_workers=2, chunk_bytes=2000)
    assert_same(acc, serial_count([path], RecordFormat("chars")))


def test_dask_missing_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, "t.txt", b"abc\n")
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"streamspec\[dask\]"):
        backfill([path], RecordFormat(), scheduler="tcp://127.0.0.1:1")


def test_count_chunk_of_a_range_reads_only_its_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "t.txt", b"aaaa\nbbbb\ncccc\n")
    res = count_chunk(Chunk(str(path), 5, 10), RecordFormat())
    assert res.acc.symbols == ["b", " "]  # its line break is read as a space
    assert (res.records, res.lines) == (5, 1)


@pytest.mark.parametrize("first", [b"z" * 21, b"z" * 22, b"z" * 25, b"", b"\xff"])
def test_csv_header_after_an_odd_first_line(tmp_path: Path, first: bytes) -> None:
    # FileSource parses a first line of up to max_bytes + 1 bytes (which makes it the header
    # candidate even when it is malformed) and drops a longer one unparsed
    rows = "".join(f"{'xy'[t % 2]},k{t % 3}\n" for t in range(60))
    path = write(tmp_path, "odd.csv", first + b"\nsymbol,key\n" + rows.encode())
    fmt = RecordFormat("csv", max_bytes=20)
    result = backfill_result([path], fmt, n_workers=1, chunk_bytes=30)
    ref = serial_count([path], fmt)
    assert_same(result.acc, ref)
    records = [rec for rec, _ in FileSource([str(path)], fmt)]
    assert result.records == len(records) >= 60
    # the header line is a row exactly when the odd first line was the header candidate
    assert ("symbol" in result.acc.keys) == (len(first) <= 21)


def test_workers_fall_back_to_this_process_when_a_pool_cannot_be_faster(tmp_path: Path,
                                                                        monkeypatch, caplog):
    import logging

    import connectors.backfill as bf

    def no_pool(*args, **kwargs):
        raise AssertionError("a process pool was started")

    monkeypatch.setattr(bf, "_run_pool", no_pool)
    paths = keyed_files(tmp_path)[:2]
    fmt = RecordFormat("csv")
    with caplog.at_level(logging.INFO, logger="streamspec.backfill"):
        result = backfill_result(paths, fmt, n_workers=4, chunk_bytes=4096)  # a few KiB
    assert "path=serial (input under 32 MiB)" in caplog.text
    assert_same(result.acc, serial_count(paths, fmt))
    monkeypatch.setattr(bf, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(bf, "_cpus", lambda: 1)
    assert bf.pool_size(file_chunks(paths, 4096), 4) == (1, "one CPU")
    monkeypatch.setattr(bf, "_cpus", lambda: 8)
    monkeypatch.setattr(bf, "_load", lambda: 0.0)
    chunks = file_chunks(paths, 4096)
    assert bf.pool_size(chunks, 4) == (4, "")
    assert bf.pool_size(chunks[:3], None) == (3, "")  # never more processes than chunks
    monkeypatch.setattr(bf, "_load", lambda: 6.5)  # other jobs keep 6.5 of the 8 CPUs busy
    assert bf.pool_size(chunks, 4) == (2, "")
    monkeypatch.setattr(bf, "_load", lambda: 8.2)
    assert bf.pool_size(chunks, 4) == (1, "no idle CPU: load average 8.2 on 8 CPUs")


UNICODE = st.lists(st.sampled_from(["a", "\u00e9", "\u00c9", "\u0130", "\u03a3", "\u03c3", "\u4e2d",
                                    "\U0001f600", " ", "\n", "\r\n", "\t", "\u2028", "xy"]),
                   max_size=80).map("".join)


@FAST
@given(text=UNICODE, lowercase=st.booleans(), encoding=st.sampled_from(["chars", "tokens"]),
       keep=st.sampled_from([None, "a\u00e9\u4e2d \U0001f600"]))
def test_unicode_fast_paths_count_like_the_parser(text, lowercase, encoding, keep) -> None:
    fmt = RecordFormat(encoding, lowercase=lowercase, keep=keep if encoding == "chars" else None)
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "u.txt", text.encode())
        result = backfill_result([path], fmt, n_workers=1, chunk_bytes=16)
        ref = serial_count([path], fmt)
        n_ref = sum(1 for rec, _ in FileSource([str(path)], fmt) if rec.symbol is not None)
    assert_same(result.acc, ref)
    assert result.records == n_ref


def test_utf8_text_is_counted_without_the_line_by_line_parser(tmp_path: Path, monkeypatch):
    import connectors.chunk_counting as bf

    def no_parser(*args, **kwargs):
        raise AssertionError("counted line by line")

    text = "Caf\u00e9 cr\u00e8me, na\u00efve \u4e2d\u6587 \U0001f600 words\r\n" * 500
    path = write(tmp_path, "book.txt", text.encode())
    refs = {enc: serial_count([path], RecordFormat(enc, lowercase=True))
            for enc in ("chars", "tokens")}
    monkeypatch.setattr(bf, "_count_lines", no_parser)
    for enc, ref in refs.items():
        assert_same(backfill([path], RecordFormat(enc, lowercase=True), n_workers=1), ref)
    # a block counted in many pieces (as blocks of megabytes are) gives the same counts
    monkeypatch.setattr(bf, "_UNICODE_PIECE", 100)
    monkeypatch.setattr(bf, "_TOKENS_PIECE", 70)
    for enc, ref in refs.items():
        assert_same(backfill([path], RecordFormat(enc, lowercase=True), n_workers=1), ref)

"""Tests of connectors.files: reading, following, rotating and resuming text files."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.files import FileSource, LineInfo, Position
from connectors.records import MalformedRecord, Record, RecordFormat

TOKENS = RecordFormat("tokens")
CHARS = RecordFormat("chars")
JSONL = RecordFormat("jsonl")
FAST = 0.01  # poll interval of follow-mode tests


def syms(items):
    return [rec.symbol for rec, _ in items]


def read_all(*args, **kwargs):
    src = FileSource(*args, **kwargs)
    return src, list(src)


class Follower:
    """Iterates a follow-mode source in a thread, collecting what it yields."""

    def __init__(self, source: FileSource):
        self.source = source
        self.items: list[tuple[Record, Position]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for item in self.source:
                self.items.append(item)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def wait_for(self, n: int, timeout: float = 3.0) -> list:
        deadline = time.monotonic() + timeout
        while len(self.items) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(self.items) >= n, f"got {syms(self.items)} after {timeout}s, expected {n}"
        return self.items

    def settle(self, seconds: float = 0.1) -> None:
        """Let several polls happen."""
        time.sleep(seconds)

    def finish(self) -> list:
        self.source.stop()
        self.thread.join(2.0)
        assert not self.thread.is_alive(), "the source did not stop"
        assert self.error is None, self.error
        return self.items


def follow(path: Path, data: bytes, poll_interval: float = FAST) -> tuple[FileSource, Follower]:
    """Write ``data`` to ``path`` and follow it (tokens) in a :class:`Follower`."""
    path.write_bytes(data)
    src = FileSource(path, TOKENS, follow=True, poll_interval=poll_interval)
    return src, Follower(src)


def read_then_stop(src: FileSource, n: int) -> list:
    """Iterate ``src``, stopping it once ``n`` symbols are read; the symbols read."""
    got = []
    for rec, _ in src:
        got.append(rec.symbol)
        if len(got) == n:
            src.stop()
    return got


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


# ----------------------------------------------------------------------------- Position


def test_position_dict_round_trip_through_json():
    p = Position("a/b.txt", 123, 40, 3, 30, 2)
    assert Position.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    assert Position.from_dict({"path": "x", "inode": 1, "offset": 2, "line": 1}) == Position(
        "x", 1, 2, 1, 0, 0
    )


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"path": "x", "inode": 1, "offset": 2}, "missing line"),
        ({"path": "x", "inode": 1, "offset": -2, "line": 1}, "offset must be"),
        ({"path": "x", "inode": 1, "offset": 2, "line": True}, "line must be"),
        ({"path": "", "inode": 1, "offset": 2, "line": 1}, "path must be"),
        ({"path": "x", "inode": 1, "offset": 2, "line": 1, "extra": 0}, "unknown fields extra"),
        (["x"], "must be a dict"),
    ],
)
def test_position_from_dict_rejects_bad_input(data, match):
    with pytest.raises(ValueError, match=match):
        Position.from_dict(data)


# ----------------------------------------------------------------------------- one pass


def test_one_pass_reads_files_in_order_with_exact_offsets(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"x y\n\nz\n")
    b.write_bytes(b"w\r\nlast")  # no final newline: consumed at the end in one pass
    src, items = read_all([a, b], TOKENS)
    assert syms(items) == ["x", "y", "z", "w", "last"]
    offsets = [(pos.path, pos.line, pos.line_start, pos.offset, pos.skip) for _, pos in items]
    assert offsets == [
        (str(a), 1, 0, 4, 1),
        (str(a), 1, 0, 4, 0),
        (str(a), 3, 5, 7, 0),
        (str(b), 1, 0, 3, 0),
        (str(b), 2, 3, 7, 0),
    ]
    assert items[0][1].inode == os.stat(a).st_ino
    assert src.position() == {str(a): items[2][1].to_dict(), str(b): items[4][1].to_dict()}
    assert src.errors == 0


def test_every_offset_ends_a_line(tmp_path):
    path = tmp_path / "t.txt"
    data = "héllo wörld\n\n€ 2\nend".encode()
    path.write_bytes(data)
    _, items = read_all(path, CHARS)
    assert "".join(syms(items)) == "héllo wörld € 2 end"  # breaks are spaces, blank lines none
    for _, pos in items:
        assert pos.offset == len(data) or data[pos.offset - 1 : pos.offset] == b"\n"
        assert pos.line_start == 0 or data[pos.line_start - 1 : pos.line_start] == b"\n"


def test_single_path_and_default_key(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("ab\n")
    _, items = read_all(str(path), RecordFormat("chars", key="doc"))
    assert [rec for rec, _ in items] == [Record("doc", "a"), Record("doc", "b"), Record("doc", " ")]


def test_gzip_files_are_read_and_resumed(tmp_path):
    path = tmp_path / "words.txt.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"one two\nthree\nfour five\n")
    _, items = read_all(path, TOKENS)
    assert syms(items) == ["one", "two", "three", "four", "five"]
    assert items[2][1].offset == len(b"one two\nthree\n")  # decompressed offsets
    _, rest = read_all(path, TOKENS, start=items[3][1])
    assert syms(rest) == ["five"]


def test_malformed_lines_are_counted_and_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"symbol": "a"}\nnot json\n{"key": "k"}\n\xff\n{"symbol": "b"}\n')
    src, items = read_all(path, JSONL)
    assert syms(items) == ["a", "b"]
    assert src.errors == 3
    assert src.errors_by_reason == {"bad-json": 1, "missing-field": 1, "undecodable": 1}


def test_on_error_gets_the_line_and_the_exception(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"symbol": "a"}\n{oops\n{"symbol": "b"}\n')
    seen = []
    src, items = read_all(path, JSONL, on_error=lambda info, exc: seen.append((info, exc)))
    assert syms(items) == ["a", "b"]
    ((info, exc),) = seen
    assert info == LineInfo(str(path), 2, 16, b"{oops\n")
    assert isinstance(exc, MalformedRecord) and exc.reason == "bad-json"
    assert src.errors == 1


def test_on_error_may_raise_and_the_bad_line_is_not_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"symbol": "a"}\n{oops\n{"symbol": "b"}\n')

    def strict(info, exc):
        raise exc

    src = FileSource(path, JSONL, on_error=strict)
    got = []
    with pytest.raises(MalformedRecord):
        for rec, _ in src:
            got.append(rec.symbol)
    assert got == ["a"]
    # resuming reads the bad line again rather than silently passing it
    again = FileSource(path, JSONL, start=src.position())
    assert syms(list(again)) == ["b"] and again.errors == 1


def test_oversized_lines_are_skipped_without_losing_the_next(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"ok\n" + b"x" * 100 + b"\nfine\n" + b"y" * 50)
    errors = []
    src, items = read_all(path, RecordFormat("tokens", max_bytes=8),
                          on_error=lambda info, exc: errors.append((info, exc.reason)))
    assert syms(items) == ["ok", "fine"]
    assert [(i.line, i.offset, r) for i, r in errors] == [
        (2, 3, "oversized"), (4, 109, "oversized")
    ]
    assert len(errors[0][0].data) <= 256
    assert items[1][1] == Position(str(path), os.stat(path).st_ino, 109, 3, 104, 0)
    assert src.position()[str(path)]["offset"] == path.stat().st_size  # the tail is consumed


def test_csv_header_still_applies_after_resuming(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("ts,symbol,key\n1,a,u1\n2,b,u2\n3,c,u1\n")
    fmt = RecordFormat("csv")
    _, items = read_all(path, fmt)
    assert [rec for rec, _ in items] == [
        Record("u1", "a", 1.0), Record("u2", "b", 2.0), Record("u1", "c", 3.0)
    ]
    _, rest = read_all(path, fmt, start=items[0][1])
    assert [rec for rec, _ in rest] == [Record("u2", "b", 2.0), Record("u1", "c", 3.0)]


def test_start_accepts_positions_in_several_forms(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("1 2\n")
    b.write_text("3 4\n")
    src, items = read_all([a, b], TOKENS)
    after_two = items[1][1]
    saved = json.loads(json.dumps({str(a): after_two.to_dict()}))
    for start in (after_two, saved, [after_two], after_two.to_dict(), [after_two.to_dict()]):
        _, rest = read_all([a, b], TOKENS, start=start)
        assert syms(rest) == ["3", "4"], start
    # a position for a path the source does not read is ignored
    _, rest = read_all([b], TOKENS, start=saved)
    assert syms(rest) == ["3", "4"]
    with pytest.raises(ValueError, match="is for"):
        FileSource([a, b], TOKENS, start={str(b): after_two})


def test_a_shorter_or_replaced_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b c\n")
    src, _ = read_all(path, TOKENS)
    saved = src.position()
    path.write_text("d\n")  # truncated and rewritten in place: offset beyond the end
    _, items = read_all(path, TOKENS, start=saved)
    assert syms(items) == ["d"]
    path.unlink()
    path.write_text("e f g h i j\n")  # a different file (new inode, no rotated sibling)
    stale = dict(saved[str(path)], inode=saved[str(path)]["inode"] + 10**9)
    _, items = read_all(path, TOKENS, start={str(path): stale})
    assert syms(items) == list("efghij")


def test_resume_finds_a_rotated_file_by_inode(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("a\nb\nc\n")
    src = FileSource(path, TOKENS)
    first = list(itertools.islice(iter(src), 1))
    assert syms(first) == ["a"]
    saved = src.position()
    os.rename(path, tmp_path / "app.log.1")
    path.write_text("d\n")
    _, rest = read_all(path, TOKENS, start=saved)
    assert syms(rest) == ["b", "c", "d"]
    assert rest[0][1].inode != rest[2][1].inode


def test_stop_ends_one_pass_reading(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcdef\n")
    src = FileSource(path, CHARS)
    assert read_then_stop(src, 2) == ["a", "b"]
    assert src.stopped
    assert src.position()[str(path)]["skip"] == 2
    _, rest = read_all(path, CHARS, start=src.position())
    assert "".join(syms(rest)) == "cdef "


def test_iterating_again_continues(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b\n")
    src = FileSource(path, TOKENS)
    assert syms(list(src)) == ["a", "b"]
    append(path, b"c\n")
    assert syms(list(src)) == ["c"]


def test_constructor_validation(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("x\n")
    with pytest.raises(FileNotFoundError):
        FileSource(tmp_path / "missing.txt", TOKENS)
    with pytest.raises(ValueError, match="gzip"):
        FileSource(tmp_path / "x.gz", TOKENS, follow=True)
    with pytest.raises(ValueError, match="poll_interval"):
        FileSource(path, TOKENS, poll_interval=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        FileSource(path, TOKENS, idle_timeout=-1)
    with pytest.raises(ValueError, match="distinct"):
        FileSource([path, str(path)], TOKENS)
    with pytest.raises(ValueError, match="at least one"):
        FileSource([], TOKENS)
    with pytest.raises(ValueError, match="RecordFormat"):
        FileSource(path, "tokens")
    with pytest.raises(ValueError, match="callable"):
        FileSource(path, TOKENS, on_error="log")


def test_one_source_cannot_be_iterated_twice_at_once(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a b\n")
    src = FileSource(path, TOKENS)
    it = iter(src)
    next(it)
    with pytest.raises(RuntimeError, match="already"):
        iter(src)
    it.close()
    assert syms(list(src)) == ["b"]


# ----------------------------------------------------------------------------- resume property

line_strategy = st.one_of(
    st.text(alphabet="ab c", max_size=6).map(str.encode),  # blank, one or many records
    st.just(b"\xff bad"),  # undecodable: counted and skipped
)


def write_lines(path: Path, lines: list[bytes], final_newline: bool) -> None:
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path.write_bytes(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.lists(
        st.tuples(st.lists(line_strategy, max_size=6), st.booleans()), min_size=1, max_size=3
    ),
    encoding=st.sampled_from(["chars", "tokens"]),
    data=st.data(),
)
def test_resume_after_any_k_records_yields_exactly_the_rest(files, encoding, data):
    fmt = RecordFormat(encoding)
    with tempfile.TemporaryDirectory() as folder:
        paths = []
        for i, (lines, final_newline) in enumerate(files):
            paths.append(Path(folder, f"f{i}.txt"))
            write_lines(paths[-1], lines, final_newline)
        full_src, full = read_all(paths, fmt)
        k = data.draw(st.integers(0, len(full)), label="k")

        # 1. from the positions handed out with the first k records (the last one per
        # file; a file without a position is read from its start)
        start = {pos.path: pos for _, pos in full[:k]}
        _, rest = read_all(paths, fmt, start=start)
        assert [r for r, _ in rest] == [r for r, _ in full[k:]]

        # 2. from source.position() after taking k records, through JSON
        src = FileSource(paths, fmt)
        it = iter(src)
        head = list(itertools.islice(it, k))
        it.close()
        saved = json.loads(json.dumps(src.position()))
        resumed = FileSource(paths, fmt, start=saved)
        tail = list(resumed)
        assert [r for r, _ in head + tail] == [r for r, _ in full]
        assert [p for _, p in tail] == [p for _, p in full[k:]]
        # no malformed line is reported twice or missed
        assert src.errors + resumed.errors == full_src.errors


# ----------------------------------------------------------------------------- follow mode


def test_follow_reads_lines_as_a_writer_appends_them(tmp_path):
    path = tmp_path / "live.txt"
    _, f = follow(path, b"")

    def writer():
        for i in range(20):
            append(path, f"w{i}\n".encode())
            time.sleep(0.003)

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    f.wait_for(20)
    items = f.finish()
    assert syms(items) == [f"w{i}" for i in range(20)]
    assert items[-1][1].offset == path.stat().st_size


def test_follow_waits_for_the_newline_of_a_partial_line(tmp_path):
    path = tmp_path / "live.txt"
    src, f = follow(path, b"a\nhel")
    f.wait_for(1)
    f.settle()
    assert syms(f.items) == ["a"]
    assert src.position()[str(path)]["offset"] == 2  # the partial line is not consumed
    append(path, b"lo wor")
    f.settle()
    assert syms(f.items) == ["a"]
    append(path, b"ld\n")
    f.wait_for(3)
    items = f.finish()
    assert syms(items) == ["a", "hello", "world"]
    assert items[-1][1].offset == len(b"a\nhello world\n")


def test_follow_several_files_side_by_side(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("a1\n")
    b.write_text("b1\n")
    f = Follower(FileSource([a, b], TOKENS, follow=True, poll_interval=FAST))
    f.wait_for(2)
    append(b, b"b2\n")
    append(a, b"a2\n")
    f.wait_for(4)
    items = f.finish()
    assert sorted(syms(items)) == ["a1", "a2", "b1", "b2"]
    assert [s for s in syms(items) if s.startswith("a")] == ["a1", "a2"]


def test_follow_waits_for_a_missing_file(tmp_path):
    path = tmp_path / "later.txt"
    f = Follower(FileSource(path, TOKENS, follow=True, poll_interval=FAST))
    f.settle(0.05)
    assert f.items == [] and f.thread.is_alive()
    path.write_text("here\n")
    f.wait_for(1)
    assert syms(f.finish()) == ["here"]


def test_follow_rotation_by_rename(tmp_path):
    path = tmp_path / "app.log"
    src, f = follow(path, b"a\nb\n")
    f.wait_for(2)
    old_inode = path.stat().st_ino
    with open(path, "ab") as writer:  # a writer that still holds the old file
        os.rename(path, tmp_path / "app.log.1")
        f.settle(0.05)  # the path is missing for a while: keep reading the old file
        writer.write(b"c\npartial-at-rotation")
        writer.flush()
        f.wait_for(3)
        path.write_bytes(b"d\ne\n")
    f.wait_for(6)
    items = f.finish()
    assert syms(items) == ["a", "b", "c", "partial-at-rotation", "d", "e"]
    assert {p.inode for _, p in items[:4]} == {old_inode}
    assert {p.inode for _, p in items[4:]} == {path.stat().st_ino}
    assert items[4][1].line == 1 and items[5][1].offset == 4
    assert src.position()[str(path)] == items[5][1].to_dict()


def test_follow_truncation_rereads_from_the_start(tmp_path):
    path = tmp_path / "app.log"
    src, f = follow(path, b"first line\nsecond line\n")
    f.wait_for(4)
    inode = path.stat().st_ino
    with open(path, "r+b") as w:  # copytruncate: same inode, shorter content
        w.truncate(0)
        w.write(b"x\n")
    f.wait_for(5)
    append(path, b"y\n")
    f.wait_for(6)
    items = f.finish()
    assert syms(items) == ["first", "line", "second", "line", "x", "y"]
    assert items[4][1] == Position(str(path), inode, 2, 1, 0, 0)
    assert items[5][1].offset == 4


def test_stop_from_another_thread_ends_a_long_wait(tmp_path):
    path = tmp_path / "quiet.txt"
    _, f = follow(path, b"a\n", poll_interval=5.0)
    f.wait_for(1)
    f.settle(0.05)
    t0 = time.monotonic()
    items = f.finish()
    assert time.monotonic() - t0 < 1.0  # not the 5 s poll interval
    assert syms(items) == ["a"]


def test_idle_timeout_ends_following(tmp_path):
    path = tmp_path / "quiet.txt"
    path.write_text("a b\n")
    t0 = time.monotonic()
    src, items = read_all(path, TOKENS, follow=True, poll_interval=FAST, idle_timeout=0.15)
    elapsed = time.monotonic() - t0
    assert syms(items) == ["a", "b"]
    assert 0.15 <= elapsed < 1.5
    assert not src.stopped


def test_follow_does_not_busy_spin(tmp_path):
    path = tmp_path / "quiet.txt"
    _, f = follow(path, b"a\n", poll_interval=0.05)
    f.wait_for(1)
    cpu0, wall0 = time.process_time(), time.monotonic()
    time.sleep(0.5)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    f.finish()
    assert cpu < 0.4 * wall, f"{cpu:.3f}s of CPU in {wall:.3f}s while idle"


def test_follow_resume_after_stop(tmp_path):
    path = tmp_path / "live.txt"
    path.write_text("a b c\nd\n")
    src = FileSource(path, TOKENS, follow=True, poll_interval=FAST)
    assert read_then_stop(src, 2) == ["a", "b"]
    saved = json.loads(json.dumps(src.position()))
    append(path, b"e\n")
    f = Follower(FileSource(path, TOKENS, follow=True, poll_interval=FAST, start=saved))
    f.wait_for(3)
    append(path, b"f\n")
    f.wait_for(4)
    assert syms(f.finish()) == ["c", "d", "e", "f"]


def test_follow_resume_inside_a_rotated_file(tmp_path):
    path = tmp_path / "app.log"
    path.write_text("a\nb\n")
    src = FileSource(path, TOKENS, follow=True, poll_interval=FAST)
    it = iter(src)
    assert next(it)[0].symbol == "a"
    it.close()
    saved = src.position()
    os.rename(path, tmp_path / "app.log.1")
    path.write_text("c\n")
    f = Follower(FileSource(path, TOKENS, follow=True, poll_interval=FAST, start=saved))
    f.wait_for(2)
    append(path, b"d\n")
    f.wait_for(3)
    assert syms(f.finish()) == ["b", "c", "d"]


def test_follow_skips_oversized_partial_lines_without_buffering_them(tmp_path):
    path = tmp_path / "live.txt"
    path.write_bytes(b"ok\n")
    errors = []
    src = FileSource(path, RecordFormat("tokens", max_bytes=16), follow=True,
                     poll_interval=FAST, on_error=lambda info, exc: errors.append(exc.reason))
    f = Follower(src)
    f.wait_for(1)
    for _ in range(5):
        append(path, b"z" * 40)  # one long line arriving in pieces
        f.settle(0.02)
    append(path, b"\nnext\n")
    f.wait_for(2)
    assert syms(f.finish()) == ["ok", "next"]
    assert errors == ["oversized"]


# ---------------------------------------------------------------------- check_files


def test_check_files_refuses_binary_files_and_directories(tmp_path):
    from connectors.files import InputError, check_files

    elf = tmp_path / "prog"
    elf.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    png = tmp_path / "x.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1"))
    for path, words in [(elf, ["NUL byte", "ELF"]), (png, ["NUL byte", "PNG"]),
                        (latin1, ["not UTF-8", "0xe9"]), (tmp_path, ["is a directory"])]:
        for fmt in (CHARS, TOKENS, JSONL, RecordFormat("csv")):
            with pytest.raises(InputError) as exc:
                check_files([path], fmt)
            assert str(path) in str(exc.value)
            for word in words:
                assert word in str(exc.value)
    with pytest.raises(FileNotFoundError):
        check_files([tmp_path / "nope.txt"], CHARS)
    check_files([tmp_path / "nope.txt"], CHARS, missing_ok=True)  # a file to follow


def test_check_files_accepts_utf8_text_cut_mid_character(tmp_path):
    from connectors.file_checks import _SNIFF, check_files

    # a multi-byte character straddles the end of the block looked at: still text
    text = tmp_path / "utf8.txt"
    text.write_bytes(b"a" * (_SNIFF - 1) + "\u00e9\u00e8\n".encode())
    check_files([text], CHARS)
    gz = tmp_path / "t.txt.gz"
    gz.write_bytes(gzip.compress("\u00e9t\u00e9\n".encode() * 10))
    check_files([gz], TOKENS)
    bad_gz = tmp_path / "b.txt.gz"
    bad_gz.write_bytes(gzip.compress(b"\x00\x01binary"))
    with pytest.raises(ValueError, match="NUL byte"):
        check_files([bad_gz], TOKENS)


def test_check_files_refuses_csv_and_jsonl_lacking_a_named_field(tmp_path):
    from connectors.files import InputError, check_files

    csv = tmp_path / "a.csv"
    csv.write_text("user,page,ts\nu1,home,1\nu2,cart,2\n")
    # the header lacks the (default) symbol field: it names another field, so it is a header
    with pytest.raises(InputError, match=r"no field 'symbol' \(--symbol-field\); its fields "
                                         r"are: user, page, ts"):
        check_files([csv], RecordFormat("csv"))
    fmt = RecordFormat("csv", symbol_field="page", key_field="usr")
    with pytest.raises(InputError, match=r"no field 'usr' \(--key-field\)"):
        check_files([csv], fmt, {"--symbol-field": "page", "--key-field": "usr"})
    # a named symbol field absent from a first row that is no header
    fmt = RecordFormat("csv", symbol_field="item")
    with pytest.raises(InputError, match=r"no field 'item' \(--symbol-field\).*by position"):
        check_files([csv], fmt, {"--symbol-field": "item"})
    # accepted: the fields are there, or the columns are given by position
    check_files([csv], RecordFormat("csv", symbol_field="page", key_field="user"),
                {"--symbol-field": "page", "--key-field": "user"})
    headerless = tmp_path / "b.csv"
    headerless.write_text("u1,home\nu2,cart\n")
    check_files([headerless], RecordFormat("csv"))  # conventional order key, symbol
    check_files([headerless], RecordFormat("csv", symbol_field=1, key_field=0),
                {"--symbol-field": 1, "--key-field": 0})

    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('\n{"user": "u1", "item": "a"}\n')
    with pytest.raises(InputError, match=r"line 2: the JSON object has no field 'symbol' "
                                         r"\(--symbol-field\); its fields are: user, item"):
        check_files([jsonl], JSONL)
    with pytest.raises(InputError, match=r"no field 'session' \(--key-field\)"):
        check_files([jsonl], RecordFormat("jsonl", symbol_field="item", key_field="session"),
                    {"--symbol-field": "item", "--key-field": "session"})
    check_files([jsonl], RecordFormat("jsonl", symbol_field="item", key_field="user"),
                {"--symbol-field": "item", "--key-field": "user"})
    marker = tmp_path / "m.jsonl"  # a first line that only ends a sequence needs no symbol
    marker.write_text('{"key": "u1", "end": true}\n{"key": "u1", "symbol": "a"}\n')
    check_files([marker], JSONL)

"""Tests of connectors.records: the record format shared by the file and Kafka sources."""

from __future__ import annotations

import csv
import io
import json
import pickle
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.records import (
    REASONS,
    MalformedRecord,
    Record,
    RecordFormat,
    RecordParser,
    format_from_options,
    parse_kafka,
    parse_line,
)


def symbols(records):
    return [r.symbol for r in records]


def malformed(line, fmt: RecordFormat) -> MalformedRecord:
    """The :class:`MalformedRecord` that ``parse_line(line, fmt)`` raises (it must raise one)."""
    with pytest.raises(MalformedRecord) as info:
        parse_line(line, fmt)
    return info.value


# ----------------------------------------------------------------------------- Record


def test_record_defaults_and_end_marker():
    r = Record("k", "a")
    assert (r.key, r.symbol, r.timestamp, r.end) == ("k", "a", None, False)
    assert Record(None, None, end=True).end is True


def test_record_requires_a_symbol_unless_end():
    with pytest.raises(ValueError, match="end marker"):
        Record("k", None)


def test_record_rejects_unhashable_fields():
    with pytest.raises(ValueError, match="symbol .* not hashable"):
        Record("k", ["a"])
    with pytest.raises(ValueError, match="key .* not hashable"):
        Record({"a": 1}, "a")


def test_record_is_frozen():
    r = Record("k", "a")
    with pytest.raises(AttributeError):
        r.symbol = "b"


# ----------------------------------------------------------------------------- MalformedRecord


def test_malformed_record_has_reason_message_and_pickles():
    err = MalformedRecord("missing-field", "no symbol")
    assert err.reason == "missing-field"
    assert "missing-field" in str(err) and "no symbol" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, MalformedRecord)
    assert (back.reason, str(back)) == (err.reason, str(err))


def test_malformed_record_rejects_unknown_reason():
    with pytest.raises(ValueError, match="unknown reason"):
        MalformedRecord("whatever", "x")


# ----------------------------------------------------------------------------- chars


def test_chars_every_character_is_a_symbol_and_the_line_break_a_space():
    recs = parse_line("ab c\n", RecordFormat("chars"))
    assert symbols(recs) == ["a", "b", " ", "c", " "]  # wrapped prose keeps words apart
    assert symbols(parse_line("\r\n", RecordFormat("chars"))) == []  # a blank line: nothing
    assert symbols(parse_line("ab\n", RecordFormat("chars", keep="ab"))) == ["a", "b"]
    assert symbols(parse_line("ab\n", RecordFormat("chars", end_each_line=True)))[:-1] == ["a", "b"]
    assert symbols(parse_line("12\n", RecordFormat("chars", int_symbols=True))) == [1, 2]
    assert all(r.key is None and r.timestamp is None and not r.end for r in recs)


def test_chars_crlf_bytes_and_bom():
    assert symbols(parse_line(b"\xef\xbb\xbfxy\r\n", RecordFormat("chars"))) == ["x", "y", " "]
    assert symbols(parse_line("é\n", RecordFormat("chars"))) == ["é", " "]
    assert symbols(parse_line("é".encode(), RecordFormat("chars"))) == ["é"]


def test_chars_lowercase_keep_and_key():
    fmt = RecordFormat("chars", key="book", lowercase=True, keep="abcdefghijklmnopqrstuvwxyz")
    recs = parse_line("Hello, World 42!", fmt)
    assert symbols(recs) == list("helloworld")
    assert {r.key for r in recs} == {"book"}


def test_chars_keep_as_a_set_is_applied_after_lowercase():
    fmt = RecordFormat("chars", lowercase=True, keep={"a", "b"})
    assert fmt.keep == frozenset("ab")
    assert symbols(parse_line("ABCabc", fmt)) == ["a", "b", "a", "b"]
    assert symbols(parse_line("ABC", RecordFormat("chars", keep={"a", "b"}))) == []


def test_chars_blank_line_gives_nothing():
    assert parse_line("\n", RecordFormat("chars")) == []
    assert parse_line(b"", RecordFormat("chars")) == []


def test_chars_end_each_line_appends_an_end_marker():
    fmt = RecordFormat("chars", key="s", end_each_line=True)
    recs = parse_line("ab", fmt)
    assert recs[-1] == Record("s", None, end=True)
    assert symbols(recs[:-1]) == ["a", "b"]
    assert parse_line("", fmt) == []  # a blank line ends nothing


def test_chars_int_symbols():
    assert symbols(parse_line("102", RecordFormat("chars", int_symbols=True))) == [1, 0, 2]
    assert malformed("1x", RecordFormat("chars", int_symbols=True)).reason == "bad-field"


# ----------------------------------------------------------------------------- tokens


def test_tokens_split_on_any_whitespace():
    recs = parse_line("the  cat\tsat\u00a0down\n", RecordFormat("tokens", key=7))
    assert symbols(recs) == ["the", "cat", "sat", "down"]
    assert {r.key for r in recs} == {7}


def test_tokens_lowercase_and_int_symbols():
    assert symbols(parse_line("The CAT", RecordFormat("tokens", lowercase=True))) == ["the", "cat"]
    fmt = RecordFormat("tokens", int_symbols=True)
    assert symbols(parse_line("3 -1 10", fmt)) == [3, -1, 10]


def test_tokens_blank_line_gives_nothing():
    assert parse_line("   \t \n", RecordFormat("tokens")) == []


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1)
                .map(lambda s: "".join(s.split())).filter(bool), max_size=20))
def test_tokens_round_trip(tokens):
    assert symbols(parse_line(" ".join(tokens), RecordFormat("tokens"))) == tokens
    line = ("\t".join(tokens) + "\n").encode()
    assert symbols(parse_line(line, RecordFormat("tokens"))) == tokens


@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\ufeff")))
def test_chars_round_trip(text):
    assert symbols(parse_line(text + "\n", RecordFormat("chars"))) == list(text) + [" "] * bool(text)
    assert symbols(parse_line(text, RecordFormat("chars"))) == list(text)
    assert symbols(parse_line(text.encode() + b"\r\n", RecordFormat("chars"))) == (
        list(text) + [" "] * bool(text))


# ----------------------------------------------------------------------------- csv


def test_csv_without_header_uses_the_conventional_column_order():
    fmt = RecordFormat("csv")
    assert parse_line("u1,a,12.5,0", fmt) == [Record("u1", "a", 12.5, False)]
    assert parse_line("u1,a", fmt) == [Record("u1", "a")]
    assert parse_line(",a", fmt) == [Record(None, "a")]  # empty key: the default key


def test_csv_header_is_detected_and_resolves_names():
    p = RecordParser(RecordFormat("csv"))
    assert p.parse("end,ts,extra,symbol,key\n") == []
    assert p.header == ("end", "ts", "extra", "symbol", "key")
    assert p.parse("1,5,zzz,b,u2\n") == [Record("u2", "b", 5.0, True)]
    assert p.parse("0,,zzz,c,u2\n") == [Record("u2", "c", None, False)]


def test_csv_header_detection_leaves_a_data_row_alone():
    p = RecordParser(RecordFormat("csv"))
    assert p.parse("u1,a,1") == [Record("u1", "a", 1.0)]
    assert p.header is None
    # only the first line may be a header
    assert p.parse("key,symbol") == [Record("key", "symbol")]


def test_csv_header_forced_and_disabled():
    forced = RecordParser(RecordFormat("csv", csv_header=True, symbol_field="s", key_field=None))
    assert forced.parse("whatever,s") == []
    assert forced.parse("x,y") == [Record(None, "y")]
    off = RecordParser(RecordFormat("csv", csv_header=False))
    assert off.parse("key,symbol") == [Record("key", "symbol")]


def test_csv_header_without_the_symbol_column_is_missing_field():
    p = RecordParser(RecordFormat("csv", csv_header=True))
    assert p.parse("a,b") == []
    with pytest.raises(MalformedRecord) as info:
        p.parse("1,2")
    assert info.value.reason == "missing-field"
    assert "'symbol'" in str(info.value)


def test_csv_positions_delimiter_and_quotes():
    fmt = RecordFormat("csv", delimiter=";", key_field=2, symbol_field=0, time_field=None,
                       end_field=None)
    assert parse_line('"a;b";ignored;k', fmt) == [Record("k", "a;b")]
    tsv = RecordFormat("csv", delimiter="\t", key_field=None, symbol_field=1, time_field=None,
                       end_field=None)
    assert parse_line("x\t y \tz", tsv) == [Record(None, "y")]


def test_csv_positional_symbol_ignores_names_without_header():
    fmt = RecordFormat("csv", symbol_field=1, csv_header=False)
    assert parse_line("a,b,c", fmt) == [Record(None, "b")]


def test_csv_iso_timestamp_and_end_marker():
    fmt = RecordFormat("csv")
    (rec,) = parse_line("u,a,2024-01-02T03:04:05Z,yes", fmt)
    assert rec.timestamp == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert rec.end is True
    (naive,) = parse_line("u,a,2024-01-02T03:04:05", fmt)
    assert naive.timestamp == rec.timestamp  # naive times are UTC, not local
    assert parse_line("u,,,true", fmt) == [Record("u", None, end=True)]


def test_csv_blank_line_gives_nothing():
    assert parse_line("\r\n", RecordFormat("csv")) == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('u,"unclosed', "bad-csv"),
        ("u,", "missing-field"),
        ("u", "missing-field"),
        ("u,a,noon", "bad-field"),
        ("u,a,1,maybe", "bad-field"),
        ("u,a,nan", "bad-field"),
    ],
)
def test_csv_malformed_rows(line, reason):
    assert malformed(line, RecordFormat("csv")).reason == reason


cell = st.text(
    st.characters(blacklist_categories=("Cs", "Zs", "Cc"), blacklist_characters="\ufeff"),
    min_size=1,
    max_size=8,
)


@given(st.lists(st.tuples(cell, cell, st.integers(0, 10**9), st.booleans()), max_size=10))
def test_csv_round_trip(rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["key", "symbol", "ts", "end"])
    for key, sym, ts, end in rows:
        w.writerow([key, sym, ts, int(end)])
    p = RecordParser(RecordFormat("csv"))
    got = [r for line in buf.getvalue().splitlines(keepends=True) for r in p.parse(line)]
    assert got == [Record(k, s, float(t), e) for k, s, t, e in rows]


# ----------------------------------------------------------------------------- jsonl


def test_jsonl_fields_and_defaults():
    fmt = RecordFormat("jsonl", key="default")
    assert parse_line('{"key": "u", "symbol": "a", "ts": 3, "end": false}', fmt) == [
        Record("u", "a", 3.0, False)
    ]
    assert parse_line('{"symbol": "a"}', fmt) == [Record("default", "a")]
    assert parse_line('{"key": 5, "end": true}', fmt) == [Record(5, None, end=True)]
    assert parse_line('{"symbol": "z", "end": 1}', fmt) == [Record("default", "z", end=True)]
    assert parse_line("   \n", fmt) == []


def test_jsonl_custom_field_names():
    fmt = RecordFormat("jsonl", key_field="user", symbol_field="event", time_field="t",
                       end_field="done")
    line = '{"user": "u9", "event": "buy", "t": "2024-01-01T00:00:00+00:00", "done": true}'
    (rec,) = parse_line(line, fmt)
    assert (rec.key, rec.symbol, rec.end) == ("u9", "buy", True)
    assert rec.timestamp == datetime(2024, 1, 1, tzinfo=UTC).timestamp()


def test_jsonl_integral_numbers_become_int_and_scalars_are_symbols():
    fmt = RecordFormat("jsonl")
    assert symbols(parse_line('{"symbol": 4.0}', fmt)) == [4]
    assert type(parse_line('{"symbol": 4.0}', fmt)[0].symbol) is int
    assert symbols(parse_line("7", fmt)) == [7]
    assert symbols(parse_line('"x"', fmt)) == ["x"]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('{"symbol": "a"', "bad-json"),
        ("[1, 2]", "bad-json"),
        ('{"symbol": NaN}', "bad-json"),
        ("null", "empty"),
        ('{"key": "u"}', "missing-field"),
        ('{"symbol": ""}', "missing-field"),
        ('{"symbol": true}', "bad-field"),
        ('{"symbol": 1.5}', "bad-field"),
        ('{"symbol": {"a": 1}}', "bad-field"),
        ('{"symbol": "a", "key": [1]}', "bad-field"),
        ('{"symbol": "a", "ts": "soon"}', "bad-field"),
        ('{"symbol": "a", "end": "perhaps"}', "bad-field"),
    ],
)
def test_jsonl_malformed_lines(line, reason):
    assert malformed(line, RecordFormat("jsonl")).reason == reason


@given(
    st.one_of(st.none(), st.text(min_size=1, max_size=5), st.integers(-5, 5)),
    st.one_of(st.text(min_size=1, max_size=5), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.floats(-1e12, 1e12, allow_nan=False)),
)
def test_jsonl_round_trip(key, symbol, ts):
    line = json.dumps({"key": key, "symbol": symbol, "ts": ts})
    assert parse_line(line, RecordFormat("jsonl", key="dflt")) == [
        Record("dflt" if key in (None, "") else key, symbol, ts)
    ]


# ----------------------------------------------------------------------------- sizes, bytes


def test_oversized_and_undecodable_lines():
    fmt = RecordFormat("tokens", max_bytes=4)
    assert symbols(parse_line(b"ab c\r\n", fmt)) == ["ab", "c"]  # the break does not count
    for line in (b"abcde", "abcde", "ééé"):  # "ééé" is 6 bytes in UTF-8
        assert malformed(line, fmt).reason == "oversized"
    undecodable = malformed(b"ok \xc3\x28", RecordFormat("tokens"))
    assert undecodable.reason == "undecodable"
    assert "0xc3" in str(undecodable)


def test_parse_line_rejects_other_types():
    with pytest.raises(TypeError):
        parse_line(42, RecordFormat())


# ----------------------------------------------------------------------------- kafka


def test_kafka_text_values():
    fmt = RecordFormat(key="dflt")
    assert parse_kafka(b"user", b"click", fmt) == [Record("user", "click")]
    assert parse_kafka(None, b"click\n", fmt) == [Record("dflt", "click")]
    assert parse_kafka(b"", "view", fmt) == [Record("dflt", "view")]
    assert parse_kafka("u", b"Ab", RecordFormat(lowercase=True)) == [Record("u", "ab")]
    assert parse_kafka(b"u", b"12", RecordFormat(int_symbols=True)) == [Record("u", 12)]
    assert parse_kafka(b"u", b"x", fmt, timestamp=9.5) == [Record("u", "x", 9.5)]


def test_kafka_json_values():
    fmt = RecordFormat(value_format="json")
    assert parse_kafka(b"m", b"3", fmt) == [Record("m", 3)]
    assert parse_kafka(b"m", b'"s"', fmt) == [Record("m", "s")]
    assert parse_kafka(b"m", b'{"symbol": "a"}', fmt) == [Record("m", "a")]
    # a key inside the value overrides the message key
    assert parse_kafka(b"m", b'{"key": "j", "symbol": "a"}', fmt) == [Record("j", "a")]
    assert parse_kafka(b"m", b'{"end": true}', fmt) == [Record("m", None, end=True)]
    # the value's own timestamp wins over the message's
    assert parse_kafka(b"m", b'{"symbol": 1, "ts": 2}', fmt, timestamp=9.0)[0].timestamp == 2.0
    assert parse_kafka(b"m", b'{"symbol": 1}', fmt, timestamp=9.0)[0].timestamp == 9.0


@pytest.mark.parametrize(
    ("key", "value", "value_format", "reason"),
    [
        (b"k", None, "text", "empty"),
        (b"k", b"", "text", "empty"),
        (b"k", b"", "json", "empty"),
        (b"k", b"\n", "text", "empty"),
        (b"k", b"null", "json", "empty"),
        (b"k", b"\xff\xfe", "text", "undecodable"),
        (b"\xff", b"a", "text", "undecodable"),
        (b"k", b"{nope", "json", "bad-json"),
        (b"k", b"[1]", "json", "bad-json"),
        (b"k", b'{"ts": 1}', "json", "missing-field"),
        (b"k", b"1.25", "json", "bad-field"),
        (b"k", b"x" * 65, "text", "oversized"),
        (b"k", b'"' + b"x" * 70 + b'"', "json", "oversized"),
    ],
)
def test_kafka_malformed(key, value, value_format, reason):
    fmt = RecordFormat(value_format=value_format, max_bytes=64)
    with pytest.raises(MalformedRecord) as info:
        parse_kafka(key, value, fmt)
    assert info.value.reason == reason


def test_kafka_size_limit_is_inclusive():
    fmt = RecordFormat(max_bytes=64)
    assert symbols(parse_kafka(b"k", b"x" * 64, fmt)) == ["x" * 64]


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1)
       .filter(lambda s: s.rstrip("\r\n") == s))
def test_kafka_text_round_trip(symbol):
    assert parse_kafka(b"k", symbol.encode(), RecordFormat()) == [Record("k", symbol)]


def test_every_reason_is_reachable():
    """Each documented reason comes out of some input (and no other reason exists)."""
    seen = set()
    attempts = [
        lambda: parse_kafka(b"k", b"", RecordFormat()),
        lambda: parse_line(b"\xff", RecordFormat()),
        lambda: parse_line("{", RecordFormat("jsonl")),
        lambda: parse_line('"', RecordFormat("csv")),
        lambda: parse_line("{}", RecordFormat("jsonl")),
        lambda: parse_line("true", RecordFormat("jsonl")),
        lambda: parse_line("abc", RecordFormat(max_bytes=2)),
    ]
    for attempt in attempts:
        with pytest.raises(MalformedRecord) as info:
            attempt()
        seen.add(info.value.reason)
    assert seen == set(REASONS)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"encoding": "xml"}, "unknown encoding 'xml'"),
        ({"value_format": "avro"}, "unknown value_format"),
        ({"encoding": "tokens", "keep": "ab"}, "keep applies only to the chars"),
        ({"keep": ""}, "at least one"),
        ({"keep": ["ab"]}, "single characters"),
        ({"delimiter": ",,"}, "delimiter"),
        ({"delimiter": "\n"}, "delimiter"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_bytes": True}, "max_bytes"),
        ({"symbol_field": None}, "symbol_field cannot be None"),
        ({"key_field": "symbol"}, "both name"),
        ({"encoding": "csv", "key_field": -1}, "non-negative"),
        ({"encoding": "jsonl", "symbol_field": 0}, "named, not numbered"),
        ({"key_field": ""}, "empty name"),
        ({"key_field": 1.5}, "field name"),
        ({"lowercase": "yes"}, "lowercase must be True or False"),
        ({"csv_header": 1}, "csv_header"),
        ({"key": ["unhashable"]}, "not hashable"),
    ],
)
def test_record_format_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RecordFormat(**kwargs)


def test_record_format_is_hashable_and_comparable():
    assert RecordFormat("chars", keep="ab") == RecordFormat("chars", keep={"b", "a"})
    assert hash(RecordFormat("csv")) == hash(RecordFormat("csv"))


def test_format_from_options_converts_cli_strings():
    fmt = format_from_options(**{
        "encoding": "csv", "key-field": "user", "symbol_field": "2", "time_field": "none",
        "end_field": "", "csv_header": "auto", "lowercase": "yes", "int_symbols": "0",
        "max_bytes": "4096", "delimiter": "\\t", "key": None,
    })
    assert fmt == RecordFormat("csv", key_field="user", symbol_field=2, time_field=None,
                               end_field=None, csv_header=None, lowercase=True,
                               int_symbols=False, max_bytes=4096, delimiter="\t")
    assert format_from_options(csv_header="TRUE", encoding="csv").csv_header is True
    assert format_from_options() == RecordFormat()
    # non-strings pass through unchanged
    assert format_from_options(keep={"a"}, lowercase=True).keep == frozenset("a")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"encodng": "csv"}, "unknown record format option 'encodng'"),
        ({"lowercase": "sometimes"}, "lowercase must be true or false"),
        ({"max_bytes": "1M"}, "max_bytes must be an integer"),
        ({"symbol_field": ""}, "symbol_field cannot be empty"),
        ({"encoding": "yaml"}, "unknown encoding"),
    ],
)
def test_format_from_options_errors(options, match):
    with pytest.raises(ValueError, match=match):
        format_from_options(**options)

"""tidemark.formats.csv: a header and one row per record, read back with Python's csv module."""

from __future__ import annotations

import base64
import csv
import io
import json

import pytest

from tests.support.independent import plain
from tests.unit.test_formats_registry import CONTEXTS, EVENT, JSON_CONTEXT, TS, envelopes, frames_for, render
from tidemark.config.model import ENVELOPE_COLUMNS
from tidemark.eventtime import iso_utc
from tidemark.formats import format_for
from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.csv import CsvFormat
from tidemark.staging.frames import RAW, Frame

CODECS = ("gzip", "zstd", "none")


def rows_of(body: bytes, codec: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(plain(body, codec).decode("utf-8"), newline="")))


def cell(data: bytes | None, encoding: str) -> str:
    if data is None:
        return ""
    return base64.b64encode(data).decode() if encoding == "bytes" else data.decode()


def expected_row(frame: Frame, context: RenderContext) -> list[str]:
    headers = [{"key": name, "value": cell(data, context.header_encoding)} for name, data in frame.headers]
    return [
        context.topic,
        str(context.partition),
        str(frame.offset),
        str(frame.timestamp_ms),
        iso_utc(frame.event_time_ms),
        cell(frame.key, context.key_encoding),
        cell(frame.value, "bytes" if context.value_encoding == "bytes" else "text"),
        json.dumps(headers, separators=(",", ":"), ensure_ascii=False),
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_every_record_reads_back_with_the_csv_module(codec: str, encoding: str) -> None:
    frames, context = frames_for(encoding), CONTEXTS[encoding]
    body = render(format_for("csv", codec), frames, context)
    rows = rows_of(body, codec)
    assert rows[0] == list(ENVELOPE_COLUMNS)
    assert rows[1:] == [expected_row(frame, context) for frame in frames]
    for row in rows[1:]:
        json.loads(row[7])
    assert list(CsvFormat(codec).read(body, context)) == envelopes(frames, context)


def test_rfc4180_quoting() -> None:
    frames = frames_for("text")  # 'café, "x"\nnext line'
    text = plain(render(CsvFormat("none"), frames, CONTEXTS["text"]), "none").decode()
    assert text.startswith('"topic","partition","offset","timestamp","event_time","key","value","headers"\n')
    assert '"caf\u00e9, ""x""\nnext line"' in text
    # a null key is an empty unquoted cell, an empty key an empty quoted one
    lines = text.split("\n")
    assert any(',,"",' in line for line in lines)  # offset 201: null key, empty value
    assert any(',"","\u00e9t\u00e9 ' in line for line in lines)  # offset 202: empty key


def test_json_value_with_line_breaks_comma_and_quotes_stays_intact() -> None:
    frames = frames_for("json")
    rows = rows_of(render(CsvFormat("gzip"), frames, JSON_CONTEXT), "gzip")
    assert rows[1][6].encode() == frames[0].value  # raw \r\n kept inside the quotes
    assert rows[2][3] == "-1"
    assert rows[4][6].encode() == frames[3].value  # 10 KB
    assert rows[1][4] == iso_utc(EVENT)


COLUMNS = ("offset", "value.order_id", "value.price", "value.nested.a", "value.missing", "key", "value.flag", "value.s")


def test_chosen_columns_and_value_paths() -> None:
    frames = [
        Frame(RAW, 1, TS, EVENT, b"o-1", b'{"order_id":"o-1","price":12.50,"nested":{"a":[1,"x"]},"flag":true,"s":""}'),
        Frame(
            RAW,
            2,
            TS,
            EVENT,
            None,
            b'{"order_id":null,"price":3,"nested":{"a":{"b":1}},"flag":false,"s":"a,\\"b\\"\\n"}',
        ),
        Frame(RAW, 3, TS, EVENT, b"", b'{"nested":5}'),
        Frame(RAW, 4, TS, EVENT, b"k", b"[1,2]"),
    ]
    context = RenderContext("orders", 3, columns=COLUMNS)
    body = render(CsvFormat("none"), frames, context)
    rows = rows_of(body, "none")
    assert rows == [
        list(COLUMNS),
        ["1", "o-1", "12.5", '[1,"x"]', "", "o-1", "true", ""],
        ["2", "", "3", '{"b":1}', "", "", "false", 'a,"b"\n'],
        ["3", "", "", "", "", "", "", ""],
        ["4", "", "", "", "", "k", "", ""],
    ]
    read = list(CsvFormat("none").read(body, context))
    assert read[0] == ArchivedEnvelope(
        None,
        None,
        1,
        None,
        None,
        b"o-1",
        None,
        None,
        {"order_id": "o-1", "price": "12.5", "nested.a": '[1,"x"]', "missing": None, "flag": "true", "s": ""},
    )
    assert read[1].key is None and read[1].fields is not None and read[1].fields["s"] == 'a,"b"\n'
    assert read[1].fields["order_id"] is None
    assert read[2].key == b"" and read[2].fields == dict.fromkeys(
        ("order_id", "price", "nested.a", "missing", "flag", "s")
    )
    assert [envelope.offset for envelope in read] == [1, 2, 3, 4]


def test_envelope_columns_without_value_paths_leave_fields_unset() -> None:
    context = RenderContext("orders", 3, columns=("partition", "offset", "value"))
    frames = frames_for("json")
    read = list(CsvFormat().read(render(CsvFormat(), frames, context), context))
    assert [(e.partition, e.offset, e.value, e.fields, e.key, e.topic) for e in read] == [
        (3, frame.offset, frame.value, None, None, None) for frame in frames
    ]


def test_value_paths_of_non_json_values_are_empty() -> None:
    context = RenderContext("orders", 3, value_encoding="text", columns=("value", "value.a"))
    rows = rows_of(render(CsvFormat("none"), [Frame(RAW, 1, TS, EVENT, None, b'{"a":1}')], context), "none")
    assert rows == [["value", "value.a"], ['{"a":1}', ""]]


def test_many_chunks_one_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidemark.formats.csv.CHUNK_ROWS", 7)
    frames = [Frame(RAW, i, TS + i, EVENT, b"k%d" % i, b'{"i":%d}' % i) for i in range(50)]
    body = render(CsvFormat("zstd"), frames, JSON_CONTEXT)
    rows = rows_of(body, "zstd")
    assert rows[0] == list(ENVELOPE_COLUMNS) and len(rows) == 51
    assert [row[2] for row in rows[1:]] == [str(i) for i in range(50)]
    assert list(CsvFormat("zstd").read(body, JSON_CONTEXT)) == envelopes(frames, JSON_CONTEXT)


def test_empty_object_has_the_header() -> None:
    context = RenderContext("orders", 3, columns=("offset", "value.a"))
    assert rows_of(render(CsvFormat("gzip"), [], context), "gzip") == [["offset", "value.a"]]

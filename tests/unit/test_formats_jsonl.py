"""tidemark.formats.jsonl: deterministic gzip JSON Lines envelopes."""

from __future__ import annotations

import base64
import gzip
import io
import json
from typing import Any

import pytest

from tests.support.legacy_segments import encode_frame
from tidemark.formats import JsonLinesFormat, RenderContext, format_for
from tidemark.staging.frames import DEAD_LETTER, NO_EVENT_TIME, RAW, Frame, decode_frames

CONTEXT = RenderContext(topic="orders", partition=3)
TS = 1_763_709_153_000  # 2025-11-21T07:12:33.000Z
EVENT = 1_795_245_153_123  # 2026-11-21T07:12:33.123Z

FRAMES = [
    Frame(RAW, 100, TS, EVENT, b"o-1000", b'{"order_id":"o-1001","price":12.5}', (("source", b"web"),)),
    Frame(RAW, 101, TS + 1, EVENT + 1, None, b'{"n":1}'),
    Frame(
        DEAD_LETTER,
        102,
        TS + 2,
        NO_EVENT_TIME,
        b"o-1003",
        b"not json at all",
        (("source", b"web"), ("bin", b"\xff\x00")),
        "invalid_value_encoding: value is not JSON (unexpected character)",
    ),
]


def render(frames: list[Frame], context: RenderContext = CONTEXT, fmt: JsonLinesFormat | None = None) -> bytes:
    out = io.BytesIO()
    count = (fmt or JsonLinesFormat()).write(frames, context, out)
    assert count == len(frames)
    return out.getvalue()


def lines_of(data: bytes) -> list[bytes]:
    text = gzip.decompress(data)
    assert text.endswith(b"\n") or text == b""
    return text.split(b"\n")[:-1] if text else []


def test_rendering_twice_gives_identical_bytes() -> None:
    first, second = render(FRAMES), render(list(FRAMES))
    assert first == second
    # gzip header: magic, deflate, no flags (no file name), mtime 0
    assert first[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00"


def test_rendering_is_independent_of_the_wall_clock_and_instance() -> None:
    assert render(FRAMES, fmt=JsonLinesFormat()) == render(FRAMES, fmt=JsonLinesFormat("gzip", 6))


def test_archived_envelopes() -> None:
    assert [json.loads(line) for line in lines_of(render(FRAMES[:2]))] == [
        {
            "topic": "orders",
            "partition": 3,
            "offset": 100,
            "timestamp": TS,
            "event_time": "2026-11-21T07:12:33.123Z",
            "key": "o-1000",
            "value": {"order_id": "o-1001", "price": 12.5},
            "headers": [{"key": "source", "value": "web"}],
        },
        {
            "topic": "orders",
            "partition": 3,
            "offset": 101,
            "timestamp": TS + 1,
            "event_time": "2026-11-21T07:12:33.124Z",
            "key": None,
            "value": {"n": 1},
            "headers": [],
        },
    ]


def test_dead_letter_envelope_keeps_original_bytes_and_the_error() -> None:
    (line,) = lines_of(render([FRAMES[2]]))
    envelope = json.loads(line)
    assert envelope == {
        "topic": "orders",
        "partition": 3,
        "offset": 102,
        "timestamp": TS + 2,
        "error": "invalid_value_encoding: value is not JSON (unexpected character)",
        "key_base64": base64.b64encode(b"o-1003").decode(),
        "value_base64": base64.b64encode(b"not json at all").decode(),
        "headers": [
            {"key": "source", "value_base64": base64.b64encode(b"web").decode()},
            {"key": "bin", "value_base64": "/wA="},
        ],
    }
    assert base64.b64decode(envelope["value_base64"]) == b"not json at all"


def test_dead_letter_of_arbitrary_bytes_with_null_key() -> None:
    original = bytes(range(256)) + b"\n\r{"
    frame = Frame(DEAD_LETTER, 7, -1, NO_EVENT_TIME, None, original, (), "oversized: value is 259 bytes, limit 8")
    (line,) = lines_of(render([frame]))
    envelope = json.loads(line)
    assert envelope["key_base64"] is None
    assert base64.b64decode(envelope["value_base64"]) == original
    assert envelope["error"] == "oversized: value is 259 bytes, limit 8"
    assert envelope["timestamp"] == -1


def test_value_with_raw_newlines_renders_on_one_line_with_every_token_intact() -> None:
    value = b'{\n  "id": 1,\r\n  "items": [\n    1,\n    2\n  ],\n  "note": "a\\nb"\n}\n'
    (line,) = lines_of(render([Frame(RAW, 1, TS, EVENT, b"k", value)]))
    assert b"\n" not in line and b"\r" not in line
    assert json.loads(line)["value"] == {"id": 1, "items": [1, 2], "note": "a\nb"}
    assert line == (
        b'{"topic":"orders","partition":3,"offset":1,"timestamp":1763709153000,'
        b'"event_time":"2026-11-21T07:12:33.123Z","key":"k",'
        b'"value":{   "id": 1,    "items": [     1,     2   ],   "note": "a\\nb" } ,"headers":[]}'
    )


def test_big_integers_and_number_spelling_survive_byte_exact() -> None:
    value = b'{"big":123456789012345678901234567890,"neg":-98765432109876543210,"f":1.0e+2,"z":0.10}'
    (line,) = lines_of(render([Frame(RAW, 1, TS, EVENT, None, value)]))
    assert b'"value":' + value + b',"headers"' in line
    assert json.loads(line)["value"]["big"] == 123456789012345678901234567890


def test_whole_line_is_compact_json_in_envelope_order() -> None:
    (line,) = lines_of(render([FRAMES[1]]))
    assert line == (
        b'{"topic":"orders","partition":3,"offset":101,"timestamp":1763709153001,'
        b'"event_time":"2026-11-21T07:12:33.124Z","key":null,"value":{"n":1},"headers":[]}'
    )


@pytest.mark.parametrize(
    ("context", "key", "value", "headers"),
    [
        (RenderContext("t", 0, "text", "text", "text"), "k\u00e9", 'caf\u00e9 "x"\n', [{"key": "h", "value": "v"}]),
        (
            RenderContext("t", 0, "bytes", "bytes", "bytes"),
            base64.b64encode("k\u00e9".encode()).decode(),
            base64.b64encode('caf\u00e9 "x"\n'.encode()).decode(),
            [{"key": "h", "value": base64.b64encode(b"v").decode()}],
        ),
    ],
    ids=["text", "bytes"],
)
def test_text_and_bytes_encodings(context: RenderContext, key: str, value: str, headers: list[dict[str, Any]]) -> None:
    frame = Frame(RAW, 1, TS, EVENT, "k\u00e9".encode(), 'caf\u00e9 "x"\n'.encode(), (("h", b"v"),))
    (line,) = lines_of(render([frame], context))
    envelope = json.loads(line)
    assert (envelope["topic"], envelope["partition"]) == ("t", 0)
    assert (envelope["key"], envelope["value"], envelope["headers"]) == (key, value, headers)


def test_uncompressed_output_is_the_same_lines() -> None:
    plain = render(FRAMES, fmt=JsonLinesFormat(compression="none"))
    assert plain == gzip.decompress(render(FRAMES))
    assert plain.count(b"\n") == 3


def test_lines_of_an_empty_frame_list() -> None:
    assert render([], fmt=JsonLinesFormat(compression="none")) == b""
    assert gzip.decompress(render([])) == b""
    assert render([]) == render([])


def test_frames_rendered_from_a_staged_segment() -> None:
    segment = b"".join(
        encode_frame(f.kind, f.offset, f.timestamp_ms, f.event_time_ms, f.key, f.value, f.headers, f.reason)
        for f in FRAMES
    )
    assert render(decode_frames(segment)) == render(FRAMES)


def test_format_properties_and_factory() -> None:
    gz = format_for("jsonl", "gzip", 9)
    assert isinstance(gz, JsonLinesFormat)
    assert (gz.extension, gz.content_type, gz.compression, gz.gzip_level) == (
        "jsonl.gz",
        "application/x-ndjson",
        "gzip",
        9,
    )
    assert format_for("jsonl", "none").extension == "jsonl"
    assert format_for("jsonl", "zstd").extension == "jsonl.zst"
    with pytest.raises(ValueError, match="unsupported format 'orc'"):
        format_for("orc", "gzip")
    with pytest.raises(ValueError, match="unsupported compression 'snappy'"):
        JsonLinesFormat(compression="snappy")


def test_gzip_level_changes_nothing_but_the_compressed_bytes() -> None:
    fast, best = render(FRAMES, fmt=JsonLinesFormat(gzip_level=1)), render(FRAMES, fmt=JsonLinesFormat(gzip_level=9))
    assert gzip.decompress(fast) == gzip.decompress(best)


@pytest.mark.parametrize("value_encoding", ["json", "text", "bytes"])
@pytest.mark.parametrize("key_encoding", ["text", "bytes"])
def test_byte_template_equals_the_envelope_serialised_by_orjson(value_encoding: str, key_encoding: str) -> None:
    """The fast path renders from a byte template; it must equal orjson's rendering of the
    envelope dict, escapes included (quotes, backslashes, control and non-ASCII characters)."""
    import orjson

    context = RenderContext('to"p\\ic', 7, key_encoding=key_encoding, value_encoding=value_encoding)
    key = 'k"\\\n\u00e9\u2028'.encode()
    value = b'{"s":"a\\"b\\\\c\\u0001","n":[1,2.50,-0]}' if value_encoding == "json" else 'v"\\\t\u00fc'.encode()
    headers = (('h"1', b"x\\y"), ("h2", "\u00e9".encode()))
    frame = Frame(RAW, 42, TS, EVENT, key, value, headers)
    (line,) = JsonLinesFormat("none").lines([frame], context)

    def as_string(data: bytes, encoding: str) -> str:
        return data.decode() if encoding == "text" else base64.b64encode(data).decode()

    expected_value: Any = orjson.Fragment(value) if value_encoding == "json" else as_string(value, value_encoding)
    envelope = {
        "topic": context.topic,
        "partition": 7,
        "offset": 42,
        "timestamp": TS,
        "event_time": "2026-11-21T07:12:33.123Z",
        "key": as_string(key, key_encoding),
        "value": expected_value,
        "headers": [{"key": name, "value": data.decode()} for name, data in headers],
    }
    assert line == orjson.dumps(envelope, option=orjson.OPT_APPEND_NEWLINE)
    assert json.loads(line)["topic"] == 'to"p\\ic'


def test_zstd_output_is_the_same_lines() -> None:
    import zstandard

    body = render(FRAMES, fmt=JsonLinesFormat(compression="zstd"))
    assert zstandard.ZstdDecompressor().decompressobj().decompress(body) == gzip.decompress(render(FRAMES))
    assert body == render(list(FRAMES), fmt=JsonLinesFormat(compression="zstd"))


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_read_gives_back_archived_records_and_dead_letters(compression: str) -> None:
    from tidemark.formats.base import ArchivedEnvelope

    value = b'{\n  "big": 123456789012345678901234567890, "f": 1.0e+2\r\n}'
    frames = [*FRAMES, Frame(RAW, 103, -1, EVENT, b"", value, (("h", b"v"), ("e", "\u00e9".encode())))]
    fmt = JsonLinesFormat(compression=compression)
    read = list(fmt.read(render(frames, fmt=fmt), CONTEXT))
    assert read == [
        ArchivedEnvelope("orders", 3, 100, TS, EVENT, b"o-1000", FRAMES[0].value, (("source", b"web"),)),
        ArchivedEnvelope("orders", 3, 101, TS + 1, EVENT + 1, None, b'{"n":1}', ()),
        ArchivedEnvelope(
            "orders",
            3,
            102,
            TS + 2,
            None,
            b"o-1003",
            b"not json at all",
            (("source", b"web"), ("bin", b"\xff\x00")),
            error="invalid_value_encoding: value is not JSON (unexpected character)",
        ),
        ArchivedEnvelope(
            "orders",
            3,
            103,
            -1,
            EVENT,
            b"",
            value.replace(b"\r", b" ").replace(b"\n", b" "),  # every token as produced
            (("h", b"v"), ("e", "\u00e9".encode())),
        ),
    ]


@pytest.mark.parametrize("encoding", ["text", "bytes"])
def test_read_of_text_and_bytes_encodings(encoding: str) -> None:
    from tidemark.formats.base import ArchivedEnvelope

    context = RenderContext("t", 0, encoding, encoding, encoding)
    frames = [
        Frame(RAW, 1, TS, EVENT, "k\u00e9".encode(), 'caf\u00e9 "x"\n'.encode(), (("h", b"v"),)),
        Frame(RAW, 2, TS, EVENT, None, b"", ()),
    ]
    if encoding == "bytes":
        frames.append(Frame(RAW, 3, TS, EVENT, b"\xff", bytes(range(256)), (("b", b"\xfe"),)))
    fmt = JsonLinesFormat()
    assert list(fmt.read(render(frames, context, fmt), context)) == [
        ArchivedEnvelope("t", 0, f.offset, f.timestamp_ms, f.event_time_ms, f.key, f.value, f.headers) for f in frames
    ]


def test_read_of_a_line_not_written_by_the_template_re_serialises_the_value() -> None:
    line = b'{"offset":1,"topic":"t","partition":0,"timestamp":5,"event_time":"1970-01-01T00:00:00.007Z",'
    line += b'"key":null,"value":{"a": 1},"headers":[]}\n'
    (envelope,) = JsonLinesFormat("none").read(line, CONTEXT)
    assert (envelope.offset, envelope.event_time_ms, envelope.value) == (1, 7, b'{"a":1}')

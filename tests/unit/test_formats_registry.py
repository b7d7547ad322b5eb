"""tidemark.formats: the registry, determinism of every format x codec, lazy imports, and the
frames the per-format tests share (imported from here by ``test_formats_<name>.py``)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tidemark.config.model import COMPRESSIONS
from tidemark.formats import FORMATS, ObjectFormat, RenderContext, RenderSpec, format_for, format_of
from tidemark.formats.base import ArchivedEnvelope
from tidemark.formats.compression import ZSTD_LEVEL, chunked, compressed, decompress, extension
from tidemark.staging.frames import DEAD_LETTER, RAW, Frame

TS = 1_763_709_153_000  # 2025-11-21T07:12:33.000Z
EVENT = 1_795_245_153_123  # 2026-11-21T07:12:33.123Z
BIG_JSON = b'{"blob":"' + b"x" * 10_240 + b'"}'
BIG_TEXT = ("\u00e9t\u00e9 " * 2_600).encode()  # ~10 KB of UTF-8
BIG_BYTES = random.Random(7).randbytes(10_240)

JSON_CONTEXT = RenderContext("orders", 3, object_key="raw/orders/a.object")
TEXT_CONTEXT = RenderContext("orders", 3, "text", "text", "text", object_key="raw/orders/a.object")
BYTES_CONTEXT = RenderContext("orders", 3, "bytes", "bytes", "bytes", object_key="raw/orders/a.object")
CONTEXTS = {"json": JSON_CONTEXT, "text": TEXT_CONTEXT, "bytes": BYTES_CONTEXT}


def json_frames() -> list[Frame]:
    """JSON values: raw line breaks (insignificant whitespace), a comma and quotes, a null and
    an empty key, unicode, a 10 KB value, a timestamp of -1, headers or none."""
    return [
        Frame(
            RAW,
            100,
            TS,
            EVENT,
            b"o-1",
            b'{\r\n  "order_id": "o-1",\n  "note": "a, \\"b\\"",\n  "price": 12.5\n}',
            (("source", b"web"),),
        ),
        Frame(RAW, 101, -1, EVENT + 1, None, b'{"n":1,"big":123456789012345678901234567890}'),
        Frame(
            RAW,
            102,
            TS + 2,
            EVENT + 2,
            "k\u00e9\u2603".encode(),
            '{"s":"\u00e9\u2603 \U0001f600","nested":{"a":[1,2]}}'.encode(),
            (("trace", "\u00e9".encode()), ("source", b"app")),
        ),
        Frame(RAW, 103, TS + 3, EVENT + 3, b"", BIG_JSON),
        Frame(RAW, 104, TS + 4, EVENT + 4, b"o-5", b'{"n":2}', (("source", b"web"),)),
    ]


def text_frames(line_breaks: bool = True) -> list[Frame]:
    """Text values (a line break only where the format allows one) and text keys/headers."""
    first = 'caf\u00e9, "x"\nnext line' if line_breaks else 'caf\u00e9, "x" and more'
    return [
        Frame(RAW, 200, TS, EVENT, "k\u00e9".encode(), first.encode(), (("h", "v\u00e9".encode()),)),
        Frame(RAW, 201, -1, EVENT + 1, None, b"", ()),
        Frame(RAW, 202, TS + 2, EVENT + 2, b"", BIG_TEXT, (("a", b""), ("b", b"2"))),
        Frame(RAW, 203, TS + 3, EVENT + 3, b"k3", "\U0001f600 plain".encode()),
    ]


def bytes_frames() -> list[Frame]:
    """Arbitrary bytes everywhere: keys, values and header values that are not UTF-8."""
    return [
        Frame(RAW, 300, TS, EVENT, b"\xff\x00k", bytes(range(256)), (("bin", b"\xff\xfe\x00"), ("", b""))),
        Frame(RAW, 301, -1, EVENT + 1, None, b""),
        Frame(RAW, 302, TS + 2, EVENT + 2, b"", b'\n,"\r', (("source", b"web"),)),
        Frame(RAW, 303, TS + 3, EVENT + 3, b"k", BIG_BYTES),
    ]


FRAMES = {"json": json_frames(), "text": text_frames(), "bytes": bytes_frames()}


def frames_for(encoding: str) -> list[Frame]:
    return list(FRAMES[encoding])


class WriteOnly:
    """An output with ``write`` and ``flush`` only, like the object store's hashing spool writer."""

    def __init__(self) -> None:
        self._data = io.BytesIO()

    def write(self, data: bytes) -> int:
        return self._data.write(data)

    def flush(self) -> None:
        pass

    def getvalue(self) -> bytes:
        return self._data.getvalue()


def render(fmt: ObjectFormat, frames: list[Frame], context: RenderContext) -> bytes:
    """Render to a write-only output (no tell, seek or mode: formats must not need them)."""
    out = WriteOnly()
    assert fmt.write(iter(frames), context, out) == len(frames)  # type: ignore[arg-type]
    return out.getvalue()


def envelopes(frames: list[Frame], context: RenderContext) -> list[ArchivedEnvelope]:
    """What a format that keeps everything reads back."""
    return [
        ArchivedEnvelope(
            context.topic,
            context.partition,
            frame.offset,
            frame.timestamp_ms,
            frame.event_time_ms,
            frame.key,
            frame.value,
            frame.headers,
        )
        for frame in frames
    ]


def dead_letter() -> Frame:
    return Frame(DEAD_LETTER, 9, TS, -1, None, b"not json", (), "invalid_value_encoding: nope")


ALL_CODECS = [(fmt, codec) for fmt in FORMATS for codec in COMPRESSIONS[fmt]]


# -- the registry ----------------------------------------------------------------------------


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
def test_every_configurable_format_and_codec_has_a_writer(type_: str, codec: str) -> None:
    fmt = format_for(type_, codec, 9)
    assert fmt.content_type
    spec = RenderSpec(type_, codec, 9, "orders", "text", "json", "text")
    assert type(format_of(spec)) is type(fmt)
    assert format_of(spec).extension == fmt.extension


@pytest.mark.parametrize(
    ("type_", "codec", "ext"),
    [
        ("jsonl", "gzip", "jsonl.gz"),
        ("jsonl", "zstd", "jsonl.zst"),
        ("jsonl", "none", "jsonl"),
        ("csv", "gzip", "csv.gz"),
        ("csv", "zstd", "csv.zst"),
        ("csv", "none", "csv"),
        ("text", "gzip", "txt.gz"),
        ("text", "zstd", "txt.zst"),
        ("text", "none", "txt"),
        ("bytes", "gzip", "bin.gz"),
        ("bytes", "zstd", "bin.zst"),
        ("bytes", "none", "bin"),
        ("parquet", "snappy", "parquet"),
        ("parquet", "zstd", "parquet"),
        ("parquet", "gzip", "parquet"),
        ("parquet", "none", "parquet"),
        ("avro", "deflate", "avro"),
        ("avro", "snappy", "avro"),
        ("avro", "zstandard", "avro"),
        ("avro", "null", "avro"),
    ],
)
def test_extensions(type_: str, codec: str, ext: str) -> None:
    assert format_for(type_, codec).extension == ext


@pytest.mark.parametrize(
    ("type_", "codec"),
    [
        ("jsonl", "snappy"),
        ("csv", "deflate"),
        ("text", "lz4"),
        ("bytes", "null"),
        ("parquet", "deflate"),
        ("avro", "gzip"),
    ],
)
def test_unsupported_codecs_are_refused(type_: str, codec: str) -> None:
    with pytest.raises(ValueError, match=f"unsupported compression '{codec}'"):
        format_for(type_, codec)


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported format 'orc'"):
        format_for("orc", "none")


# -- determinism -------------------------------------------------------------------------------


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_same_frames_give_the_same_bytes(type_: str, codec: str, encoding: str) -> None:
    frames = text_frames(line_breaks=False) if (type_, encoding) == ("text", "text") else frames_for(encoding)
    context = CONTEXTS[encoding]
    first = render(format_for(type_, codec), frames, context)
    again = render(format_for(type_, codec), list(frames), dataclasses.replace(context))
    assert first == again
    assert [envelope.value for envelope in format_for(type_, codec).read(first, context)] != []


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
def test_dead_letters_only_reach_json_lines(type_: str, codec: str) -> None:
    fmt = format_for(type_, codec)
    if type_ == "jsonl":
        assert render(fmt, [dead_letter()], JSON_CONTEXT)
        return
    with pytest.raises(ValueError, match="dead letters"):
        render(fmt, [*json_frames(), dead_letter()], JSON_CONTEXT)


@pytest.mark.parametrize(("type_", "codec"), ALL_CODECS)
def test_no_frames_still_make_a_readable_object(type_: str, codec: str) -> None:
    fmt = format_for(type_, codec)
    body = render(fmt, [], JSON_CONTEXT)
    assert body == render(fmt, [], JSON_CONTEXT)
    assert list(fmt.read(body, JSON_CONTEXT)) == []


# -- compression -----------------------------------------------------------------------------


def test_compression_helpers() -> None:
    import zstandard

    data = b"line\n" * 1000
    for codec in ("none", "gzip", "zstd"):
        out = io.BytesIO()
        with compressed(out, codec, 6) as sink:
            sink.write(data[:100])
            sink.write(data[100:])
        body = out.getvalue()
        assert decompress(body, codec) == data
        assert decompress(body, extension("jsonl", codec)) == data
    gz = io.BytesIO()
    with compressed(gz, "gzip", 6) as sink:
        sink.write(data)
    assert gz.getvalue()[:8] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00"  # no name, mtime 0
    assert gzip.decompress(gz.getvalue()) == data
    zst = io.BytesIO()
    with compressed(zst, "zstd") as sink:
        sink.write(data)
    frame = zstandard.get_frame_parameters(zst.getvalue())
    assert frame.has_checksum and frame.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert zstandard.ZstdDecompressor().decompressobj().decompress(zst.getvalue()) == data
    assert ZSTD_LEVEL == 3
    with pytest.raises(ValueError, match="unsupported compression 'lz4'"), compressed(io.BytesIO(), "lz4"):
        pass


def test_chunks_are_bounded_by_rows_and_bytes() -> None:
    frames = [Frame(RAW, i, 0, 0, b"k", b"v" * 99) for i in range(10)]  # 100 bytes each
    assert [len(chunk) for chunk in chunked(frames, 4, 10_000)] == [4, 4, 2]
    assert [len(chunk) for chunk in chunked(frames, 100, 250)] == [3, 3, 3, 1]
    assert [f.offset for chunk in chunked(frames, 3, 10_000) for f in chunk] == list(range(10))


# -- lazy imports ------------------------------------------------------------------------------


def test_core_formats_work_without_the_formats_layer() -> None:
    """JSON Lines, text and bytes with gzip or none must run in the core layer alone."""
    script = textwrap.dedent(
        """
        import io, sys
        for name in ("pyarrow", "fastavro", "zstandard", "cramjam"):
            sys.modules[name] = None  # import fails, as in a Lambda without the formats layer
        from tidemark.formats import RenderContext, format_for
        from tidemark.staging.frames import RAW, Frame
        frames = [Frame(RAW, 1, 2, 3, b"k", b'{"a":1}', (("h", b"v"),))]
        for type_ in ("jsonl", "text", "bytes"):
            for codec in ("gzip", "none"):
                fmt = format_for(type_, codec)
                out = io.BytesIO()
                assert fmt.write(frames, RenderContext("t", 0), out) == 1
                assert len(list(fmt.read(out.getvalue(), RenderContext("t", 0)))) == 1
        try:
            format_for("parquet", "snappy")
        except ImportError:
            pass
        else:
            raise SystemExit("parquet without pyarrow?")
        print("ok")
        """
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"

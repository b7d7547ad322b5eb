"""tidemark.formats.bytes: every byte of every record, read back with ``struct``."""

from __future__ import annotations

import struct

import pytest

from tests.support.independent import plain
from tests.unit.test_formats_registry import CONTEXTS, EVENT, TS, envelopes, frames_for, render, text_frames
from tidemark.formats import format_for
from tidemark.formats.base import RenderContext
from tidemark.formats.bytes import BytesFormat
from tidemark.sources import RABBITMQ
from tidemark.staging.frames import RAW, Frame

CODECS = ("gzip", "zstd", "none")


def parse(data: bytes, version: int = 3) -> tuple[str, int, list[Frame]]:
    """The documented layout, decoded independently of the module: version 3 (Kafka: a value
    or header value length of -1 is null) or version 1 (RabbitMQ: lengths unsigned)."""
    magic, found, partition, topic_len = struct.unpack_from(">4sHiH", data, 0)
    assert (magic, found) == (b"TMRB", version)
    length = ">i" if version == 3 else ">I"
    pos = 12
    topic = data[pos : pos + topic_len].decode()
    pos += topic_len
    frames = []
    while pos < len(data):
        offset, timestamp, event_time, key_len = struct.unpack_from(">qqqi", data, pos)
        pos += 28
        key = None if key_len == -1 else data[pos : pos + key_len]
        pos += max(key_len, 0)
        (value_len,) = struct.unpack_from(length, data, pos)
        value = None if value_len == -1 else data[pos + 4 : pos + 4 + value_len]
        pos += 4 + max(value_len, 0)
        (count,) = struct.unpack_from(">I", data, pos)
        pos += 4
        headers = []
        for _ in range(count):
            (name_len,) = struct.unpack_from(">I", data, pos)
            name = data[pos + 4 : pos + 4 + name_len].decode()
            pos += 4 + name_len
            (data_len,) = struct.unpack_from(length, data, pos)
            headers.append((name, None if data_len == -1 else data[pos + 4 : pos + 4 + data_len]))
            pos += 4 + max(data_len, 0)
        frames.append(Frame(RAW, offset, timestamp, event_time, key, value, tuple(headers)))
    assert pos == len(data)
    return topic, partition, frames


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("encoding", ["json", "text", "bytes"])
def test_every_byte_round_trips(codec: str, encoding: str) -> None:
    frames, context = frames_for(encoding), CONTEXTS[encoding]
    body = render(format_for("bytes", codec), frames, context)
    assert parse(plain(body, codec)) == ("orders", 3, frames)
    assert list(BytesFormat(codec).read(body, context)) == envelopes(frames, context)


def test_the_encoding_does_not_matter() -> None:
    frames = text_frames()
    assert render(BytesFormat(), frames, CONTEXTS["text"]) == render(BytesFormat(), frames, CONTEXTS["bytes"])


def test_unicode_topic_and_the_file_header() -> None:
    context = RenderContext("t\u00f6pic", 2_147_483_647)
    data = plain(render(BytesFormat("none"), [], context), "none")
    assert data == b"TMRB\x00\x03\x7f\xff\xff\xff\x00\x06t\xc3\xb6pic"
    frame = Frame(RAW, 2**63 - 1, -1, EVENT, None, b"v", (("n\u00e9", b"\x00"),))
    assert parse(plain(render(BytesFormat("none"), [frame], context), "none")) == ("t\u00f6pic", 2_147_483_647, [frame])


def test_damaged_objects_are_refused() -> None:
    body = render(BytesFormat("none"), [Frame(RAW, 1, TS, EVENT, b"k", b"value")], CONTEXTS["bytes"])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        list(BytesFormat("none").read(body[:-3], CONTEXTS["bytes"]))
    with pytest.raises(ValueError, match="not a tidemark bytes object"):
        list(BytesFormat("none").read(b"PAR1" + body[4:], CONTEXTS["bytes"]))
    with pytest.raises(ValueError, match="not a tidemark bytes object"):
        list(BytesFormat("none").read(b"TM", CONTEXTS["bytes"]))


def test_tombstones_and_null_header_values_are_nulls_distinct_from_empty_ones() -> None:
    """Version 3 (every Kafka object): a null value and a null header value are length -1."""
    frames = [
        Frame(RAW, 1, TS, EVENT, b"k", None, (("gone", None), ("empty", b""))),
        Frame(RAW, 2, TS, EVENT, b"k", b"", (("set", b"x"),)),
        Frame(RAW, 3, TS, EVENT, None, None),
    ]
    body = render(BytesFormat("none"), frames, CONTEXTS["bytes"])
    assert parse(body) == ("orders", 3, frames)
    assert body[12 + len("orders") + 28 + 1 : 12 + len("orders") + 28 + 1 + 4] == b"\xff\xff\xff\xff"  # after key "k"
    read = list(BytesFormat("none").read(body, CONTEXTS["bytes"]))
    assert [(item.value, item.tombstone) for item in read] == [(None, True), (b"", False), (None, True)]
    assert read[0].headers == (("gone", None), ("empty", b""))


def test_rabbitmq_objects_stay_version_1_and_refuse_a_null() -> None:
    """A queue has no tombstones: its objects are version 1 byte for byte, and a null (which
    routing never lets through) is refused rather than written as damage."""
    context = RenderContext("orders", 0, "bytes", "bytes", "bytes", source=RABBITMQ)
    frame = Frame(RAW, 7, TS, EVENT, b"id-7", b"body", (("h", b"1"),))
    body = render(BytesFormat("none"), [frame], context)
    assert parse(body, version=1) == ("orders", 0, [frame])
    with pytest.raises(ValueError, match="null value or header value"):
        render(BytesFormat("none"), [frame._replace(value=None)], context)
    with pytest.raises(ValueError, match="null value or header value"):
        render(BytesFormat("none"), [frame._replace(headers=(("h", None),))], context)


def test_a_reader_before_version_3_refuses_it_by_its_version_never_misreads_it() -> None:
    """What an older reader does with a version-3 object: its versions were 1 and 2 only."""
    body = render(BytesFormat("none"), [Frame(RAW, 1, TS, EVENT, b"k", None)], CONTEXTS["bytes"])
    magic, version = struct.unpack_from(">4sH", body, 0)
    assert (magic, version) == (b"TMRB", 3) and version not in (1, 2)

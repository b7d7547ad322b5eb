"""tidemark.formats.bytes: every byte of every record, read back with ``struct``."""

from __future__ import annotations

import struct

import pytest

from tests.support.independent import plain
from tests.unit.test_formats_registry import CONTEXTS, EVENT, TS, envelopes, frames_for, render, text_frames
from tidemark.formats import format_for
from tidemark.formats.base import RenderContext
from tidemark.formats.bytes import BytesFormat
from tidemark.staging.frames import RAW, Frame

CODECS = ("gzip", "zstd", "none")


def parse(data: bytes) -> tuple[str, int, list[Frame]]:
    """The documented layout, decoded independently of the module."""
    magic, version, partition, topic_len = struct.unpack_from(">4sHiH", data, 0)
    assert (magic, version) == (b"TMRB", 1)
    pos = 12
    topic = data[pos : pos + topic_len].decode()
    pos += topic_len
    frames = []
    while pos < len(data):
        offset, timestamp, event_time, key_len = struct.unpack_from(">qqqi", data, pos)
        pos += 28
        key = None if key_len == -1 else data[pos : pos + key_len]
        pos += max(key_len, 0)
        (value_len,) = struct.unpack_from(">I", data, pos)
        value = data[pos + 4 : pos + 4 + value_len]
        pos += 4 + value_len
        (count,) = struct.unpack_from(">I", data, pos)
        pos += 4
        headers = []
        for _ in range(count):
            (name_len,) = struct.unpack_from(">I", data, pos)
            name = data[pos + 4 : pos + 4 + name_len].decode()
            pos += 4 + name_len
            (data_len,) = struct.unpack_from(">I", data, pos)
            headers.append((name, data[pos + 4 : pos + 4 + data_len]))
            pos += 4 + data_len
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
    assert data == b"TMRB\x00\x01\x7f\xff\xff\xff\x00\x06t\xc3\xb6pic"
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

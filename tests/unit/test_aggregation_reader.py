"""jobs.aggregation.reader: envelopes split by their byte template, without parsing values."""

from __future__ import annotations

import gzip

import orjson
import pytest

from jobs.aggregation.reader import EnvelopeError, read_object, split_envelope
from tidemark.formats.base import RenderContext
from tidemark.formats.jsonl import JsonLinesFormat
from tidemark.staging.frames import RAW, decode_frames, encode_frame


def rendered(values: list[bytes], headers=(("value", b'a,"headers":[x'),)) -> bytes:
    """Lines exactly as the archiver renders them (the real format, not a copy of it)."""
    frames = decode_frames(
        b"".join(
            encode_frame(RAW, 10 + i, 1_795_248_000_000, 1_795_248_000_000 + i, b"k", v, headers)
            for i, v in enumerate(values)
        )
    )
    context = RenderContext(
        topic="orders", partition=3, value_encoding="json", key_encoding="text", header_encoding="text"
    )
    return b"".join(JsonLinesFormat("none").lines(frames, context))


def test_split_gives_partition_offset_event_time_and_the_value_bytes():
    value = orjson.dumps({"a": 1, "headers": [1, 2], "s": 'x,"value":y'})  # the markers inside the value
    (line,) = rendered([value]).splitlines()
    assert split_envelope(line) == (3, 10, "2026-11-21T08:00:00.000Z", value)


def test_read_object_handles_gzip_and_keeps_every_value():
    values = [orjson.dumps({"n": n, "price": n * 1.5}) for n in range(50)]
    batch = read_object(gzip.compress(rendered(values)), "2026-11-21T08")
    assert batch.column("offset").to_pylist() == list(range(10, 60))
    assert batch.column("value").to_pylist() == [v.decode() for v in values]
    assert set(batch.column("hour").to_pylist()) == {"2026-11-21T08"}


@pytest.mark.parametrize("line", [b"", b"{}", b'{"topic":"orders","partition":1}', b"not json"])
def test_a_line_that_is_not_an_envelope_is_an_error(line):
    with pytest.raises(EnvelopeError):
        split_envelope(line)

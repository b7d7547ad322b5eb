"""tidemark.formats.text: one value per line, read back by splitting lines."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
import zstandard

from tests.unit.test_formats_registry import CONTEXTS, JSON_CONTEXT, TS, frames_for, render, text_frames
from tidemark.formats import format_for
from tidemark.formats.base import ArchivedEnvelope
from tidemark.formats.text import TextFormat
from tidemark.staging.frames import RAW, Frame

CODECS = ("gzip", "zstd", "none")


def lines_of(body: bytes, codec: str) -> list[bytes]:
    if codec == "gzip":
        body = gzip.decompress(body)
    elif codec == "zstd":
        body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
    assert body.endswith(b"\n")
    return body.split(b"\n")[:-1]


@pytest.mark.parametrize("codec", CODECS)
def test_json_values_one_per_line_with_line_breaks_blanked(codec: str) -> None:
    frames = frames_for("json")
    body = render(format_for("text", codec), frames, JSON_CONTEXT)
    lines = lines_of(body, codec)
    assert len(lines) == len(frames)
    for line, frame in zip(lines, frames, strict=True):
        assert line == frame.value.replace(b"\r", b" ").replace(b"\n", b" ")
        assert json.loads(line) == json.loads(frame.value)
    assert b'"big":123456789012345678901234567890' in lines[1]  # every token as produced
    read = list(TextFormat(codec).read(body, JSON_CONTEXT))
    assert read == [ArchivedEnvelope(None, None, None, None, None, None, line, None) for line in lines]


@pytest.mark.parametrize("codec", CODECS)
def test_text_values_as_they_are(codec: str) -> None:
    frames = text_frames(line_breaks=False)
    body = render(TextFormat(codec), frames, CONTEXTS["text"])
    assert lines_of(body, codec) == [frame.value for frame in frames]  # unicode, empty, 10 KB
    assert [envelope.value for envelope in TextFormat(codec).read(body, CONTEXTS["text"])] == [f.value for f in frames]


@pytest.mark.parametrize("codec", CODECS)
def test_bytes_values_in_base64(codec: str) -> None:
    frames = frames_for("bytes")
    body = render(TextFormat(codec), frames, CONTEXTS["bytes"])
    assert [base64.b64decode(line) for line in lines_of(body, codec)] == [frame.value for frame in frames]
    assert [envelope.value for envelope in TextFormat(codec).read(body, CONTEXTS["bytes"])] == [f.value for f in frames]


@pytest.mark.parametrize("value", [b"two\nlines", b"carriage\rreturn"])
def test_a_text_value_with_a_line_break_is_refused(value: bytes) -> None:
    with pytest.raises(ValueError, match="line break"):
        render(TextFormat(), [Frame(RAW, 1, TS, TS, None, value)], CONTEXTS["text"])


def test_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tidemark.formats.text.CHUNK_ROWS", 3)
    frames = [Frame(RAW, i, TS, TS, None, b"%d" % i) for i in range(10)]
    assert lines_of(render(TextFormat("none"), frames, CONTEXTS["text"]), "none") == [b"%d" % i for i in range(10)]


def test_a_truncated_object_is_refused() -> None:
    with pytest.raises(ValueError, match="truncated"):
        list(TextFormat("none").read(b"a\nb", CONTEXTS["text"]))

"""Plain text: one value per line, each line ending with ``\\n``, in offset order.

A line holds a json value with its raw line breaks blanked to spaces (insignificant
whitespace in valid JSON, so every token stays as produced, as in JSON Lines), a text value as
it is (values with a line break are dead-lettered when routed; one that arrives here raises
``ValueError``), or a bytes value in base64. Nothing else is kept: no key, headers, offset or
timestamps (the archive checker matches text lines to what was produced by value). There is
no envelope, so every source kind's objects are alike: a Kinesis stream's lines are its
records' data exactly as a Kafka topic's are its values.

A Kafka tombstone (a null value) has no value to keep: its line is empty, so an object still
holds one line per record. For a json stream an empty line can only be a tombstone (an empty
value is not JSON: it is dead-lettered) and reads back as a null value; for text and bytes
streams it reads back as the empty value, which it cannot be told from -- a stream that needs
tombstones told apart archives another format (JSON Lines, Parquet, Avro, CSV or bytes).

Compression ``zstd`` (a stream's default), ``gzip`` or ``none``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from tidemark.formats.base import ArchivedEnvelope, RenderContext
from tidemark.formats.compression import ZSTD_LEVEL, chunked, compressed, decompress, extension
from tidemark.formats.jsonl import one_line_json
from tidemark.staging.frames import Frame

CHUNK_ROWS = 512
CHUNK_BYTES = 4 * 1024 * 1024


def _text_line(data: bytes) -> bytes:
    if b"\n" in data or b"\r" in data:
        raise ValueError("the text format keeps one value per line; this value has a line break")
    return data


def _b64_line(data: bytes) -> bytes:
    return base64.b64encode(data)


_LINE: dict[str, Callable[[bytes], bytes]] = {"json": one_line_json, "text": _text_line, "bytes": _b64_line}


class TextFormat:
    content_type = "text/plain; charset=utf-8"

    def __init__(self, compression: str = "gzip", gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> None:
        self.extension = extension("txt", compression)
        self.compression = compression
        self.gzip_level = gzip_level
        self.zstd_level = zstd_level

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        line = _LINE[context.value_encoding]
        count = 0
        with compressed(out, self.compression, self.gzip_level, self.zstd_level) as sink:
            for chunk in chunked(frames, CHUNK_ROWS, CHUNK_BYTES):
                sink.write(b"".join([b"\n" if frame.value is None else line(frame.value) + b"\n" for frame in chunk]))
                count += len(chunk)
        return count

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every line back as a value (``None`` for everything else); an empty line of a json
        stream is a tombstone (see the module docstring)."""
        data = decompress(body, self.compression)
        lines = data.split(b"\n")
        if lines[-1]:
            raise ValueError("text object does not end with a line break (truncated?)")
        decode = base64.b64decode if context.value_encoding == "bytes" else None
        json_values = context.value_encoding == "json"
        for line in lines[:-1]:
            if json_values and not line:
                yield ArchivedEnvelope(None, None, None, None, None, None, None, None, tombstone=True)
                continue
            value = decode(line, validate=True) if decode is not None else line
            yield ArchivedEnvelope(None, None, None, None, None, None, value, None)

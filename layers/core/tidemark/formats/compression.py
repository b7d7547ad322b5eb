"""Stream compression of the line and record formats (JSON Lines, CSV, text, bytes), and the
output plumbing the formats share.

Codecs (``none | gzip | zstd``), each byte-for-byte deterministic for the same input at the
same level. Neither compressed stream depends on how the input is split into writes (zlib and
zstd both buffer internally; ``tests/unit/test_render_pins.py`` pins it), so a format may
chunk its output however it likes -- by record count, never by time or buffer state:

* ``gzip``: :class:`gzip.GzipFile` with no file name and ``mtime=0`` at the stream's
  ``gzip_level`` (RFC 1952; ``gzip -d``, Athena, Spark, every tool reads it);
* ``zstd``: one Zstandard frame (RFC 8878) from the ``zstandard`` package at the stream's
  ``zstd_level`` (part of its render spec, so an object's bytes never depend on a library
  default; :data:`ZSTD_LEVEL` for buffers staged before the level was configurable),
  single-threaded, with a content checksum and no content size (it is streamed).
  ``zstandard`` is a core dependency (the default codec of the line formats), imported only
  when used;
* ``none``: the bytes as they are.

Parquet and Avro compress inside the file (their own codecs) and do not use this module's
codecs, only its :class:`PositionedSink` (and Parquet :func:`chunked`).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, Protocol

from tidemark.staging.frames import DEAD_LETTER, Frame

#: the zstd level of every buffer staged before the level was configurable (a render spec
#: without one), and of a format built without one; streams choose theirs (``format.zstd_level``)
ZSTD_LEVEL = 3
CODECS = ("none", "gzip", "zstd")
SUFFIXES = {"none": "", "gzip": ".gz", "zstd": ".zst"}
_GZIP_NAMES = frozenset({"gzip", "gz"})
_ZSTD_NAMES = frozenset({"zstd", "zst", "zstandard"})


class Sink(Protocol):
    """Where a format writes: the object's output or a compressor around it."""

    def write(self, data: Any, /) -> int: ...


def extension(base: str, compression: str) -> str:
    """``extension("csv", "zstd") == "csv.zst"``; ``ValueError`` for a codec not in :data:`CODECS`."""
    if compression not in SUFFIXES:
        raise ValueError(f"unsupported compression {compression!r}")
    return base + SUFFIXES[compression]


@contextmanager
def compressed(out: BinaryIO, compression: str, gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> Iterator[Sink]:
    """A sink that compresses into ``out``; the compressed stream is complete when the block
    exits (``out`` itself is left open)."""
    if compression == "none":
        yield out
    elif compression == "gzip":
        with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=gzip_level, mtime=0) as gz:
            yield gz
    elif compression == "zstd":
        import zstandard

        compressor = zstandard.ZstdCompressor(level=zstd_level, write_checksum=True, write_content_size=False)
        with compressor.stream_writer(out, closefd=False) as writer:
            yield writer
    else:
        raise ValueError(f"unsupported compression {compression!r}")


def decompress(body: bytes, extension_or_codec: str) -> bytes:
    """The uncompressed bytes of an object, by its codec (``gzip``/``zstd``/``none``) or its
    extension (``jsonl.gz``, ``csv.zst``, ``txt``, ``gz``...)."""
    codec = extension_or_codec.rsplit(".", 1)[-1].lower()
    if codec in _GZIP_NAMES:
        return gzip.decompress(body)
    if codec in _ZSTD_NAMES:
        import zstandard

        return _zstd_frames(zstandard.ZstdDecompressor(), body)
    return body


def _zstd_frames(context: Any, body: bytes) -> bytes:
    """Every frame of ``body``, refusing a truncated one (a stream reader would return what it
    got, silently: records lost from an object that was cut short)."""
    parts: list[bytes] = []
    data = body
    while data:
        frame = context.decompressobj()
        parts.append(frame.decompress(data))
        if not frame.eof:
            raise ValueError("truncated zstd frame: the object is incomplete")
        data = frame.unused_data
    return b"".join(parts)


class PositionedSink:
    """A write-only file over the object's output that knows its position: what pyarrow's
    Parquet writer needs (``tell``, ``closed``) from an output that only has ``write``.
    Closing it does not close the output."""

    def __init__(self, out: Sink) -> None:
        self._out = out
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self._out.write(data)
        self._position += size
        return size

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        flush = getattr(self._out, "flush", None)
        if flush is not None:
            flush()

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False


def chunked(frames: Iterable[Frame], max_rows: int, max_bytes: int) -> Iterator[list[Frame]]:
    """Frames in lists of at most ``max_rows`` and about ``max_bytes`` (keys and values), so a
    format holds one bounded chunk at a time however large the buffer. Chunk boundaries depend
    on the frames only, so the output does too. Raises ``ValueError`` at a dead letter: only
    JSON Lines keeps those."""
    chunk: list[Frame] = []
    append = chunk.append
    size = 0
    for frame in frames:
        if frame.kind == DEAD_LETTER:
            raise ValueError(f"offset {frame.offset}: dead letters are archived as JSON Lines only")
        append(frame)
        size += (len(frame.value) if frame.value else 0) + (len(frame.key) if frame.key else 0)
        if len(chunk) >= max_rows or size >= max_bytes:
            yield chunk
            chunk = []
            append = chunk.append
            size = 0
    if chunk:
        yield chunk

"""Object formats behind one interface: JSON Lines, Parquet, Avro, CSV, text and bytes.

JSON Lines, text and bytes need nothing beyond the core layer, whatever their codec (zstd's
``zstandard`` is a core dependency); Parquet and CSV need pyarrow, Avro fastavro (and cramjam
for snappy) -- the formats layer, shipped only to streams that use them. Each format module is
imported when its format is first asked for, so a stream without them never imports those
libraries.
"""

from __future__ import annotations

from tidemark.formats.base import ArchivedEnvelope, ObjectFormat, RenderContext, RenderSpec, ValueColumn
from tidemark.formats.compression import ZSTD_LEVEL
from tidemark.formats.jsonl import JsonLinesFormat

FORMATS = ("jsonl", "parquet", "avro", "csv", "text", "bytes")
#: an object's extension names its format; the line formats add their codec's suffix
BASE_EXTENSIONS = {"jsonl": "jsonl", "parquet": "parquet", "avro": "avro", "csv": "csv", "text": "txt", "bytes": "bin"}
CODEC_INSIDE = frozenset({"parquet", "avro"})  # compressed inside the file: no suffix
_FORMAT_OF_BASE = {base: fmt for fmt, base in BASE_EXTENSIONS.items()}
_CODEC_OF_SUFFIX = {"": "none", "gz": "gzip", "zst": "zstd"}


def extension_of(type_: str, compression: str) -> str:
    """An object's extension, without importing the format's library: object keys are decided
    when a buffer is sealed, which must not need the library (it may be missing for a while)."""
    if type_ in CODEC_INSIDE:
        return BASE_EXTENSIONS[type_]
    from tidemark.formats.compression import extension

    return extension(BASE_EXTENSIONS[type_], compression)


def kind_of_key(key: str) -> tuple[str, str | None]:
    """``(format, codec)`` an object key names by its extension; the codec is ``None`` for
    Parquet and Avro (inside the file). ``ValueError`` for a key that is not an archive object's."""
    name = key.rsplit("/", 1)[-1]
    base, _, suffix = (name.split(".", 1)[1] if "." in name else "").partition(".")
    fmt = _FORMAT_OF_BASE.get(base)
    if fmt is None or (fmt in CODEC_INSIDE and suffix) or (fmt not in CODEC_INSIDE and suffix not in _CODEC_OF_SUFFIX):
        raise ValueError(f"not an archive object: {key!r}")
    return fmt, None if fmt in CODEC_INSIDE else _CODEC_OF_SUFFIX[suffix]


def format_for(type_: str, compression: str, gzip_level: int = 6, zstd_level: int = ZSTD_LEVEL) -> ObjectFormat:
    """The format ``type_`` with ``compression`` (one of ``config.model.COMPRESSIONS[type_]``)
    at ``gzip_level`` (gzip, Avro's deflate) or ``zstd_level`` (zstd, Avro's zstandard);
    ``ValueError`` for an unknown format or a codec it does not support."""
    if type_ == "jsonl":
        return JsonLinesFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    if type_ == "parquet":
        from tidemark.formats.parquet import ParquetFormat

        return ParquetFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    if type_ == "avro":
        from tidemark.formats.avro import AvroFormat

        return AvroFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    if type_ == "csv":
        from tidemark.formats.csv import CsvFormat

        return CsvFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    if type_ == "text":
        from tidemark.formats.text import TextFormat

        return TextFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    if type_ == "bytes":
        from tidemark.formats.bytes import BytesFormat

        return BytesFormat(compression=compression, gzip_level=gzip_level, zstd_level=zstd_level)
    raise ValueError(f"unsupported format {type_!r}")


def format_of(spec: RenderSpec) -> ObjectFormat:
    return format_for(spec.format, spec.compression, spec.gzip_level, spec.zstd_level)


__all__ = [
    "FORMATS",
    "ArchivedEnvelope",
    "JsonLinesFormat",
    "ObjectFormat",
    "RenderContext",
    "RenderSpec",
    "ValueColumn",
    "extension_of",
    "format_for",
    "format_of",
    "kind_of_key",
]

"""Object formats behind one interface: JSON Lines, Parquet, Avro, CSV, text and bytes.

JSON Lines, text and bytes need nothing beyond the core layer with ``gzip`` or ``none``;
Parquet and CSV need pyarrow, Avro fastavro (and cramjam for snappy), zstd the zstandard
package -- the formats layer, shipped only to streams that use them. Each format module is
imported when its format is first asked for, so a stream without them never imports those
libraries.
"""

from __future__ import annotations

from tidemark.formats.base import ArchivedEnvelope, ObjectFormat, RenderContext, RenderSpec, ValueColumn
from tidemark.formats.jsonl import JsonLinesFormat

FORMATS = ("jsonl", "parquet", "avro", "csv", "text", "bytes")


def format_for(type_: str, compression: str, gzip_level: int = 6) -> ObjectFormat:
    """The format ``type_`` with ``compression`` (one of ``config.model.COMPRESSIONS[type_]``);
    ``ValueError`` for an unknown format or a codec it does not support."""
    if type_ == "jsonl":
        return JsonLinesFormat(compression=compression, gzip_level=gzip_level)
    if type_ == "parquet":
        from tidemark.formats.parquet import ParquetFormat

        return ParquetFormat(compression=compression, gzip_level=gzip_level)
    if type_ == "avro":
        from tidemark.formats.avro import AvroFormat

        return AvroFormat(compression=compression, gzip_level=gzip_level)
    if type_ == "csv":
        from tidemark.formats.csv import CsvFormat

        return CsvFormat(compression=compression, gzip_level=gzip_level)
    if type_ == "text":
        from tidemark.formats.text import TextFormat

        return TextFormat(compression=compression, gzip_level=gzip_level)
    if type_ == "bytes":
        from tidemark.formats.bytes import BytesFormat

        return BytesFormat(compression=compression, gzip_level=gzip_level)
    raise ValueError(f"unsupported format {type_!r}")


def format_of(spec: RenderSpec) -> ObjectFormat:
    return format_for(spec.format, spec.compression, spec.gzip_level)


__all__ = [
    "FORMATS",
    "ArchivedEnvelope",
    "JsonLinesFormat",
    "ObjectFormat",
    "RenderContext",
    "RenderSpec",
    "ValueColumn",
    "format_for",
    "format_of",
]

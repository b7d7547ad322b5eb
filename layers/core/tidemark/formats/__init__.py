"""Object formats behind one interface (JSON Lines now; Avro, Parquet, CSV later)."""

from __future__ import annotations

from tidemark.formats.base import ObjectFormat, RenderContext, RenderSpec
from tidemark.formats.jsonl import JsonLinesFormat


def format_for(type_: str, compression: str, gzip_level: int = 6) -> ObjectFormat:
    if type_ == "jsonl":
        return JsonLinesFormat(compression=compression, gzip_level=gzip_level)
    raise ValueError(f"unsupported format {type_!r}")


def format_of(spec: RenderSpec) -> ObjectFormat:
    return format_for(spec.format, spec.compression, spec.gzip_level)


__all__ = ["JsonLinesFormat", "ObjectFormat", "RenderContext", "RenderSpec", "format_for", "format_of"]

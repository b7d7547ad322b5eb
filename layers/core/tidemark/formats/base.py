"""The writer interface every object format implements, and what it renders from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple, Protocol

from tidemark.formats.compression import ZSTD_LEVEL
from tidemark.records.model import Headers, Schemas
from tidemark.sources import KAFKA, EnvelopeNames, PartitionId, shape_of
from tidemark.staging.frames import Frame


class ValueColumn(NamedTuple):
    """A declared value field (``format.value_schema``): name, type (string | long | double |
    boolean) and whether it may be missing or null."""

    name: str
    type: str
    nullable: bool

    @classmethod
    def parse_all(cls, encoded: str) -> tuple[ValueColumn, ...]:
        """``"order_id:string,price:double,note:string?"`` -> columns."""
        columns = []
        for item in filter(None, encoded.split(",")):
            name, _, kind = item.partition(":")
            columns.append(cls(name, kind.rstrip("?"), kind.endswith("?")))
        return tuple(columns)


@dataclass(frozen=True, slots=True)
class RenderContext:
    """What a format needs besides the frames: the envelope fields that are not per record."""

    topic: str  # the source log: a Kafka topic, a Kinesis stream's name
    partition: PartitionId  # a Kafka partition, a Kinesis shard id
    key_encoding: str = "text"  # text | bytes
    value_encoding: str = "json"  # json | text | bytes
    header_encoding: str = "text"  # text | bytes
    value_schema: tuple[ValueColumn, ...] = ()  # parquet/avro: typed value columns (value_encoding json)
    columns: tuple[str, ...] = ()  # csv: envelope fields and value.<dotted path>, in order
    object_key: str = ""  # the key being written (Avro derives its sync marker from it)
    source: str = KAFKA  # the source kind (tidemark.sources): what the envelope's fields are called
    schema_refs: bool = False  # columnar formats: key_schema / value_schema columns (RenderSpec)

    @property
    def envelope(self) -> EnvelopeNames:
        return shape_of(self.source).envelope


#: the codecs whose level is ``RenderSpec.zstd_level``
ZSTD_CODECS = frozenset({"zstd", "zstandard"})
#: what a spec encoded without them holds: value schema, csv columns, source kind, zstd level,
#: schema references
_OPTIONAL_DEFAULTS = ("", "", KAFKA, str(ZSTD_LEVEL), "")
_SCHEMA_REFS = "schema_refs"


@dataclass(frozen=True, slots=True)
class RenderSpec:
    """Everything an object's bytes depend on besides its records, fixed when a buffer opens.

    A buffer is rendered with the spec it was staged under, whoever resumes its flush and
    whatever the configuration says by then; a buffer whose spec no longer matches the
    configuration is sealed rather than appended to (rotation reason ``format_changed``).

    ``zstd_level`` is the level of a zstd codec (the line formats' and Parquet's ``zstd``,
    Avro's ``zstandard``) and is kept only with one (otherwise it is :data:`ZSTD_LEVEL`, which
    is also what a spec encoded before the level was configurable decodes to).

    ``schema_refs``: records may carry schema references (a schema registry integration, a wire
    format), so the columnar formats give every object ``key_schema`` / ``value_schema`` columns
    (JSON Lines writes them on the records that have them, whatever the spec says).
    """

    format: str
    compression: str
    gzip_level: int
    topic: str
    key_encoding: str
    value_encoding: str
    header_encoding: str
    value_schema: str = ""  # ValueColumn encoding: "name:type[?],..."
    columns: str = ""  # csv columns, comma-separated
    source: str = KAFKA  # the source kind (tidemark.sources): envelope names, position width in keys
    zstd_level: int = ZSTD_LEVEL
    schema_refs: bool = False

    def __post_init__(self) -> None:
        if self.compression not in ZSTD_CODECS:  # meaningless without zstd: one spec, one encoding
            object.__setattr__(self, "zstd_level", ZSTD_LEVEL)

    def encode(self) -> str:
        parts = [
            self.format,
            self.compression,
            str(self.gzip_level),
            self.topic,
            self.key_encoding,
            self.value_encoding,
            self.header_encoding,
        ]
        # Specs of ledgers written before the optional fields existed stay exactly as they were
        # (and so does the spec of any buffer that uses none of them).
        zstd, refs = self.zstd_level != ZSTD_LEVEL, self.schema_refs
        if self.value_schema or self.columns or self.source != KAFKA or zstd or refs:
            parts += [self.value_schema, self.columns]
        if self.source != KAFKA or zstd or refs:
            parts.append(self.source)
        if zstd or refs:
            parts.append(str(self.zstd_level))
        if refs:
            parts.append(_SCHEMA_REFS)
        return "|".join(parts)

    @classmethod
    def decode(cls, text: str) -> RenderSpec:
        fmt, compression, level, topic, key, value, headers, *extra = text.split("|")
        schema, columns, source, zstd, refs = (*extra, *_OPTIONAL_DEFAULTS[len(extra) :])
        if refs not in ("", _SCHEMA_REFS):
            raise ValueError(f"unknown render spec field {refs!r}")
        return cls(
            fmt, compression, int(level), topic, key, value, headers, schema, columns, source, int(zstd), refs != ""
        )

    def context(self, partition: PartitionId, object_key: str = "") -> RenderContext:
        return RenderContext(
            self.topic,
            partition,
            self.key_encoding,
            self.value_encoding,
            self.header_encoding,
            ValueColumn.parse_all(self.value_schema),
            tuple(filter(None, self.columns.split(","))),
            object_key,
            self.source,
            self.schema_refs,
        )


@dataclass(frozen=True, slots=True)
class ArchivedEnvelope:
    """One record read back from an object, with ``None`` for what its format does not keep.

    ``value`` is the value's bytes as the format holds them (JSON text for json values, the
    original bytes otherwise); ``fields`` is set instead when the format stored typed columns
    (a declared value schema) or flattened value paths (csv). ``tombstone``: the record's value
    is null (a Kafka tombstone), so ``value`` is ``None`` and ``fields`` too, or -- csv
    ``value.<path>`` columns -- every field ``None``; set wherever the format tells a null value
    from an empty one (every format but text, whose lines keep only values)."""

    topic: str | None  # the source log (a Kafka topic, a Kinesis stream)
    partition: PartitionId | None  # a Kafka partition, a Kinesis shard id
    offset: int | None  # a Kafka offset, a Kinesis sequence number
    timestamp_ms: int | None
    event_time_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    fields: dict[str, object] | None = None
    error: str = ""  # dead letters (JSON Lines only): the reason
    schemas: Schemas | None = None  # the record's schema references; None: it has none, or the format keeps none
    tombstone: bool = False  # the value is null (see above)


class ObjectFormat(Protocol):
    extension: str
    content_type: str

    def write(self, frames: Iterable[Frame], context: RenderContext, out: BinaryIO) -> int:
        """Write every frame to ``out`` deterministically (same frames -> same bytes); return the count."""
        ...

    def read(self, body: bytes, context: RenderContext) -> Iterator[ArchivedEnvelope]:
        """Every record of an object this format wrote (the checker's and the tools' view)."""
        ...

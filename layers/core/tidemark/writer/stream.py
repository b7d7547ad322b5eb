"""Everything per stream that partition writers share: config, router, format, flush policy."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.buffers import ERRORS_KIND, RAW_KIND, BufferKey
from tidemark.clock import Clock
from tidemark.config.model import SCHEMA_REF_FORMATS, ArchiveSettings, StreamConfig, key_fixed_part
from tidemark.flush import FlushPolicy
from tidemark.formats import ObjectFormat, RenderSpec, extension_of, format_of
from tidemark.ledger.model import OpenBuffer
from tidemark.objects.keys import object_key
from tidemark.routing import Router
from tidemark.sources import PartitionId, shape_of
from tidemark.wireformat import detector
from tidemark.writer.segments import SegmentEncoder

# Dead letters keep every original byte (base64) and their reason; one format for them, whatever
# the stream's format, so operators and tools read every stream's dead letters the same way.
DEAD_LETTER_FORMAT = ("jsonl", "gzip", 6)


@dataclass(frozen=True)
class StreamContext:
    config: StreamConfig
    archive: ArchiveSettings
    router: Router
    policy: FlushPolicy
    spec: str  # the encoded RenderSpec of the current configuration, for raw buffers
    errors_spec: str  # ... and for dead-letter buffers
    encoder: SegmentEncoder

    @classmethod
    def build(cls, config: StreamConfig, archive: ArchiveSettings, clock: Clock) -> StreamContext:
        kind, compression, level = DEAD_LETTER_FORMAT
        errors = RenderSpec(
            kind,
            compression,
            level,
            config.source.topic,
            config.encoding.key,
            config.encoding.value,
            config.encoding.headers,
            source=config.source.shape.kind,
        )
        return cls(
            config,
            archive,
            Router(config, clock),
            FlushPolicy(config.flush),
            render_spec(config),
            errors.encode(),
            SegmentEncoder(
                detect=detector(
                    config.encoding.wire_format,
                    key=config.encoding.key == "bytes",
                    value=config.encoding.value == "bytes",
                ),
                keep_refs=config.schema_refs,
            ),
        )

    @property
    def name(self) -> str:
        return self.config.name

    def spec_for(self, key: BufferKey) -> str:
        """The spec a buffer of this kind opens under with the current configuration."""
        return self.errors_spec if key.kind == ERRORS_KIND else self.spec

    def format_of(self, buffer: OpenBuffer) -> tuple[ObjectFormat, RenderSpec]:
        """How a buffer is rendered: by the spec it was staged under, not the current config."""
        spec = RenderSpec.decode(buffer.spec)
        return format_of(spec), spec

    def object_key(self, partition: PartitionId, buffer: OpenBuffer, epoch: int = 0) -> str:
        prefix = {RAW_KIND: self.archive.raw_prefix, ERRORS_KIND: self.archive.errors_prefix}[buffer.key.kind]
        spec = RenderSpec.decode(buffer.spec)
        return object_key(
            prefix,
            self.name,
            buffer.key.hour,
            partition,
            buffer.first,
            buffer.last,
            extension_of(spec.format, spec.compression),
            epoch,
            folders=buffer.key.folders,
            hive_hours=self.config.partition_by.hour_folders == "hive",
            digits=shape_of(spec.source).position_digits,
        )

    @property
    def max_key_length(self) -> int:
        """No object key of this stream is longer (the config keeps it within S3's limit)."""
        return (
            max(len(self.archive.raw_prefix), len(self.archive.errors_prefix))
            + 2 * len(self.name)
            + self.config.partition_by.max_folders_length
            + key_fixed_part(self.config.source.shape)
        )


def render_spec(config: StreamConfig) -> str:
    """The encoded render spec raw buffers of ``config`` open under."""
    fmt = config.format
    return RenderSpec(
        format=fmt.type,
        compression=fmt.compression,
        gzip_level=fmt.gzip_level,
        zstd_level=fmt.zstd_level,  # kept only with a zstd codec (RenderSpec)
        topic=config.source.topic,
        key_encoding=config.encoding.key,
        value_encoding=config.encoding.value,
        header_encoding=config.encoding.headers,
        value_schema=fmt.value_schema.encoded if fmt.value_schema is not None else "",
        columns=",".join(config.csv_columns) if fmt.type == "csv" else "",
        source=config.source.shape.kind,
        schema_refs=config.schema_refs and fmt.type in SCHEMA_REF_FORMATS,
    ).encode()

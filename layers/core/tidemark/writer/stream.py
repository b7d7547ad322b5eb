"""Everything per stream that partition writers share: config, router, format, flush policy."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.buffers import ERRORS_KIND, RAW_KIND
from tidemark.clock import Clock
from tidemark.config.model import ArchiveSettings, StreamConfig
from tidemark.flush import FlushPolicy
from tidemark.formats import ObjectFormat, RenderSpec, format_of
from tidemark.ledger.model import OpenBuffer
from tidemark.objects.keys import object_key
from tidemark.routing import Router


@dataclass(frozen=True)
class StreamContext:
    config: StreamConfig
    archive: ArchiveSettings
    router: Router
    policy: FlushPolicy
    spec: str  # the encoded RenderSpec of the current configuration

    @classmethod
    def build(cls, config: StreamConfig, archive: ArchiveSettings, clock: Clock) -> StreamContext:
        spec = RenderSpec(
            format=config.format.type,
            compression=config.format.compression,
            gzip_level=config.format.gzip_level,
            topic=config.source.topic,
            key_encoding=config.encoding.key,
            value_encoding=config.encoding.value,
            header_encoding=config.encoding.headers,
        )
        return cls(config, archive, Router(config, clock), FlushPolicy(config.flush), spec.encode())

    @property
    def name(self) -> str:
        return self.config.name

    def format_of(self, buffer: OpenBuffer) -> tuple[ObjectFormat, RenderSpec]:
        """How a buffer is rendered: by the spec it was staged under, not the current config."""
        spec = RenderSpec.decode(buffer.spec)
        return format_of(spec), spec

    def object_key(self, partition: int, buffer: OpenBuffer, epoch: int = 0) -> str:
        prefix = {RAW_KIND: self.archive.raw_prefix, ERRORS_KIND: self.archive.errors_prefix}[buffer.key.kind]
        fmt, _spec = self.format_of(buffer)
        return object_key(
            prefix, self.name, buffer.key.hour, partition, buffer.first, buffer.last, fmt.extension, epoch
        )

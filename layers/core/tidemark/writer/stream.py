"""Everything per stream that partition writers share: config, router, format, flush policy."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.buffers import ERRORS_KIND, RAW_KIND
from tidemark.clock import Clock
from tidemark.config.model import ArchiveSettings, StreamConfig
from tidemark.flush import FlushPolicy
from tidemark.formats import ObjectFormat, RenderContext, format_for
from tidemark.ledger.model import OpenBuffer
from tidemark.objects.keys import object_key
from tidemark.routing import Router


@dataclass(frozen=True)
class StreamContext:
    config: StreamConfig
    archive: ArchiveSettings
    router: Router
    policy: FlushPolicy
    format: ObjectFormat

    @classmethod
    def build(cls, config: StreamConfig, archive: ArchiveSettings, clock: Clock) -> StreamContext:
        return cls(
            config=config,
            archive=archive,
            router=Router(config, clock),
            policy=FlushPolicy(config.flush),
            format=format_for(config.format.type, config.format.compression, config.format.gzip_level),
        )

    @property
    def name(self) -> str:
        return self.config.name

    def object_key(self, partition: int, buffer: OpenBuffer) -> str:
        prefix = {RAW_KIND: self.archive.raw_prefix, ERRORS_KIND: self.archive.errors_prefix}[buffer.key.kind]
        return object_key(
            prefix, self.name, buffer.key.hour, partition, buffer.first, buffer.last, self.format.extension
        )

    def render_context(self, partition: int) -> RenderContext:
        encoding = self.config.encoding
        return RenderContext(
            topic=self.config.source.topic,
            partition=partition,
            key_encoding=encoding.key,
            value_encoding=encoding.value,
            header_encoding=encoding.headers,
        )

"""What identifies a message for deduplication (``dedupe.id``), and its digest in the index.

``message_id`` is the AMQP property (the record's key), ``header:<name>`` a header's value, and
``content_sha256`` the body's SHA-256: two messages with the same body are then one. A message
without the configured id is dead-lettered (``missing_message_id``) -- and deduplicated by its
body's digest meanwhile, so a redelivery of it is not dead-lettered twice.

The index keeps a 16-byte BLAKE2b digest per id, not the id (ids are up to 255 bytes): two ids
collide with probability about n^2 / 2^129 -- for a billion ids in a window, 1e-21.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from tidemark.records.model import Headers


class Message(Protocol):
    """What an id is read from: a record as delivered, or a frame read back from staging."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...  # None only for a Kafka tombstone, never a queue's message

    @property
    def headers(self) -> Headers: ...


MESSAGE_ID = "message_id"
CONTENT_SHA256 = "content_sha256"
HEADER_PREFIX = "header:"
DIGEST_BYTES = 16


def message_id(record: Message, rule: str) -> bytes | None:
    """The record's id under ``rule``; ``None`` when it has none."""
    if rule == MESSAGE_ID:
        return record.key or None
    if rule == CONTENT_SHA256:
        return hashlib.sha256(record.value or b"").digest()
    name = rule.removeprefix(HEADER_PREFIX)
    for header, value in record.headers:
        if header == name and value:
            return value
    return None


def digest(record: Message, rule: str) -> bytes:
    """What the index keeps for the record: its id's digest, or its body's when it has no id
    (the two never collide: each is hashed under its own prefix)."""
    found = message_id(record, rule)
    if found is None:
        return hashlib.blake2b(record.value or b"", digest_size=DIGEST_BYTES, person=b"tidemark.body").digest()
    return hashlib.blake2b(found, digest_size=DIGEST_BYTES, person=b"tidemark.id").digest()

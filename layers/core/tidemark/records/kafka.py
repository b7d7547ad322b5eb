"""Adapter for MSK and self-managed Kafka event source mapping events.

The event is read as the plain dicts Lambda hands over, a group (one topic-partition) at a time.
The common group (well-formed records, unsigned header bytes) goes through the column path:
one ``msgspec.convert`` of the whole group into a ``msgspec.Struct`` reads the required fields
and decodes the base64 key and value in C, instead of several Python calls per record (1.5 ms
instead of 2.5 ms for a group of a thousand 200-byte records). Powertools' ``KafkaEvent`` data
class documents the same fields; it is not used here because its per-record property access
costs about 4 us per record and its import (the data classes package) about 24 ms of cold start.

The column path accepts exactly what the per-record path accepts, with the same bytes; where
msgspec is laxer than the per-record checks, a column-level guard sends the group back:

* ``msgspec`` reads an ``int`` subclass (an ``IntEnum``) as an int, and takes ``bytes``,
  ``bytearray`` or ``memoryview`` for a ``bytes`` field as they are, where the per-record path
  wants exactly ``int`` and a base64 ``str``: the raw columns' types are checked.
* headers are compared by their ``marshal`` encoding, which is type-exact and keeps key order
  (``==`` is not: ``1.0 == 1``, ``{"a": .., "b": ..} == {"b": .., "a": ..}``), so each distinct
  header list is converted once; most groups carry the same headers on every record.

It is stricter in a few places, which only costs speed: excess base64 padding after a complete
quantum (``"YWJj="``, which ``a2b_base64(strict_mode=True)`` accepts), signed header bytes, falsy
headers other than ``null`` and ``[]``, headers that are not lists of dicts, non-string keys, and
records that are not exactly dicts. Anything unusual sends the group through the per-record path,
which names the first bad field exactly as before. Records are grouped by topic-partition
in delivery order.

A tombstone (a record whose value is null: a compacted topic's delete, a CDC delete) arrives with
``"value": null`` or without a ``value`` at all; both paths read either as ``Record.value``
``None``, never as the empty value ``b""`` (``""``). A null header value, ``{"<name>": null}``, is
``(name, None)``; AWS has also been seen to send a null header as ``{}``, which names nothing
and so adds no header (there is nothing left to keep).

A mapping with a schema registry integration adds ``keySchemaMetadata`` / ``valueSchemaMetadata``
(``{"dataFormat": "AVRO", "schemaId": "..."}``: Powertools' ``KafkaEventRecordSchemaMetadata``)
to each record it validated; they become the record's ``schemas`` (key before value), which the
archive's envelope keeps. A group without them costs two C-level scans more.
"""

from __future__ import annotations

import binascii
import marshal
from collections.abc import Iterable, Mapping
from itertools import chain, repeat
from operator import add, attrgetter, eq, is_not, itemgetter
from typing import Annotated, Any

import msgspec
from aws_lambda_powertools.shared.functions import decode_header_bytes

from tidemark.exceptions import MalformedEventError
from tidemark.names import TOPIC, matches
from tidemark.records.model import Headers, PartitionBatch, Record, SchemaRef, Schemas
from tidemark.sources import PartitionId

# Self-managed Kafka comes in two spellings: the AWS docs' "SelfManagedKafka" and the
# "aws:SelfManagedKafka" of Powertools' own sample event (events/self-managed-powertools.json).
EVENT_SOURCES = frozenset({"aws:kafka", "SelfManagedKafka", "aws:SelfManagedKafka"})

_Headers = Headers


class _Fields(msgspec.Struct, gc=False):  # holds no containers, so the GC need not track it
    """A record's fields that msgspec reads and decodes, in ``Record``'s order (``astuple``
    plus the headers is a ``Record``). A missing or null value is ``None``: a tombstone."""

    topic: str
    partition: Annotated[int, msgspec.Meta(ge=0)]
    offset: Annotated[int, msgspec.Meta(ge=0)]
    timestamp: int
    value: bytes | None = None
    key: bytes | None = None


_FIELDS = list[_Fields]
_astuple = msgspec.structs.astuple
_new_record = tuple.__new__
_DICT = frozenset({dict})
_INT = frozenset({int})
_STR = frozenset({str})
_ENCODED = frozenset({str, type(None)})
_PARTITION, _OFFSET, _TIMESTAMP = itemgetter("partition"), itemgetter("offset"), itemgetter("timestamp")
_TOPIC = attrgetter("topic")
_SAMPLE = 9  # neighbouring records whose headers decide between a conversion each and sharing them
_LIST_TAG = marshal.dumps([], 0)[:1]  # marshal version 0 (no back-references): b"[" + int32 count + items
#: the record fields a schema registry integration adds, in the order ``Record.schemas`` keeps
_SCHEMA_FIELDS = (("key", "keySchemaMetadata"), ("value", "valueSchemaMetadata"))


def source_identity(event: Mapping[str, Any], topic: str) -> str:
    """``<cluster>/<topic>``: the MSK cluster's name and id from the event's ARN, or nothing for
    self-managed Kafka, whose bootstrap servers change when brokers do (a migration between
    self-managed clusters is caught by its positions instead)."""
    arn = event.get("eventSourceArn")
    cluster = ""
    if isinstance(arn, str) and ":cluster/" in arn:
        cluster = arn.split(":cluster/", 1)[1]
    return f"{cluster}/{topic}"


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise MalformedEventError(message)


def _is_count(number: object) -> bool:
    return type(number) is int and number >= 0


def _convert(raw: Mapping[str, Any], position: int, topics: set[str]) -> Record:
    """One record, checked field by field: the path of a group the column path declined, so
    its messages name the first bad field of the first bad record."""
    try:
        topic, partition, offset, timestamp = raw["topic"], raw["partition"], raw["offset"], raw["timestamp"]
    except KeyError as exc:
        raise MalformedEventError(f"record #{position}: missing field {exc.args[0]!r}") from None
    if topic not in topics:  # validate each distinct topic name once per event
        if not matches(TOPIC, topic):
            raise MalformedEventError(f"record #{position}: invalid topic name {topic!r}")
        topics.add(topic)
    for name, number in (("partition", partition), ("offset", offset)):
        if not _is_count(number):
            raise MalformedEventError(f"record #{position}: {name} must be a non-negative integer, got {number!r}")
    # Kafka uses -1 for "no timestamp"; such a record is dead-lettered later, never rejected here.
    if type(timestamp) is not int:
        raise MalformedEventError(f"record #{position}: timestamp must be an integer, got {timestamp!r}")
    try:
        # Strict decoding: the ESM always sends valid base64, so anything else is not its event.
        encoded_value, encoded_key = raw.get("value"), raw.get("key")
        value = None if encoded_value is None else binascii.a2b_base64(encoded_value, strict_mode=True)  # tombstone
        key = None if encoded_key is None else binascii.a2b_base64(encoded_key, strict_mode=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise MalformedEventError(f"record #{position}: key/value is not valid base64 ({exc})") from None
    schemas = _schemas(raw)
    raw_headers = raw.get("headers")
    if not raw_headers:
        return Record(topic, partition, offset, timestamp, value, key, (), schemas)
    headers: list[tuple[str, bytes | None]] = []
    for chunk in raw_headers:
        if not isinstance(chunk, Mapping):
            raise MalformedEventError(f"record #{position}: each header must be an object")
        for name, data in chunk.items():
            if data is None:  # a null header value, kept null
                headers.append((str(name), None))
                continue
            try:
                if type(data) is not list:
                    raise TypeError(f"expected a list of byte values, got {type(data).__name__}")
                try:
                    decoded = bytes(data)  # unsigned byte values: the common case
                except ValueError:
                    decoded = decode_header_bytes(data)  # type: ignore[no-untyped-call]  # Java's signed bytes
                headers.append((str(name), decoded))
            except (TypeError, ValueError) as exc:
                raise MalformedEventError(f"record #{position}: header {name!r} is not a byte array ({exc})") from None
    return Record(topic, partition, offset, timestamp, value, key, tuple(headers), schemas)


def _schemas(raw: Mapping[str, Any]) -> Schemas:
    """The schema references a registry integration added to one record (``()`` without one).
    A metadata field that names no schema id (null, not an object, an id that is not text) is no
    reference: it is metadata, and never a reason to fail the batch."""
    found: list[SchemaRef] = []
    for part, name in _SCHEMA_FIELDS:
        meta = raw.get(name)
        if type(meta) is not dict:
            continue
        schema_id, data_format = meta.get("schemaId"), meta.get("dataFormat")
        if type(schema_id) is not str or not schema_id or not _encodable(schema_id):
            continue
        data_format = data_format if type(data_format) is str and _encodable(data_format) else ""
        found.append(SchemaRef(part, data_format, schema_id))
    return tuple(found)


def _encodable(text: str) -> bool:
    """UTF-8 can hold it (JSON may carry a lone surrogate, which staging could not write)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _with_schemas(chunk: list[Any], records: list[Record]) -> list[Record]:
    """``records`` with the schema references of the raw records they were read from. The common
    group has neither field: two scans for the key, in C (about 50 us per thousand records)."""
    for _part, name in _SCHEMA_FIELDS:
        if any(map(dict.__contains__, chunk, repeat(name))) and any(
            map(is_not, map(dict.get, chunk, repeat(name)), repeat(None))
        ):
            return [record._replace(schemas=_schemas(raw)) for raw, record in zip(chunk, records, strict=True)]
    return records


def _headers(raw: object) -> _Headers:
    """One record's headers as ``(name, bytes)`` pairs (``(name, None)`` for a null value);
    ``TypeError``/``ValueError`` for anything but null, ``[]`` or a list of dicts of ``str`` names
    and unsigned byte lists or null (the per-record path then names it, or reads signed bytes).
    It accepts only exact ``list``/``dict``/``str`` and ``int``/``bool`` elements (and ``None``),
    none of which marshal can confuse with another type, so records whose headers marshal alike
    get the same result from it and from ``_convert``."""
    if raw is None:
        return ()
    if type(raw) is not list:
        raise TypeError("not a list")
    headers: list[tuple[str, bytes | None]] = []
    for chunk in raw:
        if type(chunk) is not dict:
            raise TypeError("not an object")
        for name, data in chunk.items():
            if type(name) is not str:
                raise TypeError("not a name")
            if data is None:
                headers.append((name, None))
                continue
            if type(data) is not list:
                raise TypeError("not a list")
            headers.append((name, bytes(data)))
    return tuple(headers)


def _header_column(column: list[Any]) -> Iterable[tuple[_Headers, Schemas]]:
    """Each record's headers and (no) schemas, as pairs to append to its fields. Records whose header lists
    marshal alike (type-exact, in order) share one conversion: the common group carries the same
    headers on every record, and ``marshal`` checks that in one C call over the column."""
    first = column[0]
    encoded = marshal.dumps(first, 0)
    if marshal.dumps(column, 0) == _LIST_TAG + len(column).to_bytes(4, "little") + encoded * len(column):
        return repeat((_headers(first), ()))
    sample = column[:_SAMPLE]
    if sum(map(eq, sample, sample[1:])) * 2 < len(sample) - 1:  # most records have headers of their own
        return list(zip(map(_headers, column), repeat(())))
    keys = list(map(marshal.dumps, column, repeat(0)))
    converted = {key: (_headers(raw), ()) for key, raw in dict(zip(keys, column, strict=True)).items()}
    return list(map(converted.__getitem__, keys))


def _columns(chunk: list[Any], topics: set[str]) -> list[Record] | None:
    """The records of one group, read by one ``msgspec.convert`` and checked a column at a time;
    ``None`` when any field is unusual (the per-record path then names it)."""
    if not chunk:
        return []
    if set(map(type, chunk)) != _DICT:  # a dict subclass may read its items differently
        return None
    try:
        fields = msgspec.convert(chunk, _FIELDS)
    except (msgspec.ValidationError, TypeError, ValueError):
        return None
    # msgspec reads int subclasses as ints and takes bytes-like values as they are: exact types only.
    numbers = chain(map(_PARTITION, chunk), map(_OFFSET, chunk), map(_TIMESTAMP, chunk))
    encoded = chain(map(dict.get, chunk, repeat("value")), map(dict.get, chunk, repeat("key")))
    topic_column = list(map(_TOPIC, fields))
    if not (
        set(map(type, numbers)) == _INT
        and set(map(type, encoded)) <= _ENCODED
        and set(map(type, topic_column)) == _STR  # as before: exact str (msgspec keeps a subclass)
    ):
        return None
    for topic in set(topic_column) - topics:
        if not matches(TOPIC, topic):
            return None
        topics.add(topic)
    try:
        headers = _header_column(list(map(dict.get, chunk, repeat("headers"))))
    except (TypeError, ValueError):  # marshal's "unmarshallable object" is a ValueError
        return None
    records: list[Record] = list(map(_new_record, repeat(Record), map(add, map(_astuple, fields), headers)))
    return _with_schemas(chunk, records)


def parse_kafka_event(event: Any) -> list[PartitionBatch]:
    """Turn an ESM event into per-partition batches; anything else raises ``MalformedEventError``."""
    _require(isinstance(event, Mapping), f"expected an event object, got {type(event).__name__}")
    source = event.get("eventSource")
    _require(
        source in EVENT_SOURCES,
        f"not a Kafka event source mapping event: eventSource={source!r} (expected one of {sorted(EVENT_SOURCES)})",
    )
    groups = event.get("records")
    _require(isinstance(groups, Mapping), "event.records must be an object keyed by 'topic-partition'")
    chunks = list(groups.values())
    for index, chunk in enumerate(chunks):
        _require(isinstance(chunk, list), f"event.records group #{index} must be a list")
        if set(map(type, chunk)) - {dict}:
            for raw_record in chunk:
                _require(isinstance(raw_record, Mapping), f"event.records group #{index} holds a non-object")
    batches: dict[tuple[str, PartitionId], PartitionBatch] = {}
    topics: set[str] = set()
    position = 0  # the record's index in the whole event, for messages
    for chunk in chunks:
        records = _columns(chunk, topics) if chunk else []
        if records is None:
            records = [_convert(raw, position + index, topics) for index, raw in enumerate(chunk)]
        position += len(chunk)
        if not records:
            continue
        first = records[0]
        if len({(record[0], record[1]) for record in records}) == 1:  # the ESM groups by topic-partition
            runs = [((first.topic, first.partition), records)]
        else:
            runs = [((record.topic, record.partition), [record]) for record in records]
        for key, run in runs:
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = PartitionBatch(key[0], key[1], [], source=source_identity(event, key[0]))
            batch.records.extend(run)
    return list(batches.values())

"""What differs between source kinds below the event adapters: names and widths, nothing else.

A source partition is a Kafka partition (a number) or a Kinesis shard (an id such as
``shardId-000000000007``); a position is a Kafka offset or a Kinesis sequence number (a decimal
of up to 129 digits, never contiguous). Everything below the adapters -- staging, ledger, flush,
keys -- handles ``(PartitionId, int)`` alike. What a source kind still decides is:

* how wide positions are zero-padded in object keys (so keys sort: a width that holds the
  source's largest position), and how long a partition id may be;
* what the archive's envelope calls its fields (Kafka: ``topic``/``partition``/``offset``;
  Kinesis: ``stream``/``shard_id``/``sequence_number``), and whether positions are written as
  numbers or as strings (a Kinesis sequence number overflows every integer type query engines
  have, and Spark's decimals stop at 38 digits).

A buffer's render spec names its source kind (``tidemark.formats.base.RenderSpec.source``), so
a flush renders and names its object from the spec alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: a partition identity: a Kafka partition number, or a Kinesis shard id
PartitionId = int | str

KAFKA = "kafka"
KINESIS = "kinesis"
RABBITMQ = "rabbitmq"

#: Kinesis shard ids (``shardId-000000000007``): the API's characters, at most 128. Tidemark also
#: wants a letter first (every shard id Kinesis hands out starts ``shardId-``), so a shard id is
#: never mistaken for a partition number -- or a stray ``p-1`` directory for a shard.
SHARD_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
#: the Kinesis API's sequence number: up to 129 decimal digits
SEQUENCE_NUMBER = re.compile(r"^(0|[1-9][0-9]{0,128})$")
#: a Kinesis data stream's ARN (the config's ``stream_arn``, the events' ``eventSourceARN``)
KINESIS_STREAM_ARN = r"^arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/[A-Za-z0-9_.-]{1,128}$"
KINESIS_POSITION_DIGITS = 129
KAFKA_POSITION_DIGITS = 20  # a signed 64-bit offset has at most 19 digits


@dataclass(frozen=True, slots=True)
class EnvelopeNames:
    """The archive envelope's field names for one source kind (``None``: the source has none)."""

    source: str  # the log: Kafka topic, Kinesis stream
    partition: str
    position: str
    timestamp: str  # the source's record timestamp
    key: str
    headers: str | None
    #: positions (and partition ids) written as strings, not numbers
    position_is_text: bool
    #: the record timestamp written as epoch seconds with a fraction (Kinesis), not milliseconds
    timestamp_in_seconds: bool

    @property
    def columns(self) -> tuple[str, ...]:
        """Every envelope field in the archive's order (the CSV default columns)."""
        head = (self.source, self.partition, self.position, self.timestamp, "event_time", self.key, "value")
        return head if self.headers is None else (*head, self.headers)


@dataclass(frozen=True, slots=True)
class SourceShape:
    kind: str
    envelope: EnvelopeNames
    position_digits: int  # zero-padding of positions in object keys
    max_partition_length: int  # characters of a partition id in object keys
    #: whether one source log can hand out a position again for another record. Kafka does (a
    #: topic recreated under the same name restarts at offset 0), so a batch far below the
    #: partition's position is refused until an operator starts an epoch. A Kinesis stream never
    #: does (sequence numbers grow with time, also across a stream recreated under its name), so
    #: such a batch is a replay -- a mapping recreated at TRIM_HORIZON -- and its records are
    #: dropped as already archived.
    reuses_positions: bool = True
    #: whether positions are the ledger's, not the source's: a RabbitMQ queue has no offsets, so
    #: the archiver numbers the messages it accepts, in acceptance order, after dropping the ids
    #: it has already archived (``tidemark.dedupe``). Such a source has one partition: 0.
    assigns_positions: bool = False
    #: whether a record's value may be null -- a tombstone: a compacted topic's or a CDC delete --
    #: and a header's value too. Only Kafka's may: a Kinesis record always has data, a RabbitMQ
    #: message a body, and neither has null header values. The formats type the value (and a
    #: header's value) as nullable for such a source only, so other sources' objects are what
    #: they were before tombstones were archived.
    tombstones: bool = False

    def position_text(self, position: int) -> str:
        return f"{position:0{self.position_digits}d}"


KAFKA_SHAPE = SourceShape(
    KAFKA,
    EnvelopeNames("topic", "partition", "offset", "timestamp", "key", "headers", False, False),
    KAFKA_POSITION_DIGITS,
    10,
    tombstones=True,
)
KINESIS_SHAPE = SourceShape(
    KINESIS,
    EnvelopeNames(
        "stream", "shard_id", "sequence_number", "approximate_arrival_timestamp", "partition_key", None, True, True
    ),
    KINESIS_POSITION_DIGITS,
    128,
    reuses_positions=False,
)
#: a queue is one partition (0); a position is the ledger's number for an accepted message
RABBITMQ_SHAPE = SourceShape(
    RABBITMQ,
    EnvelopeNames("queue", "partition", "position", "timestamp", "message_id", "headers", False, False),
    KAFKA_POSITION_DIGITS,
    10,
    reuses_positions=False,
    assigns_positions=True,
)
SHAPES = {shape.kind: shape for shape in (KAFKA_SHAPE, KINESIS_SHAPE, RABBITMQ_SHAPE)}
#: every envelope field name of any source (what a CSV column may name besides value paths)
ALL_ENVELOPE_COLUMNS = tuple(dict.fromkeys(c for shape in SHAPES.values() for c in shape.envelope.columns))


def shape_of(kind: str) -> SourceShape:
    """The shape of a render spec's (or a config's) source kind; ``msk`` and self-managed Kafka
    are both ``kafka``."""
    try:
        return SHAPES["kafka" if kind in ("msk", "") else kind]
    except KeyError:
        raise ValueError(f"unknown source kind {kind!r} (expected one of {sorted(SHAPES)})") from None


def is_partition_id(value: object) -> bool:
    """A Kafka partition number (``int``, not ``bool``, >= 0) or a shard id."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and SHARD_ID.fullmatch(value) is not None and not value.isdigit()


def partition_of_text(text: str) -> PartitionId:
    """A partition id read back from a path or key: canonical digits are a Kafka partition."""
    if text.isdigit() and str(int(text)) == text:
        return int(text)
    if not is_partition_id(text):
        raise ValueError(f"not a partition id: {text!r}")
    return text


def partition_sort_key(partition: PartitionId) -> tuple[int, int, str]:
    """Numbers first, in numeric order, then ids by name: partitions of mixed kinds sort."""
    return (0, partition, "") if isinstance(partition, int) else (1, 0, partition)

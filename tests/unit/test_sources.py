"""tidemark.sources: partition ids, positions and the per-kind shapes below the adapters."""

from __future__ import annotations

import pytest

from tidemark.sources import (
    ALL_ENVELOPE_COLUMNS,
    KAFKA_SHAPE,
    KINESIS_SHAPE,
    RABBITMQ_SHAPE,
    SEQUENCE_NUMBER,
    SHARD_ID,
    EnvelopeNames,
    PartitionId,
    SourceShape,
    is_partition_id,
    partition_of_text,
    partition_sort_key,
    shape_of,
)

# -- partition ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [0, 7, 2**31, "shardId-000000000007", "a", "s" * 128, "shard_1.v-2"],
)
def test_partition_ids(value: object) -> None:
    assert is_partition_id(value)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        True,  # a bool is not a partition number
        False,
        3.0,
        None,
        "",
        "7",  # digits are a number's text, never a shard id
        "007",
        "-1",  # a shard id starts with a letter: never a (negative) number's text
        "1a",
        "_shard",
        "s" * 129,
        "shard/7",
        "shard 7",
        "shard:7",
        "shard+7",  # '+' separates an object key's parts
        "shardId-7\n",
        "shárd",
        b"shardId-000000000007",
    ],
)
def test_not_partition_ids(value: object) -> None:
    assert not is_partition_id(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("7", 7), ("12345", 12345), ("shardId-000000000007", "shardId-000000000007"), ("e1", "e1")],
)
def test_partition_of_text(text: str, expected: PartitionId) -> None:
    assert partition_of_text(text) == expected
    assert type(partition_of_text(text)) is type(expected)


@pytest.mark.parametrize("text", ["", "007", "0123", "shard/7", "s" * 129, "shard 7", "7\n"])
def test_partition_of_text_refuses_what_is_not_canonical(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        partition_of_text(text)
    assert str(caught.value) == f"not a partition id: {text!r}"


def test_partitions_sort_numbers_first_then_shard_ids_by_name() -> None:
    mixed: list[PartitionId] = ["shardId-000000000010", 10, "shardId-000000000002", 2, 0, "a"]
    assert sorted(mixed, key=partition_sort_key) == [0, 2, 10, "a", "shardId-000000000002", "shardId-000000000010"]
    assert partition_sort_key(3) == (0, 3, "")
    assert partition_sort_key("shardId-000000000003") == (1, 0, "shardId-000000000003")


def test_shard_id_and_sequence_number_patterns() -> None:
    assert SHARD_ID.fullmatch("shardId-000000000007")
    assert not SHARD_ID.fullmatch("s" * 129)
    assert SEQUENCE_NUMBER.fullmatch("0")
    assert SEQUENCE_NUMBER.fullmatch("9" * 129)
    assert SEQUENCE_NUMBER.fullmatch("49590338271490256608559692538361571095921575989136588898")
    for bad in ("", "00", "01", "-1", "1" * 130, "1.0", "1e5", " 1", "\u0661"):
        assert not SEQUENCE_NUMBER.fullmatch(bad), bad


# -- shapes ---------------------------------------------------------------------------------------


def test_kafka_shape() -> None:
    assert (
        SourceShape(
            "kafka",
            EnvelopeNames(
                source="topic",
                partition="partition",
                position="offset",
                timestamp="timestamp",
                key="key",
                headers="headers",
                position_is_text=False,
                timestamp_in_seconds=False,
            ),
            20,
            10,
            tombstones=True,  # a Kafka value (and header value) may be null
        )
        == KAFKA_SHAPE
    )
    assert KAFKA_SHAPE.envelope.columns == (
        "topic",
        "partition",
        "offset",
        "timestamp",
        "event_time",
        "key",
        "value",
        "headers",
    )


def test_kinesis_shape() -> None:
    assert (
        SourceShape(
            "kinesis",
            EnvelopeNames(
                source="stream",
                partition="shard_id",
                position="sequence_number",
                timestamp="approximate_arrival_timestamp",
                key="partition_key",
                headers=None,
                position_is_text=True,
                timestamp_in_seconds=True,
            ),
            129,
            128,
            reuses_positions=False,  # sequence numbers are never handed out twice
        )
        == KINESIS_SHAPE
    )
    # no headers column: Kinesis records have none
    assert KINESIS_SHAPE.envelope.columns == (
        "stream",
        "shard_id",
        "sequence_number",
        "approximate_arrival_timestamp",
        "event_time",
        "partition_key",
        "value",
    )


def test_all_envelope_columns_are_every_kinds_without_repeats() -> None:
    assert ALL_ENVELOPE_COLUMNS == (
        "topic",
        "partition",
        "offset",
        "timestamp",
        "event_time",
        "key",
        "value",
        "headers",
        "stream",
        "shard_id",
        "sequence_number",
        "approximate_arrival_timestamp",
        "partition_key",
        "queue",
        "position",
        "message_id",
    )


@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("msk", KAFKA_SHAPE),
        ("kafka", KAFKA_SHAPE),
        ("", KAFKA_SHAPE),
        ("kinesis", KINESIS_SHAPE),
        ("rabbitmq", RABBITMQ_SHAPE),
    ],
)
def test_shape_of(kind: str, shape: SourceShape) -> None:
    assert shape_of(kind) is shape


def test_shape_of_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError) as caught:
        shape_of("sqs")
    assert str(caught.value) == "unknown source kind 'sqs' (expected one of ['kafka', 'kinesis', 'rabbitmq'])"


def test_position_text_pads_to_the_kinds_width() -> None:
    assert KAFKA_SHAPE.position_text(0) == "0" * 20
    assert KAFKA_SHAPE.position_text(2**63 - 1) == "09223372036854775807"
    assert KINESIS_SHAPE.position_text(42) == "0" * 127 + "42"
    sequence = 49590338271490256608559692538361571095921575989136588898
    assert KINESIS_SHAPE.position_text(sequence) == "0" * 73 + str(sequence)
    assert KINESIS_SHAPE.position_text(10**129 - 1) == "9" * 129
    assert len(KINESIS_SHAPE.position_text(1)) == 129
    # text of equal width sorts like the numbers
    positions = [0, 9, 10, 2**64, sequence, 10**128, 10**129 - 1]
    assert sorted(KINESIS_SHAPE.position_text(p) for p in positions) == [
        KINESIS_SHAPE.position_text(p) for p in positions
    ]

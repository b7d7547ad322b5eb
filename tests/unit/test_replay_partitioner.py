"""The replay partitioner: Kafka's murmur2, bit for bit, and where each record goes."""

from __future__ import annotations

import pytest

from tidemark.replay.exceptions import ReplayError, TooFewPartitionsError
from tidemark.replay.partitioner import KEY, SAME, Partitioning, murmur2, partition_for_key

# Apache Kafka's own vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
# testMurmur2 (the signed ints Utils.murmur2 returns). The empty input's value is pinned by other
# Java-compatible implementations of the same function.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
]


@pytest.mark.parametrize(("data", "expected"), JAVA_MURMUR2)
def test_murmur2_is_the_java_clients(data, expected):
    assert murmur2(data) == expected


def test_murmur2_covers_every_tail_length_and_stays_a_signed_32_bit_int():
    values = [murmur2(bytes(range(200, 200 + n))) for n in range(0, 40)]
    assert all(-(2**31) <= value < 2**31 for value in values)
    assert len(set(values)) == len(values)  # every length (tails of 0..3 bytes) hashes differently
    assert any(value < 0 for value in values) and any(value > 0 for value in values)


def test_a_key_goes_where_the_java_default_partitioner_puts_it():
    # toPositive(-790332482) = 1357151166; % 50 = 16
    assert partition_for_key(b"foobar", 50) == 16
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    keyed = Partitioning(KEY, 12)
    assert [keyed.target(3, key) for key, _ in JAVA_MURMUR2] == [(value & 0x7FFFFFFF) % 12 for _, value in JAVA_MURMUR2]


def test_records_without_a_key_go_to_their_source_partition_modulo_the_partitions():
    keyed = Partitioning(KEY, 4)
    assert [keyed.target(source, None) for source in range(9)] == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    shard = "shardId-000000000007"
    assert keyed.target(shard, None) == partition_for_key(shard.encode(), 4)  # a shard id: its hash
    assert keyed.target(5, b"") == partition_for_key(b"", 4)  # an empty key is a key
    assert keyed.reach(5) == range(4)


def test_same_keeps_the_partition_number_and_refuses_a_topic_too_small():
    same = Partitioning(SAME, 3)
    assert [same.target(p, b"any") for p in (0, 1, 2)] == [0, 1, 2]
    assert same.reach(2) == range(2, 3)
    same.check([0, 2, 1], "copy")  # fits
    with pytest.raises(TooFewPartitionsError, match=r"'copy' has 3 partitions.*partition 3.*--partitioner key"):
        same.check([0, 3], "copy")
    with pytest.raises(TooFewPartitionsError, match="shard id"):
        same.check(["shardId-000000000001"], "copy")
    Partitioning(KEY, 1).check([0, 9], "copy")  # key fits any topic


def test_an_unknown_partitioner_is_refused():
    with pytest.raises(ReplayError, match="--partitioner 'round-robin'"):
        Partitioning("round-robin", 3)

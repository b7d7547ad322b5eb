"""The operator commands' questions to Kafka, asked of the embedded broker: records held in an
offset range, read from the log itself, the records themselves, and "no longer retained" for
offsets the log does not have."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from tidemark.embedded.workload import ensure_topic
from tidemark.exceptions import NotRetainedError
from tidemark.kafka_log import KafkaLog
from tidemark.records.model import Record


def test_records_between_reads_the_log(kafka_bootstrap):
    topic = f"audit-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for number in range(10):
        producer.produce(topic, value=b"%d" % number, partition=0)
    assert producer.flush(15) == 0
    with KafkaLog(kafka_bootstrap, topic) as probe:
        assert probe.records_between(0, 3, 5) == 3
        assert probe.records_between(0, 0, 0) == 1
        assert probe.records_between(0, 8, 20) == 2  # the log ends at 9
        assert probe.records_between(0, 50, 60) is None  # past its end: not there to be asked
        assert probe.partitions() == [0]
        assert probe.end_offset(0) == 10  # read on from the watermark (this broker reports it loosely)


def test_records_are_what_the_mapping_would_deliver_and_a_missing_range_is_refused(kafka_bootstrap):
    topic = f"log-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, value=b"a", key=b"k0", partition=0, timestamp=1_700_000_000_000, headers=[("h", b"1")])
    producer.produce(topic, value=None, key=b"k1", partition=0, timestamp=1_700_000_000_001)  # a tombstone
    producer.produce(topic, value=b"c", partition=0, timestamp=1_700_000_000_002, headers=[("n", None)])
    assert producer.flush(15) == 0
    with KafkaLog(kafka_bootstrap, topic) as log:
        assert list(log.records(0, 0, 2)) == [
            Record(topic, 0, 0, 1_700_000_000_000, b"a", b"k0", (("h", b"1"),)),
            Record(topic, 0, 1, 1_700_000_000_001, None, b"k1", ()),  # a tombstone stays null, as delivered
            Record(topic, 0, 2, 1_700_000_000_002, b"c", None, (("n", None),)),
        ]
        assert [record.offset for record in log.records(0, 1, 1)] == [1]
        with pytest.raises(NotRetainedError, match="past the log's end"):
            list(log.records(0, 3, 9))

"""The audit's question to Kafka, asked of the embedded broker: records held in an offset range,
read from the log itself, and "no longer retained" for offsets the log does not have."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from tidemark.audit.kafka import KafkaProbe
from tidemark.embedded.workload import ensure_topic


def test_records_between_reads_the_log(kafka_bootstrap):
    topic = f"audit-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka_bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for number in range(10):
        producer.produce(topic, value=b"%d" % number, partition=0)
    assert producer.flush(15) == 0
    with KafkaProbe(kafka_bootstrap, topic) as probe:
        assert probe.records_between(0, 3, 5) == 3
        assert probe.records_between(0, 0, 0) == 1
        assert probe.records_between(0, 8, 20) == 2  # the log ends at 9
        assert probe.records_between(0, 50, 60) is None  # past its end: not there to be asked
        assert probe.partitions() == [0]
        assert probe.end_offset(0) == 10  # read on from the watermark (this broker reports it loosely)

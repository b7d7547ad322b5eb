"""The hourly aggregation job: dirty hours -> committed objects -> records -> aggregates.

``plan`` (driver, ledger) decides what to read; ``reader`` (executors) fetches objects and reads
them with Arrow -- ``formats`` has a reader per archive format, ``values`` types the values and
unifies each hour's value schema (an hour is typed by its own records: its items never depend on
which other hours share the run) -- or, with ``--archive-root``, ``native`` reads Parquet, JSON
Lines and CSV with Spark's own readers; ``transforms`` are pure DataFrame -> DataFrame functions;
``sink`` writes DynamoDB; ``job`` ties them together and records the run.

A run aggregates one stream, so one source kind: a Kafka record is ``(epoch, partition int,
offset bigint)``, a Kinesis record ``(epoch, partition string, offset string)`` -- its shard
id and its sequence number's decimal digits, which no Spark number holds.
"""

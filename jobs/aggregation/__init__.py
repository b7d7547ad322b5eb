"""The hourly aggregation job: dirty hours -> committed objects -> records -> aggregates.

``plan`` (driver, ledger) decides what to read; ``reader`` (executors) fetches objects and reads
them with Arrow -- ``formats`` has a reader per archive format, ``values`` types the values and
unifies the run's value schema -- or, with ``--archive-root``, ``native`` reads Parquet, JSON
Lines and CSV with Spark's own readers; ``transforms`` are pure DataFrame -> DataFrame functions;
``sink`` writes DynamoDB; ``job`` ties them together and records the run.
"""

"""The hourly aggregation job: dirty hours -> committed objects -> records -> aggregates.

``plan`` (driver, ledger) decides what to read; ``reader`` (executors) fetches and splits the
objects; ``transforms`` are pure DataFrame -> DataFrame functions; ``sink`` writes DynamoDB;
``job`` ties them together and records the run.
"""

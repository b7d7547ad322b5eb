"""A local event source mapping: a Kafka consumer-group poller that invokes a handler the way
the Lambda ESM for MSK does (batching, grouping by topic-partition, commit after success,
whole-batch retry, one invocation per partition at a time)."""

"""The sweeper: what runs on a schedule, not on records (Step Functions drives the steps).

* ``discovery``: which (stream, partition) pairs to visit: staging directories and the ledger's
  registry;
* ``sweep``: per partition, the writer's own ``maintain`` (resume sealed flushes, flush idle
  buffers past max age, delete unaccepted segments past the grace period), then remove the
  staging directory once nothing is left in it;
* ``reconcile``: the ledger's committed objects against S3, both ways -- findings are logged
  and counted, nothing in S3 is ever deleted;
* ``completeness``: mark event hours complete and write their manifests.
"""

"""A stack update of event source mappings, as CloudFormation and Lambda carry it out.

moto's CloudFormation neither replaces resources as AWS does nor enforces Lambda's rules on
mappings, so this models the parts a redeploy of Tidemark's mappings depends on:

* **CloudFormation's plan.** A logical id only in the new template is created; one only in the
  old is deleted in the cleanup phase, after everything else succeeded; a resource whose
  ``createOnlyProperties`` changed is replaced (the new one created first, the old deleted at
  cleanup); any other change is an update in place. ``createOnlyProperties`` come from
  ``AWS::Lambda::EventSourceMapping``'s resource schema as cfn-lint ships it (AWS's registry
  schema; "Update requires: Replacement" in the template reference). A failed create or update
  rolls the whole stack back: the old mappings stay as they were.
* **Lambda's rules on creating a mapping** (``ResourceConflictException``, HTTP 409):
  a Kafka mapping's consumer group id "must be unique among all your Kafka event sources"
  (https://docs.aws.amazon.com/lambda/latest/dg/kafka-consumer-group-id.html); one function has at
  most one mapping per event source and topic ("An event source mapping with event source arn
  (...), function (...) and topics (...) already exists. Please update or delete the existing
  mapping with UUID", as AWS answers: aws/aws-sam-cli#2308; Kinesis: "The event source arn (...)
  and function (...) provided mapping already exists", aws/serverless-application-model#1320).
* **Lambda's rules on updating one**: the consumer group id cannot change ("After creating a Kafka
  event source mapping with the consumer group ID specified, you cannot update this value", same
  page); a changed ``Topics`` is reported updated but the mapping keeps reading its old topic
  (aws-cloudformation/cloudformation-coverage-roadmap#2140).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from typing import Any

ESM = "AWS::Lambda::EventSourceMapping"
KAFKA_CONFIGS = ("AmazonManagedKafkaEventSourceConfig", "SelfManagedKafkaEventSourceConfig")


class RolledBack(Exception):
    """The stack update failed and CloudFormation rolled it back."""


@cache
def create_only_properties() -> frozenset[str]:
    """``createOnlyProperties`` of the mapping's resource schema (a property change that replaces)."""
    from cfnlint.schema.manager import PROVIDER_SCHEMA_MANAGER

    schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", ESM).schema
    return frozenset(path.removeprefix("/properties/") for path in schema["createOnlyProperties"])


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def group_id(props: dict[str, Any]) -> str | None:
    for name in KAFKA_CONFIGS:
        if name in props:
            return str(props[name].get("ConsumerGroupId"))
    return None


@dataclass
class LiveMapping:
    """What Lambda runs: the properties it was created with, as updated since."""

    props: dict[str, Any]

    @property
    def source(self) -> str:
        return _canonical(self.props.get("EventSourceArn") or self.props.get("SelfManagedEventSource"))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self.props.get("Topics", ()))

    @property
    def conflict_key(self) -> tuple[str, str, tuple[str, ...]]:
        return (self.source, _canonical(self.props["FunctionName"]), self.topics)


@dataclass
class Account:
    """The mappings one account holds, by logical id (this model runs one stack)."""

    mappings: dict[str, LiveMapping] = field(default_factory=dict)

    def _create(self, logical_id: str, props: dict[str, Any], existing: dict[str, LiveMapping]) -> None:
        new = LiveMapping(dict(props))
        for other_id, other in existing.items():
            if other.conflict_key == new.conflict_key:
                raise RolledBack(
                    f"{logical_id}: ResourceConflictException: a mapping of this event source, function and "
                    f"topics already exists ({other_id})"
                )
            group = group_id(props)
            if group is not None and group == group_id(other.props):
                raise RolledBack(
                    f"{logical_id}: ResourceConflictException: consumer group id {group!r} is in use by {other_id}"
                )
        existing[logical_id] = new

    def _update(self, logical_id: str, props: dict[str, Any], live: dict[str, LiveMapping]) -> None:
        current = live[logical_id]
        if group_id(props) != group_id(current.props):
            raise RolledBack(f"{logical_id}: the consumer group id of a Kafka mapping cannot be updated")
        updated = dict(props)
        if "Topics" in current.props:
            updated["Topics"] = current.props["Topics"]  # reported updated, not applied (#2140)
        current.props = updated

    def deploy(self, template: dict[str, Any]) -> None:
        """Update the stack to ``template`` (a synthesized template), or raise ``RolledBack``
        leaving the mappings as they were."""
        wanted = {
            logical_id: resource["Properties"]
            for logical_id, resource in template["Resources"].items()
            if resource["Type"] == ESM
        }
        live = {logical_id: LiveMapping(dict(m.props)) for logical_id, m in self.mappings.items()}
        for logical_id, props in wanted.items():  # creates and replacements first
            current = live.get(logical_id)
            if current is None:
                self._create(logical_id, props, live)
            elif any(
                _canonical(props.get(name)) != _canonical(current.props.get(name)) for name in create_only_properties()
            ):
                others = {other: m for other, m in live.items() if other != logical_id}
                others[f"{logical_id} (being replaced)"] = current
                self._create(logical_id, props, others)
                live[logical_id] = others.pop(logical_id)
            elif _canonical(props) != _canonical(current.props):
                self._update(logical_id, props, live)
        for logical_id in [other for other in live if other not in wanted]:  # cleanup
            del live[logical_id]
        self.mappings = live

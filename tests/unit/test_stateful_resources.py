"""Issue 31, part 4: the stateful resources cannot vanish.

A construct-path change (a renamed construct id, a part moved into another construct) gives a
resource another logical ID, and CloudFormation then creates a new, empty one and -- retained --
orphans the old: an empty ledger table forgets every high-water mark, so a Kinesis stream or a
consumer group without committed offsets would be archived again from the start of its retention,
and an empty bucket would lose the archive's home. So their logical IDs are pinned here: changing
one must be a deliberate act, with a migration (CloudFormation resource import), not a refactor.
They are retained on delete and on replacement, the tables refuse deletion (DynamoDB's
``DeletionProtectionEnabled``), and the stack refuses ``cdk destroy`` (termination protection).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cdk import synth_stack
from tidemark.config import TidemarkConfig

#: logical ID -> resource type of every stateful resource of the example stack
PINNED: dict[str, str] = {
    "StorageArchiveBucketC50834F0": "AWS::S3::Bucket",
    "StorageAccessLogsBucketFEE4D6FB": "AWS::S3::Bucket",
    "StorageLedgerTable795D73B2": "AWS::DynamoDB::Table",
    "StorageAggregatesTable1F43833A": "AWS::DynamoDB::Table",
    "StorageArchiveKeyD3AC1A91": "AWS::KMS::Key",
    "StagingFileSystem218B911F": "AWS::EFS::FileSystem",
}
STATEFUL_TYPES = ("AWS::S3::Bucket", "AWS::DynamoDB::Table", "AWS::EFS::FileSystem")


@pytest.fixture(scope="module")
def synthesized(example_config: TidemarkConfig) -> tuple[Any, Any]:
    return synth_stack(example_config, nag=False)


def test_the_stateful_resources_keep_their_logical_ids(synthesized) -> None:
    _stack, template = synthesized
    resources = template.to_json()["Resources"]
    found = {logical: resources[logical]["Type"] for logical in PINNED if logical in resources}
    assert found == PINNED, "a stateful resource's logical ID changed: CloudFormation would create an empty one"
    every = {logical for logical, body in resources.items() if body["Type"] in STATEFUL_TYPES}
    assert every <= set(PINNED), f"a stateful resource without a pinned logical ID: {sorted(every - set(PINNED))}"


def test_the_stateful_resources_are_retained_on_delete_and_replacement(synthesized) -> None:
    _stack, template = synthesized
    resources = template.to_json()["Resources"]
    for logical in PINNED:
        assert resources[logical]["DeletionPolicy"] == "Retain", logical
        assert resources[logical]["UpdateReplacePolicy"] == "Retain", logical


def test_the_stack_refuses_destroy_until_its_termination_protection_is_lifted(synthesized) -> None:
    stack, _template = synthesized
    assert stack.termination_protection is True


def test_the_tables_refuse_deletion(synthesized) -> None:
    _stack, template = synthesized
    tables = template.find_resources("AWS::DynamoDB::Table")
    assert len(tables) == 2
    assert all(table["Properties"]["DeletionProtectionEnabled"] is True for table in tables.values())

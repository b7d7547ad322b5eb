"""Each stream's staging belongs to its archiver: an EFS access point per stream, at today's paths.

On the synthesized template of three streams (MSK, Kinesis, RabbitMQ): one access point per
stream rooted at ``/tidemark/<stream>``, mounted by that stream's archiver only (at
``/mnt/<stream>``, staging root ``/mnt``); the sweeper's steps keep the root access point
(``/tidemark`` at ``/mnt/staging``, the access point and logical id of earlier versions); each
role may mount and write through its own access point only; the file system policy refuses mounts
that bypass the access points, connections without TLS and root access, and allows nothing.

And the paths: the code's path of a stream's partition and dedupe index
(``tidemark.staging.store.SegmentStore`` under the function's ``TIDEMARK_STAGING_ROOT``), mapped
through the function's mount (its ``LocalMountPath`` is its access point's ``RootDirectory``), is
the same file-system path in the archiver and in the sweeper, and the one earlier versions used:
nothing staged and accepted before an upgrade is stranded. (``tests/integration/test_staging_mounts.py``
mounts the directories as the access points would and stages through them.)
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import pytest

from stacks.staging import STAGING_MOUNT, STAGING_ROOT_DIRECTORY, stream_directory, stream_mount_path
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import logical_id, synth_stack
from tests.unit.test_stack_leading_keys import STREAMS, three_streams
from tidemark.exceptions import ConfigError
from tidemark.sources import PartitionId
from tidemark.staging.store import SegmentStore

#: the root access point's logical id in every version so far: a new one would be a new access
#: point (CloudFormation replaces it), and the sweeper's mount would change under it
ROOT_ACCESS_POINT = "StagingFileSystemAccessPointF5ED5103"
#: where earlier versions (one access point at /tidemark, mounted at /mnt/staging by every
#: function, staging root /mnt/staging) kept a partition's segments and a queue's dedupe index
EARLIER = "/tidemark/{stream}/p{partition}"
EARLIER_DEDUPE = "/tidemark/{stream}/dedupe/p{partition}.sqlite"
#: a partition of each stream: a Kafka partition, a Kinesis shard, a queue's one partition
PARTITIONS: dict[str, PartitionId] = {"orders": 3, "payments": "shardId-000000000001", "refunds": 0}


@pytest.fixture(scope="module")
def synthesized() -> tuple[TidemarkStack, dict[str, Any]]:
    stack, template = synth_stack(three_streams(), nag=False)
    return stack, template.to_json()


def resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {lid: r["Properties"] for lid, r in template["Resources"].items() if r["Type"] == kind}


def access_point_of(mount: dict[str, Any]) -> str:
    """The logical id of the access point a ``FileSystemConfigs`` entry (or a condition) names."""
    (ref,) = [
        part["Ref"]
        for part in mount["Fn::Join"][1]
        if isinstance(part, dict) and "Ref" in part and "AWS::" not in part["Ref"]
    ]
    return str(ref)


def role_statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def functions(stack: TidemarkStack) -> dict[str, str]:
    """Every Tidemark function's logical id, by a name: ``archiver:<stream>`` or the sweeper step."""
    fns = stack.sweeper.functions
    named = {f"archiver:{stream}": fn for stream, fn in stack.archiver.functions.items()}
    named |= {
        "ListPartitions": fns.list_partitions,
        "SweepPartition": fns.sweep_partition,
        "Reconcile": fns.reconcile,
        "CompleteHours": fns.complete_hours,
    }
    return {name: logical_id(fn) for name, fn in named.items()}


def test_one_access_point_per_stream_at_its_directory_and_the_sweepers_at_the_root(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    points = resources(template, "AWS::EFS::AccessPoint")
    assert logical_id(stack.staging.access_point) == ROOT_ACCESS_POINT
    by_stream = {stream: logical_id(point) for stream, point in stack.staging.stream_access_points.items()}
    assert sorted(by_stream) == sorted(STREAMS) and len(points) == len(STREAMS) + 1
    paths = {lid: point["RootDirectory"]["Path"] for lid, point in points.items()}
    assert paths == {
        ROOT_ACCESS_POINT: "/tidemark",
        **{lid: f"/tidemark/{stream}" for stream, lid in by_stream.items()},
    }
    for point in points.values():
        assert point["PosixUser"] == {"Uid": "1001", "Gid": "1001"}  # never root
        assert point["RootDirectory"]["CreationInfo"] == {"OwnerUid": "1001", "OwnerGid": "1001", "Permissions": "750"}
        assert point["FileSystemId"] == {"Ref": logical_id(stack.staging.file_system)}


def test_each_archiver_mounts_its_streams_access_point_and_the_sweeper_the_root(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    lambdas = resources(template, "AWS::Lambda::Function")
    for name, lid in functions(stack).items():
        (mount,) = lambdas[lid]["FileSystemConfigs"]  # Lambda takes one
        root = lambdas[lid]["Environment"]["Variables"]["TIDEMARK_STAGING_ROOT"]
        if name.startswith("archiver:"):
            stream = name.split(":", 1)[1]
            own = logical_id(stack.staging.stream_access_points[stream])
            assert (access_point_of(mount["Arn"]), mount["LocalMountPath"], root) == (own, f"/mnt/{stream}", "/mnt")
        else:
            assert (access_point_of(mount["Arn"]), mount["LocalMountPath"], root) == (
                ROOT_ACCESS_POINT,
                STAGING_MOUNT,
                STAGING_MOUNT,
            )


def test_each_role_mounts_and_writes_only_through_its_own_access_point(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    lambdas = resources(template, "AWS::Lambda::Function")
    file_system = {"Fn::GetAtt": [logical_id(stack.staging.file_system), "Arn"]}
    for name, lid in functions(stack).items():
        role = lambdas[lid]["Role"]["Fn::GetAtt"][0]
        efs = [s for s in role_statements(template, role) if "elasticfilesystem" in json.dumps(s["Action"])]
        (statement,) = efs
        assert sorted(statement["Action"]) == ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite"], name
        assert statement["Resource"] == file_system, name  # the file system, not "*"
        ((key, arn),) = statement["Condition"]["StringEquals"].items()
        assert key == "elasticfilesystem:AccessPointArn"
        (mount,) = lambdas[lid]["FileSystemConfigs"]
        assert access_point_of(arn) == access_point_of(mount["Arn"]), name
    granted = json.dumps([r for r in template["Resources"].values() if r["Type"].startswith("AWS::IAM::")])
    assert "elasticfilesystem:ClientRootAccess" not in granted


def test_the_file_system_policy_refuses_bypass_plaintext_and_root_and_allows_nothing(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    policy = resources(template, "AWS::EFS::FileSystem")[logical_id(stack.staging.file_system)]["FileSystemPolicy"]
    client = ["elasticfilesystem:ClientMount", "elasticfilesystem:ClientRootAccess", "elasticfilesystem:ClientWrite"]
    everyone = {"AWS": "*"}
    assert policy["Statement"] == [
        {
            "Sid": "DenyMountsBypassingAccessPoints",
            "Effect": "Deny",
            "Principal": everyone,
            "Action": client,
            "Condition": {"Null": {"elasticfilesystem:AccessPointArn": "true"}},
        },
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": everyone,
            "Action": client,
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
        {
            "Sid": "DenyRootAccess",
            "Effect": "Deny",
            "Principal": everyone,
            "Action": "elasticfilesystem:ClientRootAccess",
        },
    ]


def on_file_system(local: PurePosixPath, mount: str, access_point_root: str) -> PurePosixPath:
    """Where a function's local path is on the file system: its mount is the access point's root."""
    return PurePosixPath(access_point_root) / local.relative_to(mount)


def test_the_code_finds_each_streams_staging_where_earlier_versions_left_it(
    synthesized: tuple[TidemarkStack, dict[str, Any]],
) -> None:
    stack, template = synthesized
    lambdas = resources(template, "AWS::Lambda::Function")
    roots = {lid: point["RootDirectory"]["Path"] for lid, point in resources(template, "AWS::EFS::AccessPoint").items()}
    for name, lid in functions(stack).items():
        (mount,) = lambdas[lid]["FileSystemConfigs"]
        store = SegmentStore(lambdas[lid]["Environment"]["Variables"]["TIDEMARK_STAGING_ROOT"])
        root = roots[access_point_of(mount["Arn"])]
        streams = [name.split(":", 1)[1]] if name.startswith("archiver:") else list(STREAMS)
        for stream in streams:
            partition = PARTITIONS[stream]
            where = {"stream": stream, "partition": partition}
            directory = PurePosixPath(store.partition_dir(stream, partition))
            dedupe = PurePosixPath(store.dedupe_path(stream, partition))
            assert str(on_file_system(directory, mount["LocalMountPath"], root)) == EARLIER.format(**where), name
            assert str(on_file_system(dedupe, mount["LocalMountPath"], root)) == EARLIER_DEDUPE.format(**where), name


def test_a_stream_directory_and_mount_path_are_made_of_a_stream_name_only() -> None:
    assert (stream_directory("orders"), stream_mount_path("orders")) == (
        f"{STAGING_ROOT_DIRECTORY}/orders",
        "/mnt/orders",
    )
    longest = "o" * 63
    assert len(stream_directory(longest)) <= 100  # EFS: RootDirectory.Path, at most 100 characters
    for bad in ("../x", "orders/p0", "Orders", "a" * 64):
        with pytest.raises(ConfigError):
            stream_directory(bad)

"""The EFS staging file system: where the archiver appends segments and the sweeper recovers them.

One encrypted file system, mount targets in Tidemark's subnets, and access points that pin every
function to a POSIX user and a root directory:

* **one per stream** (``stream_mount``), rooted at ``/tidemark/<stream>``: the stream's archiver
  mounts it, and sees no other stream's segments, dedupe indexes or directories. A Lambda
  function mounts at most one access point (``FileSystemConfigs`` holds one), and a mount path is
  one level below ``/mnt`` (``^/mnt/[a-zA-Z0-9-_.]+$``, Lambda API ``FileSystemConfig``), so it
  is mounted at ``/mnt/<stream>`` and the archiver's staging root (``TIDEMARK_STAGING_ROOT``) is
  ``/mnt``: the code's path of a stream's partition, ``<root>/<stream>/p<partition>``
  (``tidemark.staging.store.SegmentStore``), is then ``/mnt/<stream>/p<partition>`` in the
  function and ``/tidemark/<stream>/p<partition>`` on the file system -- the same directory the
  single access point of earlier versions gave it, so nothing staged and accepted before an
  upgrade is stranded (for a queue that would be loss: its messages are acked);
* **one for the sweeper** (``mount``, the access point earlier versions gave every function,
  same construct and logical id), rooted at ``/tidemark`` and mounted at ``/mnt/staging``: its
  steps serve every stream (list, flush, recover, clean up), so they see every stream's directory.

Each mount grants ``elasticfilesystem:ClientMount`` and ``ClientWrite`` on the file system only
through its own access point (condition ``elasticfilesystem:AccessPointArn``): an archiver's role
cannot mount the sweeper's access point or another stream's. The file system policy
(:func:`file_system_policy`) refuses what no function needs: a mount that bypasses the access
points, a connection without TLS, and root access; it allows nothing, so only a principal whose
own IAM policy grants a mount can mount (anonymous NFS clients cannot).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from tidemark.config.deployment import StagingSettings
from tidemark.exceptions import ConfigError
from tidemark.names import STREAM, matches

#: where the sweeper's (root) access point is mounted (its functions' TIDEMARK_STAGING_ROOT)
STAGING_MOUNT = "/mnt/staging"
#: the root access point's directory on the file system; a stream's is ``<this>/<stream>``
STAGING_ROOT_DIRECTORY = "/tidemark"
#: an archiver's TIDEMARK_STAGING_ROOT: its stream's access point is mounted at ``<this>/<stream>``
STREAM_MOUNT_PARENT = "/mnt"
#: the POSIX identity the functions act as on the file system (not root)
POSIX_UID = "1001"
POSIX_GID = "1001"
#: an access point's root directory: at most 100 characters and four levels (EFS API, RootDirectory.Path)
MAX_ACCESS_POINT_PATH = 100
#: what a function does on the file system (``ClientRootAccess`` is never granted, and denied)
CLIENT_ACTIONS = ("elasticfilesystem:ClientMount", "elasticfilesystem:ClientWrite")
ROOT_ACCESS = "elasticfilesystem:ClientRootAccess"


def throughput(settings: StagingSettings) -> dict[str, Any]:
    """The file system's throughput arguments for ``staging.throughput``."""
    if settings.throughput == "provisioned":
        assert settings.provisioned_mibps is not None  # StagingSettings requires it
        return {
            "throughput_mode": efs.ThroughputMode.PROVISIONED,
            "provisioned_throughput_per_second": Size.mebibytes(settings.provisioned_mibps),
        }
    return {"throughput_mode": efs.ThroughputMode.ELASTIC}


def stream_directory(stream: str) -> str:
    """A stream's access point root on the file system: ``/tidemark/<stream>``, today's directory."""
    if not matches(STREAM, stream):
        raise ConfigError(f"{stream!r} is not a stream name: no staging directory is made of it")
    path = f"{STAGING_ROOT_DIRECTORY}/{stream}"
    if len(path) > MAX_ACCESS_POINT_PATH:  # a stream name is at most 63 characters: never
        raise ConfigError(f"staging: {path} is longer than an access point's {MAX_ACCESS_POINT_PATH} characters")
    return path


def stream_mount_path(stream: str) -> str:
    """Where an archiver mounts its stream's access point: ``/mnt/<stream>``."""
    stream_directory(stream)  # validates the name
    return f"{STREAM_MOUNT_PARENT}/{stream}"


def file_system_policy() -> iam.PolicyDocument:
    """Denies what no Tidemark function does, to every principal; allows nothing.

    * a mount that does not go through an access point (``elasticfilesystem:AccessPointArn`` is
      absent): the whole file system, as root, past every function's POSIX identity;
    * a connection without TLS (``aws:SecureTransport`` false);
    * root access (``ClientRootAccess``): the access points' POSIX user is 1001.

    A file system with a policy of its own no longer has EFS's default one (full access for any
    client that reaches a mount target), and this one allows nothing: a mount needs an identity
    grant (the functions' roles have theirs, per access point)."""
    everyone = [iam.AnyPrincipal()]
    client_actions = [*CLIENT_ACTIONS, ROOT_ACCESS]
    return iam.PolicyDocument(
        statements=[
            iam.PolicyStatement(
                sid="DenyMountsBypassingAccessPoints",
                effect=iam.Effect.DENY,
                principals=everyone,
                actions=client_actions,
                conditions={"Null": {"elasticfilesystem:AccessPointArn": "true"}},
            ),
            iam.PolicyStatement(
                sid="DenyInsecureTransport",
                effect=iam.Effect.DENY,
                principals=everyone,
                actions=client_actions,
                conditions={"Bool": {"aws:SecureTransport": "false"}},
            ),
            iam.PolicyStatement(
                sid="DenyRootAccess", effect=iam.Effect.DENY, principals=everyone, actions=[ROOT_ACCESS]
            ),
        ]
    )


class StagingConstruct(Construct):
    """EFS file system + access points; ``mount`` is what the sweeper's functions pass as
    ``filesystem``, ``stream_mount(name)`` what a stream's archiver passes."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        settings: StagingSettings | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.file_system = efs.FileSystem(
            self,
            "FileSystem",
            vpc=vpc,
            vpc_subnets=subnets,
            encrypted=True,
            performance_mode=efs.PerformanceMode.GENERAL_PURPOSE,
            # Elastic (the default) follows the archiver's bursts, billed per byte; Provisioned bills a
            # rate and caps throughput there (``staging.throughput``; ``tidemark cost`` compares them).
            **throughput(settings or StagingSettings()),
            # Staged segments live minutes to hours; moving them to IA would only add latency.
            lifecycle_policy=None,
            # No AWS Backup: a restored snapshot would lag the ledger (segments it accepted since
            # would be missing), so it could not be used without a manual re-read from Kafka anyway.
            # Staged but unflushed records are only here: keep the file system if the stack goes.
            enable_automatic_backups=False,
            removal_policy=RemovalPolicy.RETAIN,
            file_system_policy=file_system_policy(),
            # CDK's name for "do not add CDK's own statement": without it CDK appends an Allow of
            # ClientWrite and ClientRootAccess to any principal through a mount target. Anonymous
            # clients get nothing either way: the policy above allows nothing.
            allow_anonymous_access=True,
        )
        # The sweeper's: the one access point of earlier versions (same construct id), at the root.
        self.access_point = self.file_system.add_access_point(
            "AccessPoint",
            path=STAGING_ROOT_DIRECTORY,
            create_acl=efs.Acl(owner_uid=POSIX_UID, owner_gid=POSIX_GID, permissions="750"),
            posix_user=efs.PosixUser(uid=POSIX_UID, gid=POSIX_GID),
        )
        self.mount = self._mount(self.access_point, STAGING_MOUNT)
        self.stream_access_points: dict[str, efs.AccessPoint] = {}
        self._stream_mounts: dict[str, lambda_.FileSystem] = {}

    def stream_mount(self, stream: str) -> lambda_.FileSystem:
        """The stream's access point (made on first use), mounted at ``/mnt/<stream>``."""
        mount = self._stream_mounts.get(stream)
        if mount is None:
            access_point = self.stream_access_points[stream] = self.file_system.add_access_point(
                f"AccessPoint-{stream}",
                path=stream_directory(stream),
                # Created only if missing (a stream new with this version): the archiver and the
                # sweeper, both POSIX user 1001, then read and write it as they do today's.
                create_acl=efs.Acl(owner_uid=POSIX_UID, owner_gid=POSIX_GID, permissions="750"),
                posix_user=efs.PosixUser(uid=POSIX_UID, gid=POSIX_GID),
            )
            mount = self._stream_mounts[stream] = self._mount(access_point, stream_mount_path(stream))
        return mount

    def _mount(self, access_point: efs.AccessPoint, path: str) -> lambda_.FileSystem:
        """``lambda_.FileSystem.from_efs_access_point`` with its grants narrowed: CDK grants
        ClientMount on "*" and ClientWrite on the file system whatever the access point; here both
        are on the file system and only through ``access_point``."""
        through = {"StringEquals": {"elasticfilesystem:AccessPointArn": access_point.access_point_arn}}
        return lambda_.FileSystem(
            arn=access_point.access_point_arn,
            local_mount_path=path,
            connections=self.file_system.connections,
            dependency=[self.file_system.mount_targets_available],
            policies=[
                iam.PolicyStatement(
                    actions=list(CLIENT_ACTIONS), resources=[self.file_system.file_system_arn], conditions=through
                )
            ],
        )

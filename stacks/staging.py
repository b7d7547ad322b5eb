"""The EFS staging file system: where the archiver appends segments and the sweeper recovers them.

One encrypted file system, mount targets in Tidemark's subnets, and one access point that pins
every function to a POSIX user and a root directory, so the functions can neither see nor
write anything outside ``/tidemark`` on the file system.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy, Size
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_efs as efs
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from tidemark.config.deployment import StagingSettings

#: where the access point is mounted in every function (the runtime's TIDEMARK_STAGING_ROOT)
STAGING_MOUNT = "/mnt/staging"
#: the access point's root directory on the file system
STAGING_ROOT_DIRECTORY = "/tidemark"
#: the POSIX identity the functions act as on the file system (not root)
POSIX_UID = "1001"
POSIX_GID = "1001"


def throughput(settings: StagingSettings) -> dict[str, Any]:
    """The file system's throughput arguments for ``staging.throughput``."""
    if settings.throughput == "provisioned":
        assert settings.provisioned_mibps is not None  # StagingSettings requires it
        return {
            "throughput_mode": efs.ThroughputMode.PROVISIONED,
            "provisioned_throughput_per_second": Size.mebibytes(settings.provisioned_mibps),
        }
    return {"throughput_mode": efs.ThroughputMode.ELASTIC}


class StagingConstruct(Construct):
    """EFS file system + access point; ``mount`` is what a function passes as ``filesystem``."""

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
        )
        self.access_point = self.file_system.add_access_point(
            "AccessPoint",
            path=STAGING_ROOT_DIRECTORY,
            create_acl=efs.Acl(owner_uid=POSIX_UID, owner_gid=POSIX_GID, permissions="750"),
            posix_user=efs.PosixUser(uid=POSIX_UID, gid=POSIX_GID),
        )
        self.mount = lambda_.FileSystem.from_efs_access_point(self.access_point, STAGING_MOUNT)

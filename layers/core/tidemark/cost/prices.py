"""AWS list prices, us-east-1, as named constants with the page each comes from.

All were read for prices effective 2025-10-01 (the AWS Price List API dump and the pricing pages
below, collected in the project's COST-NOTES). Only us-east-1 is known here: ``tidemark cost``
refuses other regions rather than guess. Per-GB prices are applied per GiB (2**30 bytes), as AWS
bills data.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the date the prices below are effective from (AWS Price List API), and the only region known
PRICES_EFFECTIVE = "2025-10-01"
REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class Price:
    """One list price: dollars per ``unit``, from ``source`` (effective ``PRICES_EFFECTIVE``)."""

    dollars: float
    unit: str
    source: str


LAMBDA_PAGE = "https://aws.amazon.com/lambda/pricing/"
EFS_PAGE = "https://aws.amazon.com/efs/pricing/"
DYNAMODB_PAGE = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
S3_PAGE = "https://aws.amazon.com/s3/pricing/"
SFN_PAGE = "https://aws.amazon.com/step-functions/pricing/"
EMR_PAGE = "https://aws.amazon.com/emr/pricing/"
PRIVATELINK_PAGE = "https://aws.amazon.com/privatelink/pricing/"
FIREHOSE_PAGE = "https://aws.amazon.com/firehose/pricing/"
MSK_PAGE = "https://aws.amazon.com/msk/pricing/"

#: Lambda on arm64 (the archiver and sweeper functions' architecture, stacks/functions.py), first 7.5B GB-s
LAMBDA_ARM64_GB_SECOND = Price(0.0000133334, "GB-second", LAMBDA_PAGE)
LAMBDA_REQUEST = Price(0.20 / 1_000_000, "request", LAMBDA_PAGE)
#: Kafka event source mapping in provisioned mode; one EPU polls up to 20 MB/s
ESM_EPU_HOUR = Price(0.185, "EPU-hour", LAMBDA_PAGE)
ESM_EPU_MB_PER_S = 20.0

EFS_STANDARD_GB_MONTH = Price(0.30, "GB-month", EFS_PAGE)
EFS_ELASTIC_WRITE_GB = Price(0.06, "GB written", EFS_PAGE)
EFS_ELASTIC_READ_GB = Price(0.03, "GB read", EFS_PAGE)
#: Provisioned Throughput, per MiB/s provisioned for a month (EFS provisions in MiB/s)
EFS_PROVISIONED_MIBPS_MONTH = Price(6.00, "MiB/s-month", EFS_PAGE)

#: on-demand, after the 2024-11-01 price cut
DYNAMODB_WRU = Price(0.625 / 1_000_000, "WRU", DYNAMODB_PAGE)

S3_PUT = Price(0.005 / 1000, "PUT/COPY/POST/LIST request", S3_PAGE)
S3_GET = Price(0.0004 / 1000, "GET request", S3_PAGE)
S3_STANDARD_GB_MONTH = Price(0.023, "GB-month", S3_PAGE)

SFN_STANDARD_TRANSITION = Price(0.025 / 1000, "state transition", SFN_PAGE)

EMR_SERVERLESS_VCPU_HOUR = Price(0.052624, "vCPU-hour", EMR_PAGE)
EMR_SERVERLESS_GB_HOUR = Price(0.0057785, "GB-hour", EMR_PAGE)

VPC_INTERFACE_ENDPOINT_AZ_HOUR = Price(0.01, "endpoint-AZ-hour", PRIVATELINK_PAGE)
VPC_INTERFACE_ENDPOINT_GB = Price(0.01, "GB processed", PRIVATELINK_PAGE)

#: Firehose with an MSK source: billed on the higher of bytes ingested or delivered, no 5 KB rounding
FIREHOSE_MSK_GB = Price(0.055, "GB ingested", FIREHOSE_PAGE)
#: one MCU is 1 vCPU + 4 GiB
MSK_CONNECT_MCU_HOUR = Price(0.11, "MCU-hour", MSK_PAGE)

#: every price, for the README and ``--json``
ALL: dict[str, Price] = {
    name: value for name, value in dict(globals()).items() if isinstance(value, Price) and name.isupper()
}

"""``tidemark cost`` against figures computed by hand for one workload: 10 MB/s of 500-byte
records over 12 partitions, defaults otherwise. The arithmetic is written out here, from the
list prices and the measured inputs, independently of ``tidemark.cost.model``."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tidemark.cli.app import app
from tidemark.cost.model import Workload, estimate, total
from tidemark.exceptions import ConfigError

ARGS = ["cost", "--mb-per-s", "10", "--record-bytes", "500", "--partitions", "12"]
MONTH_S = 730 * 3600  # 2,628,000
GIB_PER_MONTH = 10e6 * MONTH_S / 2**30  # 24,475.16 GiB of record bytes
RATIO = 1_672_572 / (50_000 * 143)  # jsonl + zstd object bytes per value byte (README formats bench)

# -- by hand -------------------------------------------------------------------------------------
# 20,000 records/s; 1,666.7 per partition fills a 1,000-record batch well within the 1 s window.
INVOCATIONS = 20 * MONTH_S  # 20 batches/s = 52,560,000
DURATION_S = 0.015  # ceil(1,000 / 70,000 records/s = 14.29 ms) = 15 ms (> the 6 ms fixed floor)
SWEEPS = MONTH_S / 300  # 8,760
SWEEPER_CALLS = (3 + 12) * SWEEPS  # 131,400
OBJECTS = (60 + 1) * 12 * 730  # 100,000 records fill in 60 s: 60 per hour + 1 cut by the hour; 534,360
EMR_VCPU_H = (72e6 / 29_300 / 3600 + 4 * 5 / 60) * 730  # measured work + assumed 5 min of a 4-vCPU driver
HAND = {
    ("Lambda", 0): 52_560_000 * DURATION_S * 2 * 0.0000133334,  # 1,576,800 GB-s = 21.02
    ("Lambda", 1): 52.56 * 0.20,  # 10.51
    ("Lambda", 2): 131_400 * 1.0 * 1 * 0.0000133334,  # 1.75
    ("Lambda", 3): 0.1314 * 0.20,  # 0.03
    ("EFS", 0): 24 * 6.00,  # ceil(2 x 10e6 / 2**20 x 1.25 = 23.84) = 24 MiB/s provisioned = 144.00
    ("EFS", 1): 10e6 * 60 / 2**30 * 0.30,  # 60 s staged = 0.56 GiB -> 0.17
    ("DynamoDB", 0): 52_560_000 * 7 * 0.625 / 1e6,  # ceil(6,297 B / 1 KB) = 7 WRU per accept: 229.95
    ("DynamoDB", 1): 534_360 * 2 * (7 + 1 + 1) * 0.625 / 1e6,  # 18 WRU per commit: 6.01
    ("DynamoDB", 2): 3 * 730 * 0.625 / 1e6,
    ("S3", 0): 534_360 * 0.005 / 1000,  # objects of 50 MB x 0.234 = 11.7 MB < 16 MiB: one PUT each; 2.67
    ("S3", 1): GIB_PER_MONTH * RATIO * 0.023,  # 5,725 GiB: 131.68
    ("Step Functions", 0): (7 + 2 * 12) * 8760 * 0.025 / 1000,  # 271,560 transitions: 6.79
    ("VPC endpoints", 0): 2 * 2 * 730 * 0.01,  # 29.20
    ("VPC endpoints", 1): GIB_PER_MONTH * 4 / 3 * 0.01,  # 326.34
    ("EMR Serverless", 0): EMR_VCPU_H * 0.052624,  # 741.6 vCPU-h: 39.03
    ("EMR Serverless", 1): EMR_VCPU_H * 4 * 0.0057785,  # 17.14
    ("EMR Serverless", 2): 534_360 * 0.0004 / 1000,  # 0.21
}
HAND_TOTAL = sum(HAND.values())  # 966.51
HAND_FIREHOSE = GIB_PER_MONTH * 0.055 + GIB_PER_MONTH * RATIO * 0.023  # 1,346.13 + 131.68
HAND_MSK_CONNECT = 2 * 730 * 0.11 + GIB_PER_MONTH * RATIO * 0.023  # ceil(10 / 5 MB/s per MCU) = 2 MCU


def test_tidemark_items_match_the_hand_computed_figures() -> None:
    result = estimate(Workload(mb_per_s=10, record_bytes=500, partitions=12))
    by_part: dict[str, list[float]] = {}
    for item in result.tidemark:
        by_part.setdefault(item.part, []).append(item.monthly)
    got = {(part, index): value for part, values in by_part.items() for index, value in enumerate(values)}
    assert got.keys() == HAND.keys()
    for key, expected in HAND.items():
        assert got[key] == pytest.approx(expected, rel=1e-9), key
    assert total(result.tidemark) == pytest.approx(HAND_TOTAL)
    assert round(HAND_TOTAL, 2) == 966.51
    assert total(result.firehose) == pytest.approx(HAND_FIREHOSE)
    assert total(result.msk_connect) == pytest.approx(HAND_MSK_CONNECT)
    assert result.efs.recommended == "provisioned"
    assert result.efs.elastic_monthly == pytest.approx(GIB_PER_MONTH * (0.06 + 0.03))  # 2,202.76


def test_elastic_is_recommended_for_a_light_load() -> None:
    # 0.01 MB/s: Elastic moves 49 GiB a month for $4.40; 1 MiB/s provisioned (the minimum) is $6.
    result = estimate(Workload(mb_per_s=0.01, record_bytes=500, partitions=1))
    assert result.efs.recommended == "elastic"
    assert result.efs.elastic_monthly == pytest.approx(0.01e6 * MONTH_S / 2**30 * 0.09)
    assert result.efs.provisioned_mibps == 1
    # batches of 20 records (20 records/s over a 1 s window), billed the 6 ms floor
    assert [i.quantity for i in result.tidemark if i.item.startswith("archiver GB-s")] == [
        pytest.approx(MONTH_S * 0.006 * 2)
    ]


def test_provisioned_pollers_are_priced_and_checked() -> None:
    result = estimate(Workload(mb_per_s=10, record_bytes=500, partitions=12, provisioned_pollers=2))
    (epu,) = [item for item in result.tidemark if item.part == "ESM"]
    assert epu.monthly == pytest.approx(2 * 730 * 0.185)
    with pytest.raises(ConfigError, match="below the 2 this load needs"):
        Workload(mb_per_s=30, record_bytes=500, partitions=12, provisioned_pollers=1)


def test_cli_prints_the_tables_and_the_comparison() -> None:
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    out = result.output
    assert f"Tidemark total: ${HAND_TOTAL:,.2f}/month" in out
    assert f"Amazon Data Firehose (MSK source)        ${HAND_FIREHOSE:>12,.2f}" in out
    assert f"${HAND_MSK_CONNECT:>12,.2f}" in out
    assert "EFS throughput: provisioned: 24 MiB/s" in out
    for part in ("Lambda", "EFS", "DynamoDB", "S3", "Step Functions", "VPC endpoints", "EMR Serverless"):
        assert f"\n{part} ($" in out


def test_cli_json_has_the_same_figures() -> None:
    result = CliRunner().invoke(app, [*ARGS, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tidemark"]["total"] == round(HAND_TOTAL, 2)
    assert data["firehose"]["total"] == round(HAND_FIREHOSE, 2)
    assert data["msk_connect"]["mcus"] == 2
    assert data["efs"]["recommended"] == "provisioned" and data["efs"]["provisioned_mibps"] == 24
    assert data["measured"]["ledger_item_bytes_per_accept"]["value"] == 6297
    assert math.isclose(sum(row["monthly"] for row in data["tidemark"]["items"]), HAND_TOTAL, abs_tol=0.01)


def test_other_regions_are_refused_in_one_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tidemark.cli.app", *ARGS, "--region", "eu-west-1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: --region eu-west-1: only us-east-1")


def test_bad_workload_is_one_line_exit_2() -> None:
    result = CliRunner().invoke(app, ["cost", "--mb-per-s", "0", "--record-bytes", "500", "--partitions", "1"])
    assert result.exit_code == 2
    assert "--mb-per-s must be above 0" in result.output

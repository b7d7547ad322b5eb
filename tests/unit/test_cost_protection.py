"""``archive.protection`` in the cost model (``tidemark.cost.model``): what versioning and Object
Lock cost for the load of ``test_cost.py`` (10 MB/s of 500-byte records over 12 partitions),
written out by hand."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.cost.model import Workload, estimate, total
from tidemark.exceptions import ConfigError


def load(**settings: Any) -> Workload:
    return Workload(mb_per_s=10, record_bytes=500, partitions=12, **settings)


MONTH_S = 730 * 3600
STORED_GIB = 10e6 * MONTH_S / 2**30 * (1_672_572 / (50_000 * 143))  # 5,725 GiB a month, as test_cost.py


def s3_items(workload: Workload) -> list[tuple[str, float]]:
    return [(item.item, item.monthly) for item in estimate(workload).tidemark if item.part == "S3"]


def test_no_protection_prices_nothing_extra() -> None:
    result = estimate(load())
    assert [item for item, _ in s3_items(load())] == [
        "PUTs (61 objects per partition-hour, 1 request(s) each)",
        "Standard storage (one month of objects)",
    ]
    assert not any("protection" in note for note in result.notes)


@pytest.mark.parametrize("protection", ["versioning", "object_lock"])
def test_versioning_and_object_lock_add_no_monthly_cost_while_nothing_is_deleted(protection: str) -> None:
    """The bucket policy refuses overwrites and deletes: no noncurrent version is ever made by
    Tidemark's own writes, so the line is there, at zero, and the total does not move."""
    days = 365 if protection == "object_lock" else 0
    workload = load(protection=protection, object_lock_days=days)
    (_puts, _storage, (item, monthly)) = s3_items(workload)
    assert monthly == 0.0
    assert ("Object Lock (365 d" if protection == "object_lock" else "versioning: noncurrent versions") in item
    assert total(estimate(workload).tidemark) == pytest.approx(total(estimate(load()).tidemark))
    notes = estimate(workload).notes
    assert any(note.startswith(f"archive.protection {protection}: an object deleted") for note in notes)


def test_object_lock_states_the_storage_each_month_of_objects_commits_to() -> None:
    notes = estimate(load(protection="object_lock", object_lock_days=365)).notes
    (note,) = [note for note in notes if note.startswith("Object Lock:")]
    committed = STORED_GIB * 0.023 * 365 / (730 / 24)  # a month's objects, Standard, 365 days
    assert f"${committed:,.2f}" in note  # $1,580.20
    assert f"({STORED_GIB:,.0f} GiB)" in note and "365 days" in note


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"protection": "object_lock"}, "--object-lock-days must be between 1 and 36500"),
        ({"protection": "object_lock", "object_lock_days": 36_501}, "--object-lock-days must be between"),
        ({"protection": "versioning", "object_lock_days": 30}, "only for --protection object_lock"),
        ({"protection": "frozen"}, "--protection must be none, versioning or object_lock"),
    ],
)
def test_bad_protection_settings_are_one_line_errors(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(**settings)

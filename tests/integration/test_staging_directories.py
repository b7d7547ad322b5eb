"""Staging directories on a real file system: listing, removal by the sweeper, and a writer that
races the removal; and the runtime's refusal to start without its staging root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemark.buffers import BufferKey
from tidemark.exceptions import ConfigError
from tidemark.runtime import Runtime
from tidemark.staging.store import SegmentStore

KEY = BufferKey("raw", "2026-11-21T08")


def test_partitions_are_listed_and_an_empty_directory_is_removed(tmp_path: Path) -> None:
    store = SegmentStore(tmp_path)
    ref = store.write("orders", 3, KEY, [b"x"], 0, 0, 1)
    store.write("orders", 11, KEY, [b"y"], 0, 0, 1)
    (tmp_path / "orders" / "p-1").mkdir()  # not a partition directory
    (tmp_path / "orders" / "p07").mkdir()  # nor this (leading zero)
    assert store.partitions("orders") == [3, 11]
    assert store.partitions("clicks") == []

    assert not store.remove_partition_dir("orders", 3)  # holds a segment: stays
    store.delete("orders", 3, ref.name)
    assert store.remove_partition_dir("orders", 3)
    assert store.partitions("orders") == [11]
    assert not store.remove_partition_dir("orders", 3)  # already gone


def test_a_write_recreates_a_directory_removed_under_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SegmentStore(tmp_path)
    store.write("orders", 0, KEY, [b"a"], 0, 0, 1)
    directory = store.partition_dir("orders", 0)
    for name in os.listdir(directory):
        os.unlink(directory / name)
    real_is_dir = Path.is_dir

    def stale_is_dir(path: Path) -> bool:  # the writer saw the directory just before the sweeper removed it
        if path == directory:
            store.remove_partition_dir("orders", 0)
            return True
        return real_is_dir(path)

    monkeypatch.setattr(Path, "is_dir", stale_is_dir)
    ref = store.write("orders", 0, KEY, [b"b"], 1, 1, 2)

    assert (directory / ref.name).read_bytes() == b"b"


def test_the_runtime_refuses_a_staging_root_that_is_not_there(tmp_path: Path) -> None:
    environ = {
        "TIDEMARK_BUCKET": "b",
        "TIDEMARK_LEDGER_TABLE": "t",
        "TIDEMARK_STAGING_ROOT": str(tmp_path / "not-mounted"),
        "TIDEMARK_CONFIG": str(Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"),
    }
    with pytest.raises(ConfigError, match="not-mounted is not a directory: is the EFS access point mounted"):
        Runtime.from_env(environ)


def test_the_runtime_refuses_an_archiver_whose_stream_access_point_is_not_mounted(tmp_path: Path) -> None:
    """An archiver's staging root is ``/mnt``, which exists whether or not its stream's access
    point is mounted at ``/mnt/<stream>``: the mount is checked itself (``TIDEMARK_STAGING_MOUNT``)."""
    environ = {
        "TIDEMARK_BUCKET": "b",
        "TIDEMARK_LEDGER_TABLE": "t",
        "TIDEMARK_STAGING_ROOT": str(tmp_path),
        "TIDEMARK_STAGING_MOUNT": str(tmp_path / "orders"),
        "TIDEMARK_CONFIG": str(Path(__file__).resolve().parents[2] / "config" / "tidemark.yaml"),
    }
    with pytest.raises(ConfigError, match=r"TIDEMARK_STAGING_MOUNT=.*/orders is not a directory: is the EFS access"):
        Runtime.from_env(environ)
    (tmp_path / "orders").mkdir()
    assert Runtime.from_env(environ).staging is not None

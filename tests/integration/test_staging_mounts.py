"""Staging through the access points, mounted as Lambda mounts them: nothing staged is stranded.

A temporary directory stands for the EFS file system; in a mount namespace of its own (``unshare``,
skipped where the machine does not allow one), its directories are bind-mounted where each
function of the synthesized template sees its access point: the access point's root directory at
the function's ``LocalMountPath``. Then, with the real ``SegmentStore`` under each function's
``TIDEMARK_STAGING_ROOT``:

* segments and a queue's dedupe index staged the way earlier versions staged them (one access
  point at ``/tidemark``, mounted at ``/mnt/staging`` by every function) are found and read by
  the stream's archiver through its own access point, and by the sweeper through the root one;
* what the archiver stages now, the sweeper finds;
* another stream's archiver sees none of it: its mount holds its own stream's directory only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.cdk import logical_id, synth_stack
from tests.unit.test_stack_leading_keys import three_streams
from tests.unit.test_staging_access_points import access_point_of

CHILD = r"""
import json, os, subprocess, sys
from pathlib import Path

from tidemark.buffers import BufferKey
from tidemark.staging.frames import RAW, Frame
from tidemark.staging.segment import segment_of_frames
from tidemark.staging.store import SegmentStore

views = json.loads(sys.argv[1])   # name -> {"efs": dir on the file system, "mount": where, "root": staging root}
for view in views.values():
    Path(view["efs"]).mkdir(parents=True, exist_ok=True)  # the access point creates its root
    Path(view["mount"]).mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", view["efs"], view["mount"]], check=True)

def store(name):
    return SegmentStore(views[name]["root"])

def stage(s, stream, partition, offset):
    at = 1_795_248_000_000
    segment = segment_of_frames([Frame(RAW, offset, at, at, b"k", b"v")])
    return s.write(stream, partition, BufferKey("raw", "2026-11-21T08"), [segment], offset, offset, at)

earlier = stage(store("earlier"), "orders", 0, 5)
store("earlier").dedupe_path("refunds", 0).parent.mkdir(parents=True, exist_ok=True)
store("earlier").dedupe_path("refunds", 0).write_bytes(b"index")
now = stage(store("archiver:orders"), "orders", 0, 6)
out = {
    "archiver_reads_earlier": [f.offset for f in store("archiver:orders").read("orders", 0, earlier)],
    "archiver_lists": sorted(s.first for s in store("archiver:orders").segments("orders", 0)),
    "sweeper_lists": sorted(s.first for s in store("sweeper").segments("orders", 0)),
    "sweeper_reads_now": [f.offset for f in store("sweeper").read("orders", 0, now)],
    "queue_index": store("archiver:refunds").dedupe_path("refunds", 0).read_bytes().decode(),
    "payments_sees_orders": store("archiver:payments").partitions("orders"),
    "payments_lists": os.listdir(views["archiver:payments"]["root"]),
}
print(json.dumps(out))
"""


def can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


def test_each_function_finds_the_staging_earlier_versions_left_through_its_access_point(tmp_path: Path) -> None:
    # util-linux's unshare with unprivileged user namespaces, as these machines have: a machine
    # without them fails here rather than passing without the mounts
    assert can_unshare(), "this test needs `unshare --user --map-root-user --mount` (util-linux)"
    stack, template = synth_stack(three_streams(), nag=False)
    resources: dict[str, Any] = template.to_json()["Resources"]
    roots = {
        lid: r["Properties"]["RootDirectory"]["Path"]
        for lid, r in resources.items()
        if r["Type"] == "AWS::EFS::AccessPoint"
    }
    efs, views = tmp_path / "efs", {}
    functions = {f"archiver:{name}": fn for name, fn in stack.archiver.functions.items()}
    functions["sweeper"] = stack.sweeper.functions.sweep_partition
    for name, fn in functions.items():
        properties = resources[logical_id(fn)]["Properties"]
        (mount,) = properties["FileSystemConfigs"]
        local = tmp_path / name.replace(":", "-")  # each function's own /
        views[name] = {
            "efs": str(efs / roots[access_point_of(mount["Arn"])].lstrip("/")),
            "mount": str(local / mount["LocalMountPath"].lstrip("/")),
            "root": str(local / properties["Environment"]["Variables"]["TIDEMARK_STAGING_ROOT"].lstrip("/")),
        }
    # earlier versions: every function mounted the one access point, /tidemark, at /mnt/staging
    views["earlier"] = {
        "efs": str(efs / "tidemark"),
        "mount": str(tmp_path / "earlier" / "mnt" / "staging"),
        "root": str(tmp_path / "earlier" / "mnt" / "staging"),
    }
    assert views["sweeper"]["efs"] == views["earlier"]["efs"]  # the sweeper's access point is unchanged
    run = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", CHILD, json.dumps(views)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["archiver_reads_earlier"] == [5]
    assert out["archiver_lists"] == [5, 6] and out["sweeper_lists"] == [5, 6]
    assert out["sweeper_reads_now"] == [6]
    assert out["queue_index"] == "index"  # a queue's dedupe index: its acked messages' ids
    assert out["payments_sees_orders"] == [] and out["payments_lists"] == ["payments"]

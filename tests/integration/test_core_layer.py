"""The core layer and the job's code archive, bundled for real (pip from PyPI, no Docker).

The layers built for this machine's platform (to run them here) come from ``host_layer``, which
tests/integration/test_formats_layer.py shares: each is built once per session, from the
repository's cache (a fresh clone downloads the wheels once).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Literal

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.assets import CORE_LOCAL_ONLY
from stacks.layer import LAMBDA_PYTHON, core_bundling, formats_bundling
from stacks.tidemark_stack import TidemarkStack
from tests.conftest import Archive
from tests.support.cdk import REPO, cdk_context, logical_id
from tidemark.config import TidemarkConfig

LAYER_CACHE = REPO / ".cache" / "layer"
#: the manylinux tag and Python of this machine, for layers the tests run here
HOST_PLATFORM = f"manylinux2014_{platform.machine()}"
HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
#: the oldest glibc a Lambda Python runtime has (python3.11's Amazon Linux 2; python3.13's Amazon
#: Linux 2023 has 2.34): the layers' wheels must run on it
LAMBDA_GLIBC = (2, 26)


def host_layer(kind: Literal["core", "formats"], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``python/`` directory of a layer built as the stack builds it, for this machine's
    platform: once per session (the session's temporary directory keeps it)."""
    built = tmp_path_factory.getbasetemp() / f"host-{kind}-layer"
    if not (built / ".built").is_file():
        shutil.rmtree(built, ignore_errors=True)
        bundling = (core_bundling if kind == "core" else formats_bundling)(
            REPO, LAYER_CACHE, platform=HOST_PLATFORM, python_version=HOST_PYTHON
        )
        assert bundling.try_bundle(str(built))
        (built / ".built").touch()
    return built / "python"


def oldest_glibc(dist_info: Path) -> tuple[int, int] | None:
    """The glibc a wheel needs at least (from the tags in its WHEEL file), None if pure Python."""
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist_info / "WHEEL").read_text().splitlines()
        if line.startswith("Tag:")
    ]
    needs: list[tuple[int, int]] = []
    for tag in tags:
        plat = tag.rsplit("-", 1)[-1]
        if plat == "any":
            return None
        if plat.startswith("manylinux2014_"):
            needs.append((2, 17))
        elif match := re.match(r"manylinux_(\d+)_(\d+)_", plat):
            needs.append((int(match[1]), int(match[2])))
        else:
            raise AssertionError(f"{dist_info.name}: not a manylinux wheel: {tag}")
    return min(needs)


def not_for_lambdas_python(python: Path) -> dict[str, list[str]]:
    """Wheels in a layer whose tags do not run on the Lambda runtime's Python (``LAMBDA_PYTHON``):
    each must have a tag for any Python 3 (``py3``), for exactly that CPython (``cp313``), or for
    the stable ABI of an older one (``cp38-abi3``)."""
    major, minor = (int(part) for part in LAMBDA_PYTHON.split("."))
    found = {}
    for dist in python.glob("*.dist-info"):
        tags = [
            line.split(":", 1)[1].strip()
            for line in (dist / "WHEEL").read_text().splitlines()
            if line.startswith("Tag:")
        ]

        def runs(tag: str) -> bool:
            interpreter, abi, _platform = tag.split("-")
            if interpreter in ("py3", "py2.py3") or interpreter == f"cp{major}{minor}":
                return True
            version = re.fullmatch(rf"cp{major}(\d+)", interpreter)
            return abi == "abi3" and version is not None and int(version[1]) <= minor

        if not any(runs(tag) for tag in tags):
            found[dist.name] = tags
    return found


def too_new_for_lambda(python: Path) -> dict[str, tuple[int, int]]:
    """Wheels in a layer that need a newer glibc than Lambda's runtime has."""
    return {
        dist.name: needed
        for dist in python.glob("*.dist-info")
        if (needed := oldest_glibc(dist)) is not None and needed > LAMBDA_GLIBC
    }


@pytest.fixture(scope="session")
def host_core_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return host_layer("core", tmp_path_factory)


@pytest.fixture(scope="module")
def assembly(example_config: TidemarkConfig, tmp_path_factory: pytest.TempPathFactory) -> tuple[TidemarkStack, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(context=cdk_context(bundle=True, **{"aws:cdk:enable-asset-metadata": True}), outdir=str(outdir))
    # The repository's cache (what `cdk synth` uses): a fresh clone downloads the wheels once.
    stack = TidemarkStack(app, "Tidemark", config=example_config, layer_cache=LAYER_CACHE)
    app.synth()
    return stack, outdir


def asset_dir(stack: TidemarkStack, outdir: Path, construct_id: str) -> Path:
    template = Template.from_stack(stack).to_json()
    resource = template["Resources"][construct_id]
    return outdir / str(resource["Metadata"]["aws:asset:path"])


def test_layer_holds_the_package_and_its_dependencies_for_arm64(assembly: tuple[TidemarkStack, Path]) -> None:
    stack, outdir = assembly
    python = asset_dir(stack, outdir, logical_id(stack.core_layer)) / "python"
    assert (python / "tidemark" / "__init__.py").is_file()
    assert (python / "tidemark" / "archiver.py").is_file()
    assert not [name for name in CORE_LOCAL_ONLY if (python / "tidemark" / name).exists()]
    assert not list(python.rglob("__pycache__"))
    # every runtime requirement of pyproject.toml is installed
    requirements = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {
        r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower().replace("-", "_")
        for r in requirements
    }
    installed = {p.name.split("-")[0].lower() for p in python.glob("*.dist-info")}
    assert wanted <= installed, wanted - installed
    assert "aws_xray_sdk" in installed  # powertools' tracer extra
    # compiled wheels are the Lambda platform's, not this machine's
    (core,) = list((python / "pydantic_core").glob("_pydantic_core*.so"))
    assert core.name == "_pydantic_core.cpython-313-aarch64-linux-gnu.so"
    assert list((python / "orjson").glob("*aarch64*.so"))
    # zstd, the line formats' default codec: zstandard's C backend, without its unused CFFI one
    assert list((python / "zstandard").glob("backend_c.cpython-313-aarch64-linux-gnu.so"))
    assert not list((python / "zstandard").glob("*cffi*"))
    assert not too_new_for_lambda(python)
    assert not not_for_lambdas_python(python)  # resolved for the runtime's Python, not this machine's
    # the example's one stream writes zstd JSON lines: no formats layer
    assert stack.formats_layer is None


def test_job_code_archive_holds_both_packages_and_the_entry_point_is_the_job(
    assembly: tuple[TidemarkStack, Path],
) -> None:
    stack, outdir = assembly
    template = Template.from_stack(stack).to_json()
    assets = json.loads((outdir / "Tidemark.assets.json").read_text())["files"]
    paths = {entry["source"]["path"] for entry in assets.values()}
    code = [outdir / path for path in paths if (outdir / path / "jobs").is_dir()]
    assert len(code) == 1
    assert (code[0] / "jobs" / "aggregation" / "transforms.py").is_file()
    assert (code[0] / "tidemark" / "config" / "model.py").is_file()
    assert not (code[0] / "jobs" / "image").exists()
    assert not [name for name in CORE_LOCAL_ONLY if (code[0] / "tidemark" / name).exists()]
    scripts = [outdir / path for path in paths if path.endswith(".py")]
    assert [script.read_text() for script in scripts] == [(REPO / "jobs" / "aggregate.py").read_text()]
    assert "AWS::EMRServerless::Application" in {r["Type"] for r in template["Resources"].values()}


#: run in an isolated interpreter (-I -S: no site-packages), like Lambda with only the layer
INVOKE = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import handler

class Context:
    function_name = "tidemark-archiver-orders"
    memory_limit_in_mb = 2048
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:tidemark-archiver-orders"
    aws_request_id = "layer-test"

print("RESULT " + json.dumps(handler.lambda_handler(json.load(open(sys.argv[3])), Context())))
import pydantic, boto3
print("PATHS " + json.dumps([pydantic.__file__, boto3.__file__, handler.ARCHIVER.__class__.__module__]))
"""


def test_archiver_runs_from_the_layer_alone(
    archive: Archive, example_config: TidemarkConfig, host_core_layer: Path
) -> None:
    """The layer, built the same way for this machine's platform, is all the handler needs (a
    JSON lines stream: no formats layer)."""
    layer = host_core_layer.parent
    event = REPO / "events" / "msk-orders.json"
    env = {
        "PATH": os.environ["PATH"],
        **archive.env(),
        "TIDEMARK_CONFIG_JSON": example_config.runtime_json(),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_TRACE_DISABLED": "1",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            INVOKE,
            str(layer / "python"),
            str(REPO / "functions" / "archiver"),
            str(event),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if line.startswith(("RESULT ", "PATHS ")))
    response = json.loads(lines["RESULT"])
    records = sum(len(batch) for batch in json.loads(event.read_text())["records"].values())
    assert response["status"] == "ok"
    assert response["streams"]["orders"]["records_in"] == records
    assert all(path.startswith(str(layer)) for path in json.loads(lines["PATHS"])[:2])
    # the batch is staged and accepted: the ledger holds the partition's high-water mark
    assert archive.dynamodb.scan(TableName=archive.table)["Count"] > 0

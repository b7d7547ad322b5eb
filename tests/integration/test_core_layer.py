"""The core layer and the job's code archive, bundled for real (pip from PyPI, no Docker)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.assets import CORE_LOCAL_ONLY, ShippedPackage
from stacks.layer import PipLayerBundling, project_requirements
from stacks.tidemark_stack import TidemarkStack
from tests.conftest import Archive
from tests.support.cdk import REPO, cdk_context, logical_id
from tidemark.config import TidemarkConfig


@pytest.fixture(scope="module")
def assembly(example_config: TidemarkConfig, tmp_path_factory: pytest.TempPathFactory) -> tuple[TidemarkStack, Path]:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(context=cdk_context(bundle=True, **{"aws:cdk:enable-asset-metadata": True}), outdir=str(outdir))
    # The repository's cache (what `cdk synth` uses): a fresh clone downloads the wheels once.
    stack = TidemarkStack(app, "Tidemark", config=example_config, layer_cache=REPO / ".cache" / "layer")
    app.synth()
    return stack, outdir


def asset_dir(stack: TidemarkStack, outdir: Path, construct_id: str) -> Path:
    template = Template.from_stack(stack).to_json()
    resource = template["Resources"][construct_id]
    return outdir / resource["Metadata"]["aws:asset:path"]


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
    assert core.name == "_pydantic_core.cpython-311-aarch64-linux-gnu.so"
    assert list((python / "orjson").glob("*aarch64*.so"))


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


def test_archiver_runs_from_the_layer_alone(archive: Archive, example_config: TidemarkConfig, tmp_path: Path) -> None:
    """The layer, built the same way for this machine's platform, is all the handler needs."""
    bundling = PipLayerBundling(
        package=ShippedPackage(REPO / "layers" / "core" / "tidemark", leave_out=CORE_LOCAL_ONLY),
        requirements=project_requirements(REPO / "pyproject.toml"),
        cache_dir=REPO / ".cache" / "layer",
        platform=f"manylinux2014_{platform.machine()}",
    )
    layer = tmp_path / "layer"
    assert bundling.try_bundle(str(layer))
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

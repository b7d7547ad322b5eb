"""Another CDK app builds Tidemark from the installed package: the README's five-line app.

The app runs in a temporary directory, outside the repository and without it on ``sys.path``:
``stacks`` and ``tidemark`` must come from the installation. Two installations:

* the project's own (``pip install -e .``, as ``make install`` does): the constructs find their
  assets in the checkout the editable install points at;
* a wheel built from the project and unpacked into a directory of its own (``site-packages`` as a
  consumer has it): the constructs find the function code, the core package and the job next to
  ``stacks``, and the layers' requirements in the distribution's metadata.

Bundling (the layers' pip install) is skipped with ``aws:cdk:bundling-stacks = []``, as in the
other synth tests; the function code assets are still staged, so their files are checked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cdk import BUNDLING_STACKS, REPO

#: the README's consumer app, verbatim
CONSUMER_APP = """\
from aws_cdk import App, Stack
from stacks import TidemarkArchive
from tidemark.config import load_config
app = App(); stack = Stack(app, "MyData")
TidemarkArchive(stack, "Archive", config=load_config("tidemark.yaml")); app.synth()
"""

EXPECTED_TYPES = {
    "AWS::Lambda::EventSourceMapping",
    "AWS::EFS::AccessPoint",
    "AWS::StepFunctions::StateMachine",
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
    "AWS::EMRServerless::Application",
    "AWS::CloudWatch::Dashboard",
    "AWS::Lambda::LayerVersion",
}


def _environment(tmp_path: Path, pythonpath: Path | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CDK_", "PYTHON"))}
    env.update(
        CDK_CONTEXT_JSON=json.dumps({BUNDLING_STACKS: []}),
        CDK_OUTDIR=str(tmp_path / "cdk.out"),
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def _run(args: list[str], tmp_path: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _consumer(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """Write the app and a copy of the example configuration, synthesize, return the template."""
    (tmp_path / "app.py").write_text(CONSUMER_APP, encoding="utf-8")
    shutil.copy(REPO / "config" / "tidemark.yaml", tmp_path / "tidemark.yaml")
    path = _run(["-c", "import sys, json; print(json.dumps(sys.path))"], tmp_path, env)
    assert str(REPO) not in json.loads(path), "the repository must not be on the consumer's sys.path"
    _run(["app.py"], tmp_path, env)
    template: dict[str, Any] = json.loads((tmp_path / "cdk.out" / "MyData.template.json").read_text())
    return template


def _check_template(template: dict[str, Any], out: Path) -> None:
    resources = template["Resources"]
    types = {resource["Type"] for resource in resources.values()}
    assert types >= EXPECTED_TYPES
    machines = [name for name, resource in resources.items() if resource["Type"] == "AWS::StepFunctions::StateMachine"]
    assert len(machines) == 2  # the sweeper and the aggregation pipeline
    # the outputs keep the keys `tidemark audit --stack-name` reads, below a construct of any id
    assert {"ArchiveBucketName", "LedgerTableName", "SweeperStateMachineArn"} <= set(template["Outputs"])
    # the function code assets were staged from the installed functions/ (the archiver's and the sweeper's)
    handlers = {path.parent.name: path.read_text() for path in out.glob("asset.*/handler.py")}
    assert len(handlers) == 2
    assert any("def sweep_partition" in text for text in handlers.values())


def test_the_five_line_consumer_app_synthesizes_with_the_editable_install(tmp_path: Path) -> None:
    env = _environment(tmp_path)
    origin = _run(["-c", "import stacks; print(stacks.__file__)"], tmp_path, env).strip()
    assert Path(origin).parent == REPO / "stacks"  # pip install -e . points stacks at the checkout
    _check_template(_consumer(tmp_path, env), tmp_path / "cdk.out")


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel installed (no dependencies) into a directory of its own."""
    wheels, target = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("site-packages")
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("layers/core/tidemark", "jobs", "stacks", "functions"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    built = subprocess.run(
        [*pip, "wheel", str(source), "--no-deps", "-w", str(wheels)], capture_output=True, text=True, check=False
    )
    # pip fetches setuptools and wheel (the build backend) from PyPI for the isolated build
    assert built.returncode == 0, f"cannot build the project's wheel: {built.stderr.strip()[-500:]}"
    (wheel,) = wheels.glob("tidemark-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
    return target


def test_the_consumer_app_synthesizes_from_an_installed_wheel(tmp_path: Path, installed_wheel: Path) -> None:
    env = _environment(tmp_path, pythonpath=installed_wheel)
    where = _run(
        ["-c", "from stacks.paths import ProjectSources as P; s = P.locate(); print(s.pyproject, s.functions)"],
        tmp_path,
        env,
    ).split()
    assert where == ["None", str(installed_wheel / "functions")]  # the installed layout, no checkout
    _check_template(_consumer(tmp_path, env), tmp_path / "cdk.out")

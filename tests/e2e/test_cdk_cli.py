"""`npx cdk synth` with the CLI pinned in package.json: what a user runs before `cdk deploy`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.cdk import REPO

CLI = REPO / "node_modules" / ".bin" / "cdk"


def cdk(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    assert CLI.is_file(), "the pinned CDK CLI is missing: run `make install` (npm ci)"
    # jsii's end-of-life banner names the Node major versions it stays quiet for (as the Makefile)
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true", "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    for name in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION"):
        env.pop(name, None)
    return subprocess.run(
        [str(CLI), *args, "--no-notices", "--no-version-reporting"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_pinned_cli_is_the_one_package_json_names() -> None:
    pinned = json.loads((REPO / "package.json").read_text())["devDependencies"]["aws-cdk"]
    result = cdk("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == pinned


def test_cdk_synth_writes_the_stack_without_docker(tmp_path: Path) -> None:
    out = tmp_path / "cdk.out"
    result = cdk("synth", "--quiet", "--output", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((out / "Tidemark.template.json").read_text())
    types = {resource["Type"] for resource in template["Resources"].values()}
    assert {
        "AWS::Lambda::EventSourceMapping",
        "AWS::EFS::AccessPoint",
        "AWS::StepFunctions::StateMachine",
        "AWS::EMRServerless::Application",
        "AWS::CloudWatch::Dashboard",
    } <= types
    assert shutil.which("docker") is None or "docker" not in result.stderr.lower()
    assert "end-of-life" not in result.stderr  # the banner is silenced for the Node these machines run
    # cdk-nag's report: every AwsSolutions rule either passed, was not relevant, or is suppressed
    report = (out / "AwsSolutions--Tidemark-NagReport.csv").read_text().splitlines()
    assert report and not [line for line in report[1:] if ',"Non-Compliant",' in line]


def test_cdk_synth_fails_on_a_config_error_naming_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "config" / "tidemark.yaml").read_text())
    data["streams"][0]["flush"]["max_age"] = "1m"
    config = tmp_path / "broken.yaml"
    config.write_text(yaml.safe_dump(data))
    result = cdk("synth", "--quiet", "--output", str(tmp_path / "out"), "-c", f"config={config}")
    assert result.returncode != 0
    assert "tidemark: invalid configuration:" in result.stderr
    assert "streams[0].flush.max_age" in result.stderr
    assert "Traceback" not in result.stderr

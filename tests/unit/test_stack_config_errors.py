"""A wrong configuration fails synth with a message that names the field."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import app as cdk_app
from tests.support.cdk import REPO, cdk_context
from tidemark.exceptions import ConfigError

EXAMPLE = yaml.safe_load((REPO / "config" / "tidemark.yaml").read_text(encoding="utf-8"))

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return edit


CASES: list[tuple[str, Edit, str]] = [
    ("unknown top-level field", _set("networks", {}), r"networks: unknown field"),
    ("unknown nested field", _set("streams.0.archiver.memory", 512), r"streams\[0\]\.archiver\.memory: unknown field"),
    (
        "bad cluster ARN",
        _set("streams.0.source.cluster_arn", "arn:aws:kafka:us-east-1:123:cluster/x"),
        r"streams\[0\]\.source\.cluster_arn: String should match pattern",
    ),
    (
        "flush below the sweeper interval",
        _set("streams.0.flush.max_age", "1m"),
        r"streams\[0\]\.flush\.max_age \(0:01:00\)",
    ),
    (
        "archiver timeout at the ESM limit",
        _set("streams.0.archiver.timeout", "14m"),
        r"streams\[0\]\.archiver\.timeout: .*below 14m",
    ),
    (
        "retries without provisioned mode",
        _set("streams.0.archiver.retry_attempts", 3),
        r"streams\[0\]\.archiver: retry_attempts needs provisioned_pollers",
    ),
    (
        "fractional batching window",
        _set("streams.0.source.batching_window", "1500ms"),
        r"streams\[0\]\.source\.batching_window",
    ),
    (
        "SASL/SCRAM on MSK from a secret MSK cannot read",
        _set(
            "streams.0.source.auth",
            {
                "mechanism": "sasl_scram_512",
                "secret_arn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:kafka-AbCdEf",
            },
        ),
        r"streams\[0\]\.source: .*secrets named AmazonMSK_",
    ),
    ("image missing", _set("pipeline.image_uri", None), r"pipeline\.image_uri is required"),
    ("bad image URI", _set("pipeline.image_uri", "docker.io/tidemark:1"), r"pipeline\.image_uri: String should match"),
    (
        "image by tag alone",
        _set("pipeline.image_uri", "123456789012.dkr.ecr.us-east-1.amazonaws.com/tidemark-spark:0.1.0"),
        r"pipeline\.image_uri: String should match",
    ),
    ("not Spark 3.5", _set("pipeline.release_label", "emr-6.15.0"), r"pipeline\.release_label: String should match"),
    (
        "job outlasting its schedule",
        _set("pipeline.job_timeout", "2h"),
        r"pipeline: .*job_timeout .* must be shorter than schedule",
    ),
    (
        "early infrequent-access transition",
        _set("archive.transitions", [{"storage_class": "STANDARD_IA", "after": "7d"}]),
        r"archive\.transitions\[0\]: .*STANDARD_IA after 30d",
    ),
    (
        "subnets without a VPC",
        _set("network.subnet_ids", ["subnet-0aaaaaaaaaaaaaaa1"]),
        r"network: subnet_ids needs vpc_id",
    ),
    ("bad CIDR", _set("network.cidr", "10.0.0.0/8"), r"network\.cidr: .*/16 to /24"),
    (
        "existing VPC without an environment",
        _set("network.vpc_id", "vpc-0123456789abcdef0"),
        r"network\.vpc_id: looking up",
    ),
    ("bad alarm address", _set("alarms.emails", ["oncall"]), r"alarms\.emails: .*not an email"),
]


def write(tmp_path: Path, edit: Edit) -> Path:
    data = copy.deepcopy(EXAMPLE)
    edit(data)
    path = tmp_path / "tidemark.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(("edit", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_config_error_fails_synth_naming_the_field(tmp_path: Path, edit: Edit, message: str) -> None:
    path = write(tmp_path, edit)
    with pytest.MonkeyPatch.context() as patch:
        for name in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION"):  # as on a machine without credentials
            patch.delitem(os.environ, name, raising=False)
        with pytest.raises(ConfigError, match=message):
            cdk_app.build_app(context=cdk_context(config=str(path)))

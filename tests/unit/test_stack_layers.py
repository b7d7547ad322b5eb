"""Which functions run on the formats layer: only those rendering a stream's Parquet, Avro or CSV
objects (the stream's archiver and the sweeper's SweepPartition); every one on the core layer,
which holds zstd (the line formats' default codec).

Synthesized with bundling skipped (tests.support.cdk): no pip, no network. Building the layers
for real is tests/integration/test_core_layer.py's and test_formats_layer.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from stacks.functions import Placement
from stacks.grants import ArchiveAccess
from stacks.layer import CORE_SLIM, FORMATS_SLIM, needs_format_layer, project_requirements, slimmed_away
from stacks.network import NetworkConstruct
from stacks.staging import StagingConstruct
from stacks.storage import StorageConstruct
from stacks.sweeper import SweeperConstruct
from stacks.tidemark_stack import TidemarkStack
from tests.support.cdk import REPO, cdk_context, logical_id, synth_stack, with_changes
from tidemark.config import StreamConfig, TidemarkConfig
from tidemark.exceptions import ConfigError


def stream(config: TidemarkConfig, name: str, fmt: dict[str, Any]) -> dict[str, Any]:
    """The example's stream as ``name`` (its own topic) writing ``fmt``."""
    data: dict[str, Any] = json.loads(config.model_dump_json())["streams"][0]
    data["name"] = name
    data["source"]["topic"] = name
    data["format"] = fmt
    return data


def layers_of(template: Template, fn: lambda_.IFunction) -> list[Any]:
    layers: list[Any] = template.to_json()["Resources"][logical_id(fn)]["Properties"]["Layers"]
    return layers


def synth(config: TidemarkConfig, cache: Path) -> tuple[TidemarkStack, Template]:
    return synth_stack(config, nag=False, layer_cache=cache)


@pytest.mark.parametrize(
    ("fmt", "needs"),
    [
        ({"type": "jsonl"}, False),
        ({"type": "jsonl", "compression": "none"}, False),
        ({"type": "text", "compression": "gzip"}, False),
        ({"type": "bytes"}, False),
        ({"type": "jsonl", "compression": "zstd"}, False),
        ({"type": "bytes", "compression": "zstd"}, False),
        ({"type": "text", "compression": "zstd", "zstd_level": 19}, False),
        ({"type": "csv"}, True),
        ({"type": "avro", "compression": "zstandard"}, True),
        ({"type": "parquet"}, True),
        ({"type": "parquet", "compression": "gzip"}, True),
        ({"type": "avro", "compression": "null"}, True),
        ({"type": "csv", "compression": "none"}, True),
    ],
)
def test_a_stream_needs_the_formats_layer_for_parquet_avro_and_csv_not_zstd(
    example_config: TidemarkConfig, fmt: dict[str, Any], needs: bool
) -> None:
    data = {**stream(example_config, "s", fmt), "aggregations": []}  # text keeps no offsets to aggregate on
    assert needs_format_layer(StreamConfig.model_validate(data)) is needs


def test_a_stream_moving_off_parquet_can_keep_the_formats_layer(example_config: TidemarkConfig) -> None:
    """Buffers staged as Parquet are flushed as Parquet after the switch: the layer stays."""
    data = {**stream(example_config, "s", {"type": "jsonl"}), "aggregations": []}
    assert needs_format_layer(StreamConfig.model_validate(data)) is False
    data["archiver"] = {**data.get("archiver", {}), "formats_layer": "always"}
    assert needs_format_layer(StreamConfig.model_validate(data)) is True


def test_json_lines_only_keep_the_core_layer_and_no_formats_layer_is_built(
    example_config: TidemarkConfig, tmp_path: Path
) -> None:
    stack, template = synth(example_config, tmp_path / "cache")
    assert stack.formats_layer is None
    template.resource_count_is("AWS::Lambda::LayerVersion", 1)
    core = {"Ref": logical_id(stack.core_layer)}
    assert layers_of(template, stack.archiver.functions["orders"]) == [core]
    assert layers_of(template, stack.sweeper.functions.sweep_partition) == [core]
    assert not (tmp_path / "cache").exists()  # nothing was installed


def test_a_parquet_stream_and_the_sweeper_run_on_both_layers(example_config: TidemarkConfig, tmp_path: Path) -> None:
    config = with_changes(example_config, streams=[stream(example_config, "orders", {"type": "parquet"})])
    stack, template = synth(config, tmp_path / "cache")
    assert stack.formats_layer is not None
    core, formats = {"Ref": logical_id(stack.core_layer)}, {"Ref": logical_id(stack.formats_layer)}
    assert layers_of(template, stack.archiver.functions["orders"]) == [core, formats]
    sweeper = stack.sweeper.functions
    assert layers_of(template, sweeper.sweep_partition) == [core, formats]  # renders idle flushes
    for fn in (sweeper.list_partitions, sweeper.reconcile, sweeper.complete_hours):
        assert layers_of(template, fn) == [core]  # list, head and record: no rendering
    layer = template.to_json()["Resources"][logical_id(stack.formats_layer)]["Properties"]
    assert (layer["CompatibleRuntimes"], layer["CompatibleArchitectures"]) == (["python3.13"], ["arm64"])
    assert layer["Description"].startswith("tidemark object formats (Parquet, Avro, CSV): pyarrow, fastavro, cramjam")
    assert "manylinux2014_aarch64" in layer["Description"]
    assert len(layer["Description"]) <= 256  # Lambda's limit
    assert not (tmp_path / "cache").exists()  # bundling skipped: no pip


def test_a_json_lines_stream_next_to_a_parquet_stream_keeps_one_layer(
    example_config: TidemarkConfig, tmp_path: Path
) -> None:
    config = with_changes(
        example_config,
        streams=[
            stream(example_config, "orders", {"type": "jsonl", "compression": "gzip"}),
            stream(example_config, "clicks", {"type": "parquet", "compression": "zstd"}),
        ],
    )
    stack, template = synth(config, tmp_path / "cache")
    assert stack.formats_layer is not None
    core, formats = {"Ref": logical_id(stack.core_layer)}, {"Ref": logical_id(stack.formats_layer)}
    template.resource_count_is("AWS::Lambda::LayerVersion", 2)
    assert layers_of(template, stack.archiver.functions["orders"]) == [core]
    assert layers_of(template, stack.archiver.functions["clicks"]) == [core, formats]
    assert layers_of(template, stack.sweeper.functions.sweep_partition) == [core, formats]


def bare_sweeper(config: TidemarkConfig, *, formats: bool) -> tuple[SweeperConstruct, Template, list[str]]:
    """The sweeper in a bare stack (as tests/unit/test_sweeper_stack.py builds it)."""
    stack = Stack(App(context=cdk_context()), "Test")
    storage = StorageConstruct(stack, "Storage", config=config)
    network = NetworkConstruct(stack, "Network", settings=config.network)
    staging = StagingConstruct(stack, "Staging", vpc=network.vpc, subnets=network.subnets)
    core = lambda_.LayerVersion(stack, "Core", code=lambda_.Code.from_asset(str(REPO / "layers" / "core")))
    extra = (
        lambda_.LayerVersion(stack, "Formats", code=lambda_.Code.from_asset(str(REPO / "layers"))) if formats else None
    )
    sweeper = SweeperConstruct(
        stack,
        "Sweeper",
        config=config,
        code_dir=REPO / "functions" / "sweeper",
        layer=core,
        formats_layer=extra,
        access=ArchiveAccess(storage.bucket, storage.encryption_key),
        ledger_table=storage.ledger_table,
        environment={"TIDEMARK_STAGING_ROOT": "/mnt/staging"},
        placement=Placement(
            vpc=network.vpc,
            subnets=network.subnets,
            security_group=network.function_security_group,
            filesystem=staging.mount,
        ),
    )
    return sweeper, Template.from_stack(stack), [logical_id(core), *([logical_id(extra)] if extra else [])]


def test_in_a_bare_stack_only_sweep_partition_gets_the_formats_layer(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, streams=[stream(example_config, "orders", {"type": "avro"})])
    sweeper, template, (core, formats) = bare_sweeper(config, formats=True)
    assert layers_of(template, sweeper.functions.sweep_partition) == [{"Ref": core}, {"Ref": formats}]
    assert layers_of(template, sweeper.functions.reconcile) == [{"Ref": core}]


def test_a_sweeper_rendering_csv_without_the_formats_layer_is_refused(example_config: TidemarkConfig) -> None:
    config = with_changes(example_config, streams=[stream(example_config, "orders", {"type": "csv"})])
    with pytest.raises(ConfigError, match=r"streams \['orders'\] need the formats layer"):
        bare_sweeper(config, formats=False)


@pytest.mark.parametrize(
    ("path", "gone"),
    [
        ("pyarrow/include", True),  # a directory: everything below it goes
        ("pyarrow/include/arrow/api.h", True),
        ("pyarrow/tests", True),
        ("pyarrow/lib.pyx", True),
        ("pyarrow/libarrow_flight.so.2000", True),
        ("pyarrow/_flight.cpython-311-aarch64-linux-gnu.so", True),
        ("pyarrow/libarrow_python.so", True),
        ("pyarrow/libarrow_python.so.2000.0.0", True),
        # what the formats load stays
        ("pyarrow/libarrow_python.so.2000", False),
        ("pyarrow/libarrow.so.2000", False),
        ("pyarrow/libarrow_substrait.so.2000", False),  # every pyarrow extension links it
        ("pyarrow/lib.cpython-311-aarch64-linux-gnu.so", False),
        ("pyarrow/_parquet.cpython-311-aarch64-linux-gnu.so", False),
        ("pyarrow/_csv.cpython-311-aarch64-linux-gnu.so", False),
        ("pyarrow/parquet/core.py", False),
        ("fastavro/_write.cpython-311-aarch64-linux-gnu.so", False),
        ("cramjam/cramjam.cpython-311-aarch64-linux-gnu.so", False),
    ],
)
def test_slimming_leaves_out_only_what_the_formats_never_load(path: str, gone: bool) -> None:
    assert slimmed_away(path, FORMATS_SLIM) is gone


@pytest.mark.parametrize(
    ("path", "gone"),
    [
        ("zstandard/_cffi.cpython-311-aarch64-linux-gnu.so", True),
        ("zstandard/backend_cffi.py", True),
        ("zstandard/backend_c.cpython-311-aarch64-linux-gnu.so", False),
        ("zstandard/__init__.py", False),
        ("orjson/orjson.cpython-311-aarch64-linux-gnu.so", False),
        ("pydantic_core/_pydantic_core.cpython-311-aarch64-linux-gnu.so", False),
    ],
)
def test_the_core_layer_leaves_out_only_zstandards_unused_cffi_backend(path: str, gone: bool) -> None:
    assert slimmed_away(path, CORE_SLIM) is gone


def test_zstandard_is_the_core_layers_and_not_the_formats_layers() -> None:
    """Lambda extracts every layer into /opt: one package in both would be two copies, and zstd
    (the line formats' default) must not need the formats layer."""
    names = {
        name: {
            requirement.split(">")[0].split("<")[0]
            for requirement in project_requirements(REPO / "pyproject.toml", extra)
        }
        for name, extra in (("core", None), ("formats", "formats"))
    }
    assert "zstandard" in names["core"]
    assert "zstandard" not in names["formats"]

"""The formats layer, bundled for real (pip from PyPI, no Docker): small enough, and enough.

* Every function of a stack with a Parquet stream fits Lambda's 250 MB unzipped limit (its code
  plus its layers, measured in the synthesized assembly), with headroom.
* The slimmed layer, built for this machine's platform, runs Parquet, CSV and Avro (snappy, and
  zstandard with the core layer's zstandard) next to the core layer alone, in an interpreter
  without site-packages -- the libraries themselves, and every format and codec through
  tidemark's own writers (the layer holds the pyarrow Lambda can run, possibly older than the dev
  venv's).
* Without the formats layer, the line formats -- zstd included -- never import its libraries.

Each layer is downloaded at most once (the repository's cache, ``.cache/layer``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.layer import LAMBDA_UNZIPPED_LIMIT, formats_bundling, tree_size
from stacks.tidemark_stack import TidemarkStack
from tests.integration.test_core_layer import (
    HOST_PLATFORM,
    LAYER_CACHE,
    host_layer,
    not_for_lambdas_python,
    too_new_for_lambda,
)
from tests.support.cdk import REPO, cdk_context, logical_id, with_changes
from tidemark.config import TidemarkConfig

#: what a function's code and layers must leave free below Lambda's limit (the check that warns
#: before a dependency upgrade breaks the deployment)
HEADROOM = 25 * 1024 * 1024
MB = 1024 * 1024


@pytest.fixture(scope="module")
def assembly(example_config: TidemarkConfig, tmp_path_factory: pytest.TempPathFactory) -> tuple[TidemarkStack, Path]:
    """The example's JSON lines stream next to a Parquet stream, synthesized with the real layers."""
    orders: dict[str, Any] = json.loads(example_config.model_dump_json())["streams"][0]
    clicks = {**orders, "name": "clicks", "format": {"type": "parquet"}, "aggregations": []}
    clicks["source"] = {**orders["source"], "topic": "clicks"}
    config = with_changes(example_config, streams=[orders, clicks])
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = App(context=cdk_context(bundle=True, **{"aws:cdk:enable-asset-metadata": True}), outdir=str(outdir))
    stack = TidemarkStack(app, "Tidemark", config=config, layer_cache=LAYER_CACHE, nag=False)
    app.synth()
    return stack, outdir


def asset_path(resource: dict[str, Any], outdir: Path) -> Path:
    return outdir / str(resource["Metadata"]["aws:asset:path"])


def test_every_function_fits_lambdas_unzipped_limit_with_headroom(
    assembly: tuple[TidemarkStack, Path], record_property: Any
) -> None:
    stack, outdir = assembly
    resources = Template.from_stack(stack).to_json()["Resources"]
    sizes: dict[str, dict[str, int]] = {}
    sweeper = stack.sweeper.functions
    functions = {
        **{f"archiver {name}": archiver for name, archiver in stack.archiver.functions.items()},
        "sweeper sweep_partition": sweeper.sweep_partition,
        "sweeper list_partitions": sweeper.list_partitions,
        "sweeper reconcile": sweeper.reconcile,
        "sweeper complete_hours": sweeper.complete_hours,
    }
    for construct_id, fn in functions.items():
        resource = resources[logical_id(fn)]
        parts = {"code": tree_size(asset_path(resource, outdir))}
        for layer in resource["Properties"]["Layers"]:
            parts[layer["Ref"]] = tree_size(asset_path(resources[layer["Ref"]], outdir))
        sizes[construct_id] = {**parts, "total": sum(parts.values())}
    report = json.dumps(
        {
            name: {part: f"{size:,} B ({size / MB:.1f} MiB)" for part, size in parts.items()}
            for name, parts in sizes.items()
        },
        indent=1,
    )
    record_property("unzipped_sizes", report)
    print(f"unzipped sizes (limit {LAMBDA_UNZIPPED_LIMIT / MB:.0f} MiB):\n{report}")
    # the Parquet stream's archiver and SweepPartition carry both layers; the others only the core
    assert len(sizes["archiver clicks"]) == len(sizes["sweeper sweep_partition"]) == 4
    assert len(sizes["archiver orders"]) == len(sizes["sweeper reconcile"]) == 3
    over = {name: parts["total"] for name, parts in sizes.items() if parts["total"] > LAMBDA_UNZIPPED_LIMIT}
    assert not over, f"over Lambda's {LAMBDA_UNZIPPED_LIMIT:,} bytes unzipped: {over}\n{report}"
    tight = {name: parts["total"] for name, parts in sizes.items() if parts["total"] > LAMBDA_UNZIPPED_LIMIT - HEADROOM}
    assert not tight, f"less than {HEADROOM / MB:.0f} MiB below Lambda's limit: {tight}\n{report}"


def test_the_formats_layer_is_slimmed_for_arm64(assembly: tuple[TidemarkStack, Path], record_property: Any) -> None:
    stack, outdir = assembly
    assert stack.formats_layer is not None
    resources = Template.from_stack(stack).to_json()["Resources"]
    python = asset_path(resources[logical_id(stack.formats_layer)], outdir) / "python"
    core = asset_path(resources[logical_id(stack.core_layer)], outdir) / "python"
    installed = formats_bundling(REPO, LAYER_CACHE).dependencies()  # the cached install, before slimming
    before, after = tree_size(installed), tree_size(python)
    record_property("formats_layer_bytes", {"before": before, "after": after, "core": tree_size(core)})
    print(f"formats layer: {before / MB:.1f} MiB installed, {after / MB:.1f} MiB slimmed")
    assert after < before - 30 * MB  # ~36 MiB left out (pyarrow 20)
    pyarrow = python / "pyarrow"
    assert (pyarrow / "lib.cpython-313-aarch64-linux-gnu.so").is_file()
    assert list(pyarrow.glob("_parquet.cpython-313-aarch64-linux-gnu.so"))
    assert list(pyarrow.glob("libarrow.so.*")) and list(pyarrow.glob("libparquet.so.*"))
    assert not (python / "zstandard").exists()  # the core layer's
    assert list((python / "fastavro").glob("_write.cpython-313-aarch64-linux-gnu.so"))
    assert list((python / "cramjam").glob("cramjam.cpython-313-aarch64-linux-gnu.so"))
    for gone in ("include", "includes", "src", "tests", "flight.py", "substrait.py"):
        assert not (pyarrow / gone).exists(), gone
    for pattern in ("libarrow_flight*", "_flight*", "_substrait*", "*.pyx", "*.pxd", "*.pxi", "*.h", "*.cc"):
        assert not list(python.rglob(pattern)), pattern
    assert not (python / "bin").exists() and not list(python.rglob("__pycache__"))
    # every wheel runs on Lambda's oldest glibc (Amazon Linux 2's 2.26), and on the runtime's Python
    assert not too_new_for_lambda(python)
    assert not not_for_lambdas_python(python)
    assert "pyarrow-20." in " ".join(p.name for p in python.glob("pyarrow-*.dist-info"))
    # Lambda extracts every layer into /opt: the two must not hold the same paths
    assert not {p.name for p in python.iterdir()} & {p.name for p in core.iterdir()}


#: run in an isolated interpreter (-I -S -B: no site-packages, no bytecode written), like Lambda
#: with the two layers only; argv: the core layer's python/, the formats layer's python/
ROUND_TRIPS = """
import io, json, pkgutil, sys, tempfile
sys.path[:0] = sys.argv[1:3]
import pyarrow as pa, pyarrow.parquet as pq, pyarrow.csv as pcsv, fastavro, zstandard, cramjam

import tidemark.formats
for module in pkgutil.walk_packages(tidemark.formats.__path__, "tidemark.formats."):
    __import__(module.name)  # the formats' own code imports from the two layers alone

table = pa.table({"offset": pa.array([1, 2, 3], pa.int64()), "value": ["a", None, "c"]})
for codec in ("snappy", "zstd", "gzip", "none"):
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=codec)
    assert pq.read_table(io.BytesIO(sink.getvalue())).equals(table), codec
    assert pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.num_rows == 3
with tempfile.NamedTemporaryFile(suffix=".parquet") as file:  # read_table over a path: datasets
    pq.write_table(table, file.name)
    assert pq.read_table(file.name).equals(table)
sink = io.BytesIO()
pcsv.write_csv(table, sink)
assert pcsv.read_csv(io.BytesIO(sink.getvalue())).column("offset").to_pylist() == [1, 2, 3]

# fastavro >= 1.13 wants backports.zstd for Avro's zstandard codec; tidemark.formats.avro
# registers one over the zstandard package instead (imported above)
schema = {
    "type": "record",
    "name": "r",
    "fields": [{"name": "offset", "type": "long"}, {"name": "v", "type": "string"}],
}
records = [{"offset": i, "v": "x" * i} for i in range(100)]
for codec in ("snappy", "zstandard", "deflate", "null"):
    sink = io.BytesIO()
    fastavro.writer(sink, schema, records, codec=codec)
    reader = fastavro.reader(io.BytesIO(sink.getvalue()))
    assert reader.codec == codec and list(reader) == records, codec

frame = zstandard.ZstdCompressor(level=3).compress(b"tidemark" * 1000)
assert frame[:4] == b"\\x28\\xb5\\x2f\\xfd"  # a zstd frame
assert zstandard.ZstdDecompressor().decompress(frame) == b"tidemark" * 1000
assert zstandard.backend == "cext"

names = ("pyarrow", "fastavro", "zstandard", "cramjam", "tidemark")
print("MODULES " + json.dumps({name: sys.modules[name].__file__ for name in names}))
"""


def run_isolated(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", script, *args],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def host_layers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The core and formats layers' ``python/``, built as the stack builds them for this machine."""
    return host_layer("core", tmp_path_factory), host_layer("formats", tmp_path_factory)


def test_the_slimmed_layer_round_trips_parquet_csv_avro_and_zstd(host_layers: tuple[Path, Path]) -> None:
    core, formats = host_layers
    result = run_isolated(ROUND_TRIPS, str(core), str(formats))
    assert result.returncode == 0, f"{HOST_PLATFORM}: {result.stderr[-3000:]}"
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("MODULES ")]
    modules = json.loads(line.removeprefix("MODULES "))
    assert modules["tidemark"].startswith(str(core)) and modules["zstandard"].startswith(str(core))
    assert all(modules[name].startswith(str(formats)) for name in ("pyarrow", "fastavro", "cramjam"))


#: every format and codec through tidemark's own writers and readers, on the layer's pyarrow
#: (the dev venv may have a newer one); argv: the core layer's python/, the formats layer's python/
RENDERS = """
import io, json, sys
sys.path[:0] = sys.argv[1:3]
from tidemark.config.model import COMPRESSIONS
from tidemark.formats import RenderContext, ValueColumn, format_for
from tidemark.staging.frames import RAW, Frame

schema = ValueColumn.parse_all("id:long,name:string,price:double,gift:boolean,note:string?")
frames = [
    Frame(RAW, 100 + i, 1_795_248_000_000 + i, 1_795_248_000_000 + i, f"k{i}".encode(),
          json.dumps({"id": i, "name": f"n{i}", "price": i / 4, "gift": i % 2 == 0}).encode(),
          (("source", b"web"),) if i % 2 else ())
    for i in range(50)
]
rendered = []
for kind, codecs in COMPRESSIONS.items():
    for codec in codecs:
        for typed in ((), schema) if kind in ("parquet", "avro") else ((),):
            context = RenderContext("orders", 3, value_schema=typed, object_key=f"raw/orders/{kind}-{codec}")
            fmt = format_for(kind, codec)
            out = io.BytesIO()
            assert fmt.write(iter(frames), context, out) == len(frames), (kind, codec)
            back = list(fmt.read(out.getvalue(), context))
            assert len(back) == len(frames), (kind, codec, len(back))
            offsets = [record.offset for record in back]
            assert offsets == [f.offset for f in frames] or set(offsets) == {None}, (kind, codec, offsets[:3])
            rendered.append(f"{kind}/{codec}{'/typed' if typed else ''}")
print("RENDERED " + json.dumps(rendered))
"""


def test_every_format_renders_and_reads_back_with_the_layers_libraries(host_layers: tuple[Path, Path]) -> None:
    core, formats = host_layers
    result = run_isolated(RENDERS, str(core), str(formats))
    assert result.returncode == 0, f"{HOST_PLATFORM}: {result.stderr[-3000:]}"
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("RENDERED ")]
    rendered = json.loads(line.removeprefix("RENDERED "))
    assert {"parquet/zstd/typed", "avro/zstandard/typed", "avro/snappy", "csv/zstd", "jsonl/zstd"} <= set(rendered)


CORE_ONLY = """
import io, sys
sys.path[:0] = [sys.argv[1]]
from tidemark.formats import RenderContext, format_for
from tidemark.staging.frames import RAW, Frame
frames = [Frame(RAW, 7, 1, 2, b"k", b'{"a":1}', (("h", b"v"),))]
for kind in ("jsonl", "text", "bytes"):
    for codec in ("zstd", "gzip", "none"):
        out = io.BytesIO()
        assert format_for(kind, codec, zstd_level=1).write(frames, RenderContext("t", 0), out) == 1
        assert len(list(format_for(kind, codec).read(out.getvalue(), RenderContext("t", 0)))) == 1
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("pyarrow", "fastavro", "cramjam"))
assert not loaded, loaded
import zstandard
assert zstandard.__file__.startswith(sys.argv[1]) and zstandard.backend == "cext", zstandard.__file__
"""


def test_json_lines_need_nothing_from_the_formats_layer(host_layers: tuple[Path, Path]) -> None:
    """The functions without the formats layer (JSON lines streams, three sweeper steps) import
    ``tidemark.formats``: it must load the formats' libraries only when a format needs them, and
    zstd (the line formats' default) is the core layer's."""
    core, _ = host_layers
    result = run_isolated(CORE_ONLY, str(core))
    assert result.returncode == 0, result.stderr[-3000:]

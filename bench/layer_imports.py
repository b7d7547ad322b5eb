"""Cold-start import cost of the formats' libraries, and the layers' sizes.

Scenario
    The core and formats layers built as the stack builds them (``stacks.layer``), for this
    machine's platform (``manylinux2014_<machine>``), in a temporary directory. Each case runs in
    a fresh interpreter isolated like a Lambda function with those layers only (``-I -S``: no
    site-packages; ``-B``: no bytecode written, as ``/opt`` is read-only on Lambda and the
    layers ship none, so every run compiles what it imports, as a cold start does):

    ``baseline``     ``import tidemark.archiver``
    ``+pyarrow``     the baseline, then ``import pyarrow.parquet, pyarrow.csv``
    ``+fastavro``    the baseline, then ``import fastavro``
    ``+zstandard``   the baseline, then ``import zstandard`` (the core layer's: zstd, the line
                     formats' default codec, is imported at a stream's first flush)
    ``+all``         the baseline, then all of them

Measured
    ``import_s``: the imports' time inside the interpreter (``time.perf_counter``);
    ``import_cpu_s``: their CPU time (``time.process_time``);
    ``added_import_s``: the time of the imports after the baseline's alone (steadier than the
    difference of two totals on a busy machine);
    ``process_s``: the subprocess' wall time (interpreter start-up included). Each is the best of
    ``--runs`` (default 5) fresh subprocesses. ``ratio`` is a case's import time over the
    baseline's: ``(baseline import_s + added_import_s) / baseline import_s``.
    ``sizes`` are bytes unzipped (what Lambda's 250 MB limit counts) of the Lambda (aarch64)
    builds: the core layer, the formats layer as pip installs it and as slimmed, and the
    functions' code.

    ``--bytecode`` times with bytecode instead (``-B`` dropped, one warm-up run per case writes
    ``__pycache__`` into the scratch layers): what shipping compiled layers would save.

Output
    Progress on stderr; one JSON object on stdout. The first run on a fresh clone downloads the
    wheels into ``.cache/layer``; later runs reuse them.

Run: ``.venv/bin/python bench/layer_imports.py [--runs 5]``; ``--smoke`` (what ``make test`` runs, so
the bench cannot rot): every layer built, every case timed once, the JSON on one line.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # stacks/ (tidemark is the venv's, installed editable)

from stacks.layer import (  # noqa: E402
    LAMBDA_PLATFORM,
    LAMBDA_PYTHON,
    LAMBDA_UNZIPPED_LIMIT,
    core_bundling,
    formats_bundling,
    tree_size,
)

CASES: dict[str, tuple[str, ...]] = {
    "baseline": (),
    "+pyarrow": ("pyarrow.parquet", "pyarrow.csv"),
    "+fastavro": ("fastavro",),
    "+zstandard": ("zstandard",),
    "+all": ("pyarrow.parquet", "pyarrow.csv", "fastavro", "zstandard"),
}

#: ``--smoke``: the same builds and cases, one subprocess each
SMOKE = {"runs": 1}

#: argv: the layers' python/ directories, then the modules to import after the baseline
TIMED = """
import sys, time
sys.path[:0] = sys.argv[1:3]
start, cpu = time.perf_counter(), time.process_time()
import tidemark.archiver
after_baseline = time.perf_counter()
for name in sys.argv[3:]:
    __import__(name)
end = time.perf_counter()
print(end - start, time.process_time() - cpu, end - after_baseline)
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build(kind: str, platform_tag: str, into: Path, cache: Path) -> Path:
    # a layer for this machine is run here, by this interpreter: resolved for its Python version
    python = LAMBDA_PYTHON if platform_tag == LAMBDA_PLATFORM else f"{sys.version_info.major}.{sys.version_info.minor}"
    bundling = (core_bundling if kind == "core" else formats_bundling)(
        REPO, cache, platform=platform_tag, python_version=python
    )
    target = into / f"{kind}-{platform_tag}"
    bundling.try_bundle(str(target))
    return target / "python"


def time_case(core: Path, formats: Path, modules: tuple[str, ...], runs: int, bytecode: bool) -> dict[str, float]:
    imports, cpus, extras, processes = [], [], [], []
    for run in range(-1 if bytecode else 0, runs):
        started = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-I", "-S", *([] if bytecode else ["-B"]), "-c", TIMED, str(core), str(formats), *modules],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if result.returncode != 0:
            raise RuntimeError(f"importing {modules} failed:\n{result.stderr[-3000:]}")
        if run < 0:
            continue  # the warm-up run writes the bytecode
        wall, cpu, extra = result.stdout.strip().splitlines()[-1].split()
        imports.append(float(wall))
        cpus.append(float(cpu))
        extras.append(float(extra))
        processes.append(elapsed)
    return {
        "import_s": round(min(imports), 4),
        "import_cpu_s": round(min(cpus), 4),
        "added_import_s": round(min(extras), 4),
        "process_s": round(min(processes), 4),
    }


def code_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh subprocesses per case (the best counts)")
    parser.add_argument("--bytecode", action="store_true", help="time with bytecode written and reused")
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "layer", help="the layers' pip cache")
    parser.add_argument("--smoke", action="store_true", help="one run per case (unless given), JSON on one line")
    args = parser.parse_args(argv)
    if args.smoke:  # smaller defaults; options given still win
        parser.set_defaults(**SMOKE)
        args = parser.parse_args(argv)
    host = f"manylinux2014_{platform.machine()}"
    with tempfile.TemporaryDirectory(prefix="tidemark-layers-") as scratch:
        root = Path(scratch)
        log(f"building the layers for {host} and {LAMBDA_PLATFORM} in {root}")
        core, formats = build("core", host, root, args.cache), build("formats", host, root, args.cache)
        lambda_core = build("core", LAMBDA_PLATFORM, root, args.cache)
        lambda_formats = build("formats", LAMBDA_PLATFORM, root, args.cache)
        installed = formats_bundling(REPO, args.cache).dependencies()
        sizes = {
            "core_layer": tree_size(lambda_core),
            "formats_layer_installed": tree_size(installed),
            "formats_layer_slimmed": tree_size(lambda_formats),
            "archiver_code": code_size(REPO / "functions" / "archiver"),
            "sweeper_code": code_size(REPO / "functions" / "sweeper"),
            "limit": LAMBDA_UNZIPPED_LIMIT,
        }
        sizes["largest_function"] = (
            sizes["core_layer"] + sizes["formats_layer_slimmed"] + max(sizes["archiver_code"], sizes["sweeper_code"])
        )
        sizes["headroom"] = LAMBDA_UNZIPPED_LIMIT - sizes["largest_function"]
        pyarrow = sorted(p.name for p in lambda_formats.glob("pyarrow-*.dist-info"))
        cases: dict[str, dict[str, float]] = {}
        for name, modules in CASES.items():
            log(f"timing {name} ({args.runs} runs)")
            cases[name] = time_case(core, formats, modules, args.runs, args.bytecode)
        base = cases["baseline"]
        for case in cases.values():
            case["ratio"] = round((base["import_s"] + case["added_import_s"]) / base["import_s"], 3)
    print(
        json.dumps(
            {
                "host_platform": host,
                "python": platform.python_version(),
                "runs": args.runs,
                "bytecode": args.bytecode,
                "lambda_platform": LAMBDA_PLATFORM,
                "pyarrow": pyarrow[0].removeprefix("pyarrow-").removesuffix(".dist-info") if pyarrow else None,
                "cases": cases,
                "sizes_bytes": sizes,
            },
            indent=None if args.smoke else 2,
        )
    )


if __name__ == "__main__":
    main()

"""The Lambda layers, built without Docker: the core package, and the object formats' libraries.

CDK's usual Python bundling runs pip inside a Lambda build image, which needs Docker. Here each
asset is bundled locally instead: pip installs a requirement list from ``pyproject.toml`` (the one
list) as wheels for the Lambda platform (``--platform manylinux2014_aarch64 --only-binary=:all:``)
and the layer's own packages are copied next to them. Wheels only means no compiler runs and the
result does not depend on the building machine. The installed dependencies are cached by a hash
of the requirements and the platform, so repeated synths do not download again.

Two layers:

``CoreLayer``
    the ``tidemark`` package and ``[project].dependencies`` (zstandard among them: zstd is the
    line formats' default codec); every function has it. Slimmed (``CORE_SLIM``).
``FormatsLayer``
    ``[project.optional-dependencies].formats`` (pyarrow, fastavro, cramjam): what Parquet, Avro
    and CSV need. Attached only to the functions that render objects of a stream using one of
    them (``needs_format_layer``): pyarrow alone installs at ~170 MB, and Lambda allows 250 MB
    unzipped for a function's code and all its layers together. It is slimmed
    (``FORMATS_SLIM``): what the formats never load is left out.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.assets import CORE_LOCAL_ONLY, ShippedPackage, tree_hash
from stacks.layer_lock import lock_path
from stacks.paths import ProjectSources
from stacks.paths import project_requirements as project_requirements  # it lived here
from tidemark.config import StreamConfig
from tidemark.exceptions import ConfigError

LAMBDA_PLATFORM = "manylinux2014_aarch64"  # the functions run on arm64 (Graviton)
#: The functions' runtime: python3.13 on Amazon Linux 2023 (glibc 2.34). python3.11 (Amazon Linux
#: 2) was deprecated on 2026-06-30. Not 3.14: the formats layer's pyarrow (below) has no cp314
#: wheels. The layers' wheels are resolved for it (``--python-version``); the tests and the demo
#: run the same code on the 3.11 of these machines, with layers resolved for that.
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
LAMBDA_PYTHON = "3.13"
#: the image CDK would bundle in if local bundling ever declined (it never does)
LAMBDA_BUILD_IMAGE = "public.ecr.aws/sam/build-python3.13"
#: Lambda's limit on a function's code plus all its layers, unzipped (250 MiB)
LAMBDA_UNZIPPED_LIMIT = 262_144_000

#: Requirements the Lambda build of the formats layer adds to ``formats`` (the dev venv and EMR
#: do not get them). The layers are resolved for manylinux2014 (glibc 2.17) wheels, which every
#: Lambda Python runtime runs, and pyarrow 20 is the last release with manylinux2014 wheels for
#: aarch64 (and x86_64). pip's ``--platform manylinux2014_aarch64`` would not pick a newer one
#: anyway; the pin makes that explicit and keeps the layer a test builds for this machine
#: (``platform=manylinux2014_x86_64``) on the same pyarrow. (python3.13's Amazon Linux 2023 has
#: glibc 2.34 and would take manylinux_2_28 wheels: lifting the pin is a change of its own, with
#: the layer's size measured again.)
FORMATS_LAMBDA_PINS = ("pyarrow<21",)

#: Format types whose writers need the formats layer (jsonl, text and bytes are the core's).
FORMAT_TYPES_OF_THE_LAYER = ("parquet", "avro", "csv")

#: What the core layer leaves out (``fnmatch`` patterns over paths relative to ``python/``; a
#: directory that matches goes with everything below it): zstandard's CFFI backend. CPython
#: imports the C backend (``backend_c``) and falls back to CFFI only when that is missing.
CORE_SLIM: tuple[str, ...] = (
    "zstandard/_cffi.*",
    "zstandard/backend_cffi.py",
)

#: What the formats layer leaves out (as ``CORE_SLIM``). Each is never imported by
#: ``pyarrow.parquet``, ``pyarrow.csv`` or ``fastavro``:
#: tests/integration/test_formats_layer.py proves the slimmed layer imports and round-trips them.
#: pyarrow's ``libarrow_acero``, ``libarrow_dataset`` and ``libarrow_substrait`` stay: every
#: pyarrow extension module (``lib`` included) links them, so ``import pyarrow`` needs them.
FORMATS_SLIM: tuple[str, ...] = (
    "bin",  # console scripts (fastavro's CLI), with the building interpreter's shebang
    # headers and sources for building extensions against Arrow / Cython
    "pyarrow/include",
    "pyarrow/includes",
    "pyarrow/src",
    "*.pxd",
    "*.pyx",
    "*.pxi",
    "*.h",
    "*.hpp",
    "*.cc",
    "*.cpp",
    # test suites
    "pyarrow/tests",
    "pyarrow/_pyarrow_cpp_tests.*",
    # Arrow Flight (RPC): its own 19 MB C++ library and the bindings over it
    "pyarrow/flight.py",
    "pyarrow/_flight.*",
    "pyarrow/libarrow_flight.so*",
    "pyarrow/libarrow_python_flight.so*",
    # Substrait query plans, Gandiva, CUDA, ORC: bindings nothing here uses
    "pyarrow/substrait.py",
    "pyarrow/_substrait.*",
    "pyarrow/gandiva.*",
    "pyarrow/_gandiva.*",
    "pyarrow/cuda.py",
    "pyarrow/_cuda.*",
    "pyarrow/orc.py",
    "pyarrow/_orc.*",
    "pyarrow/_dataset_orc.*",
    # Arrow's own S3 / GCS / Azure / HDFS filesystems (objects go through boto3); pyarrow.fs
    # imports each under try/except ImportError
    "pyarrow/_s3fs.*",
    "pyarrow/_gcsfs.*",
    "pyarrow/_azurefs.*",
    "pyarrow/_hdfs.*",
    # wheels hold no symlinks: the linker names (libarrow_python.so) and full versions
    # (libarrow_python.so.2000.0.0) are copies of the soname (libarrow_python.so.2000), the only
    # name the extension modules load (their DT_NEEDED)
    "pyarrow/libarrow*.so",
    "pyarrow/libarrow*.so.*.*.*",
)


def needs_format_layer(stream: StreamConfig) -> bool:
    """Whether the stream's objects are rendered with the formats layer's libraries: Parquet
    (pyarrow), Avro (fastavro; its snappy codec is cramjam's) or CSV (pyarrow) -- or kept
    (``archiver.formats_layer: always``) while buffers of a format the stream moved off are still
    staged. zstd, whatever the format, is the core layer's (zstandard)."""
    return stream.format.type in FORMAT_TYPES_OF_THE_LAYER or stream.archiver.formats_layer == "always"


def tree_size(directory: Path) -> int:
    """Bytes of the files below ``directory``: what Lambda counts as the unzipped size."""
    return sum(path.lstat().st_size for path in directory.rglob("*") if path.is_file() and not path.is_symlink())


def slimmed_away(relative: str, patterns: Iterable[str]) -> bool:
    """Whether a path (posix, relative to the layer's ``python/``) matches a slimming pattern."""
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


def _copy_tree(source: Path, target: Path, *, leave_out: Sequence[str]) -> None:
    """Copy ``source`` into ``target`` without the cache's marker and what ``leave_out`` matches."""
    for directory, dirnames, filenames in os.walk(source):
        here = Path(directory)
        relative = here.relative_to(source)
        dirnames[:] = sorted(name for name in dirnames if not slimmed_away((relative / name).as_posix(), leave_out))
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if (relative == Path(".") and name == ".complete") or slimmed_away((relative / name).as_posix(), leave_out):
                continue
            shutil.copy2(here / name, target / relative / name)


@jsii.implements(ILocalBundling)
class PipLayerBundling:
    """Local bundling of a layer: ``python/`` with ``requirements`` installed for the Lambda
    platform, less what ``slim`` matches, plus ``packages`` (copied as they are shipped)."""

    def __init__(
        self,
        *,
        requirements: Sequence[str],
        cache_dir: Path,
        packages: Sequence[ShippedPackage] = (),
        slim: Sequence[str] = (),
        platform: str = LAMBDA_PLATFORM,
        python_version: str = LAMBDA_PYTHON,
        lock: Path | None = None,
        name: str = "layer",
    ) -> None:
        """``lock``: install exactly its wheels, by hash (``stacks/layer_lock.py``), instead of
        resolving ``requirements`` (which a host build for the tests does)."""
        self.requirements = list(requirements)
        self.lock = lock
        self.lock_text = lock.read_text(encoding="utf-8") if lock is not None else None
        self.packages = tuple(packages)
        self.slim = tuple(slim)
        # another platform and Python only for tests that run the layer on this machine
        self.platform = platform
        self.python_version = python_version
        self.name = name
        self.cache = cache_dir / hashlib.sha256("\n".join(self.dependency_key).encode()).hexdigest()[:16]

    @property
    def dependency_key(self) -> list[str]:
        """What the installed dependencies depend on: the platform, Python and the lock's content
        (every resolved version and wheel hash: a patched dependency changes it), or, without a
        lock, the requirements."""
        if self.lock_text is not None:
            return [self.platform, self.python_version, "lock:" + hashlib.sha256(self.lock_text.encode()).hexdigest()]
        return [self.platform, self.python_version, *sorted(self.requirements)]

    @property
    def asset_salt(self) -> list[str]:
        """What the layer depends on besides its packages' files: the dependencies and the slimming."""
        return [*self.dependency_key, *(f"slim:{pattern}" for pattern in self.slim)]

    def asset_hash(self) -> str:
        return tree_hash(self.packages, salt=self.asset_salt)

    def dependencies(self) -> Path:
        """The requirements installed for the platform (not slimmed): from the cache, or pip."""
        if (self.cache / ".complete").is_file():
            return self.cache
        # per process: two synths (or test sessions) building the same cache at once do not clash
        partial = self.cache.with_name(f"{self.cache.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(partial),
            "--platform",
            self.platform,
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
            "--only-binary=:all:",
            *(["--require-hashes", "--no-deps", "-r", str(self.lock)] if self.lock is not None else self.requirements),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the {self.name} failed: {' '.join(command)}\n{result.stderr.strip()}")
        (partial / ".complete").write_text("\n".join(self.requirements) + "\n", encoding="utf-8")
        try:
            partial.rename(self.cache)  # the cache only ever appears complete
        except OSError:  # another build's is there already (or an incomplete leftover: replaced)
            if not (self.cache / ".complete").is_file():
                shutil.rmtree(self.cache)
                partial.rename(self.cache)
        shutil.rmtree(partial, ignore_errors=True)
        return self.cache

    def try_bundle(self, output_dir: str, options: Any = None, **_: Any) -> bool:
        """Called by CDK at synth; returning True means no Docker fallback is needed."""
        target = Path(output_dir) / "python"
        _copy_tree(self.dependencies(), target, leave_out=self.slim)
        for package in self.packages:
            package.copy_into(target)
        return True


def layer_requirements(layer: str, root: Path | ProjectSources | None = None) -> list[str]:
    """What a layer installs: the core's ``[project].dependencies``, or the ``formats`` extra
    pinned for Lambda (:data:`FORMATS_LAMBDA_PINS`)."""
    sources = ProjectSources.locate(root)
    if layer == "core":
        return sources.requirements()
    return [*sources.requirements("formats"), *FORMATS_LAMBDA_PINS]


def _lock_for(layer: str, platform: str, python_version: str) -> Path | None:
    """The layer's lock when building for the Lambda platform and Python (a host build for the
    tests resolves the requirements for this machine instead)."""
    if (platform, python_version) != (LAMBDA_PLATFORM, LAMBDA_PYTHON):
        return None
    lock = lock_path(layer)
    if not lock.is_file():
        raise ConfigError(f"{layer} layer: {lock} is missing (make lock)")
    return lock


def core_bundling(
    root: Path | ProjectSources,
    cache_dir: Path,
    *,
    platform: str = LAMBDA_PLATFORM,
    python_version: str = LAMBDA_PYTHON,
) -> PipLayerBundling:
    """How the core layer is built (``root`` is the repository, or where the installed package is)."""
    sources = ProjectSources.locate(root)
    package_dir = sources.core_package
    if not (package_dir / "__init__.py").is_file():
        raise ConfigError(f"core layer: {package_dir} is not the tidemark package")
    return PipLayerBundling(
        requirements=layer_requirements("core", sources),
        lock=_lock_for("core", platform, python_version),
        packages=[ShippedPackage(package_dir, leave_out=CORE_LOCAL_ONLY)],
        slim=CORE_SLIM,
        cache_dir=cache_dir,
        platform=platform,
        python_version=python_version,
        name="core layer",
    )


def formats_bundling(
    root: Path | ProjectSources,
    cache_dir: Path,
    *,
    platform: str = LAMBDA_PLATFORM,
    python_version: str = LAMBDA_PYTHON,
) -> PipLayerBundling:
    """How the formats layer is built: the ``formats`` extra, pinned for Lambda, slimmed."""
    return PipLayerBundling(
        requirements=layer_requirements("formats", root),
        lock=_lock_for("formats", platform, python_version),
        slim=FORMATS_SLIM,
        cache_dir=cache_dir,
        platform=platform,
        python_version=python_version,
        name="formats layer",
    )


def _layer(scope: Construct, source: Path, bundling: PipLayerBundling, description: str) -> lambda_.LayerVersion:
    return lambda_.LayerVersion(
        scope,
        "Layer",
        code=lambda_.Code.from_asset(
            str(source),
            exclude=["**/__pycache__", "*.egg-info"],
            bundling=BundlingOptions(
                # Only used if local bundling declined; it never does (try_bundle returns True).
                image=DockerImage.from_registry(LAMBDA_BUILD_IMAGE),
                local=bundling,
            ),
            # The asset changes when the packages' source, the requirements or the slimming change.
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=bundling.asset_hash(),
        ),
        compatible_runtimes=[LAMBDA_RUNTIME],
        compatible_architectures=[lambda_.Architecture.ARM_64],
        description=description,
    )


class CoreLayer(Construct):
    """The core layer. ``root`` is the repository (``pyproject.toml`` and ``layers/core/tidemark``)
    or the sources of the installed package (``ProjectSources``)."""

    def __init__(self, scope: Construct, construct_id: str, *, root: Path | ProjectSources, cache_dir: Path) -> None:
        super().__init__(scope, construct_id)
        sources = ProjectSources.locate(root)
        self.layer = _layer(
            self,
            sources.layer_source,
            core_bundling(sources, cache_dir),
            f"tidemark core package and its dependencies ({LAMBDA_PLATFORM}, Python {LAMBDA_PYTHON})",
        )


class FormatsLayer(Construct):
    """The object formats' libraries (``formats`` extra of ``root/pyproject.toml``, or of the
    installed distribution's metadata), slimmed."""

    def __init__(self, scope: Construct, construct_id: str, *, root: Path | ProjectSources, cache_dir: Path) -> None:
        super().__init__(scope, construct_id)
        sources = ProjectSources.locate(root)
        bundling = formats_bundling(sources, cache_dir)
        names = ", ".join(_project_name(requirement) for requirement in sources.requirements("formats"))
        self.layer = _layer(
            self,
            # Bundling reads no source (the requirements come from pyproject.toml): any directory does.
            sources.formats_layer_source,
            bundling,
            f"tidemark object formats (Parquet, Avro, CSV): {names} ({', '.join(FORMATS_LAMBDA_PINS)};"
            f" {LAMBDA_PLATFORM}, Python {LAMBDA_PYTHON}), without Arrow Flight, headers, Cython sources or tests",
        )


def _project_name(requirement: str) -> str:
    """``"pyarrow>=15"`` -> ``"pyarrow"``."""
    for index, char in enumerate(requirement):
        if not (char.isalnum() or char in "-_."):
            return requirement[:index].strip()
    return requirement.strip()

"""The core package as a Lambda layer, built without Docker.

CDK's usual Python bundling runs pip inside a Lambda build image, which needs Docker. Here the
asset is bundled locally instead: pip installs the core package's dependencies (the
``[project].dependencies`` of ``pyproject.toml``, the one list) as wheels for the Lambda
platform (``--platform manylinux2014_aarch64 --only-binary=:all:``), then the ``tidemark``
package is copied next to them. Wheels only means no compiler runs and the result does not
depend on the building machine. The installed dependencies are cached by a hash of the
requirements and the platform, so repeated synths do not download again.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from stacks.assets import CORE_LOCAL_ONLY, ShippedPackage, tree_hash
from tidemark.exceptions import ConfigError

LAMBDA_PLATFORM = "manylinux2014_aarch64"  # the functions run on arm64 (Graviton)
LAMBDA_PYTHON = "3.11"


def project_requirements(pyproject: Path) -> list[str]:
    """The core package's runtime requirements, as pip requirement strings."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    requirements = data.get("project", {}).get("dependencies")
    if not isinstance(requirements, list) or not all(isinstance(item, str) for item in requirements):
        raise ConfigError(f"{pyproject}: [project].dependencies must be a list of requirement strings")
    return requirements


@jsii.implements(ILocalBundling)
class PipLayerBundling:
    """Local bundling: ``python/`` with the dependencies for the Lambda platform plus the package."""

    def __init__(
        self, *, package: ShippedPackage, requirements: list[str], cache_dir: Path, platform: str = LAMBDA_PLATFORM
    ) -> None:
        self.package = package
        self.requirements = requirements
        self.platform = platform  # another platform only for tests that run the layer on this machine
        self.cache = cache_dir / hashlib.sha256("\n".join(self.dependency_key).encode()).hexdigest()[:16]

    @property
    def dependency_key(self) -> list[str]:
        """What the installed dependencies depend on: the platform, Python and the requirements."""
        return [self.platform, LAMBDA_PYTHON, *sorted(self.requirements)]

    def _dependencies(self) -> Path:
        if (self.cache / ".complete").is_file():
            return self.cache
        partial = self.cache.with_name(self.cache.name + ".partial")
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
            LAMBDA_PYTHON,
            "--only-binary=:all:",
            *self.requirements,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building the core layer failed: {' '.join(command)}\n{result.stderr.strip()}")
        (partial / ".complete").write_text("\n".join(self.requirements) + "\n", encoding="utf-8")
        shutil.rmtree(self.cache, ignore_errors=True)
        partial.rename(self.cache)
        return self.cache

    def try_bundle(self, output_dir: str, options: Any = None, **_: Any) -> bool:
        """Called by CDK at synth; returning True means no Docker fallback is needed."""
        target = Path(output_dir) / "python"
        shutil.copytree(self._dependencies(), target, ignore=shutil.ignore_patterns(".complete"), dirs_exist_ok=True)
        self.package.copy_into(target)
        return True


class CoreLayer(Construct):
    """The layer. ``root`` is the repository (``pyproject.toml`` and ``layers/core/tidemark``)."""

    def __init__(self, scope: Construct, construct_id: str, *, root: Path, cache_dir: Path) -> None:
        super().__init__(scope, construct_id)
        package_dir = root / "layers" / "core" / "tidemark"
        if not (package_dir / "__init__.py").is_file():
            raise ConfigError(f"core layer: {package_dir} is not the tidemark package")
        package = ShippedPackage(package_dir, leave_out=CORE_LOCAL_ONLY)
        bundling = PipLayerBundling(
            package=package, requirements=project_requirements(root / "pyproject.toml"), cache_dir=cache_dir
        )
        self.layer = lambda_.LayerVersion(
            self,
            "Layer",
            code=lambda_.Code.from_asset(
                str(root / "layers" / "core"),
                exclude=["**/__pycache__", "*.egg-info"],
                bundling=BundlingOptions(
                    # Only used if local bundling declined; it never does (try_bundle returns True).
                    image=DockerImage.from_registry("public.ecr.aws/sam/build-python3.11"),
                    local=bundling,
                ),
                # The asset changes when the package source or the requirements change.
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=tree_hash([package], salt=bundling.dependency_key),
            ),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_11],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description=f"tidemark core package and its dependencies ({LAMBDA_PLATFORM}, Python {LAMBDA_PYTHON})",
        )

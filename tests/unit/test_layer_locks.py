"""Issue 31, part 6: the Lambda layers install exactly their locks' wheels, by hash, and the
layer's asset hash covers what was resolved (a patched dependency is a new layer version)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from stacks.layer import LAMBDA_PLATFORM, LAMBDA_PYTHON, PipLayerBundling, core_bundling, layer_requirements
from stacks.layer_lock import lock_path, locked
from tests.support.cdk import REPO


@pytest.mark.parametrize("layer", ["core", "formats"])
def test_each_lock_pins_every_requirement_of_its_layer_by_hash(layer: str) -> None:
    pins = locked(lock_path(layer).read_text(encoding="utf-8"))
    for text in layer_requirements(layer, REPO):
        requirement = Requirement(text)
        version, digest = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version, prereleases=True), (text, version)
        assert len(digest) == 64
    if layer == "core":
        assert "aws-xray-sdk" in pins  # powertools' tracer extra, resolved too
        assert pins["pydantic-core"][0]  # a compiled dependency of a requirement


def test_the_layer_installs_from_its_lock_and_its_key_is_the_locks_content(tmp_path: Path) -> None:
    bundling = core_bundling(REPO, tmp_path)
    assert bundling.lock == lock_path("core")
    assert bundling.dependency_key[:2] == [LAMBDA_PLATFORM, LAMBDA_PYTHON]
    assert bundling.dependency_key[2].startswith("lock:")
    patched = tmp_path / "core.lock"
    patched.write_text(lock_path("core").read_text(encoding="utf-8").replace("orjson==", "orjson==9", 1))
    again = PipLayerBundling(requirements=bundling.requirements, cache_dir=tmp_path, lock=patched, name="core layer")
    assert again.dependency_key != bundling.dependency_key  # a patched dependency: a new asset
    assert (
        again.asset_hash()
        != PipLayerBundling(
            requirements=bundling.requirements, cache_dir=tmp_path, lock=lock_path("core"), name="core layer"
        ).asset_hash()
    )


def test_a_build_for_this_machine_resolves_its_requirements(tmp_path: Path) -> None:
    host = core_bundling(REPO, tmp_path, platform="manylinux2014_x86_64", python_version="3.11")
    assert host.lock is None and host.dependency_key[2:] == sorted(layer_requirements("core", REPO))


def test_the_spark_image_installs_its_lock_which_pins_its_requirements() -> None:
    from stacks.layer_lock import IMAGE_LOCK, image_requirements

    pins = locked(IMAGE_LOCK.read_text(encoding="utf-8"))
    for text in image_requirements():
        requirement = Requirement(text)
        version, _digest = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version, prereleases=True), (text, version)
    dockerfile = (REPO / "jobs" / "image" / "Dockerfile").read_text(encoding="utf-8")
    assert "--require-hashes --no-deps -r /tmp/tidemark/requirements.lock" in dockerfile
    assert "COPY jobs/image/requirements.lock" in dockerfile and "pyproject.toml" not in dockerfile

"""The Lambda layers' locks: the exact wheels each layer installs for the functions' platform.

``stacks/locks/<layer>.lock`` pins every distribution of a layer -- its requirements and theirs --
to one version and the SHA-256 of the one wheel pip resolved for ``manylinux2014_aarch64`` and
the runtime's Python (``LAMBDA_PYTHON``). Synth installs exactly that (``pip install
--require-hashes --no-deps -r``), and the layer's asset hash covers the lock's content: a patched
dependency is a changed lock, so a new layer version is deployed. The locks live in the ``stacks``
package, so an installed ``tidemark`` synthesizes from them too.

``python -m stacks.layer_lock`` (``make lock``) re-resolves both from the requirements
(``pip install --dry-run --report``: what pip would install for that platform, with each wheel's
hash); ``tests/unit/test_layer_locks.py`` fails while a lock and its requirements disagree.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

LOCKS = Path(__file__).resolve().parent / "locks"
HEADER = """\
# The {what}'s distributions ({platform}, CPython {python}), each with the SHA-256 of its one
# wheel: {who} installs exactly these (pip --require-hashes --no-deps). Regenerate with
# `make lock` (python -m stacks.layer_lock); tests/unit/test_layer_locks.py fails while this and
# the requirements disagree.
"""


def lock_path(layer: str) -> Path:
    return LOCKS / f"{layer}.lock"


def resolve(requirements: Sequence[str], *, platform: str | Sequence[str], python: str) -> list[tuple[str, str, str]]:
    """``(name, version, sha256)`` of every wheel pip would install for ``requirements`` on that
    platform (or any of those platforms) and Python (a dry run: nothing is installed)."""
    platforms = [platform] if isinstance(platform, str) else list(platform)
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--disable-pip-version-check",
            "--report",
            str(report),
            "--target",
            str(Path(scratch) / "target"),
            *(argument for name in platforms for argument in ("--platform", name)),
            "--implementation",
            "cp",
            "--python-version",
            python,
            "--only-binary=:all:",
            *requirements,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"resolving {' '.join(requirements)} failed:\n{result.stderr.strip()}")
        installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    found = []
    for item in installs:
        archive = item["download_info"].get("archive_info", {})
        digest = archive.get("hashes", {}).get("sha256")
        if digest is None:
            raise RuntimeError(f"{item['metadata']['name']}: pip reported no sha256 for {item['download_info']['url']}")
        found.append((item["metadata"]["name"], item["metadata"]["version"], digest))
    return sorted(found, key=lambda entry: entry[0].lower())


def render(
    what: str, pins: Sequence[tuple[str, str, str]], *, platform: str | Sequence[str], python: str, who: str
) -> str:
    platform = platform if isinstance(platform, str) else " or ".join(platform)
    lines = [f"{name}=={version} \\\n    --hash=sha256:{digest}" for name, version, digest in pins]
    return HEADER.format(what=what, platform=platform, python=python, who=who) + "\n".join(lines) + "\n"


def locked(text: str) -> dict[str, tuple[str, str]]:
    """A lock's pins: canonical name -> (version, sha256)."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    found = {}
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+) --hash=sha256:([0-9a-f]{64})", line.strip())
        if match is None:
            raise ValueError(f"not a pinned, hashed wheel: {line.strip()[:80]}")
        found[re.sub(r"[-_.]+", "-", match[1]).lower()] = (match[2], match[3])
    return found


#: the Spark image's lock (``jobs/image/Dockerfile`` installs it): EMR 7.x's Amazon Linux 2023 on
#: x86_64 (glibc 2.34: manylinux_2_28 wheels run), the image's Python 3.11
IMAGE_LOCK = Path(__file__).resolve().parents[1] / "jobs" / "image" / "requirements.lock"
IMAGE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")
IMAGE_PYTHON = "3.11"
#: what the image adds to the core and formats requirements: PySpark's Arrow functions need pandas
IMAGE_EXTRA = ("pandas>=2",)


def image_requirements() -> list[str]:
    from stacks.paths import ProjectSources

    sources = ProjectSources.locate()
    return [*sources.requirements(), *sources.requirements("formats"), *IMAGE_EXTRA]


def main() -> None:
    from stacks.layer import LAMBDA_PLATFORM, LAMBDA_PYTHON, layer_requirements

    LOCKS.mkdir(exist_ok=True)
    targets: list[tuple[str, Path, list[str], str | Sequence[str], str, str]] = [
        (f"{layer} layer", lock_path(layer), layer_requirements(layer), LAMBDA_PLATFORM, LAMBDA_PYTHON, "synth")
        for layer in ("core", "formats")
    ]
    image = ("Spark image", IMAGE_LOCK, image_requirements(), IMAGE_PLATFORMS, IMAGE_PYTHON, "jobs/image/Dockerfile")
    targets.append(image)
    for name, path, requirements, platform, python, who in targets:
        pins = resolve(requirements, platform=platform, python=python)
        text = render(name, pins, platform=platform, python=python, who=who)
        locked(text)  # refuses what is not one pinned, hashed wheel per line
        path.write_text(text, encoding="utf-8")
        print(f"{path}: {len(pins)} wheels")


if __name__ == "__main__":
    main()

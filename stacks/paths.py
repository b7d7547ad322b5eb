"""Where the constructs find what they ship: in the repository, or in the installed package.

The constructs turn files into CDK assets at synth: the archiver's and the sweeper's function code
(``functions/``), the core package and its requirement lists (the core and formats layers), and
the Spark job (``jobs/``). Two layouts hold them:

checkout
    the repository (``app.py`` and ``cdk synth`` here, and an editable install, whose ``stacks``
    package *is* the checkout's): ``layers/core/tidemark``, ``functions/``, ``jobs/``, and the
    requirements read from ``pyproject.toml`` -- exactly what the stack has always been built from,
    so the repository's template (asset hashes included) does not depend on how it is installed.
installed
    a wheel in another CDK app's environment: ``tidemark``, ``jobs``, ``functions`` and ``stacks``
    are siblings in ``site-packages`` (pyproject.toml ships them all), and the requirement lists
    come from the distribution's metadata (``Requires-Dist``), since no pyproject.toml is installed.

``ProjectSources.locate()`` picks the checkout when ``stacks`` sits in one, else the installed
layout; siblings of ``stacks`` are used rather than an import lookup, so a consumer's own
``jobs`` or ``functions`` directory next to its app cannot shadow Tidemark's.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tidemark.exceptions import ConfigError

#: the directory holding the ``stacks`` package: the repository root, or ``site-packages``
PACKAGE_PARENT = Path(__file__).resolve().parents[1]
#: the distribution whose metadata lists the requirements when there is no pyproject.toml
DISTRIBUTION = "tidemark"
_EXTRA_MARKER = re.compile(r"""^extra\s*==\s*["']([A-Za-z0-9._-]+)["']$""")


def project_requirements(pyproject: Path, extra: str | None = None) -> list[str]:
    """The core package's runtime requirements (``[project].dependencies``), or those of an
    optional extra (``[project.optional-dependencies].<extra>``), as pip requirement strings."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if extra is None:
        requirements, where = project.get("dependencies"), "[project].dependencies"
    else:
        requirements = project.get("optional-dependencies", {}).get(extra)
        where = f"[project.optional-dependencies].{extra}"
    if not isinstance(requirements, list) or not all(isinstance(item, str) for item in requirements):
        raise ConfigError(f"{pyproject}: {where} must be a list of requirement strings")
    return requirements


def distribution_requirements(extra: str | None = None, *, distribution: str = DISTRIBUTION) -> list[str]:
    """The same lists from the installed distribution's metadata: ``Requires-Dist`` entries without
    a marker (``extra`` None), or those marked ``extra == "<extra>"`` (the marker stripped)."""
    try:
        entries = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(
            f"the {distribution} distribution is not installed, so its layer requirements are unknown: "
            f"install it (pip install {distribution}[cdk]) or build from a checkout"
        ) from exc
    requirements = []
    for entry in entries:
        requirement, _, marker = (part.strip() for part in entry.partition(";"))
        match = _EXTRA_MARKER.match(marker)
        if (extra is None and not marker) or (extra is not None and match and match.group(1) == extra):
            requirements.append(requirement)
    if extra is not None and not requirements:
        raise ConfigError(f"the installed {distribution} distribution declares no extra {extra!r}")
    return requirements


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tidemark" / "layer"


@dataclass(frozen=True)
class ProjectSources:
    """The directories and requirement lists the constructs build their assets from.

    ``core_package`` is the ``tidemark`` package (the core layer, the job's ``--py-files``),
    ``functions`` holds ``archiver/`` and ``sweeper/``, ``jobs`` is the Spark job package;
    ``layer_source`` and ``formats_layer_source`` are the layers' asset directories (the layers are
    bundled locally from the requirements, so nothing is read from them: they only have to exist);
    ``pyproject`` gives the requirement lists, or the installed metadata does when it is None;
    ``cache_dir`` is the default cache of the layers' pip installs.
    """

    core_package: Path
    functions: Path
    jobs: Path
    layer_source: Path
    formats_layer_source: Path
    pyproject: Path | None
    cache_dir: Path

    @classmethod
    def checkout(cls, root: Path) -> ProjectSources:
        """The repository layout under ``root``."""
        return cls(
            core_package=root / "layers" / "core" / "tidemark",
            functions=root / "functions",
            jobs=root / "jobs",
            layer_source=root / "layers" / "core",
            formats_layer_source=root / "layers",
            pyproject=root / "pyproject.toml",
            cache_dir=root / ".cache" / "layer",
        )

    @classmethod
    def installed(cls, parent: Path = PACKAGE_PARENT) -> ProjectSources:
        """The installed layout: the packages side by side in ``parent`` (``site-packages``); the
        layer cache in the user's cache directory (``site-packages`` may be read-only)."""
        core = parent / "tidemark"
        return cls(
            core_package=core,
            functions=parent / "functions",
            jobs=parent / "jobs",
            layer_source=core,
            formats_layer_source=core,
            pyproject=None,
            cache_dir=_user_cache(),
        )

    @classmethod
    def locate(cls, root: Path | ProjectSources | None = None) -> ProjectSources:
        """``root`` as given (a checkout's directory, or sources), else the checkout ``stacks`` is
        part of, else the installed layout; checked, so a broken install fails here by name."""
        if isinstance(root, ProjectSources):
            sources = root
        elif root is not None:
            sources = cls.checkout(root)
        elif (PACKAGE_PARENT / "pyproject.toml").is_file() and (PACKAGE_PARENT / "layers" / "core").is_dir():
            sources = cls.checkout(PACKAGE_PARENT)
        else:
            sources = cls.installed()
        sources.check()
        return sources

    def check(self) -> None:
        expected = {
            "the tidemark package": self.core_package / "__init__.py",
            "the archiver's code": self.functions / "archiver" / "handler.py",
            "the sweeper's code": self.functions / "sweeper" / "handler.py",
            "the aggregation job": self.jobs / "aggregate.py",
        }
        missing = [f"{what} ({path})" for what, path in expected.items() if not path.is_file()]
        if self.pyproject is not None and not self.pyproject.is_file():
            missing.append(f"pyproject.toml ({self.pyproject})")
        if missing:
            raise ConfigError(f"Tidemark's assets are incomplete: missing {', '.join(missing)}")

    def requirements(self, extra: str | None = None) -> list[str]:
        """``[project].dependencies`` (or an extra's list) from pyproject.toml or the metadata."""
        if self.pyproject is not None:
            return project_requirements(self.pyproject, extra)
        return distribution_requirements(extra)

"""Issue 32, finding 1: a license, and one version number the package and ``tidemark --version``
report."""

from __future__ import annotations

import json
import tomllib

from typer.testing import CliRunner

from tests.support.cdk import REPO
from tidemark.cli.app import app


def test_the_project_is_apache_2_0_everywhere_it_says_so() -> None:
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert (project["license"], project["license-files"]) == ("Apache-2.0", ["LICENSE"])
    assert json.loads((REPO / "package.json").read_text(encoding="utf-8"))["license"] == "Apache-2.0"
    lock = json.loads((REPO / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["packages"][""]["license"] == "Apache-2.0"


def test_tidemark_version_is_the_packages() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"tidemark {version}\n"

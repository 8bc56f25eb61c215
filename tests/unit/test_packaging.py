"""The wheel holds every module an editable install sees.

pyproject.toml finds packages (`[tool.setuptools.packages.find]`, include `topics*`)
instead of listing them; discovery skips a folder without `__init__.py` (a namespace
folder), so a module put in one would import in the checkout and be missing from the wheel.
scripts/wheel_smoke (in the gate) builds and installs the real wheel; this is the fast check.
"""

from __future__ import annotations

import ast
import pathlib
import sys
import tomllib

from setuptools import find_packages

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _find_config() -> dict[str, list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found: dict[str, list[str]] = config["tool"]["setuptools"]["packages"]["find"]
    return found


def _sources() -> list[tuple[str, pathlib.Path]]:
    """(package of the module, path) for every module the import name `topics` covers:
    topics/ itself and frontends/, which installs as topics.frontends (3.11's rglob does not
    follow the topics/frontends symlink, so frontends/ is walked on its own)."""
    out = []
    for base, prefix in (
        (ROOT / "topics", ("topics",)),
        (ROOT / "frontends", ("topics", "frontends")),
    ):
        for path in base.rglob("*.py"):
            rel = path.parent.relative_to(base).parts
            if "__pycache__" not in rel:
                out.append((".".join(prefix + rel), path))
    return out


def _module_folders() -> set[str]:
    return {package for package, _ in _sources()}


def test_every_folder_with_modules_is_a_found_package() -> None:
    found = set(find_packages(str(ROOT), include=_find_config()["include"]))
    missing = _module_folders() - found
    assert not missing, (
        f"folders with modules but no __init__.py (left out of the wheel): {missing}"
    )
    assert {"topics.frontends", "topics.frontends.http.openapi", "topics._persistence"} <= found


def test_every_third_party_import_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        req.split("[")[0]
        .split(">")[0]
        .split("<")[0]
        .split("=")[0]
        .strip()
        .lower()
        .replace("-", "_")
        for req in config["dependencies"] + config["optional-dependencies"]["spark"]
    }
    # Import name -> distribution name where they differ.
    dist_of = {"quart_trio": "quart_trio", "pyarrow": "pyarrow", "pyspark": "pyspark"}
    undeclared = {}
    for _, path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in {"topics", "frontends"}:
                    continue
                if dist_of.get(top, top).lower() not in declared:
                    undeclared[top] = str(path.relative_to(ROOT))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"

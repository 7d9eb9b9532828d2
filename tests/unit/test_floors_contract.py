"""The floors contract (pyproject.toml [tool.importlinter], run by `make lint`) holds on this tree, and breaks
when an import runs back up a floor or a package grows a cycle: checked on a copy of the tree, so the test can
fail the way a careless change would."""

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


@pytest.fixture
def tree(tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=where, capture_output=True, text=True, timeout=120
    )


def test_every_package_is_under_the_contract():
    top_level = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert top_level == set(PACKAGES)


def test_the_tree_keeps_the_contract(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 kept, 0 broken" in result.stdout


def test_an_import_back_up_a_floor_breaks_it(tree):
    with (tree / "gpus" / "pages.py").open("a") as f:
        f.write("\nfrom jobs import models as _jobs_models  # noqa\n")
    result = lint(tree)
    assert result.returncode == 1
    assert "gpus is not allowed to import jobs" in result.stdout


def test_an_import_hidden_in_a_function_breaks_it_too(tree):
    with (tree / "vocab" / "mig.py").open("a") as f:
        f.write("\n\ndef _sneak():\n    from cluster import base  # noqa\n\n    return base\n")
    result = lint(tree)
    assert result.returncode == 1
    assert "vocab is not allowed to import cluster" in result.stdout


def test_a_cycle_inside_a_package_breaks_it(tree):
    with (tree / "gpus" / "pages.py").open("a") as f:
        f.write("\nfrom gpus import views as _views  # noqa\n")
    result = lint(tree)
    assert result.returncode == 1
    assert "No cycles are allowed in gpus" in result.stdout

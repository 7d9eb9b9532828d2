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
#: Packages that do not sit at the top of the tree: the client is its own distribution under client/.
WHERE = {"gpuportal": ROOT / "client" / "src" / "gpuportal"}


@pytest.fixture
def tree(tmp_path):
    for package in PACKAGES:
        source = WHERE.get(package, ROOT / package)
        shutil.copytree(source, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint(where: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=where, capture_output=True, text=True, timeout=120
    )


def test_every_package_is_under_the_contract():
    top_level = {p.parent.name for p in [*ROOT.glob("*/__init__.py"), *ROOT.glob("client/src/*/__init__.py")]}
    top_level -= {"tests", "bench"}
    assert top_level == set(PACKAGES)


def test_the_tree_keeps_the_contract(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in result.stdout


BREAKAGES = {
    # an import running back up a floor
    "upward": (
        "gpus/pages.py",
        "\nfrom jobs import models as _jobs_models  # noqa\n",
        "gpus is not allowed to import jobs",
    ),
    # the same, hidden inside a function
    "hidden": (
        "vocab/mig.py",
        "\n\ndef _sneak():\n    from cluster import base  # noqa\n\n    return base\n",
        "vocab is not allowed to import cluster",
    ),
    # a cycle inside one package (gpus.views already imports gpus.pages)
    "cycle": ("gpus/pages.py", "\nfrom gpus import views as _views  # noqa\n", "No cycles are allowed in gpus"),
    # the planner's replay engine reaching for Django (it must stay plain Python over plain data)
    "planner-engine": (
        "planner/engine_replay.py",
        "\nfrom django.conf import settings as _settings  # noqa\n",
        "planner.engine_replay is not allowed to import django",
    ),
    # the job cycle naming a kind instead of asking the kind interface
    "kind-by-name": (
        "jobs/cycle/run.py",
        "\nfrom jobs.service import follow as _service_follow  # noqa\n",
        "jobs.cycle is not allowed to import jobs.service",
    ),
    # a type-only import closing a circle counts too
    "type-only-cycle": (
        "jobs/cycle/result.py",
        "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from jobs.cycle import run as _run  # noqa\n",
        "No cycles are allowed in jobs.cycle",
    ),
    # the client reaching into the portal instead of its API
    "client": (
        "gpuportal/client.py",
        "\nfrom jobs import models as _jobs_models  # noqa\n",
        "gpuportal is not allowed to import jobs",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_careless_import_breaks_it(tree, breakage):
    path, added, complaint = BREAKAGES[breakage]
    with (tree / path).open("a") as f:
        f.write(added)
    result = lint(tree)
    assert result.returncode == 1
    assert complaint in result.stdout

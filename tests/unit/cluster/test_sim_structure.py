"""The simulated cluster's components talk only through stored objects: none imports another.

Like KWOK's controllers, each component module (scheduler, Job controller, kubelet, node lifecycle, GPU Operator)
reads and writes the transaction's state; only the clock knows them all and runs them in a fixed order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cluster.sim import clock

SIM = Path(__file__).resolve().parents[3] / "cluster" / "sim"
COMPONENTS = {"node_lifecycle", "gpu_operator", "volume_binder", "kubelet", "job_controller", "scheduler"}
#: The inference services' components (Deployments and ReplicaSets, the HPA, the kubelet's prober).
COMPONENTS |= {"deployments", "hpa", "prober"}
#: Dynamic Resource Allocation's (NVIDIA's DRA driver, its ComputeDomain controller, the resourceclaim controller).
COMPONENTS |= {"dra_driver", "compute_domains", "resource_claims"}
DJANGO_APPS = ("gpus", "jobs", "portal")


def _imported_modules(tree: ast.Module) -> set[str]:
    """Module names imported anywhere in the file, resolved against cluster.sim (``.x`` -> ``cluster.sim.x``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                package = ["cluster", "sim"][: 3 - node.level] if node.level <= 2 else []
                base = ".".join(package + ([node.module] if node.module else []))
            if node.module:
                names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _tree(name: str) -> ast.Module:
    return ast.parse((SIM / f"{name}.py").read_text(encoding="utf-8"))


def test_the_components_exist():
    assert {path.stem for path in SIM.glob("*.py")} >= COMPONENTS


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_no_component_imports_another(component):
    imported = _imported_modules(_tree(component))
    others = {f"cluster.sim.{other}" for other in COMPONENTS - {component}}
    assert not imported & others, f"{component} imports {sorted(imported & others)}: talk through stored objects"


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_no_component_imports_the_clock_or_the_api(component):
    imported = _imported_modules(_tree(component))
    facade = {"cluster.sim.clock", "cluster.sim.api", "cluster.sim.storage_api", "cluster.sim.apps_api", "cluster.sim",
              "cluster.sim.dra_api"}  # fmt: skip
    assert not imported & facade


def test_helpers_import_no_component():
    """Shared helpers stay below the components, so a component cannot reach another through them."""
    for path in sorted(SIM.glob("*.py")):
        if path.stem in COMPONENTS | {
            "clock",
            "api",
            "storage_api",
            "apps_api",
            "dra_api",
            "__init__",
        }:  # the facade, its parts
            continue
        imported = _imported_modules(_tree(path.stem))
        assert not imported & {f"cluster.sim.{c}" for c in COMPONENTS}, path.name


def test_imports_are_at_module_level_and_not_from_django_apps():
    for path in sorted(SIM.glob("*.py")):
        tree = _tree(path.stem)
        top = {id(node) for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                assert id(node) in top, f"{path.name}:{node.lineno}: import inside a function or block"
        for name in _imported_modules(tree):
            assert name.split(".")[0] not in DJANGO_APPS, f"{path.name} imports {name}"


def test_the_clock_runs_every_component_in_the_documented_order():
    order = [module.__name__.rsplit(".", 1)[-1] for module in clock.COMPONENTS]
    assert order == [
        "node_lifecycle",
        "gpu_operator",
        "dra_driver",
        "compute_domains",
        "volume_binder",
        "kubelet",
        "prober",
        "job_controller",
        "deployments",
        "hpa",
        "resource_claims",
        "scheduler",
    ]
    for module in clock.COMPONENTS:
        assert callable(module.reconcile) and callable(module.next_due)


def test_modules_stay_small():
    for path in sorted(SIM.glob("*.py")):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 600, path.name

"""The floors are one-way: the inventory (gpus) never imports jobs, and the job modules that run the lifecycle
do not import each other in a loop, nor hide an import inside a function to dodge one."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, at top level) of every import in the file, relative ones made absolute."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]) if base else ".".join(parent)
            names = [f"{base}.{alias.name}" for alias in node.names] if not node.module or node.level else []
            found += [(base, node.lineno, id(node) in top)] + [(n, node.lineno, id(node) in top) for n in names]
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "gpus").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_inventory_never_imports_jobs(path):
    offending = [(m, line) for m, line, _ in imported_modules(path) if m == "jobs" or m.startswith("jobs.")]
    assert not offending, f"{path.relative_to(ROOT)} imports {offending}"


LIFECYCLE_MODULES = ["services", "cycle", "tasks", "notebooks", "lifecycle", "kick", "access", "admission"]


def job_imports(name: str) -> set[str]:
    modules = {m for m, _, _ in imported_modules(ROOT / "jobs" / f"{name}.py")}
    return {m.split(".")[1] for m in modules if m.startswith("jobs.") and m.split(".")[1] in LIFECYCLE_MODULES}


def test_the_job_modules_import_each_other_without_a_cycle():
    graph = {name: job_imports(name) - {name} for name in LIFECYCLE_MODULES}
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            raise AssertionError(f"import cycle: {' -> '.join([*stack[stack.index(node) :], node])}")
        if node in seen:
            return
        stack.append(node)
        for nxt in graph.get(node, ()):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for name in graph:
        visit(name)
    assert "tasks" not in set().union(*graph.values())  # nothing imports the Celery entry points back


@pytest.mark.parametrize(
    "path",
    sorted(p for package in ("jobs", "gpus") for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_import_hides_inside_a_function_without_saying_why(path):
    lines = path.read_text().splitlines()
    hidden = [
        (module, line)
        for module, line, top in imported_modules(path)
        if not top and "noqa: PLC0415" not in lines[line - 1] and module != "__future__"
    ]
    # An import under ``if TYPE_CHECKING:`` is at module level in spirit; none are used in these packages.
    assert not hidden, f"{path.relative_to(ROOT)}: imports inside functions {hidden}"

"""NVIDIA and Kubernetes names are spelled in vocab.names only, and vocab stays a bottom package.

The scan reads the source with ``ast``: string constants (f-string parts included) that are not docstrings and
that start like a label, annotation, taint or resource name of NVIDIA or Kubernetes are reported. Comments and
docstrings are free to mention names; prose that merely contains one (an error message) is not flagged either,
because the pattern is anchored at the start of the string.
"""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: Packages (directories) and modules (files) whose Python source must not spell NVIDIA/Kubernetes names:
#: every package of the portal and the agent.
SCANNED = ("vocab", "cluster", "accounts", "gpus", "telemetry", "jobs", "portal", "agent")
#: Inside SCANNED, what is not held to it: the one place the names are spelled.
EXCLUDED = ("vocab/names.py",)
#: What a spelled-out name looks like: nvidia.com/..., kubernetes.io/..., node.kubernetes.io/..., ...
NAME = re.compile(r"^(nvidia\.com|[a-z0-9.-]*kubernetes\.io)/")
#: Top-level modules vocab may import besides the standard library.
VOCAB_THIRD_PARTY = {"yaml", "prometheus_client"}


def scanned_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = ROOT / entry
        candidates = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in candidates:
            relative = file.relative_to(ROOT).as_posix()
            if not any(relative == ex or relative.startswith(ex.rstrip("/") + "/") for ex in EXCLUDED):
                files.append(file)
    return files


def docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def spelled_names(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    docstrings = docstring_nodes(tree)
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and NAME.match(node.value)
    ]
    return [(node.lineno, node.value) for node in sorted(found, key=lambda n: (n.lineno, n.col_offset))]


def test_the_scan_covers_what_it_says():
    files = {f.relative_to(ROOT).as_posix() for f in scanned_files()}
    assert {"vocab/gfd.py", "gpus/reconcile.py", "cluster/base.py", "telemetry/tasks.py"} <= files
    assert {"cluster/sim/gpu_operator.py", "cluster/sim/scenario.py", "jobs/render.py", "portal/settings.py"} <= files
    assert "vocab/names.py" not in files


def test_the_scan_finds_names_but_not_docstrings_or_prose():
    source = (
        '"""Module doc: nvidia.com/gpu."""\n'
        "def f():\n"
        '    """nvidia.com/gpu.product"""\n'
        '    return {"nvidia.com/gpu": 1, "x": "node.kubernetes.io/unschedulable", "y": "see nvidia.com/gpu"}\n'
        'g = f"kubernetes.io/hostname={1}"\n'
    )
    assert spelled_names(source) == [
        (4, "nvidia.com/gpu"),
        (4, "node.kubernetes.io/unschedulable"),
        (5, "kubernetes.io/hostname="),
    ]


def test_nvidia_and_kubernetes_names_are_spelled_in_vocab_names_only():
    found = [
        f"{file.relative_to(ROOT).as_posix()}:{line}: {value!r}"
        for file in scanned_files()
        for line, value in spelled_names(file.read_text(encoding="utf-8"))
    ]
    assert not found, "Spell these through vocab.names (constants or helpers):\n" + "\n".join(found)


def test_vocab_imports_only_the_standard_library_yaml_and_prometheus_client():
    outside = []
    for file in sorted((ROOT / "vocab").rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [] if node.level else [node.module or ""]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in VOCAB_THIRD_PARTY and top != "vocab":
                    outside.append(f"{file.relative_to(ROOT).as_posix()}:{node.lineno}: {module}")
    assert not outside, "vocab is the bottom package; it may not import:\n" + "\n".join(outside)

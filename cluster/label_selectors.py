"""Label selector strings (``k=v,k!=v,k,!k,k in (a,b),k notin (a)``) as the API server reads them: parsed into
requirements and matched against labels. The one home for it: the simulated cluster filters its lists with it and
the Kubernetes backend's watch caches filter theirs (cluster/kubernetes_cache.py), which is why it lives outside
cluster/sim (the backend does not load the simulator).
"""

from __future__ import annotations

import re
from collections.abc import Callable


def _split_requirements(selector: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part.strip() for part in parts if part.strip()]


_SET_REQUIREMENT = re.compile(r"^(\S+)\s+(in|notin)\s*\(([^)]*)\)$")


def parse_label_selector(selector: str | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """Parse ``k=v,k2!=v2,k3,!k4,k5 in (a,b)`` into (operator, key, values) requirements."""
    requirements: list[tuple[str, str, tuple[str, ...]]] = []
    for part in _split_requirements(selector or ""):
        set_match = _SET_REQUIREMENT.match(part)
        if set_match:
            values = tuple(value.strip() for value in set_match.group(3).split(",") if value.strip())
            requirements.append((set_match.group(2), set_match.group(1), values))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append(("!=", key.strip(), (value.strip(),)))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            requirements.append(("=", key.strip(), (value.strip(),)))
        elif part.startswith("!"):
            requirements.append(("!exists", part[1:].strip(), ()))
        else:
            requirements.append(("exists", part, ()))
    return requirements


def selector_matches(selector: str | None, labels: dict[str, str] | None) -> bool:
    return requirements_match(parse_label_selector(selector), labels)


def requirements_match(requirements: list[tuple[str, str, tuple[str, ...]]], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    for operator, key, values in requirements:
        present = key in labels
        if operator == "=" and labels.get(key) != values[0]:
            return False
        if operator == "!=" and present and labels[key] == values[0]:
            return False
        if operator == "in" and (not present or labels[key] not in values):
            return False
        if operator == "notin" and present and labels[key] in values:
            return False
        if operator == "exists" and not present:
            return False
        if operator == "!exists" and present:
            return False
    return True


def label_matcher(selector: str | None) -> Callable[[dict[str, str] | None], bool]:
    """A predicate over labels for a selector string, parsed once (for filtering many objects with one selector)."""
    requirements = parse_label_selector(selector)
    return lambda labels: requirements_match(requirements, labels)

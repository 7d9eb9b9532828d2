"""Kubernetes resource quantities and a pod's effective requests, as the API server and scheduler read them.

Not a component: pure functions over values, shared by admission, the scheduler and the GPU Operator.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from fractions import Fraction
from typing import Any

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity ("500m", "4Gi", "16G", "1e3", 2) as an exact number of base units."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    return _parse_quantity_text(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_quantity_text(text: str) -> Fraction:
    match = _QUANTITY.match(text.strip())
    if not match:
        raise ValueError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIX[suffix]


def format_cpu(cores: Fraction) -> str:
    return str(int(cores)) if cores.denominator == 1 else f"{int(cores * 1000)}m"


def format_memory(num_bytes: Fraction) -> str:
    return f"{int(num_bytes) // 1024}Ki"


def pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests as the scheduler sums them: containers added, init containers as a maximum."""
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += parse_quantity(value)
    return dict(total)


def container_requests(container: dict[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: parse_quantity(value) for name, value in merged.items()}


def is_extended(resource: str) -> bool:
    return (
        "/" in resource
        and not resource.startswith(("kubernetes.io/", "requests."))
        and not resource.startswith("hugepages-")
    )


def qos_class(spec: dict[str, Any]) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    guaranteed, any_set = True, False
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or parse_quantity(requests.get(name, limits[name])) != parse_quantity(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"

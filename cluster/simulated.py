"""The embedded simulated cluster: the portal's own default backend for the demo, tests and benchmarks.

It is not a mock. It keeps Kubernetes-shaped objects (Node, Namespace, batch/v1 Job, Pod, ConfigMap, core/v1 Event)
and makes them behave the way a small real cluster with the NVIDIA GPU Operator does:

* Nodes carry what GPU Feature Discovery, the GPU Operator and Node Feature Discovery label them with for the
  hardware and configuration in the scenario, and advertise what the NVIDIA device plugin would: whole GPUs,
  MIG devices (single / mixed strategy) or time-sliced replicas (optionally renamed ``.shared``).
* MIG Manager is simulated: setting ``nvidia.com/mig.config`` on a node moves ``nvidia.com/mig.config.state``
  through ``pending`` (and ``rebooting`` when MIG mode is turned on or off) to ``success`` (or ``failed``: unknown
  config, impossible geometry, GPUs still in use, or a failure injected with ``fail_next_mig_reconfiguration``) and
  the advertised resources follow. The device plugin follows ``nvidia.com/device-plugin.config`` and the ConfigMaps
  in the ``gpu-operator`` namespace.
* A scheduler with kube-scheduler's filters (v1.20 order and messages), a Job controller and a kubelet that moves
  pods through ContainerCreating, Running and a terminal phase as the clock advances.

The API semantics follow Kubernetes v1.20, the version of the real kube-apiserver the project's integration tests
run, so both backends return the same shapes: ``controller-uid``/``job-name`` labels, no Job ``suspend``, scheduler
messages such as ``0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had taint {nvidia.com/gpu:
present}, that the pod didn't tolerate.``

Time is lazy: nothing runs in the background. Every call first advances the world to ``clock()``.

State is one JSON document. With a ``state_path`` every call is a read-modify-write under an exclusive ``fcntl``
lock on ``<state_path>.lock`` and is written atomically (temporary file + ``os.replace``), so the web process,
Celery workers and beat can share one simulated cluster.

Simulation conventions (how a workload says how it should behave):

* ``sim.gpu-portal.io/duration-seconds`` annotation on the Job (or its pod template), else the container env var
  ``SIM_DURATION_SECONDS``, else a container command/args ending in ``sleep <seconds>``: the container exits after
  that long. Without any of them it runs until deleted (or until ``activeDeadlineSeconds``).
* ``sim.gpu-portal.io/exit-code`` annotation (default 0): the exit code when it ends; non-zero fails the pod and
  the Job retries up to ``backoffLimit``.
* An image whose name contains ``doesnotexist`` cannot be pulled: ErrImagePull, then ImagePullBackOff.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import json
import math
import os
import random
import re
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from vocab.products import GpuProduct, layout_fits, lookup_product, preset_mig_configs, sanitise_product_name

from .base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    ClusterError,
    Conflict,
    Invalid,
    KubeObject,
    NotFound,
    WatchEvent,
)

__all__ = [
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "IMAGE_PULL_FAILURE_MARKER",
    "SimulatedCluster",
    "parse_quantity",
    "parse_label_selector",
    "selector_matches",
]

DURATION_ANNOTATION = "sim.gpu-portal.io/duration-seconds"
EXIT_CODE_ANNOTATION = "sim.gpu-portal.io/exit-code"
DURATION_ENV = "SIM_DURATION_SECONDS"
EXIT_CODE_ENV = "SIM_EXIT_CODE"
#: The exit code the kernel's OOM killer leaves (128 + SIGKILL); the simulated kubelet reports it as OOMKilled,
#: since nothing else kills a container it has not been asked to stop.
OOM_EXIT_CODE = 137
IMAGE_PULL_FAILURE_MARKER = "doesnotexist"

GPU_OPERATOR_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIG_MAP = "time-slicing-config"  # where the scenario's time-slicing configs are written
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"

DEFAULT_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "demo.yaml"
DEFAULT_KUBERNETES_VERSION = "v1.20.2"
STATE_FORMAT = 1

#: Seconds for the simulated machinery; a scenario's ``timing:`` section overrides them.
DEFAULT_TIMING = {
    "container_creating_seconds": 4.0,  # bound -> Running (pull, create, start)
    "image_pull_error_seconds": 3.0,  # bound -> ErrImagePull for an image that does not exist
    "image_pull_backoff_seconds": 10.0,  # ErrImagePull -> ImagePullBackOff
    "mig_reconfigure_seconds": 30.0,  # mig.config.state pending -> success/failed
    "job_backoff_seconds": 10.0,  # first retry delay after a failed pod (doubles, capped at 360 s)
    "event_ttl_seconds": 3600.0,  # kube-apiserver --event-ttl
}

_GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery utilrand.String
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}
_DEPLOY_OPERANDS = (
    "container-toolkit",
    "dcgm",
    "dcgm-exporter",
    "device-plugin",
    "driver",
    "gpu-feature-discovery",
    "node-status-exporter",
    "operator-validator",
)
_PAUSED_FOR_MIG = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")
_TERMINAL = ("Succeeded", "Failed")


# --------------------------------------------------------------------------------------------------------------
# Quantities and label selectors
# --------------------------------------------------------------------------------------------------------------

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


def _format_cpu(cores: Fraction) -> str:
    return str(int(cores)) if cores.denominator == 1 else f"{int(cores * 1000)}m"


def _format_memory(num_bytes: Fraction) -> str:
    return f"{int(num_bytes) // 1024}Ki"


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
    return _requirements_match(parse_label_selector(selector), labels)


def _requirements_match(requirements: list[tuple[str, str, tuple[str, ...]]], labels: dict[str, str] | None) -> bool:
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


# --------------------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------------------


def _clone(obj: Any) -> Any:
    """A deep copy of JSON data (the C json codec is several times faster than copy.deepcopy)."""
    return json.loads(json.dumps(obj))


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _stable_hex(*parts: Any, length: int = 64) -> str:
    return hashlib.sha256("\0".join(str(part) for part in parts).encode()).hexdigest()[:length]


def _gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-portal-sim/{node}/{index}"))


def _qualified_image(image: str) -> str:
    """docker.io/library/name:latest style reference, as containerd reports it."""
    name = image
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + (name if rest else "library/" + name)
    last = name.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        name += ":latest"
    return name


def _toleration_matches(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def _tolerated(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    return any(_toleration_matches(toleration, taint) for toleration in tolerations)


def _expression_matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator", "")
    values = [str(value) for value in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def _node_affinity_matches(spec: dict[str, Any], node: KubeObject) -> bool:
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in terms:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue  # an empty term matches nothing
        if all(_expression_matches(expression, labels) for expression in expressions) and all(
            _expression_matches(expression, fields) for expression in field_expressions
        ):
            return True
    return False


def _pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests as the scheduler sums them: containers added, init containers as a maximum."""
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += parse_quantity(value)
    return dict(total)


def _container_requests(container: dict[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: parse_quantity(value) for name, value in merged.items()}


_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _label_problem(key: str, value: Any) -> str | None:
    """Why the API server would refuse this label (None: it would not)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f'Invalid value: "{key}": prefix part {_SUBDOMAIN_HELP}'
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (at most 63 characters)"
        )
    if value is None:
        return None
    if not isinstance(value, str):
        return f"Invalid value: {value!r}: label values must be strings"
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return (
            f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)"
        )
    return None


def _scheduling_signature(spec: dict[str, Any]) -> str:
    """Everything in a pod spec the scheduler's filters look at, hashed: equal signatures, equal verdicts."""
    fields = ("containers", "initContainers", "overhead", "tolerations", "nodeSelector", "affinity", "priority")
    text = json.dumps([spec.get(field) for field in fields], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _is_extended(resource: str) -> bool:
    return (
        "/" in resource
        and not resource.startswith(("kubernetes.io/", "requests."))
        and not resource.startswith("hugepages-")
    )


def _qos_class(spec: dict[str, Any]) -> str:
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


class _Txn:
    """One read-modify-write of the whole state; ``dirty`` decides whether it is written back."""

    def __init__(self, state: dict[str, Any], now: float) -> None:
        self.state = state
        self.now = now
        self.dirty = False


# --------------------------------------------------------------------------------------------------------------
# Scenario handling
# --------------------------------------------------------------------------------------------------------------


def load_scenario(scenario: dict[str, Any] | str | Path | None) -> dict[str, Any]:
    """A scenario dict from a dict, a YAML file path, or a name under cluster/scenarios/ ("demo")."""
    if scenario is None or scenario == "":
        scenario = DEFAULT_SCENARIO
    if isinstance(scenario, dict):
        return copy.deepcopy(scenario)
    path = Path(scenario)
    if not path.exists() and isinstance(scenario, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", scenario):
        candidate = DEFAULT_SCENARIO.parent / f"{scenario.removesuffix('.yaml')}.yaml"
        if candidate.exists():
            path = candidate
    if not path.exists():
        raise FileNotFoundError(f"Simulated cluster scenario {str(scenario)!r} does not exist.")
    loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"Scenario {path} must be a mapping with a 'nodes:' list.")
    return loaded


def _expand_node_specs(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    defaults = scenario.get("defaults") or {}
    specs = []
    for entry in scenario.get("nodes") or []:
        names = entry.get("names") or [entry.get("name")]
        for name in names:
            spec = {**copy.deepcopy(defaults), **copy.deepcopy(entry), "name": name}
            spec.pop("names", None)
            specs.append(spec)
    return specs


# --------------------------------------------------------------------------------------------------------------
# GPU Feature Discovery + device plugin model
# --------------------------------------------------------------------------------------------------------------


def _product_label(base: str, replicas: int, rename: bool) -> str:
    return f"{base}-SHARED" if replicas > 1 and not rename else base


def _sharing_label(replicas: int) -> str:
    return "time-slicing" if replicas > 1 else "none"


def _shared_name(resource: str, replicas: int, rename: bool) -> str:
    return f"{resource}.shared" if replicas > 1 and rename else resource


def _mig_attribute_labels(prefix: str, profile: Any) -> dict[str, str]:
    labels = {
        f"{prefix}.memory": str(profile.memory_mb),
        f"{prefix}.multiprocessors": str(profile.multiprocessors),
        f"{prefix}.slices.gi": str(profile.slices),
        f"{prefix}.slices.ci": str(profile.slices),
    }
    for engine, count in profile.engines.items():
        labels[f"{prefix}.engines.{engine}"] = str(count)
    return labels


def render_gpu_node(hw: dict[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
    """Labels GFD + the GPU Operator put on this node, and the resources its device plugin advertises.

    ``hw`` is the simulated node's hardware/config record (see ``SimulatedCluster``). Excludes the two labels an
    admin sets (``nvidia.com/mig.config``, ``nvidia.com/device-plugin.config``).
    """
    gpu = hw["gpu"]
    product = lookup_product(gpu["product"])
    count = int(gpu["count"])
    base = sanitise_product_name(gpu["product"])
    mig = hw["mig"]
    strategy = mig.get("strategy") or "none"
    gpus = mig.get("gpus") or [None] * count
    sharing = hw.get("sharing") or {}
    replicas_of = sharing.get("resources") or {}
    rename = bool(sharing.get("rename"))
    driver = str(hw["driver"]).split(".")
    cuda = str(hw["cuda"]).split(".")

    labels: dict[str, str] = {
        "nvidia.com/cuda.driver-version.full": str(hw["driver"]),
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1] if len(driver) > 1 else "0",
        "nvidia.com/cuda.driver-version.revision": driver[2] if len(driver) > 2 else "0",
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1] if len(driver) > 1 else "0",
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "0",
        "nvidia.com/cuda.runtime-version.full": f"{cuda[0]}.{cuda[1] if len(cuda) > 1 else '0'}",
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/cuda.runtime-version.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/cuda.runtime.major": cuda[0],
        "nvidia.com/cuda.runtime.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/gfd.timestamp": str(int(hw.get("gfd_timestamp") or 0)),
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/gpu.compute.major": str(product.compute_capability[0]),
        "nvidia.com/gpu.compute.minor": str(product.compute_capability[1]),
        "nvidia.com/gpu.family": product.family,
        "nvidia.com/gpu.machine": sanitise_product_name(gpu.get("machine") or "Standard-PC"),
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.capable": "true" if product.mig_capable else "false",
        "nvidia.com/mps.capable": "false",
    }
    operands = list(_DEPLOY_OPERANDS) + (["mig-manager"] if product.mig_capable else [])
    reconfiguring = bool(hw.get("mig_op"))
    for operand in operands:
        value = "true"
        if operand == "device-plugin" and not hw.get("device_plugin", True):
            value = "false"
        elif reconfiguring and operand in _PAUSED_FOR_MIG:
            value = "paused-for-mig-change"
        labels[f"nvidia.com/gpu.deploy.{operand}"] = value
    if product.mig_capable:
        labels[MIG_STATE_LABEL] = mig.get("state") or "success"
    if strategy in ("single", "mixed"):
        labels["nvidia.com/mig.strategy"] = strategy

    resources: dict[str, int] = {}
    mig_gpus = [devices for devices in gpus if devices is not None] if product.mig_capable else []
    full_gpus = count - len(mig_gpus)
    gpu_replicas = int(replicas_of.get("nvidia.com/gpu", 1))

    def whole_gpu_labels(product_label: str, replicas_label: int) -> None:
        labels["nvidia.com/gpu.product"] = product_label
        labels["nvidia.com/gpu.count"] = str(count)
        labels["nvidia.com/gpu.memory"] = str(gpu.get("memory_mb") or product.memory_mib)
        labels["nvidia.com/gpu.replicas"] = str(replicas_label)
        labels["nvidia.com/gpu.sharing-strategy"] = _sharing_label(replicas_label)

    if strategy == "single" and mig_gpus:
        profiles = {name for devices in mig_gpus for name, n in devices.items() if n}
        empty = any(not any(devices.values()) for devices in mig_gpus)
        if full_gpus or empty or len(profiles) != 1:
            # GFD's verdict for a node the single strategy cannot describe; the device plugin refuses to start.
            labels["nvidia.com/gpu.product"] = f"{base}-MIG-INVALID"
            labels["nvidia.com/gpu.count"] = "0"
            labels["nvidia.com/gpu.replicas"] = "0"
            labels["nvidia.com/gpu.memory"] = "0"
            labels["nvidia.com/gpu.sharing-strategy"] = "none"
        else:
            profile = product.mig_profiles[profiles.pop()]
            devices_total = sum(sum(devices.values()) for devices in mig_gpus)
            labels["nvidia.com/gpu.product"] = _product_label(f"{base}-MIG-{profile.name}", gpu_replicas, rename)
            labels["nvidia.com/gpu.count"] = str(devices_total)
            labels["nvidia.com/gpu.replicas"] = str(gpu_replicas)
            labels["nvidia.com/gpu.sharing-strategy"] = _sharing_label(gpu_replicas)
            labels.update(_mig_attribute_labels("nvidia.com/gpu", profile))
            resources[_shared_name("nvidia.com/gpu", gpu_replicas, rename)] = devices_total * gpu_replicas
    elif strategy == "mixed" and mig_gpus:
        whole_gpu_labels(
            _product_label(base, gpu_replicas, rename) if full_gpus else base, gpu_replicas if full_gpus else 0
        )
        if full_gpus:
            resources[_shared_name("nvidia.com/gpu", gpu_replicas, rename)] = full_gpus * gpu_replicas
        counts: Counter[str] = Counter()
        for devices in mig_gpus:
            counts.update({name: n for name, n in devices.items() if n})
        for name in sorted(counts):
            profile = product.mig_profiles[name]
            resource = profile.resource_name
            replicas = int(replicas_of.get(resource, 1))
            prefix = resource
            labels[f"{prefix}.count"] = str(counts[name])
            labels[f"{prefix}.product"] = _product_label(f"{base}-MIG-{name}", replicas, rename)
            labels[f"{prefix}.replicas"] = str(replicas)
            labels[f"{prefix}.sharing-strategy"] = _sharing_label(replicas)
            labels.update(_mig_attribute_labels(prefix, profile))
            resources[_shared_name(resource, replicas, rename)] = counts[name] * replicas
    else:
        whole_gpu_labels(_product_label(base, gpu_replicas, rename), gpu_replicas)
        resources[_shared_name("nvidia.com/gpu", gpu_replicas, rename)] = count * gpu_replicas

    if not hw.get("device_plugin", True):
        resources = {}
    return labels, resources


def _device_plugin_config_text(strategy: str, replicas: int, rename: bool) -> str:
    config = {
        "version": "v1",
        "flags": {"migStrategy": strategy},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": rename,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
            }
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


# --------------------------------------------------------------------------------------------------------------
# The simulated cluster
# --------------------------------------------------------------------------------------------------------------


class SimulatedCluster:
    """A ClusterBackend backed by a simulated Kubernetes + GPU Operator cluster (see the module docstring)."""

    name = "simulated"
    watch_poll_interval = 0.2

    def __init__(
        self,
        state_path: str | Path | None = None,
        scenario: dict[str, Any] | str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = Path(state_path) if state_path is not None else None
        self._lock_path = self._path.with_name(self._path.name + ".lock") if self._path else None
        self._scenario_source = scenario
        self._scenario: dict[str, Any] | None = None
        self._clock = clock
        self._thread_lock = threading.RLock()
        self._memory_state: dict[str, Any] | None = None
        self._cache: tuple[tuple[int, int, int], dict[str, Any]] | None = None
        self._random = random.Random()  # pod name suffixes only
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction():
            pass  # creates the state (file) from the scenario if there is none yet

    def __repr__(self) -> str:
        return f"SimulatedCluster({str(self._path) if self._path else 'in-memory'!r})"

    # ----------------------------------------------------------------------------------------------------------
    # Nodes
    # ----------------------------------------------------------------------------------------------------------
    def list_nodes(self, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        requirements = parse_label_selector(label_selector)
        with self._transaction() as tx:
            nodes = [
                _clone(node)
                for _, node in sorted(tx.state["nodes"].items())
                if _requirements_match(requirements, node["metadata"].get("labels"))
            ]
            return nodes, str(tx.state["rv"])

    def get_node(self, name: str) -> KubeObject:
        with self._transaction() as tx:
            return _clone(self._node(tx, name))

    def watch_nodes(self, resource_version: str | None = None, timeout_seconds: int = 30) -> Iterator[WatchEvent]:
        try:
            since = int(resource_version) if resource_version not in (None, "", "0") else None
        except ValueError:
            raise Invalid(f"resourceVersion {resource_version!r} is not one this cluster handed out.") from None
        deadline = time.monotonic() + max(0, timeout_seconds)
        while True:
            with self._transaction() as tx:
                events = self._node_events_since(tx, since)
            if events or since is None:
                yield from events
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(self.watch_poll_interval, remaining))

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> KubeObject:
        for key, value in labels.items():
            problem = _label_problem(key, value)
            if problem:
                raise Invalid(f'Node "{name}" is invalid: metadata.labels: {problem}')
        with self._transaction() as tx:
            node = self._node(tx, name)
            current = node["metadata"].setdefault("labels", {})
            before = dict(current)
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            if current != before:
                node["metadata"]["labels"] = current = dict(sorted(current.items()))
                self._touch(tx, node)
                if before.get(DEVICE_PLUGIN_CONFIG_LABEL) != current.get(DEVICE_PLUGIN_CONFIG_LABEL):
                    self._sync_device_plugin(tx, name)
                if before.get(MIG_CONFIG_LABEL) != current.get(MIG_CONFIG_LABEL):
                    self._sync_mig_manager(tx, name)
            return _clone(node)

    # ----------------------------------------------------------------------------------------------------------
    # Namespaces and workloads
    # ----------------------------------------------------------------------------------------------------------
    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> KubeObject:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            raise Invalid(f'Namespace "{name}" is invalid: metadata.name: Invalid value: "{name}": {_LABEL_HELP}')
        with self._transaction() as tx:
            namespace = tx.state["namespaces"].get(name)
            if namespace is None:
                namespace = self._new_namespace(tx, name, labels)
            elif labels and any(namespace["metadata"]["labels"].get(k) != v for k, v in labels.items()):
                namespace["metadata"]["labels"].update(labels)
                self._touch(tx, namespace)
            return _clone(namespace)

    def list_workloads(self, namespace: str | None = None) -> list[KubeObject]:
        requirements = parse_label_selector(MANAGED_SELECTOR)
        with self._transaction() as tx:
            return [
                _clone(job)
                for key, job in sorted(tx.state["jobs"].items())
                if (namespace is None or job["metadata"]["namespace"] == namespace)
                and _requirements_match(requirements, job["metadata"].get("labels"))
            ]

    def list_pods(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        requirements = parse_label_selector(label_selector)
        with self._transaction() as tx:
            return [
                _clone(pod)
                for key, pod in sorted(tx.state["pods"].items())
                if (namespace is None or pod["metadata"]["namespace"] == namespace)
                and _requirements_match(requirements, pod["metadata"].get("labels"))
            ]

    def create_workload(self, manifest: KubeObject) -> KubeObject:
        job = self._validated_job(manifest)
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        with self._transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            existing = tx.state["jobs"].get(_key(namespace, name))
            if existing is not None:
                owner = (existing["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
                if owner != MANAGED_BY_VALUE:
                    raise Conflict(
                        f'jobs.batch "{name}" already exists and is not managed by the portal '
                        f"({MANAGED_BY_LABEL}={owner!r}). Delete or rename it."
                    )
                return _clone(existing)
            self._admit_job(tx, job)
            self._schedule_pending(tx)
            return _clone(tx.state["jobs"][_key(namespace, name)])

    def delete_workload(self, namespace: str, name: str) -> bool:
        with self._transaction() as tx:
            key = _key(namespace, name)
            job = tx.state["jobs"].pop(key, None)
            if job is None:
                return False
            tx.state["jobsim"].pop(key, None)
            uid = job["metadata"]["uid"]
            for pod_key, pod in list(tx.state["pods"].items()):
                if self._owner_uid(pod) == uid:
                    self._delete_pod(tx, pod_key)
            tx.dirty = True
            self._bump_rv(tx)
            self._schedule_pending(tx)
            return True

    # ----------------------------------------------------------------------------------------------------------
    # Notebook objects: PersistentVolumeClaims (bound at once by a dynamic provisioner), Services (a ClusterIP
    # from 10.96.0.0/12) and the Jupyter kernels API
    # ----------------------------------------------------------------------------------------------------------
    def ensure_pvc(self, manifest: KubeObject) -> KubeObject:
        claim = _clone(manifest)
        metadata = claim.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        if claim.get("apiVersion") != "v1" or claim.get("kind") != "PersistentVolumeClaim":
            raise Invalid(f"Expected a v1 PersistentVolumeClaim, not {claim.get('apiVersion')}/{claim.get('kind')}.")
        if not name or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise Invalid(f'PersistentVolumeClaim "{name}" is invalid: metadata.name: {_SUBDOMAIN_HELP}')
        storage = ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        try:
            parse_quantity(storage)
        except (ValueError, TypeError):
            raise Invalid(
                f'PersistentVolumeClaim "{name}" is invalid: spec.resources.requests.storage: Required value'
            ) from None
        with self._transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            claims = tx.state.setdefault("pvcs", {})
            existing = claims.get(_key(namespace, name))
            if existing is not None:
                return _clone(existing)
            claim["metadata"] = {**metadata, **self._metadata(tx, name, namespace)}
            claim["spec"].setdefault("volumeMode", "Filesystem")
            claim["spec"]["volumeName"] = f"pvc-{claim['metadata']['uid']}"
            claim["spec"].setdefault("storageClassName", "standard")
            claim["status"] = {
                "phase": "Bound",
                "accessModes": list(claim["spec"].get("accessModes") or ["ReadWriteOnce"]),
                "capacity": {"storage": storage},
            }
            claims[_key(namespace, name)] = claim
            return _clone(claim)

    def delete_pvc(self, namespace: str, name: str) -> bool:
        with self._transaction() as tx:
            if tx.state.setdefault("pvcs", {}).pop(_key(namespace, name), None) is None:
                return False
            self._bump_rv(tx)
            return True

    def get_pvc(self, namespace: str, name: str) -> KubeObject:
        with self._transaction() as tx:
            claim = tx.state.get("pvcs", {}).get(_key(namespace, name))
            if claim is None:
                raise NotFound(f'persistentvolumeclaims "{name}" not found')
            return _clone(claim)

    def ensure_service(self, manifest: KubeObject) -> KubeObject:
        service = _clone(manifest)
        metadata = service.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        if service.get("apiVersion") != "v1" or service.get("kind") != "Service":
            raise Invalid(f"Expected a v1 Service, not {service.get('apiVersion')}/{service.get('kind')}.")
        if not name or len(name) > 63 or not _DNS1123_LABEL.match(name):
            raise Invalid(f'Service "{name}" is invalid: metadata.name: Invalid value: "{name}": {_LABEL_HELP}')
        if not (service.get("spec") or {}).get("ports"):
            raise Invalid(f'Service "{name}" is invalid: spec.ports: Required value')
        with self._transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            services = tx.state.setdefault("services", {})
            existing = services.get(_key(namespace, name))
            if existing is not None:
                return _clone(existing)
            seq = tx.state["service_seq"] = tx.state.get("service_seq", 0) + 1
            service["metadata"] = {**metadata, **self._metadata(tx, name, namespace)}
            ip = f"10.96.{(seq // 250) % 256}.{seq % 250 + 2}"
            service["spec"].update(type=service["spec"].get("type", "ClusterIP"), clusterIP=ip, clusterIPs=[ip])
            service["status"] = {"loadBalancer": {}}
            services[_key(namespace, name)] = service
            return _clone(service)

    def delete_service(self, namespace: str, name: str) -> bool:
        with self._transaction() as tx:
            if tx.state.setdefault("services", {}).pop(_key(namespace, name), None) is None:
                return False
            self._bump_rv(tx)
            return True

    def get_service(self, namespace: str, name: str) -> KubeObject:
        with self._transaction() as tx:
            service = tx.state.get("services", {}).get(_key(namespace, name))
            if service is None:
                raise NotFound(f'services "{name}" not found')
            return _clone(service)

    def notebook_kernels(self, namespace: str, service: str, pod_name: str) -> list[dict] | None:
        """The kernels of a running notebook pod, from the same load model as its GPU utilisation; None when the
        Service or a running pod is missing (a real proxy call would fail the same way)."""
        with self._transaction() as tx:
            if _key(namespace, service) not in tx.state.get("services", {}):
                return None
            key = _key(namespace, pod_name)
            pod, sim = tx.state["pods"].get(key), tx.state["podsim"].get(key) or {}
            if pod is None or sim.get("stage") != "running" or sim.get("running") is None:
                return None
            from .sim_telemetry import kernels, load_kind

            return kernels(load_kind(pod["spec"]["containers"][0]), sim["running"], tx.now)

    # ----------------------------------------------------------------------------------------------------------
    # ConfigMaps
    # ----------------------------------------------------------------------------------------------------------
    def get_config_map(self, namespace: str, name: str) -> KubeObject:
        with self._transaction() as tx:
            config_map = tx.state["configmaps"].get(_key(namespace, name))
            if config_map is None:
                raise NotFound(f'configmaps "{name}" not found')
            return _clone(config_map)

    def apply_config_map(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> KubeObject:
        if len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise Invalid(f'ConfigMap "{name}" is invalid: metadata.name: Invalid value: "{name}": {_SUBDOMAIN_HELP}')
        for key, value in data.items():
            if not isinstance(value, str):
                raise Invalid(f'ConfigMap "{name}" is invalid: data[{key}]: Invalid value: must be a string')
        with self._transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            key = _key(namespace, name)
            config_map = tx.state["configmaps"].get(key)
            if config_map is None:
                config_map = self._new_config_map(
                    tx, namespace, name, data, {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **(labels or {})}
                )
            else:
                merged = {**(config_map["metadata"].get("labels") or {}), **(labels or {})}
                if config_map.get("data", {}) == data and config_map["metadata"].get("labels", {}) == merged:
                    return _clone(config_map)
                config_map["data"] = dict(data)
                config_map["metadata"]["labels"] = merged
                self._touch(tx, config_map)
            if namespace == GPU_OPERATOR_NAMESPACE:
                # The device plugin's config-manager sidecar watches its ConfigMap and reloads.
                for node_name in sorted(tx.state["nodes"]):
                    self._sync_device_plugin(tx, node_name)
            return _clone(config_map)

    # ----------------------------------------------------------------------------------------------------------
    # Diagnostics
    # ----------------------------------------------------------------------------------------------------------
    def pod_events(self, namespace: str, pod_name: str) -> list[KubeObject]:
        with self._transaction() as tx:
            events = [
                event
                for event in tx.state["events"].values()
                if event["metadata"]["namespace"] == namespace
                and event["involvedObject"].get("kind") == "Pod"
                and event["involvedObject"].get("name") == pod_name
            ]
            events.sort(key=lambda e: (e["lastTimestamp"], int(e["metadata"]["resourceVersion"])))
            return _clone(events)

    def pod_logs(self, namespace: str, pod_name: str, tail_lines: int = 200) -> str:
        with self._transaction() as tx:
            key = _key(namespace, pod_name)
            pod = tx.state["pods"].get(key)
            if pod is None:
                raise NotFound(f'pods "{pod_name}" not found')
            sim = tx.state["podsim"].get(key) or {}
            container = pod["spec"]["containers"][0]["name"]
            if not pod["spec"].get("nodeName"):
                raise ClusterError(
                    f'Read logs of pod {namespace}/{pod_name}: container "{container}" in pod "{pod_name}" is '
                    "waiting to start: the pod is not scheduled to a node yet"
                )
            if sim.get("stage") in ("bound", "errimagepull", "backoff"):
                reason = {"bound": "ContainerCreating"}.get(sim["stage"], "trying and failing to pull image")
                raise ClusterError(
                    f'Read logs of pod {namespace}/{pod_name}: container "{container}" in pod "{pod_name}" is '
                    f"waiting to start: {reason}"
                )
            lines = self._log_lines(tx, pod, sim)
            if tail_lines is not None and tail_lines >= 0:
                lines = lines[-tail_lines:] if tail_lines else []
            return "".join(line + "\n" for line in lines)

    # ----------------------------------------------------------------------------------------------------------
    # Admin and test helpers (not part of ClusterBackend)
    # ----------------------------------------------------------------------------------------------------------
    def dcgm_metrics(self) -> dict[str, str]:
        """What dcgm-exporter on each GPU node would serve now (cluster.sim_telemetry), by node name."""
        from .sim_telemetry import render

        with self._transaction() as tx:
            return render(tx.state, tx.now, _gpu_uuid)

    def add_node(self, spec: dict[str, Any]) -> KubeObject:
        """Add a node; Conflict if the name is taken.

        ``spec`` is either a scenario ``nodes:`` entry (the hardware is simulated: GFD labels, device plugin, MIG
        Manager) or a Node object as the API returns it (kept as given, like ``kubectl create -f node.json``; the
        API server assigns a new uid and resourceVersion).
        """
        raw = isinstance(spec.get("metadata"), dict)
        name = spec["metadata"].get("name") if raw else spec.get("name")
        with self._transaction() as tx:
            if name in tx.state["nodes"]:
                raise Conflict(f'nodes "{name}" already exists')
            node = self._add_raw_node(tx, spec) if raw else self._add_node(tx, spec)
            self._schedule_pending(tx)
            return _clone(node)

    def remove_node(self, name: str) -> None:
        """Delete a node; its pods are garbage-collected and their Jobs create replacements."""
        with self._transaction() as tx:
            node = self._node(tx, name)
            del tx.state["nodes"][name]
            tx.state["hw"].pop(name, None)
            for pod_key, pod in list(tx.state["pods"].items()):
                if pod["spec"].get("nodeName") == name:
                    self._delete_pod(tx, pod_key)
            rv = self._bump_rv(tx)
            node["metadata"]["resourceVersion"] = str(rv)
            tx.state["tombstones"].append({"rv": rv, "object": node})
            del tx.state["tombstones"][:-500]
            self._reconcile_jobs(tx)
            self._schedule_pending(tx)

    def set_node_ready(self, name: str, ready: bool) -> KubeObject:
        """Flip the node's Ready condition (NotReady nodes get the not-ready taints; pods are evicted after 300 s)."""
        with self._transaction() as tx:
            node = self._node(tx, name)
            hw = tx.state["hw"][name]
            if hw.get("ready", True) != ready:
                hw["ready"] = ready
                hw["not_ready_since"] = None if ready else tx.now
                self._set_ready_status(node, ready, tx.now)
                self._touch(tx, node)
                self._schedule_pending(tx)
            return _clone(node)

    def set_node_unschedulable(self, name: str, unschedulable: bool = True) -> KubeObject:
        """Cordon or uncordon a node (``kubectl cordon``)."""
        with self._transaction() as tx:
            node = self._node(tx, name)
            if bool(node["spec"].get("unschedulable")) != unschedulable:
                self._set_unschedulable(node, unschedulable)
                self._touch(tx, node)
                self._schedule_pending(tx)
            return _clone(node)

    def reset(self) -> None:
        """Throw away all state and rebuild the cluster from the scenario."""
        with self._transaction(fresh=True):
            pass

    def list_events(self, namespace: str | None = None) -> list[KubeObject]:
        """All stored core/v1 Events (pods and Jobs), oldest first."""
        with self._transaction() as tx:
            events = [
                e for e in tx.state["events"].values() if namespace is None or e["metadata"]["namespace"] == namespace
            ]
            events.sort(key=lambda e: (e["lastTimestamp"], int(e["metadata"]["resourceVersion"])))
            return _clone(events)

    # ----------------------------------------------------------------------------------------------------------
    # State plumbing
    # ----------------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self, fresh: bool = False) -> Iterator[_Txn]:
        with self._thread_lock:
            if self._path is None:
                if self._memory_state is None or fresh:
                    stored = (self._memory_state or {}).get("scenario")
                    self._memory_state = self._build_state(self._clock(), stored)
                tx = _Txn(self._memory_state, self._clock())
                self._advance(tx)
                yield tx
                return
            assert self._lock_path is not None
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                now = self._clock()
                state = self._load()
                if fresh:
                    state = self._build_state(now, (state or {}).get("scenario"))
                tx = _Txn(state if state is not None else self._build_state(now), now)
                tx.dirty = fresh or state is None
                try:
                    self._advance(tx)
                    yield tx
                except ClusterError:
                    # The call was refused before it changed anything; what the clock moved on is still kept.
                    if tx.dirty:
                        self._save(tx.state)
                    raise
                except BaseException:
                    self._cache = None  # the in-memory copy may be half-modified
                    raise
                if tx.dirty:
                    self._save(tx.state)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def _load(self) -> dict[str, Any] | None:
        assert self._path is not None
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return None
        signature = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._cache is not None and self._cache[0] == signature:
            return self._cache[1]
        try:
            with open(self._path, encoding="utf-8") as handle:
                state = json.load(handle)
        except json.JSONDecodeError as error:
            raise ClusterError(
                f"The simulated cluster state {self._path} is not valid JSON ({error}). Delete the file to rebuild "
                "the cluster from its scenario."
            ) from None
        if state.get("format") != STATE_FORMAT:
            return None  # written by an incompatible version: rebuild from the scenario
        self._cache = (signature, state)
        return state

    def _save(self, state: dict[str, Any]) -> None:
        assert self._path is not None
        fd, temp = tempfile.mkstemp(prefix=self._path.name + ".", suffix=".tmp", dir=self._path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                # json.dumps (C encoder in one go) is far faster than json.dump's chunked pure-Python path.
                handle.write(json.dumps(state, separators=(",", ":")))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self._path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            self._cache = None
            raise
        stat = os.stat(self._path)
        self._cache = ((stat.st_ino, stat.st_mtime_ns, stat.st_size), state)

    def _scenario_dict(self, stored: dict[str, Any] | None = None) -> dict[str, Any]:
        """The scenario given at construction; without one, the one the existing state was built from."""
        if self._scenario_source is None and stored is not None:
            return _clone(stored)
        if self._scenario is None:
            self._scenario = load_scenario(self._scenario_source)
        return _clone(self._scenario)

    def _build_state(self, now: float, stored_scenario: dict[str, Any] | None = None) -> dict[str, Any]:
        scenario = self._scenario_dict(stored_scenario)
        timing = {**DEFAULT_TIMING, **(scenario.get("timing") or {})}
        state: dict[str, Any] = {
            "format": STATE_FORMAT,
            "rv": 0,
            "created": now,
            "scenario": copy.deepcopy(scenario),
            "timing": timing,
            "kubernetes_version": str(scenario.get("kubernetes_version") or DEFAULT_KUBERNETES_VERSION),
            "node_seq": 0,
            "namespaces": {},
            "nodes": {},
            "hw": {},
            "jobs": {},
            "jobsim": {},
            "pods": {},
            "podsim": {},
            "configmaps": {},
            "events": {},
            "tombstones": [],
        }
        tx = _Txn(state, now)
        for namespace in ["default", "kube-system", "kube-public", "kube-node-lease", GPU_OPERATOR_NAMESPACE] + list(
            scenario.get("namespaces") or []
        ):
            if namespace not in state["namespaces"]:
                self._new_namespace(tx, namespace, None)
        for spec in _expand_node_specs(scenario):
            self._add_node(tx, spec)
        return state

    def _bump_rv(self, tx: _Txn) -> int:
        tx.state["rv"] += 1
        tx.dirty = True
        return tx.state["rv"]

    def _touch(self, tx: _Txn, obj: KubeObject) -> None:
        obj["metadata"]["resourceVersion"] = str(self._bump_rv(tx))

    def _node(self, tx: _Txn, name: str) -> KubeObject:
        node = tx.state["nodes"].get(name)
        if node is None:
            raise NotFound(f'nodes "{name}" not found')
        return node

    def _node_events_since(self, tx: _Txn, since: int | None) -> list[WatchEvent]:
        found: list[tuple[int, WatchEvent]] = []
        for name, node in tx.state["nodes"].items():
            rv = int(node["metadata"]["resourceVersion"])
            if since is None or rv > since:
                created = tx.state["hw"].get(name, {}).get("created_rv", 0)
                kind = "ADDED" if since is None or created > since else "MODIFIED"
                found.append((rv, WatchEvent(type=kind, object=copy.deepcopy(node))))
        if since is not None:
            for tombstone in tx.state["tombstones"]:
                if tombstone["rv"] > since and tombstone["object"]["metadata"]["name"] not in tx.state["nodes"]:
                    found.append(
                        (tombstone["rv"], WatchEvent(type="DELETED", object=copy.deepcopy(tombstone["object"])))
                    )
        found.sort(key=lambda item: item[0])
        return [event for _, event in found]

    # ----------------------------------------------------------------------------------------------------------
    # Object construction
    # ----------------------------------------------------------------------------------------------------------
    def _metadata(self, tx: _Txn, name: str, namespace: str | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        metadata.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(self._bump_rv(tx)),
            creationTimestamp=_timestamp(tx.now),
        )
        return metadata

    def _new_namespace(self, tx: _Txn, name: str, labels: dict[str, str] | None) -> KubeObject:
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                **self._metadata(tx, name),
                "labels": {"kubernetes.io/metadata.name": name, **(labels or {})},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        tx.state["namespaces"][name] = namespace
        return namespace

    def _new_config_map(
        self, tx: _Txn, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None
    ) -> KubeObject:
        metadata = self._metadata(tx, name, namespace)
        if labels:
            metadata["labels"] = dict(labels)
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict(data)}
        tx.state["configmaps"][_key(namespace, name)] = config_map
        return config_map

    def _add_node(self, tx: _Txn, spec: dict[str, Any]) -> KubeObject:
        name = str(spec.get("name") or "")
        if not name or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise Invalid(f'Node "{name}" is invalid: metadata.name: Invalid value: "{name}": {_SUBDOMAIN_HELP}')
        now = tx.now
        index = tx.state["node_seq"]
        tx.state["node_seq"] += 1
        ready = bool(spec.get("ready", True))
        gpu_spec = spec.get("gpu")
        hw: dict[str, Any] = {
            "index": index,
            "ready": ready,
            "not_ready_since": None if ready else now,
            "gpu": None,
            "next_ip": 2,
        }
        os_image = str(spec.get("os_image") or "Ubuntu 22.04.4 LTS")
        kernel = str(spec.get("kernel") or "5.15.0-105-generic")
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "feature.node.kubernetes.io/kernel-version.full": kernel,
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        }
        taints: list[dict[str, Any]] = []
        if gpu_spec:
            product = self._product(spec)
            count = int(gpu_spec.get("count", 1))
            mig_spec = spec.get("mig") or {}
            strategy = str(mig_spec.get("strategy") or "none")
            if strategy not in ("none", "single", "mixed"):
                raise Invalid(f"Node {name}: mig.strategy must be none, single or mixed, not {strategy!r}.")
            config_name = mig_spec.get("config") or ("all-disabled" if product.mig_capable else None)
            gpus = self._scenario_mig_layout(name, product, count, config_name, mig_spec.get("layout"))
            sharing_spec = spec.get("time_slicing") or {}
            replicas = int(sharing_spec.get("replicas") or 1)
            rename = bool(sharing_spec.get("rename", False))
            hw.update(
                gpu={
                    # The name as the driver prints it is authoritative for the product label.
                    "product": str(gpu_spec["product"]),
                    "count": count,
                    "memory_mb": gpu_spec.get("memory_mb"),
                    "machine": gpu_spec.get("machine") or spec.get("machine") or "Standard-PC",
                },
                driver=str(spec.get("driver") or "550.54.15"),
                cuda=str(spec.get("cuda") or "12.4"),
                device_plugin=bool(spec.get("device_plugin", True)),
                base_strategy=strategy,
                mig={"strategy": strategy, "config": config_name, "gpus": gpus, "state": "success"},
                sharing={"resources": {"nvidia.com/gpu": replicas}, "rename": rename} if replicas > 1 else {},
                gfd_timestamp=int(now),
                gfd_keys=[],
                gpu_resources=[],
                mig_op=None,
                mig_failed_config=None,
            )
            if mig_spec.get("fail_next"):
                hw["mig_fail_next"] = str(mig_spec["fail_next"])
            labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
            if product.mig_capable and config_name:
                labels[MIG_CONFIG_LABEL] = str(config_name)
            if replicas > 1:
                config_key = str(sharing_spec.get("config") or sanitise_product_name(product.name).lower())
                labels[DEVICE_PLUGIN_CONFIG_LABEL] = config_key
                self._write_device_plugin_config(tx, config_key, strategy, replicas, rename)
            if spec.get("taint", True):
                taints.append(dict(GPU_TAINT))
        labels.update({str(k): str(v) for k, v in (spec.get("labels") or {}).items()})
        taints.extend(copy.deepcopy(spec.get("taints") or []))

        cpu = parse_quantity(spec.get("cpu", 16))
        memory = parse_quantity(spec.get("memory", "64Gi"))
        reserved = spec.get("reserved") or {}
        cpu_reserved = parse_quantity(reserved.get("cpu", "500m" if cpu >= 8 else "100m"))
        memory_reserved = parse_quantity(reserved.get("memory", "1Gi")) + 100 * 2**20  # + eviction threshold
        storage = parse_quantity(spec.get("ephemeral_storage", "1787Gi"))
        capacity = {
            "cpu": _format_cpu(cpu),
            "ephemeral-storage": _format_memory(storage),
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": _format_memory(memory),
            "pods": str(int(spec.get("pods", 110))),
        }
        allocatable = {
            **capacity,
            "cpu": _format_cpu(cpu - cpu_reserved),
            "ephemeral-storage": str(int(storage * 9 / 10)),
            "memory": _format_memory(memory - memory_reserved),
        }
        internal_ip = f"10.0.{index // 200}.{index % 200 + 10}"
        node_metadata = self._metadata(tx, name)
        node_metadata["labels"] = dict(sorted(labels.items()))
        node_metadata["annotations"] = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        node: KubeObject = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": node_metadata,
            "spec": {"podCIDR": f"10.244.{index}.0/24", "podCIDRs": [f"10.244.{index}.0/24"]},
            "status": {
                "addresses": [
                    {"address": internal_ip, "type": "InternalIP"},
                    {"address": name, "type": "Hostname"},
                ],
                "allocatable": allocatable,
                "capacity": capacity,
                "conditions": [],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"boot/{name}/{now}")),
                    "containerRuntimeVersion": str(spec.get("container_runtime") or "containerd://1.7.13"),
                    "kernelVersion": kernel,
                    "kubeProxyVersion": str(spec.get("kubelet") or tx.state["kubernetes_version"]),
                    "kubeletVersion": str(spec.get("kubelet") or tx.state["kubernetes_version"]),
                    "machineID": _stable_hex("machine", name, length=32),
                    "operatingSystem": "linux",
                    "osImage": os_image,
                    "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)).upper(),
                },
            },
        }
        if taints:
            node["spec"]["taints"] = taints
        if spec.get("cordoned"):
            self._set_unschedulable(node, True)
        self._set_ready_status(node, ready, now, since=now)
        tx.state["nodes"][name] = node
        hw["created_rv"] = int(node_metadata["resourceVersion"])
        tx.state["hw"][name] = hw
        if hw["gpu"] is not None:
            self._render_node(tx, name, touch=False)
        return node

    def _add_raw_node(self, tx: _Txn, obj: KubeObject) -> KubeObject:
        node = copy.deepcopy(obj)
        node["apiVersion"], node["kind"] = "v1", "Node"
        name = str(node["metadata"].get("name") or "")
        if not name or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            raise Invalid(f'Node "{name}" is invalid: metadata.name: Invalid value: "{name}": {_SUBDOMAIN_HELP}')
        metadata = node["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "managedFields"):
            metadata.pop(key, None)
        node["metadata"] = {**self._metadata(tx, name), **{k: v for k, v in metadata.items() if k != "name"}}
        node.setdefault("spec", {})
        status = node.setdefault("status", {})
        status.setdefault("capacity", {"cpu": "1", "memory": "1Gi", "pods": "110"})
        status.setdefault("allocatable", dict(status["capacity"]))
        ready_condition = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        ready = ready_condition is None or ready_condition.get("status") == "True"
        index = tx.state["node_seq"]
        tx.state["node_seq"] += 1
        status.setdefault("addresses", [{"address": f"10.0.{index // 200}.{index % 200 + 10}", "type": "InternalIP"}])
        tx.state["nodes"][name] = node
        tx.state["hw"][name] = {
            "index": index,
            "ready": ready,
            "not_ready_since": None if ready else tx.now,
            "gpu": None,
            "next_ip": 2,
            "raw": True,
            "created_rv": int(node["metadata"]["resourceVersion"]),
        }
        return node

    def _product(self, spec: dict[str, Any]) -> GpuProduct:
        try:
            return lookup_product(str(spec["gpu"]["product"]))
        except KeyError as error:
            raise Invalid(f"Node {spec.get('name')}: {error.args[0]}") from None

    def _scenario_mig_layout(
        self, name: str, product: GpuProduct, count: int, config_name: str | None, layout: Any
    ) -> list[dict[str, int] | None]:
        if layout is not None:
            per_gpu = layout if isinstance(layout, list) else [layout] * count
            if len(per_gpu) != count:
                raise Invalid(f"Node {name}: mig.layout lists {len(per_gpu)} GPUs but the node has {count}.")
            gpus = [None if devices is None else {str(k): int(v) for k, v in devices.items()} for devices in per_gpu]
        elif config_name:
            presets = preset_mig_configs(product)
            if config_name not in presets:
                raise Invalid(
                    f"Node {name}: MIG config {config_name!r} is not a GPU Operator preset for {product.name}; "
                    f"give mig.layout explicitly. Presets: {', '.join(sorted(presets))}."
                )
            devices = presets[config_name]
            gpus = [None if devices is None else dict(devices) for _ in range(count)]
        else:
            gpus = [None] * count
        for index, devices in enumerate(gpus):
            if devices is not None and not layout_fits(product, devices):
                raise Invalid(f"Node {name}: GPU {index} cannot hold MIG devices {devices} on a {product.name}.")
        return gpus

    def _write_device_plugin_config(self, tx: _Txn, key: str, strategy: str, replicas: int, rename: bool) -> None:
        cm_key = _key(GPU_OPERATOR_NAMESPACE, DEVICE_PLUGIN_CONFIG_MAP)
        config_map = tx.state["configmaps"].get(cm_key)
        text = _device_plugin_config_text(strategy, replicas, rename)
        if config_map is None:
            self._new_config_map(tx, GPU_OPERATOR_NAMESPACE, DEVICE_PLUGIN_CONFIG_MAP, {key: text}, None)
        elif config_map["data"].get(key) != text:
            config_map["data"][key] = text
            self._touch(tx, config_map)

    def _set_unschedulable(self, node: KubeObject, unschedulable: bool) -> None:
        spec = node["spec"]
        taints = [t for t in spec.get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT_KEY]
        if unschedulable:
            spec["unschedulable"] = True
            taints.append({"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"})
        else:
            spec.pop("unschedulable", None)
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    def _set_ready_status(self, node: KubeObject, ready: bool, now: float, since: float | None = None) -> None:
        stamp = _timestamp(now)
        since_stamp = _timestamp(since if since is not None else now)
        ready_condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
            "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": "kubelet is posting ready status"
            if ready
            else "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
            "message:Network plugin returns error: cni plugin not initialized",
        }
        pressure = [
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ]
        conditions = node["status"].get("conditions") or []
        previous = {c["type"]: c for c in conditions}
        node["status"]["conditions"] = [
            {
                "type": kind,
                "status": "False",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": previous.get(kind, {}).get("lastTransitionTime", since_stamp),
                "reason": reason,
                "message": message,
            }
            for kind, reason, message in pressure
        ] + [ready_condition]
        # The node lifecycle controller taints NotReady nodes (TaintNodesByCondition / taint-based eviction).
        spec = node["spec"]
        taints = [t for t in spec.get("taints") or [] if t.get("key") != NOT_READY_TAINT_KEY]
        if not ready:
            taints.append({"key": NOT_READY_TAINT_KEY, "effect": "NoSchedule"})
            taints.append({"key": NOT_READY_TAINT_KEY, "effect": "NoExecute", "timeAdded": stamp})
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    # ----------------------------------------------------------------------------------------------------------
    # GPU Operator: GFD labels, device plugin resources, MIG Manager
    # ----------------------------------------------------------------------------------------------------------
    def _render_node(self, tx: _Txn, name: str, touch: bool = True) -> None:
        node, hw = tx.state["nodes"][name], tx.state["hw"][name]
        if hw.get("gpu") is None:
            return
        labels, resources = render_gpu_node(hw)
        metadata_labels = node["metadata"].setdefault("labels", {})
        status = node["status"]
        before = (dict(metadata_labels), dict(status["capacity"]), dict(status["allocatable"]))
        for key in hw.get("gfd_keys") or []:
            if key not in labels:
                metadata_labels.pop(key, None)
        metadata_labels.update(labels)
        hw["gfd_keys"] = sorted(labels)
        # The kubelet keeps an extended resource it once saw, at 0, after the plugin stops advertising it.
        for resource in hw.get("gpu_resources") or []:
            if resource not in resources:
                status["capacity"][resource] = "0"
                status["allocatable"][resource] = "0"
        paused = bool(hw.get("mig_op"))
        for resource, amount in resources.items():
            status["capacity"][resource] = str(amount)
            status["allocatable"][resource] = "0" if paused else str(amount)
        hw["gpu_resources"] = sorted(set(hw.get("gpu_resources") or []) | set(resources))
        # The API server serialises maps with sorted keys.
        node["metadata"]["labels"] = dict(sorted(metadata_labels.items()))
        status["capacity"] = dict(sorted(status["capacity"].items()))
        status["allocatable"] = dict(sorted(status["allocatable"].items()))
        metadata_labels = node["metadata"]["labels"]
        tx.dirty = True
        if touch and before != (metadata_labels, status["capacity"], status["allocatable"]):
            self._touch(tx, node)

    def _gpu_pods_on(self, tx: _Txn, node_name: str) -> list[str]:
        names = []
        for pod in tx.state["pods"].values():
            if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in _TERMINAL:
                continue
            if any(r.startswith("nvidia.com/") for r in _pod_requests(pod["spec"])):
                names.append(_key(pod["metadata"]["namespace"], pod["metadata"]["name"]))
        return sorted(names)

    def _sync_mig_manager(self, tx: _Txn, name: str) -> None:
        """Start, retarget or finish a MIG reconfiguration, the way nvidia-mig-manager reacts to its label."""
        node, hw = tx.state["nodes"].get(name), tx.state["hw"].get(name)
        if node is None or not hw or hw.get("gpu") is None:
            return
        if not lookup_product(hw["gpu"]["product"]).mig_capable:
            return
        op = hw.get("mig_op")
        wanted = (node["metadata"].get("labels") or {}).get(MIG_CONFIG_LABEL)
        if wanted is None:
            if op is None:
                return
            wanted = op["config"]  # the label was removed mid-way: MIG Manager finishes what it started
        if op is None:
            if wanted == hw["mig"].get("config"):
                if hw["mig"].get("state") != "success":
                    hw["mig"]["state"] = "success"
                    hw["mig_failed_config"] = None
                    self._render_node(tx, name)
                return
            if wanted == hw.get("mig_failed_config"):
                return  # MIG Manager only tries again when the label changes
            hw["mig_op"] = {"config": wanted, "started": tx.now, "reboots": self._mig_mode_changes(tx, hw, wanted)}
            hw["mig"]["state"] = "pending"
            self._render_node(tx, name)
            return
        if op["config"] != wanted:
            op.update(config=wanted, started=tx.now, reboots=self._mig_mode_changes(tx, hw, wanted), phase=None)
            if hw["mig"].get("state") != "pending":
                hw["mig"]["state"] = "pending"
                self._render_node(tx, name)
            tx.dirty = True
            return
        seconds = tx.state["timing"]["mig_reconfigure_seconds"]
        if op.get("reboots") and op.get("phase") != "rebooting" and tx.now >= op["started"] + seconds / 2:
            # Turning MIG mode on or off needs a GPU reset; MIG Manager (WITH_REBOOT=true) reboots the node for it.
            op["phase"] = "rebooting"
            hw["mig"]["state"] = "rebooting"
            self._render_node(tx, name)
        if tx.now < op["started"] + seconds:
            return
        layout = self._resolve_mig_config(tx, hw, wanted)
        busy = self._gpu_pods_on(tx, name)
        injected = hw.pop("mig_fail_next", None)
        hw["mig_op"] = None
        if isinstance(layout, str) or busy or injected:
            hw["mig"]["state"] = "failed"
            hw["mig_failed_config"] = wanted
            hw["mig_failure"] = (
                layout if isinstance(layout, str) else f"GPUs in use by {', '.join(busy)}" if busy else injected
            )
        else:
            hw["mig"].update(config=wanted, gpus=layout, state="success")
            hw["mig_failed_config"] = None
            hw["mig_failure"] = None
        self._render_node(tx, name)
        self._schedule_pending(tx)

    def _mig_mode_changes(self, tx: _Txn, hw: dict[str, Any], config_name: str) -> bool:
        """Whether applying the config turns MIG mode on or off on some GPU (which takes a reboot)."""
        layout = self._resolve_mig_config(tx, hw, config_name)
        if isinstance(layout, str):
            return False
        current = hw["mig"].get("gpus") or [None] * len(layout)
        return any((a is None) != (b is None) for a, b in zip(current, layout, strict=False))

    def fail_next_mig_reconfiguration(self, name: str, reason: str = "injected failure") -> None:
        """Make MIG Manager's next reconfiguration of this node end in ``failed`` (for tests and the demo of the
        failure path); the scenario can ask for the same with ``mig: {fail_next: "<reason>"}``."""
        with self._transaction() as tx:
            hw = tx.state["hw"].get(name)
            if hw is None or hw.get("gpu") is None:
                raise NotFound(f'nodes "{name}" not found')
            hw["mig_fail_next"] = reason
            tx.dirty = True

    def mig_failure(self, name: str) -> str | None:
        """Why MIG Manager last failed on this node (what its log would say), or None."""
        with self._transaction() as tx:
            return (tx.state["hw"].get(name) or {}).get("mig_failure")

    def _resolve_mig_config(self, tx: _Txn, hw: dict[str, Any], config_name: str) -> list[dict[str, int] | None] | str:
        """The per-GPU layout of a named mig-parted config, or why it cannot be applied."""
        product = lookup_product(hw["gpu"]["product"])
        count = int(hw["gpu"]["count"])
        for key in sorted(tx.state["configmaps"]):
            config_map = tx.state["configmaps"][key]
            if config_map["metadata"]["namespace"] != GPU_OPERATOR_NAMESPACE:
                continue
            text = (config_map.get("data") or {}).get("config.yaml")
            if not text:
                continue
            try:
                parsed = yaml.safe_load(text) or {}
            except yaml.YAMLError:
                continue
            entries = (parsed.get("mig-configs") or {}).get(config_name) if isinstance(parsed, dict) else None
            if entries:
                return self._layout_from_mig_parted(product, count, hw["mig"].get("gpus") or [None] * count, entries)
        presets = preset_mig_configs(product)
        if config_name not in presets:
            return f'no MIG configuration named "{config_name}" for {product.name}'
        devices = presets[config_name]
        return [None if devices is None else dict(devices) for _ in range(count)]

    def _layout_from_mig_parted(
        self, product: GpuProduct, count: int, current: list[Any], entries: list[Any]
    ) -> list[dict[str, int] | None] | str:
        layout = [None if devices is None else dict(devices) for devices in current]
        matched = False
        for entry in entries:
            if not isinstance(entry, dict):
                return "malformed mig-parted entry"
            device_filter = entry.get("device-filter")
            if device_filter:
                allowed = [device_filter] if isinstance(device_filter, str) else list(device_filter)
                if product.pci_device_id.upper() not in {str(item).upper() for item in allowed}:
                    continue
            devices = entry.get("devices")
            indices = list(range(count)) if devices == "all" else devices
            if not isinstance(indices, list) or any(not isinstance(i, int) or not 0 <= i < count for i in indices):
                return f"invalid devices {devices!r} for a node with {count} GPUs"
            mig_devices = {str(k): int(v) for k, v in (entry.get("mig-devices") or {}).items()}
            for index in indices:
                layout[index] = dict(mig_devices) if entry.get("mig-enabled") else None
                if layout[index] is not None and not layout_fits(product, layout[index]):
                    return f"GPU {index}: MIG devices {mig_devices} do not fit on a {product.name}"
            matched = True
        if not matched:
            return f"no entry of the configuration applies to device {product.pci_device_id}"
        return layout

    def _sync_device_plugin(self, tx: _Txn, name: str) -> None:
        """Reload the device plugin's config for this node, like its config-manager sidecar does."""
        node, hw = tx.state["nodes"].get(name), tx.state["hw"].get(name)
        if node is None or not hw or hw.get("gpu") is None:
            return
        wanted = (node["metadata"].get("labels") or {}).get(DEVICE_PLUGIN_CONFIG_LABEL)
        strategy, sharing = hw["base_strategy"], {}
        if wanted is not None:
            config = None
            for key in sorted(tx.state["configmaps"]):
                config_map = tx.state["configmaps"][key]
                if config_map["metadata"]["namespace"] == GPU_OPERATOR_NAMESPACE and wanted in (
                    config_map.get("data") or {}
                ):
                    try:
                        config = yaml.safe_load(config_map["data"][wanted]) or {}
                    except yaml.YAMLError:
                        config = None
                    break
            if not isinstance(config, dict):
                return  # an unknown or unreadable config: the plugin keeps the one it runs with
            flags = config.get("flags") or {}
            if flags.get("migStrategy") in ("none", "single", "mixed"):
                strategy = flags["migStrategy"]
            time_slicing = (config.get("sharing") or {}).get("timeSlicing") or {}
            resources = {
                str(r.get("name")): int(r.get("replicas") or 1)
                for r in time_slicing.get("resources") or []
                if isinstance(r, dict) and r.get("name")
            }
            if any(replicas > 1 for replicas in resources.values()):
                sharing = {"resources": resources, "rename": bool(time_slicing.get("renameByDefault", False))}
        if hw["mig"].get("strategy") != strategy or (hw.get("sharing") or {}) != sharing:
            hw["mig"]["strategy"] = strategy
            hw["sharing"] = sharing
            self._render_node(tx, name)
            self._schedule_pending(tx)

    # ----------------------------------------------------------------------------------------------------------
    # Job admission
    # ----------------------------------------------------------------------------------------------------------
    def _validated_job(self, manifest: KubeObject) -> KubeObject:
        if not isinstance(manifest, dict):
            raise Invalid("A workload manifest must be a batch/v1 Job object.")
        try:
            job = _clone(manifest)
        except (TypeError, ValueError) as error:
            raise Invalid(f"The Job manifest is not plain JSON data: {error}.") from None
        metadata = job.setdefault("metadata", {})
        name = str(metadata.get("name") or "")
        metadata.setdefault("namespace", "default")
        errors: list[str] = []
        if job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
            raise Invalid(
                f"The simulated cluster creates batch/v1 Jobs, not {job.get('apiVersion')}/{job.get('kind')}."
            )
        if not name:
            errors.append("metadata.name: Required value: name or generateName is required")
        elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            errors.append(f'metadata.name: Invalid value: "{name}": {_SUBDOMAIN_HELP}')
        elif len(name) > 63:
            errors.append(f'spec.template.labels: Invalid value: "{name}": must be no more than 63 characters')
        spec = job.setdefault("spec", {})
        template = spec.setdefault("template", {})
        pod_spec = template.setdefault("spec", {})
        containers = pod_spec.get("containers") or []
        restart = pod_spec.get("restartPolicy") or "Always"
        if restart not in ("OnFailure", "Never"):
            errors.append(
                f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": supported values: '
                '"OnFailure", "Never"'
            )
        if not containers:
            errors.append("spec.template.spec.containers: Required value")
        seen: set[str] = set()
        for index, container in enumerate(containers):
            path = f"spec.template.spec.containers[{index}]"
            cname = str(container.get("name") or "")
            if not cname:
                errors.append(f"{path}.name: Required value")
            elif not _DNS1123_LABEL.match(cname) or len(cname) > 63:
                errors.append(f'{path}.name: Invalid value: "{cname}": {_LABEL_HELP}')
            elif cname in seen:
                errors.append(f'{path}.name: Duplicate value: "{cname}"')
            seen.add(cname)
            if not container.get("image"):
                errors.append(f"{path}.image: Required value")
            errors.extend(self._resource_errors(path, container.get("resources") or {}))
        for field in ("parallelism", "completions"):
            value = spec.get(field, 1)
            if not isinstance(value, int) or value < 0:
                errors.append(f"spec.{field}: Invalid value: {value}: must be greater than or equal to 0")
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
            errors.append(f"spec.activeDeadlineSeconds: Invalid value: {deadline}: must be greater than 0")
        if errors:
            detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise Invalid(f'Job.batch "{name}" is invalid: {detail}')
        return job

    def _resource_errors(self, path: str, resources: dict[str, Any]) -> list[str]:
        errors: list[str] = []
        parsed: dict[str, dict[str, Fraction]] = {"limits": {}, "requests": {}}
        for section in ("limits", "requests"):
            for resource, value in (resources.get(section) or {}).items():
                try:
                    quantity = parse_quantity(value)
                except ValueError as error:
                    errors.append(f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": {error}')
                    continue
                if quantity < 0:
                    errors.append(
                        f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": must be greater than or '
                        "equal to 0"
                    )
                if _is_extended(resource) and quantity.denominator != 1:
                    errors.append(
                        f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": must be an integer'
                    )
                parsed[section][resource] = quantity
        limits, requests = parsed["limits"], parsed["requests"]
        for resource, quantity in requests.items():
            if _is_extended(resource):
                if resource not in limits:
                    errors.append(
                        f"{path}.resources.limits: Required value: Limit must be set for non overcommitable resources"
                    )
                elif limits[resource] != quantity:
                    errors.append(
                        f'{path}.resources.requests[{resource}]: Invalid value: "{resources["requests"][resource]}": '
                        f"must be equal to {resource} limit"
                    )
            elif resource in limits and quantity > limits[resource]:
                errors.append(
                    f'{path}.resources.requests[{resource}]: Invalid value: "{resources["requests"][resource]}": '
                    f"must be less than or equal to {resource} limit"
                )
        return errors

    def _admit_job(self, tx: _Txn, job: KubeObject) -> None:
        """Store the Job with the API server's defaults, then let the Job controller create its pod."""
        metadata = job["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        stamp = self._metadata(tx, name, namespace)
        uid = stamp["uid"]
        spec = job["spec"]
        template = spec["template"]
        template_metadata = template.setdefault("metadata", {})
        template_labels = template_metadata.setdefault("labels", {})
        template_labels.setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        template_labels["controller-uid"] = uid
        template_labels["job-name"] = name
        labels = metadata.get("labels") or dict(template_labels)  # v1.20 defaults Job labels from the template
        labels.setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        metadata.update(stamp)
        metadata["labels"] = labels
        metadata.pop("generateName", None)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec["selector"] = {"matchLabels": {"controller-uid": uid}}
        pod_spec = template["spec"]
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("securityContext", {})
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        for container in pod_spec.get("containers") or []:
            image = str(container.get("image"))
            tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
            latest = not tagged or image.endswith(":latest")
            container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            resources = container.setdefault("resources", {})
            # Requests default to limits where only limits are given (API defaulting).
            for resource, value in (resources.get("limits") or {}).items():
                resources.setdefault("requests", {}).setdefault(resource, value)
        job["status"] = {"startTime": _timestamp(tx.now)}
        if not spec["parallelism"] or not spec["completions"]:
            job["status"].pop("startTime")
        key = _key(namespace, name)
        tx.state["jobs"][key] = job
        tx.state["jobsim"][key] = {"next_pod_at": tx.now, "finished": False, "started": tx.now}
        self._reconcile_job(tx, key)

    # ----------------------------------------------------------------------------------------------------------
    # Job controller
    # ----------------------------------------------------------------------------------------------------------
    def _owner_uid(self, pod: KubeObject) -> str | None:
        for owner in pod["metadata"].get("ownerReferences") or []:
            if owner.get("controller"):
                return owner.get("uid")
        return None

    def _job_pods(self, tx: _Txn, job_key: str) -> list[tuple[str, KubeObject]]:
        return [
            (key, tx.state["pods"][key])
            for key, sim in tx.state["podsim"].items()
            if sim.get("job") == job_key and key in tx.state["pods"]
        ]

    def _pods_by_job(self, tx: _Txn) -> dict[str, list[tuple[str, KubeObject]]]:
        index: dict[str, list[tuple[str, KubeObject]]] = {}
        for key, sim in tx.state["podsim"].items():
            if key in tx.state["pods"]:
                index.setdefault(sim.get("job", ""), []).append((key, tx.state["pods"][key]))
        return index

    def _reconcile_jobs(self, tx: _Txn) -> None:
        index = self._pods_by_job(tx)
        for key, sim in tx.state["jobsim"].items():
            if not sim.get("finished"):
                self._reconcile_job(tx, key, index.get(key, []))

    def _reconcile_job(self, tx: _Txn, key: str, pods: list[tuple[str, KubeObject]] | None = None) -> None:
        job = tx.state["jobs"].get(key)
        sim = tx.state["jobsim"].get(key)
        if job is None or sim is None or sim.get("finished"):
            return
        spec, status = job["spec"], job["status"]
        if not spec.get("parallelism") or not spec.get("completions"):
            return
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and tx.now >= sim["started"] + deadline:
            self._fail_job(
                tx, key, sim["started"] + deadline, "DeadlineExceeded", "Job was active longer than specified deadline"
            )
            return
        if pods is None:
            pods = self._job_pods(tx, key)
        active = [p for _, p in pods if p["status"].get("phase") not in _TERMINAL]
        if status.get("succeeded", 0) >= spec["completions"] or active:
            self._set_job_counts(tx, job, len(active))
            return
        if status.get("failed", 0) > spec.get("backoffLimit", 6):
            when = sim.get("last_failure_at", tx.now)
            self._fail_job(tx, key, when, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return
        if tx.now >= sim.get("next_pod_at", tx.now):
            self._create_pod(tx, key)
            self._set_job_counts(tx, job, 1)
        else:
            self._set_job_counts(tx, job, 0)

    def _set_job_counts(self, tx: _Txn, job: KubeObject, active: int) -> None:
        status = job["status"]
        if status.get("active", 0) != active:
            if active:
                status["active"] = active
            else:
                status.pop("active", None)
            self._touch(tx, job)

    def _job_condition(self, kind: str, when: float, reason: str | None = None, message: str | None = None) -> dict:
        condition: dict[str, Any] = {
            "type": kind,
            "status": "True",
            "lastProbeTime": _timestamp(when),
            "lastTransitionTime": _timestamp(when),
        }
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        return condition

    def _fail_job(self, tx: _Txn, key: str, when: float, reason: str, message: str) -> None:
        job, sim = tx.state["jobs"][key], tx.state["jobsim"][key]
        status = job["status"]
        killed = 0
        for pod_key, pod in self._job_pods(tx, key):
            if pod["status"].get("phase") not in _TERMINAL:
                killed += 1
                self._event(
                    tx,
                    job,
                    "Normal",
                    "SuccessfulDelete",
                    f"Deleted pod: {pod['metadata']['name']}",
                    "job-controller",
                    when=when,
                )
                self._delete_pod(tx, pod_key)
        if killed:
            status["failed"] = status.get("failed", 0) + killed
        status.pop("active", None)
        status.setdefault("conditions", []).append(self._job_condition("Failed", when, reason, message))
        sim["finished"] = True
        self._event(tx, job, "Warning", reason, message, "job-controller", when=when)
        self._touch(tx, job)

    def _on_pod_terminated(self, tx: _Txn, job_key: str | None, when: float, succeeded: bool) -> None:
        job, sim = tx.state["jobs"].get(job_key or ""), tx.state["jobsim"].get(job_key or "")
        if job is None or sim is None or sim.get("finished"):
            return
        status = job["status"]
        status.pop("active", None)
        if succeeded:
            status["succeeded"] = status.get("succeeded", 0) + 1
            if status["succeeded"] >= job["spec"].get("completions", 1):
                status["completionTime"] = _timestamp(when)
                status.setdefault("conditions", []).append(self._job_condition("Complete", when))
                sim["finished"] = True
                self._event(tx, job, "Normal", "Completed", "Job completed", "job-controller", when=when)
        else:
            status["failed"] = status.get("failed", 0) + 1
            delay = min(tx.state["timing"]["job_backoff_seconds"] * 2 ** (status["failed"] - 1), 360.0)
            sim.update(next_pod_at=when + delay, last_failure_at=when)
        self._touch(tx, job)

    # ----------------------------------------------------------------------------------------------------------
    # Pods
    # ----------------------------------------------------------------------------------------------------------
    def _create_pod(self, tx: _Txn, job_key: str) -> KubeObject:
        job = tx.state["jobs"][job_key]
        job_meta = job["metadata"]
        namespace = job_meta["namespace"]
        template = copy.deepcopy(job["spec"]["template"])
        while True:
            suffix = "".join(self._random.choice(_GENERATE_NAME_ALPHABET) for _ in range(5))
            name = f"{job_meta['name']}-{suffix}"
            if _key(namespace, name) not in tx.state["pods"]:
                break
        metadata = {"generateName": f"{job_meta['name']}-", **self._metadata(tx, name, namespace)}
        metadata["labels"] = dict(template.get("metadata", {}).get("labels") or {})
        if template.get("metadata", {}).get("annotations"):
            metadata["annotations"] = dict(template["metadata"]["annotations"])
        metadata["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job_meta["name"],
                "uid": job_meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        spec = template["spec"]
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("priority", 0)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.setdefault("tolerations", [])
        for taint_key in (NOT_READY_TAINT_KEY, "node.kubernetes.io/unreachable"):
            # DefaultTolerationSeconds admission plugin.
            if not any(t.get("key") == taint_key and t.get("effect") == "NoExecute" for t in tolerations):
                tolerations.append(
                    {"key": taint_key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        pod: KubeObject = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": spec,
            "status": {"phase": "Pending", "qosClass": _qos_class(spec)},
        }
        key = _key(namespace, name)
        tx.state["pods"][key] = pod
        tx.state["podsim"][key] = {
            "created": tx.now,
            "created_rv": int(metadata["resourceVersion"]),
            "stage": "pending",
            "bound": None,
            "job": job_key,
        }
        self._event(tx, job, "Normal", "SuccessfulCreate", f"Created pod: {name}", "job-controller")
        return pod

    def _delete_pod(self, tx: _Txn, key: str) -> None:
        tx.state["pods"].pop(key, None)
        tx.state["podsim"].pop(key, None)
        tx.dirty = True

    def _workload_behaviour(self, tx: _Txn, pod: KubeObject) -> tuple[float | None, int]:
        """How long the container runs (None = until deleted) and its exit code, from the conventions."""
        annotations: dict[str, str] = {}
        sim = tx.state["podsim"].get(_key(pod["metadata"]["namespace"], pod["metadata"]["name"])) or {}
        job = tx.state["jobs"].get(sim.get("job") or "")
        if job is not None:
            annotations.update(job["spec"]["template"].get("metadata", {}).get("annotations") or {})
            annotations.update(job["metadata"].get("annotations") or {})
        annotations.update(pod["metadata"].get("annotations") or {})
        duration: float | None = None
        container = pod["spec"]["containers"][0]
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if isinstance(e, dict)}
        words = " ".join(str(w) for w in (container.get("command") or []) + (container.get("args") or []))
        sleep = re.search(r"(?:^|[\s;&|])sleep\s+([0-9]+(?:\.[0-9]+)?)s?\s*[\"']?\s*$", words)
        for candidate in (
            annotations.get(DURATION_ANNOTATION),
            env.get(DURATION_ENV),
            sleep.group(1) if sleep else None,
        ):
            if candidate is None:
                continue
            with contextlib.suppress(ValueError):
                duration = max(0.0, float(candidate))
                break
        exit_code = 0
        with contextlib.suppress(ValueError, TypeError):
            exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, env.get(EXIT_CODE_ENV) or 0))
        return duration, exit_code

    def _container_statuses(
        self, pod: KubeObject, state: dict[str, Any], ready: bool, started: bool
    ) -> list[dict[str, Any]]:
        statuses = []
        for index, container in enumerate(pod["spec"]["containers"]):
            image = str(container.get("image"))
            status: dict[str, Any] = {
                "name": container["name"],
                "image": image,
                "imageID": "",
                "lastState": {},
                "ready": ready,
                "restartCount": 0,
                "started": started,
                "state": copy.deepcopy(state),
            }
            if "running" in state or "terminated" in state:
                digest = _stable_hex("image", _qualified_image(image))
                status["imageID"] = f"{_qualified_image(image).rsplit(':', 1)[0]}@sha256:{digest}"
                container_id = "containerd://" + _stable_hex("container", pod["metadata"]["uid"], index)
                status["containerID"] = container_id
                if "terminated" in state:
                    status["state"]["terminated"]["containerID"] = container_id
            statuses.append(status)
        return statuses

    def _pod_conditions(
        self,
        pod: KubeObject,
        scheduled_at: float,
        ready_at: float | None,
        terminal: bool = False,
        not_ready_at: float | None = None,
    ) -> list[dict[str, Any]]:
        names = ",".join(c["name"] for c in pod["spec"]["containers"])
        stamp = _timestamp(scheduled_at)

        def condition(kind: str, ok: bool, when: float, reason: str | None = None, message: str | None = None):
            item: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": _timestamp(when),
            }
            if reason:
                item["reason"] = reason
            if message:
                item["message"] = message
            return item

        if terminal:
            ready = [
                condition("Ready", False, not_ready_at or scheduled_at, "PodCompleted"),
                condition("ContainersReady", False, not_ready_at or scheduled_at, "PodCompleted"),
            ]
        elif ready_at is not None:
            ready = [condition("Ready", True, ready_at), condition("ContainersReady", True, ready_at)]
        else:
            message = f"containers with unready status: [{names.replace(',', ' ')}]"
            ready = [
                condition("Ready", False, scheduled_at, "ContainersNotReady", message),
                condition("ContainersReady", False, scheduled_at, "ContainersNotReady", message),
            ]
        initialized = condition("Initialized", True, scheduled_at, "PodCompleted" if terminal else None)
        scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
        return [initialized, *ready, scheduled]

    def _bind(self, tx: _Txn, key: str, node_name: str) -> None:
        pod, sim = tx.state["pods"][key], tx.state["podsim"][key]
        node, hw = tx.state["nodes"][node_name], tx.state["hw"][node_name]
        now = tx.now
        pod["spec"]["nodeName"] = node_name
        sim.update(stage="bound", bound=now)
        duration, exit_code = self._workload_behaviour(tx, pod)
        sim.update(duration=duration, exit_code=exit_code)
        sim["image_fails"] = any(
            IMAGE_PULL_FAILURE_MARKER in str(c.get("image", "")) for c in pod["spec"]["containers"]
        )
        sim["devices"] = self._assign_devices(tx, node_name, pod)
        addresses = node["status"].get("addresses") or []
        host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
        pod_ip = f"10.244.{hw['index']}.{hw['next_ip'] % 250 + 2}"
        hw["next_ip"] += 1
        sim["pod_ip"] = pod_ip
        status = pod["status"]
        status.update(
            phase="Pending",
            hostIP=host_ip,
            startTime=_timestamp(now),
            conditions=self._pod_conditions(pod, now, None),
            containerStatuses=self._container_statuses(pod, {"waiting": {"reason": "ContainerCreating"}}, False, False),
        )
        status.pop("message", None)
        status.pop("reason", None)
        self._touch(tx, pod)
        self._event(
            tx,
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node_name}",
            "default-scheduler",
        )

    def _assign_devices(self, tx: _Txn, node_name: str, pod: KubeObject) -> list[str]:
        """Which devices the device plugin hands to the container (for believable logs)."""
        hw = tx.state["hw"][node_name]
        requests = _pod_requests(pod["spec"])
        if not hw.get("gpu"):
            # A node added as a raw object: all we know is what its labels say.
            product = (tx.state["nodes"][node_name]["metadata"].get("labels") or {}).get(
                "nvidia.com/gpu.product", "GPU"
            )
            wanted = sum(int(v) for r, v in requests.items() if r.startswith("nvidia.com/"))
            return [f"{index}|{product}|" for index in range(wanted)]
        taken: set[str] = set()
        for other_key, other in tx.state["pods"].items():
            if other["spec"].get("nodeName") == node_name and other["status"].get("phase") not in _TERMINAL:
                taken.update(tx.state["podsim"].get(other_key, {}).get("devices") or [])
        product = hw["gpu"]["product"]
        count = int(hw["gpu"]["count"])
        devices: list[str] = []
        gpus = hw["mig"].get("gpus") or [None] * count
        for resource, amount in sorted(requests.items()):
            if not resource.startswith("nvidia.com/") or amount <= 0:
                continue
            candidates: list[str] = []
            if resource.startswith("nvidia.com/mig-") or (
                hw["mig"].get("strategy") == "single" and any(g is not None for g in gpus)
            ):
                for index, layout in enumerate(gpus):
                    for profile, n in sorted((layout or {}).items()):
                        own = "nvidia.com/mig-" + profile.replace("+", ".")
                        if resource.startswith("nvidia.com/mig-") and resource not in (own, own + ".shared"):
                            continue
                        for slot in range(n):
                            candidates.append(f"{index}|{product}|MIG {profile} Device {slot}")
            else:
                replicas = int(((hw.get("sharing") or {}).get("resources") or {}).get("nvidia.com/gpu", 1))
                for replica in range(replicas):
                    for index in range(count):
                        candidates.append(f"{index}|{product}|{'replica ' + str(replica) if replicas > 1 else ''}")
            free = [c for c in candidates if c not in taken]
            devices.extend(free[: int(amount)])
        return devices

    def _advance_pods(self, tx: _Txn) -> None:
        timing = tx.state["timing"]
        for key in sorted(tx.state["pods"]):
            pod = tx.state["pods"].get(key)
            sim = tx.state["podsim"].get(key)
            if pod is None or sim is None or sim.get("bound") is None or sim["stage"] in ("succeeded", "failed"):
                continue
            horizon = tx.now
            job_deadline = self._job_deadline(tx, sim.get("job"))
            if job_deadline is not None:
                horizon = min(horizon, job_deadline)
            bound = sim["bound"]
            images = [str(c.get("image")) for c in pod["spec"]["containers"]]
            if sim.get("image_fails"):
                error_at = bound + timing["image_pull_error_seconds"]
                backoff_at = error_at + timing["image_pull_backoff_seconds"]
                if sim["stage"] == "bound" and horizon >= error_at:
                    self._kubelet_event(tx, pod, "Normal", "Pulling", f'Pulling image "{images[0]}"', bound + 0.5)
                    reference = _qualified_image(images[0])
                    self._kubelet_event(
                        tx,
                        pod,
                        "Warning",
                        "Failed",
                        f'Failed to pull image "{images[0]}": rpc error: code = NotFound desc = failed to pull and '
                        f'unpack image "{reference}": failed to resolve reference "{reference}": '
                        f"{reference}: not found",
                        error_at,
                    )
                    self._kubelet_event(tx, pod, "Warning", "Failed", "Error: ErrImagePull", error_at)
                    self._set_waiting(
                        tx,
                        pod,
                        "ErrImagePull",
                        f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": '
                        f'failed to resolve reference "{reference}": {reference}: not found',
                    )
                    sim["stage"] = "errimagepull"
                if sim["stage"] == "errimagepull" and horizon >= backoff_at:
                    sim["backoff_event"] = self._kubelet_event(
                        tx, pod, "Normal", "BackOff", f'Back-off pulling image "{images[0]}"', backoff_at
                    )
                    self._kubelet_event(tx, pod, "Warning", "Failed", "Error: ImagePullBackOff", backoff_at)
                    self._set_waiting(tx, pod, "ImagePullBackOff", f'Back-off pulling image "{images[0]}"')
                    sim["stage"] = "backoff"
                    sim["backoff_at"] = backoff_at
                if sim["stage"] == "backoff":
                    # The kubelet keeps retrying; the aggregated events count up.
                    count = 1 + int((horizon - sim["backoff_at"]) // 20)
                    self._bump_event_count(tx, sim.get("backoff_event"), count, horizon)
                continue
            running_at = bound + timing["container_creating_seconds"]
            if sim["stage"] == "bound" and horizon >= running_at:
                self._kubelet_event(tx, pod, "Normal", "Pulling", f'Pulling image "{images[0]}"', bound + 0.5)
                pull = max(0.1, timing["container_creating_seconds"] - 1.5)
                self._kubelet_event(
                    tx,
                    pod,
                    "Normal",
                    "Pulled",
                    f'Successfully pulled image "{images[0]}" in {pull:.6f}s',
                    bound + 0.5 + pull,
                )
                for container in pod["spec"]["containers"]:
                    self._kubelet_event(
                        tx,
                        pod,
                        "Normal",
                        "Created",
                        f"Created container {container['name']}",
                        running_at,
                        container["name"],
                    )
                    self._kubelet_event(
                        tx,
                        pod,
                        "Normal",
                        "Started",
                        f"Started container {container['name']}",
                        running_at,
                        container["name"],
                    )
                status = pod["status"]
                status.update(
                    phase="Running",
                    podIP=sim["pod_ip"],
                    podIPs=[{"ip": sim["pod_ip"]}],
                    conditions=self._pod_conditions(pod, bound, running_at),
                    containerStatuses=self._container_statuses(
                        pod, {"running": {"startedAt": _timestamp(running_at)}}, True, True
                    ),
                )
                sim.update(stage="running", running=running_at)
                self._touch(tx, pod)
            if sim["stage"] == "running" and sim.get("duration") is not None:
                finished_at = sim["running"] + sim["duration"]
                if horizon >= finished_at:
                    self._terminate_pod(tx, key, finished_at, int(sim.get("exit_code") or 0))

    def _terminate_pod(self, tx: _Txn, key: str, when: float, exit_code: int) -> None:
        pod, sim = tx.state["pods"][key], tx.state["podsim"][key]
        succeeded = exit_code == 0
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if succeeded else "OOMKilled" if exit_code == OOM_EXIT_CODE else "Error",
            "startedAt": _timestamp(sim["running"]),
            "finishedAt": _timestamp(when),
        }
        pod["status"].update(
            phase="Succeeded" if succeeded else "Failed",
            conditions=self._pod_conditions(pod, sim["bound"], None, terminal=True, not_ready_at=when),
            containerStatuses=self._container_statuses(pod, {"terminated": terminated}, False, False),
        )
        sim.update(stage="succeeded" if succeeded else "failed", finished=when)
        self._touch(tx, pod)
        self._on_pod_terminated(tx, sim.get("job"), when, succeeded)

    def _set_waiting(self, tx: _Txn, pod: KubeObject, reason: str, message: str) -> None:
        pod["status"]["containerStatuses"] = self._container_statuses(
            pod, {"waiting": {"reason": reason, "message": message}}, False, False
        )
        self._touch(tx, pod)

    def _job_deadline(self, tx: _Txn, job_key: str | None) -> float | None:
        job = tx.state["jobs"].get(job_key or "")
        if job is None or job["spec"].get("activeDeadlineSeconds") is None:
            return None
        return tx.state["jobsim"][job_key]["started"] + job["spec"]["activeDeadlineSeconds"]

    # ----------------------------------------------------------------------------------------------------------
    # Scheduler
    # ----------------------------------------------------------------------------------------------------------
    def _node_usage(self, tx: _Txn) -> dict[str, Counter[str]]:
        usage: dict[str, Counter[str]] = {name: Counter() for name in tx.state["nodes"]}
        for pod in tx.state["pods"].values():
            node_name = pod["spec"].get("nodeName")
            if node_name in usage and pod["status"].get("phase") not in _TERMINAL:
                usage[node_name].update(_pod_requests(pod["spec"]))
                usage[node_name]["pods"] += 1
        return usage

    def _filter_node(
        self,
        node: KubeObject,
        allocatable: dict[str, Fraction],
        pod_spec: dict[str, Any],
        requests: dict[str, Fraction],
        used: Counter[str],
    ) -> list[str]:
        """kube-scheduler v1.20 filter plugins, in their order; the first failing plugin's reasons."""
        tolerations = pod_spec.get("tolerations") or []
        taints = node["spec"].get("taints") or []
        # NodeUnschedulable
        if node["spec"].get("unschedulable") and not _tolerated(
            tolerations, {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}
        ):
            return ["node(s) were unschedulable"]
        # NodeResourcesFit
        reasons = []
        if used["pods"] + 1 > allocatable.get("pods", 110):
            reasons.append("Too many pods")
        for resource in sorted(requests, key=lambda r: (r not in ("cpu", "memory", "ephemeral-storage"), r)):
            wanted = requests[resource]
            if wanted <= 0 or resource == "pods":
                continue
            available = allocatable.get(resource, 0)
            if available < wanted + used[resource]:
                reasons.append(f"Insufficient {resource}")
        if reasons:
            return reasons
        # NodeAffinity (nodeSelector + required node affinity)
        if not _node_affinity_matches(pod_spec, node):
            return ["node(s) didn't match node selector"]
        # TaintToleration
        for taint in taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerated(tolerations, taint):
                return [
                    f"node(s) had taint {{{taint.get('key')}: {taint.get('value', '')}}}, that the pod didn't tolerate"
                ]
        return []

    def _score_node(
        self, allocatable: dict[str, Fraction], requests: dict[str, Fraction], used: Counter[str]
    ) -> Fraction:
        """NodeResourcesLeastAllocated over cpu and memory (non-zero defaults for pods that request nothing)."""
        score = Fraction(0)
        for resource, default in (("cpu", Fraction(1, 10)), ("memory", Fraction(200 * 2**20))):
            capacity = allocatable.get(resource, Fraction(0))
            wanted = used[resource] + (requests.get(resource) or default)
            if capacity > 0 and wanted <= capacity:
                score += (capacity - wanted) * 100 / capacity
        return score / 2

    def _schedule_pending(self, tx: _Txn) -> None:
        pending = [
            (key, pod)
            for key, pod in tx.state["pods"].items()
            if not pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending"
        ]
        if not pending:
            return
        pending.sort(
            key=lambda item: (
                -int(item[1]["spec"].get("priority") or 0),
                int(tx.state["podsim"].get(item[0], {}).get("created_rv") or 0),
                item[1]["metadata"]["creationTimestamp"],
                item[0],
            )
        )
        usage = self._node_usage(tx)
        nodes = sorted(tx.state["nodes"].items())
        allocatable = {
            name: {
                resource: parse_quantity(value) for resource, value in (node["status"].get("allocatable") or {}).items()
            }
            for name, node in nodes
        }
        # Pods that ask for the same thing get the same answer until a bind changes the picture; the cache keeps
        # a long queue of identical pending pods from costing pods x nodes on every call.
        verdicts: dict[str, str] = {}
        for key, pod in pending:
            spec = pod["spec"]
            sim = tx.state["podsim"].setdefault(key, {})
            missing = [
                claim
                for volume in spec.get("volumes") or []
                if (claim := (volume.get("persistentVolumeClaim") or {}).get("claimName"))
                and _key(pod["metadata"]["namespace"], claim) not in tx.state.get("pvcs", {})
            ]
            if missing:
                # As kube-scheduler's VolumeBinding plugin: a pod whose claim does not exist waits, unscheduled.
                self._mark_unschedulable(
                    tx, pod, f'0/{len(nodes)} nodes are available: persistentvolumeclaim "{missing[0]}" not found.'
                )
                continue
            signature = sim.get("signature") or sim.setdefault("signature", _scheduling_signature(spec))
            if signature in verdicts:
                self._mark_unschedulable(tx, pod, verdicts[signature])
                continue
            requests = _pod_requests(spec)
            reasons: Counter[str] = Counter()
            best: tuple[Fraction, str] | None = None
            for node_name, node in nodes:
                failed = self._filter_node(node, allocatable[node_name], spec, requests, usage[node_name])
                if failed:
                    reasons.update(failed)
                    continue
                score = self._score_node(allocatable[node_name], requests, usage[node_name])
                if best is None or score > best[0]:
                    best = (score, node_name)
            if best is not None:
                self._bind(tx, key, best[1])
                usage[best[1]].update(requests)
                usage[best[1]]["pods"] += 1
                verdicts.clear()
                continue
            histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
            message = f"0/{len(nodes)} nodes are available: {', '.join(histogram)}."
            verdicts[signature] = message
            self._mark_unschedulable(tx, pod, message)

    def _mark_unschedulable(self, tx: _Txn, pod: KubeObject, message: str) -> None:
        conditions = pod["status"].get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if current is not None and current.get("message") == message:
            # The scheduler retries with backoff; the aggregated event counts up at most once a minute.
            self._bump_failed_scheduling(tx, pod, message)
            return
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": _timestamp(tx.now),
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        self._touch(tx, pod)
        event = self._event(tx, pod, "Warning", "FailedScheduling", message, "default-scheduler")
        sim = tx.state["podsim"].get(_key(pod["metadata"]["namespace"], pod["metadata"]["name"]))
        if sim is not None:
            sim.update(sched_event=_key(event["metadata"]["namespace"], event["metadata"]["name"]), sched_at=tx.now)

    def _bump_failed_scheduling(self, tx: _Txn, pod: KubeObject, message: str) -> None:
        sim = tx.state["podsim"].get(_key(pod["metadata"]["namespace"], pod["metadata"]["name"])) or {}
        event = tx.state["events"].get(sim.get("sched_event") or "")
        if event is not None and event["message"] == message and tx.now - sim.get("sched_at", tx.now) >= 60:
            event["count"] += 1
            event["lastTimestamp"] = _timestamp(tx.now)
            sim["sched_at"] = tx.now
            self._touch(tx, event)

    # ----------------------------------------------------------------------------------------------------------
    # Events
    # ----------------------------------------------------------------------------------------------------------

    def _event(
        self,
        tx: _Txn,
        obj: KubeObject,
        kind: str,
        reason: str,
        message: str,
        component: str,
        when: float | None = None,
        host: str | None = None,
        field_path: str | None = None,
    ) -> KubeObject:
        when = tx.now if when is None else when
        metadata = obj["metadata"]
        namespace = metadata.get("namespace", "default")
        base = f"{metadata['name']}.{int(when * 1e9):x}"
        name, n = base, 0
        while _key(namespace, name) in tx.state["events"]:
            n += 1
            name = f"{base}{n}"
        involved = {
            "kind": obj["kind"],
            "namespace": namespace,
            "name": metadata["name"],
            "uid": metadata["uid"],
            "apiVersion": obj["apiVersion"],
            "resourceVersion": metadata.get("resourceVersion", ""),
        }
        if field_path:
            involved["fieldPath"] = field_path
        source = {"component": component}
        if host:
            source["host"] = host
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": self._metadata(tx, name, namespace),
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": _timestamp(when),
            "lastTimestamp": _timestamp(when),
            "count": 1,
            "type": kind,
            "eventTime": None,
            "reportingComponent": "",
            "reportingInstance": "",
        }
        event["metadata"]["creationTimestamp"] = _timestamp(when)
        tx.state["events"][_key(namespace, name)] = event
        return event

    def _kubelet_event(
        self, tx: _Txn, pod: KubeObject, kind: str, reason: str, message: str, when: float, container: str | None = None
    ) -> str:
        name = container or pod["spec"]["containers"][0]["name"]
        event = self._event(
            tx,
            pod,
            kind,
            reason,
            message,
            "kubelet",
            when=when,
            host=pod["spec"].get("nodeName"),
            field_path=f"spec.containers{{{name}}}",
        )
        return _key(event["metadata"]["namespace"], event["metadata"]["name"])

    def _bump_event_count(self, tx: _Txn, event_key: str | None, count: int, when: float) -> None:
        event = tx.state["events"].get(event_key or "")
        if event is not None and event["count"] < count:
            event["count"] = count
            event["lastTimestamp"] = _timestamp(when)
            self._touch(tx, event)

    # ----------------------------------------------------------------------------------------------------------
    # The clock: everything that happens by itself
    # ----------------------------------------------------------------------------------------------------------
    def _toleration_seconds(self, pod: KubeObject) -> float:
        """How long the pod may stay on a NotReady node: 0 if it does not tolerate the NoExecute taint at all."""
        taint = {"key": NOT_READY_TAINT_KEY, "effect": "NoExecute"}
        seconds = [
            float(t["tolerationSeconds"]) if t.get("tolerationSeconds") is not None else math.inf
            for t in pod["spec"].get("tolerations") or []
            if _toleration_matches(t, taint)
        ]
        return max(0.0, min(seconds)) if seconds else 0.0

    def _eviction_time(self, tx: _Txn, key: str, pod: KubeObject, not_ready_since: float) -> float:
        """The taint manager evicts tolerationSeconds after it saw both the NoExecute taint and the pod there."""
        bound = tx.state["podsim"].get(key, {}).get("bound") or not_ready_since
        return max(not_ready_since, bound) + self._toleration_seconds(pod)

    def _next_due(self, tx: _Txn) -> float | None:
        """The earliest moment at which something changes by itself (None: nothing is scheduled to)."""
        state, timing = tx.state, tx.state["timing"]
        times: list[float] = []
        for sim in state["podsim"].values():
            stage, bound = sim.get("stage"), sim.get("bound")
            if stage == "bound" and bound is not None:
                delay = "image_pull_error_seconds" if sim.get("image_fails") else "container_creating_seconds"
                times.append(bound + timing[delay])
            elif stage == "errimagepull":
                times.append(bound + timing["image_pull_error_seconds"] + timing["image_pull_backoff_seconds"])
            elif stage == "running" and sim.get("duration") is not None:
                times.append(sim["running"] + sim["duration"])
        active_jobs = {
            sim.get("job")
            for key, sim in state["podsim"].items()
            if key in state["pods"] and state["pods"][key]["status"].get("phase") not in _TERMINAL
        }
        for key, sim in state["jobsim"].items():
            job = state["jobs"].get(key)
            if job is None or sim.get("finished"):
                continue
            deadline = job["spec"].get("activeDeadlineSeconds")
            if deadline is not None:
                times.append(sim["started"] + deadline)
            if key not in active_jobs and job["spec"].get("parallelism") and job["spec"].get("completions"):
                times.append(sim.get("next_pod_at", sim["started"]))
        for node_name, hw in state["hw"].items():
            op = hw.get("mig_op")
            if op:
                times.append(op["started"] + timing["mig_reconfigure_seconds"])
                if op.get("reboots") and op.get("phase") != "rebooting":
                    times.append(op["started"] + timing["mig_reconfigure_seconds"] / 2)
            if hw.get("not_ready_since") is not None and not hw.get("ready", True):
                for key, pod in state["pods"].items():
                    if pod["spec"].get("nodeName") == node_name and pod["status"].get("phase") not in _TERMINAL:
                        evict_at = self._eviction_time(tx, key, pod, hw["not_ready_since"])
                        if evict_at != math.inf:
                            times.append(evict_at)
        return min(times) if times else None

    def _step(self, tx: _Txn) -> None:
        """What the controllers, the kubelets and the scheduler do at ``tx.now``."""
        state = tx.state
        # Node lifecycle controller: evict pods from nodes NotReady for longer than their toleration.
        for node_name, hw in state["hw"].items():
            since = hw.get("not_ready_since")
            if since is None or hw.get("ready", True):
                continue
            for key, pod in list(state["pods"].items()):
                if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in _TERMINAL:
                    continue
                if tx.now >= self._eviction_time(tx, key, pod, since):
                    job = state["jobs"].get(state["podsim"].get(key, {}).get("job") or "")
                    if job is not None:
                        message = f"Deleted pod: {pod['metadata']['name']}"
                        self._event(tx, job, "Normal", "SuccessfulDelete", message, "job-controller")
                    message = f"Marking for deletion Pod {key}"
                    self._event(tx, pod, "Normal", "TaintManagerEviction", message, "taint-controller")
                    self._delete_pod(tx, key)
        # MIG Manager reconfigurations that are due.
        for node_name in sorted(state["hw"]):
            if state["hw"][node_name].get("mig_op"):
                self._sync_mig_manager(tx, node_name)
        self._advance_pods(tx)
        self._reconcile_jobs(tx)
        self._schedule_pending(tx)

    def _advance(self, tx: _Txn) -> None:
        """Play everything that became due since the last call, in time order, then settle at ``clock()``.

        Nothing runs between calls, so a pod that finished at t=60 and a pod waiting for its GPU must still see
        the GPU handed over at t=60, not when somebody next looks: due moments are replayed one by one.
        """
        target = tx.now
        cursor = None
        for _ in range(10_000):  # a bound, not an expected count: each step retires what was due
            due = self._next_due(tx)
            if due is None or due > target:
                break
            cursor = due if cursor is None else max(cursor, due)
            tx.now = cursor
            self._step(tx)
        tx.now = target
        self._step(tx)
        state = tx.state
        # kube-apiserver drops events after --event-ttl.
        ttl = state["timing"]["event_ttl_seconds"]
        cutoff = _timestamp(tx.now - ttl)
        stale = [key for key, event in state["events"].items() if event["lastTimestamp"] < cutoff]
        for key in stale:
            del state["events"][key]
        if stale:
            tx.dirty = True

    # ----------------------------------------------------------------------------------------------------------
    # Logs
    # ----------------------------------------------------------------------------------------------------------
    def _log_lines(self, tx: _Txn, pod: KubeObject, sim: dict[str, Any]) -> list[str]:
        running = sim.get("running")
        if running is None:
            return []
        end = sim.get("finished") if sim.get("finished") is not None else tx.now
        seed = int(_stable_hex("logs", pod["metadata"]["uid"], length=8), 16)
        rng = random.Random(seed)
        node_name = pod["spec"].get("nodeName") or ""
        lines = [f"{_timestamp(running)} starting {pod['metadata']['name']} on {node_name}"]
        gpus_seen: dict[str, list[str]] = {}
        for device in sim.get("devices") or []:
            index, product, detail = device.split("|", 2)
            gpus_seen.setdefault(f"{index}|{product}", []).append(detail)
        for shown, (gpu, details) in enumerate(sorted(gpus_seen.items())):
            index, product = gpu.split("|", 1)
            lines.append(f"GPU {shown}: {product} (UUID: {_gpu_uuid(node_name, int(index))})")
            for slot, detail in enumerate(details):
                if detail.startswith("MIG "):
                    profile = detail.split()[1]
                    mig_uuid = "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{node_name}/{index}/{detail}"))
                    lines.append(f"  MIG {profile} Device {slot}: (UUID: {mig_uuid})")
        if not gpus_seen:
            lines.append("No GPU visible to this container (CUDA_VISIBLE_DEVICES is empty); running on CPU")
        from .sim_telemetry import load_kind

        # A container that only sleeps (holding its GPU, doing nothing) prints nothing more.
        idle = load_kind(pod["spec"]["containers"][0]) == "idle"
        steps = 0 if idle else int(max(0.0, end - running) // 10)
        loss = 2.5 + rng.random()
        throughput = 200 + rng.random() * 800
        for step in range(1, steps + 1):
            loss = max(0.05, loss * (0.97 + rng.random() * 0.02))
            lines.append(
                f"{_timestamp(running + step * 10)} step {step * 50} loss={loss:.4f} "
                f"throughput={throughput * (0.95 + rng.random() * 0.1):.1f} samples/s"
            )
        if sim.get("finished") is not None:
            code = int(sim.get("exit_code") or 0)
            if code:
                lines.append(
                    f"{_timestamp(sim['finished'])} RuntimeError: training step failed; exiting with code {code}"
                )
            elif not idle:
                lines.append(f"{_timestamp(sim['finished'])} finished after {steps * 50} steps")
        return lines

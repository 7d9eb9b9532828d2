"""Scenarios: the cluster a simulation starts from, and how a node joins it.

Not a component. ``load_scenario`` reads a scenario (a dict, a YAML path, or a name under cluster/scenarios/),
``build_state`` makes the initial state document from it, and ``add_node`` registers one node the way its
kubelet would (Node object with capacity, addresses, nodeInfo, conditions, the GPU taint) together with the
node's ``hw`` record: the simulated hardware and GPU Operator configuration (GPU product and count, driver,
MIG strategy/config/layout, time-slicing, whose config it writes to the device plugin's ConfigMap). The GPU
Operator component labels the node and advertises its resources on its first round. ``add_raw_node`` stores a
Node object as given (``kubectl create -f node.json``).
"""

from __future__ import annotations

import copy
import re
import uuid
from pathlib import Path
from typing import Any

import yaml

from vocab.cloud import AKS, EKS, GKE
from vocab.dra import DEVICE_TAINT_EFFECTS, DYNAMIC_MIG_GATE, EXCLUSIVE_GATES
from vocab.images import normalise_registry
from vocab.names import (
    AKS_ACCELERATOR_LABEL,
    AKS_AGENTPOOL_LABEL,
    ARCH_LABEL,
    BETA_ARCH_LABEL,
    BETA_OS_LABEL,
    CONTROLLER_MANAGED_ATTACH_DETACH_ANNOTATION,
    CPU_RESOURCE,
    DEVICE_PLUGIN_CONFIG_LABEL,
    EKS_CAPACITY_TYPE_LABEL,
    EKS_NODEGROUP_LABEL,
    EPHEMERAL_STORAGE_RESOURCE,
    GKE_ACCELERATOR_LABEL,
    GKE_GPU_DRIVER_VERSION_LABEL,
    GKE_GPU_SHARING_STRATEGY_LABEL,
    GKE_MAX_SHARED_CLIENTS_LABEL,
    GKE_NODEPOOL_LABEL,
    GKE_TIME_SHARING,
    GPU_OPERATOR_NAMESPACE,
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    HUGEPAGES_RESOURCE_PREFIX,
    INSTANCE_TYPE_LABEL,
    MEMORY_RESOURCE,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_SUCCESS,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_NONE,
    MIG_STRATEGY_SINGLE,
    NFD_KERNEL_VERSION_LABEL,
    NFD_NVIDIA_PCI_LABEL,
    NFD_OS_RELEASE_ID_LABEL,
    NFD_OS_RELEASE_VERSION_ID_LABEL,
    NODE_TTL_ANNOTATION,
    OS_LABEL,
    PODS_RESOURCE,
    PRESSURE_CONDITION_TAINTS,
    SHARING_MPS,
    TIME_SLICING_CONFIG_MAP,
)
from vocab.products import GpuProduct, layout_fits, lookup_product, preset_mig_configs, sanitise_product_name
from vocab.quantity import format_cpu, format_memory

from ..base import Invalid, KubeObject
from .constants import (
    DEFAULT_KUBERNETES_VERSION,
    DEFAULT_SCENARIO,
    DEFAULT_SERVER_VERSION,
    DEFAULT_TIMING,
    GPU_TAINT,
    STATE_FORMAT,
)
from .nodes import set_ready_status, set_unschedulable
from .pod_resources import decode_quantity
from .store import Txn, new_config_map, new_metadata, new_namespace, object_key, stable_hex, touch
from .validation import DNS1123_SUBDOMAIN, SUBDOMAIN_HELP


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
    # PyYAML's libyaml safe loader where it is built in (the demo's scenario in 2.5 ms against 8.8 ms, and every
    # simulated cluster a process makes reads it); its pure-Python one otherwise.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}  # noqa: S506 - a safe loader
    if not isinstance(loaded, dict):
        raise ValueError(f"Scenario {path} must be a mapping with a 'nodes:' list.")
    return loaded


def expand_node_specs(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    defaults = scenario.get("defaults") or {}
    specs = []
    for entry in scenario.get("nodes") or []:
        names = entry.get("names") or [entry.get("name")]
        for name in names:
            spec = {**copy.deepcopy(defaults), **copy.deepcopy(entry), "name": name}
            spec.pop("names", None)
            specs.append(spec)
    return specs


def device_plugin_config_text(strategy: str, replicas: int, rename: bool, mps: bool = False) -> str:
    """The device plugin config (k8s-device-plugin README, "Shared Access to GPUs"): ``sharing.timeSlicing`` or
    ``sharing.mps``, each with renameByDefault and per-resource replicas."""
    config = {
        "version": "v1",
        "flags": {"migStrategy": strategy},
        "sharing": {
            "mps" if mps else "timeSlicing": {
                "renameByDefault": rename,
                "resources": [{"name": GPU_RESOURCE, "replicas": replicas}],
            }
        },
    }
    return yaml.safe_dump(config, sort_keys=False)


def build_state(now: float, scenario: dict[str, Any]) -> dict[str, Any]:
    """A fresh cluster: the system namespaces, the scenario's namespaces and its nodes."""
    timing = {**DEFAULT_TIMING, **(scenario.get("timing") or {})}
    state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "rv": 0,
        "created": now,
        "scenario": copy.deepcopy(scenario),
        "timing": timing,
        "kubernetes_version": str(scenario.get("kubernetes_version") or DEFAULT_KUBERNETES_VERSION),
        "server_version": str(scenario.get("server_version") or DEFAULT_SERVER_VERSION),
        "node_seq": 0,
        "namespaces": {},
        "nodes": {},
        "hw": {},
        "jobs": {},
        "jobsim": {},
        "pods": {},
        "podsim": {},
        "configmaps": {},
        "secrets": {},
        # Registries that want credentials: {host: {"private": true | [repository prefixes], "accounts": [...]}}
        "registries": {
            normalise_registry(str(host)): dict(entry or {})
            for host, entry in (scenario.get("registries") or {}).items()
        },
        "events": {},
        "tombstones": [],
        # resource.k8s.io (Dynamic Resource Allocation) and NVIDIA's ComputeDomain custom resources.
        "deviceclasses": {},
        "resourceslices": {},
        "resourceclaims": {},
        "resourceclaimtemplates": {},
        "computedomains": {},
    }
    tx = Txn(state, now)
    for namespace in ["default", "kube-system", "kube-public", "kube-node-lease", GPU_OPERATOR_NAMESPACE] + list(
        scenario.get("namespaces") or []
    ):
        if namespace not in state["namespaces"]:
            new_namespace(tx, namespace, None)
    for spec in expand_node_specs(scenario):
        add_node(tx, spec)
    return state


def add_node(tx: Txn, spec: dict[str, Any]) -> KubeObject:
    name = str(spec.get("name") or "")
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        raise Invalid(f'Node "{name}" is invalid: metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
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
    arch = str(spec.get("arch") or "amd64")
    if arch not in ("amd64", "arm64"):
        raise Invalid(f"Node {name}: arch must be amd64 or arm64, not {arch!r}.")
    pressure = [str(c) for c in spec.get("conditions") or []]
    unknown = [c for c in pressure if c not in PRESSURE_CONDITION_TAINTS]
    if unknown:
        raise Invalid(f"Node {name}: conditions may list {', '.join(PRESSURE_CONDITION_TAINTS)}, not {unknown}.")
    hw["pressure"] = pressure
    managed = str(spec.get("managed") or "")
    if managed not in ("", GKE, EKS, AKS):
        raise Invalid(f"Node {name}: managed must be gke, eks or aks, not {managed!r}.")
    os_image = str(spec.get("os_image") or "Ubuntu 22.04.4 LTS")
    kernel = str(spec.get("kernel") or "5.15.0-105-generic")
    labels = {
        BETA_ARCH_LABEL: arch,
        BETA_OS_LABEL: "linux",
        ARCH_LABEL: arch,
        HOSTNAME_LABEL: name,
        OS_LABEL: "linux",
        NFD_KERNEL_VERSION_LABEL: kernel,
        NFD_OS_RELEASE_ID_LABEL: "ubuntu",
        NFD_OS_RELEASE_VERSION_ID_LABEL: "22.04",
    }
    taints: list[dict[str, Any]] = []
    if gpu_spec:
        product = _product(spec)
        count = int(gpu_spec.get("count", 1))
        mig_spec = spec.get("mig") or {}
        strategy = str(mig_spec.get("strategy") or MIG_STRATEGY_NONE)
        if strategy not in (MIG_STRATEGY_NONE, MIG_STRATEGY_SINGLE, MIG_STRATEGY_MIXED):
            raise Invalid(f"Node {name}: mig.strategy must be none, single or mixed, not {strategy!r}.")
        config_name = mig_spec.get("config") or ("all-disabled" if product.mig_capable else None)
        gpus = _scenario_mig_layout(name, product, count, config_name, mig_spec.get("layout"))
        sharing_spec = spec.get("time_slicing") or spec.get("mps") or {}
        mps = bool(spec.get("mps"))
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
            # A DRA node's GPUs are announced by NVIDIA's DRA driver instead of the device plugin (by default).
            device_plugin=bool(spec.get("device_plugin", spec.get("dra") in (None, False))),
            base_strategy=strategy,
            mig={"strategy": strategy, "config": config_name, "gpus": gpus, "state": MIG_CONFIG_SUCCESS},
            sharing=(
                {"resources": {GPU_RESOURCE: replicas}, "rename": rename, **({"mps": True} if mps else {})}
                if replicas > 1
                else {}
            ),
            managed=managed,
            unhealthy=int(gpu_spec.get("unhealthy") or 0),
            cuda_fault=str(spec.get("cuda_fault") or ""),
            operands_off=[str(o) for o in spec.get("operands_off") or []],
            driver_upgrade_state=str(spec.get("driver_upgrade_state") or ""),
            clique=str(spec.get("clique") or ""),
            gfd_timestamp=int(now),
            gfd_keys=[],
            gpu_resources=[],
            mig_op=None,
            mig_failed_config=None,
        )
        if spec.get("dra") not in (None, False):
            hw["dra"] = _dra_settings(name, spec["dra"], product, gpus)
        if mig_spec.get("fail_next"):
            hw["mig_fail_next"] = str(mig_spec["fail_next"])
        if managed:
            labels.update(_managed_labels(name, managed, spec, replicas, mps))
            if spec.get("taint", managed == GKE):  # GKE taints its GPU nodes; EKS and AKS do not by default
                taints.append(dict(GPU_TAINT))
        else:
            labels[NFD_NVIDIA_PCI_LABEL] = "true"
            if product.mig_capable and config_name:
                labels[MIG_CONFIG_LABEL] = str(config_name)
            if replicas > 1:
                config_key = str(sharing_spec.get("config") or sanitise_product_name(product.name).lower())
                labels[DEVICE_PLUGIN_CONFIG_LABEL] = config_key
                _write_device_plugin_config(tx, config_key, strategy, replicas, rename, mps)
            if spec.get("taint", True):
                taints.append(dict(GPU_TAINT))
    labels.update({str(k): str(v) for k, v in (spec.get("labels") or {}).items()})
    taints.extend(copy.deepcopy(spec.get("taints") or []))

    cpu = decode_quantity(spec.get("cpu", 16))
    memory = decode_quantity(spec.get("memory", "64Gi"))
    reserved = spec.get("reserved") or {}
    cpu_reserved = decode_quantity(reserved.get("cpu", "500m" if cpu >= 8 else "100m"))
    memory_reserved = decode_quantity(reserved.get("memory", "1Gi")) + 100 * 2**20  # + eviction threshold
    storage = decode_quantity(spec.get("ephemeral_storage", "1787Gi"))
    capacity = {
        CPU_RESOURCE: format_cpu(cpu),
        EPHEMERAL_STORAGE_RESOURCE: format_memory(storage),
        HUGEPAGES_RESOURCE_PREFIX + "1Gi": "0",
        HUGEPAGES_RESOURCE_PREFIX + "2Mi": "0",
        MEMORY_RESOURCE: format_memory(memory),
        PODS_RESOURCE: str(int(spec.get("pods", 110))),
    }
    allocatable = {
        **capacity,
        CPU_RESOURCE: format_cpu(cpu - cpu_reserved),
        EPHEMERAL_STORAGE_RESOURCE: str(int(storage * 9 / 10)),
        MEMORY_RESOURCE: format_memory(memory - memory_reserved),
    }
    internal_ip = f"10.0.{index // 200}.{index % 200 + 10}"
    node_metadata = new_metadata(tx, name)
    node_metadata["labels"] = dict(sorted(labels.items()))
    node_metadata["annotations"] = {
        NODE_TTL_ANNOTATION: "0",
        CONTROLLER_MANAGED_ATTACH_DETACH_ANNOTATION: "true",
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
                "architecture": arch,
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, f"boot/{name}/{now}")),
                "containerRuntimeVersion": str(spec.get("container_runtime") or "containerd://1.7.13"),
                "kernelVersion": kernel,
                "kubeProxyVersion": str(spec.get("kubelet") or tx.state["kubernetes_version"]),
                "kubeletVersion": str(spec.get("kubelet") or tx.state["kubernetes_version"]),
                "machineID": stable_hex("machine", name, length=32),
                "operatingSystem": "linux",
                "osImage": os_image,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)).upper(),
            },
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    if spec.get("cordoned"):
        set_unschedulable(node, True)
    if managed:
        node["spec"]["providerID"] = _provider_id(managed, name)
    set_ready_status(node, ready, now, since=now, pressure=pressure)
    tx.state["nodes"][name] = node
    hw["created_rv"] = int(node_metadata["resourceVersion"])
    tx.state["hw"][name] = hw  # the GPU Operator labels the node and advertises its GPUs on its first round
    return node


def add_raw_node(tx: Txn, obj: KubeObject) -> KubeObject:
    node = copy.deepcopy(obj)
    node["apiVersion"], node["kind"] = "v1", "Node"
    name = str(node["metadata"].get("name") or "")
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        raise Invalid(f'Node "{name}" is invalid: metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
    metadata = node["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "managedFields"):
        metadata.pop(key, None)
    node["metadata"] = {**new_metadata(tx, name), **{k: v for k, v in metadata.items() if k != "name"}}
    node.setdefault("spec", {})
    status = node.setdefault("status", {})
    status.setdefault("capacity", {CPU_RESOURCE: "1", MEMORY_RESOURCE: "1Gi", PODS_RESOURCE: "110"})
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


def _product(spec: dict[str, Any]) -> GpuProduct:
    try:
        return lookup_product(str(spec["gpu"]["product"]))
    except KeyError as error:
        raise Invalid(f"Node {spec.get('name')}: {error.args[0]}") from None


def _scenario_mig_layout(
    name: str, product: GpuProduct, count: int, config_name: str | None, layout: Any
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


def _dra_settings(name: str, dra: Any, product: GpuProduct, gpus: list[dict[str, int] | None]) -> dict[str, Any]:
    """A DRA node's driver settings (cluster/sim/dra_driver.py announces its devices from them): ``mig``
    (none: whole GPUs; static: the node's MIG layout, as the plugin finds it at start; dynamic: every placement
    with shared counters), the driver's feature gates, whether the ComputeDomain plugin runs there, and device
    taints ``[{device, key, value, effect}]``."""
    dra = dra if isinstance(dra, dict) else {}
    mig = str(dra.get("mig") or "none")
    if mig not in ("none", "static", "dynamic"):
        raise Invalid(f"Node {name}: dra.mig must be none, static or dynamic, not {mig!r}.")
    gates = [str(g) for g in dra.get("feature_gates") or []]
    if mig == "dynamic" and DYNAMIC_MIG_GATE not in gates:
        gates.append(DYNAMIC_MIG_GATE)
    for first, second in EXCLUSIVE_GATES:
        if first in gates and second in gates:
            raise Invalid(
                f"Node {name}: NVIDIA's DRA driver refuses feature gates {first} and {second} together; drop one."
            )
    if mig != "none" and not product.mig_capable:
        raise Invalid(f"Node {name}: dra.mig {mig} needs a MIG-capable GPU; {product.name} is not.")
    if mig == "static" and not any(gpus):
        raise Invalid(f"Node {name}: dra.mig static announces the node's MIG layout; give mig.config or mig.layout.")
    taints = []
    for taint in dra.get("taints") or []:
        if taint.get("effect") not in DEVICE_TAINT_EFFECTS or not taint.get("device") or not taint.get("key"):
            raise Invalid(
                f"Node {name}: a dra.taints entry needs device, key and effect (one of "
                f"{', '.join(DEVICE_TAINT_EFFECTS)}), not {taint!r}."
            )
        taints.append({k: str(v) for k, v in taint.items() if k in ("device", "key", "value", "effect")})
    return {
        "mig": mig,
        "feature_gates": sorted(gates),
        "compute_domains": bool(dra.get("compute_domains", False)),
        "taints": taints,
    }


def _managed_labels(name: str, managed: str, spec: dict[str, Any], replicas: int, mps: bool) -> dict[str, str]:
    """The labels a managed node pool's node carries (no GFD): the pool, the instance type and, on GKE, the
    accelerator type and sharing settings (GKE, EKS and AKS node documentation; see vocab/cloud.py)."""
    pool = str(spec.get("node_pool") or "gpu-pool")
    labels = {}
    if spec.get("instance_type"):
        labels[INSTANCE_TYPE_LABEL] = str(spec["instance_type"])
    if managed == GKE:
        labels[GKE_NODEPOOL_LABEL] = pool
        labels[GKE_ACCELERATOR_LABEL] = str(spec.get("accelerator") or "")
        labels[GKE_GPU_DRIVER_VERSION_LABEL] = str(spec.get("gke_driver") or "default")
        if replicas > 1:
            labels[GKE_GPU_SHARING_STRATEGY_LABEL] = SHARING_MPS if mps else GKE_TIME_SHARING
            labels[GKE_MAX_SHARED_CLIENTS_LABEL] = str(replicas)
    elif managed == EKS:
        labels[EKS_NODEGROUP_LABEL] = pool
        labels[EKS_CAPACITY_TYPE_LABEL] = "ON_DEMAND"
    else:
        labels[AKS_AGENTPOOL_LABEL] = pool
        labels[AKS_ACCELERATOR_LABEL] = "nvidia"
    needed = GKE_ACCELERATOR_LABEL if managed == GKE else INSTANCE_TYPE_LABEL
    if not labels.get(needed):
        field = "accelerator" if managed == GKE else "instance_type"
        raise Invalid(f"Node {name}: a managed {managed} node needs {field} (it sets {needed}).")
    return labels


def _provider_id(managed: str, name: str) -> str:
    """spec.providerID as each cloud's node controller writes it."""
    if managed == GKE:
        return f"gce://demo-project/europe-west4-a/{name}"
    if managed == EKS:
        return f"aws:///eu-west-1a/i-{stable_hex('instance', name, length=17)}"
    return (
        f"azure:///subscriptions/0000/resourceGroups/mc_demo/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
    )


def _write_device_plugin_config(
    tx: Txn, key: str, strategy: str, replicas: int, rename: bool, mps: bool = False
) -> None:
    cm_key = object_key(GPU_OPERATOR_NAMESPACE, TIME_SLICING_CONFIG_MAP)
    config_map = tx.state["configmaps"].get(cm_key)
    text = device_plugin_config_text(strategy, replicas, rename, mps)
    if config_map is None:
        new_config_map(tx, GPU_OPERATOR_NAMESPACE, TIME_SLICING_CONFIG_MAP, {key: text}, None)
    elif config_map["data"].get(key) != text:
        config_map["data"][key] = text
        touch(tx, config_map)

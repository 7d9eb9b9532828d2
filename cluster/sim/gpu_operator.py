"""The NVIDIA GPU Operator's node agents: GPU Feature Discovery, the device plugin and MIG Manager.

Reads each GPU node's ``hw`` record (the simulated hardware and the operands' own state), the node's
``nvidia.com/mig.config`` and ``nvidia.com/device-plugin.config`` labels and the ConfigMaps in the
``gpu-operator`` namespace (mig-parted's ``config.yaml`` and the device plugin's time-slicing configs). Writes
the node's GFD/operator labels (``render_gpu_node``), its advertised ``nvidia.com/*`` capacity and allocatable,
``nvidia.com/mig.config.state`` (pending, rebooting, success, failed) and the ``hw`` record:

* GFD renders a node that has just joined, and again whenever its hardware or configuration changes.
* The device plugin's config-manager reloads when the node's config label or the config text it names changes.
* MIG Manager starts a reconfiguration when ``nvidia.com/mig.config`` changes, and finishes it (or fails it:
  unknown config, impossible geometry, GPUs still in use, an injected failure) ``mig_reconfigure_seconds`` later.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from vocab.names import (
    CUDA_DRIVER_MAJOR_LABEL,
    CUDA_DRIVER_MINOR_LABEL,
    CUDA_DRIVER_REV_LABEL,
    CUDA_DRIVER_VERSION_FULL_LABEL,
    CUDA_DRIVER_VERSION_MAJOR_LABEL,
    CUDA_DRIVER_VERSION_MINOR_LABEL,
    CUDA_DRIVER_VERSION_REVISION_LABEL,
    CUDA_RUNTIME_MAJOR_LABEL,
    CUDA_RUNTIME_MINOR_LABEL,
    CUDA_RUNTIME_VERSION_FULL_LABEL,
    CUDA_RUNTIME_VERSION_MAJOR_LABEL,
    CUDA_RUNTIME_VERSION_MINOR_LABEL,
    DEPLOY_OPERANDS_SWITCH,
    DEPLOY_PAUSED_FOR_MIG,
    DEVICE_PLUGIN_CONFIG_LABEL,
    DRIVER_UPGRADE_DONE,
    GFD_TIMESTAMP_LABEL,
    GPU_CLIQUE_LABEL,
    GPU_COMPUTE_MAJOR_LABEL,
    GPU_COMPUTE_MINOR_LABEL,
    GPU_COUNT_LABEL,
    GPU_DRIVER_UPGRADE_STATE_LABEL,
    GPU_FAMILY_LABEL,
    GPU_MACHINE_LABEL,
    GPU_MEMORY_LABEL,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    MIG_ATTRIBUTE_CI_SLICES,
    MIG_ATTRIBUTE_COUNT,
    MIG_ATTRIBUTE_ENGINES_PREFIX,
    MIG_ATTRIBUTE_GI_SLICES,
    MIG_ATTRIBUTE_MEMORY,
    MIG_ATTRIBUTE_MULTIPROCESSORS,
    MIG_ATTRIBUTE_PRODUCT,
    MIG_ATTRIBUTE_REPLICAS,
    MIG_ATTRIBUTE_SHARING_STRATEGY,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_FAILED,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_PENDING,
    MIG_CONFIG_REBOOTING,
    MIG_CONFIG_STATE_LABEL,
    MIG_CONFIG_SUCCESS,
    MIG_INVALID_PROFILE,
    MIG_PARTED_CONFIG_KEY,
    MIG_PARTED_CONFIGS,
    MIG_STRATEGY_LABEL,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_NONE,
    MIG_STRATEGY_SINGLE,
    MPS_CAPABLE_LABEL,
    SHARING_MPS,
    SHARING_NONE,
    gpu_deploy_label,
    is_nvidia,
    mig_label,
    mig_product,
    shared_product,
    sharing_strategy,
    time_sliced_resource_name,
    unshared_resource_name,
)
from vocab.products import GpuProduct, layout_fits, lookup_product, preset_mig_configs, sanitise_product_name

from .constants import TERMINAL
from .pod_resources import pod_requests
from .store import Txn, mark_changed, object_key, touch

DEPLOY_OPERANDS = (
    "container-toolkit",
    "dcgm",
    "dcgm-exporter",
    "device-plugin",
    "driver",
    "gpu-feature-discovery",
    "node-status-exporter",
    "operator-validator",
)
PAUSED_FOR_MIG = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm")


def _mig_attribute_labels(prefix: str, profile: Any) -> dict[str, str]:
    labels = {
        mig_label(prefix, MIG_ATTRIBUTE_MEMORY): str(profile.memory_mb),
        mig_label(prefix, MIG_ATTRIBUTE_MULTIPROCESSORS): str(profile.multiprocessors),
        mig_label(prefix, MIG_ATTRIBUTE_GI_SLICES): str(profile.slices),
        mig_label(prefix, MIG_ATTRIBUTE_CI_SLICES): str(profile.slices),
    }
    for engine, count in profile.engines.items():
        labels[mig_label(prefix, MIG_ATTRIBUTE_ENGINES_PREFIX + engine)] = str(count)
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
    strategy = mig.get("strategy") or MIG_STRATEGY_NONE
    gpus = mig.get("gpus") or [None] * count
    sharing = hw.get("sharing") or {}
    replicas_of = sharing.get("resources") or {}
    rename = bool(sharing.get("rename"))
    driver = str(hw["driver"]).split(".")
    cuda = str(hw["cuda"]).split(".")

    if hw.get("managed"):
        # A managed node pool: the provider's driver and device plugin, no GFD and no GPU Operator labels.
        gpu_replicas = int(replicas_of.get(GPU_RESOURCE, 1))
        return {}, {GPU_RESOURCE: count * gpu_replicas}
    mps = bool(sharing.get("mps"))
    labels: dict[str, str] = {
        CUDA_DRIVER_VERSION_FULL_LABEL: str(hw["driver"]),
        CUDA_DRIVER_VERSION_MAJOR_LABEL: driver[0],
        CUDA_DRIVER_VERSION_MINOR_LABEL: driver[1] if len(driver) > 1 else "0",
        CUDA_DRIVER_VERSION_REVISION_LABEL: driver[2] if len(driver) > 2 else "0",
        CUDA_DRIVER_MAJOR_LABEL: driver[0],
        CUDA_DRIVER_MINOR_LABEL: driver[1] if len(driver) > 1 else "0",
        CUDA_DRIVER_REV_LABEL: driver[2] if len(driver) > 2 else "0",
        CUDA_RUNTIME_VERSION_FULL_LABEL: f"{cuda[0]}.{cuda[1] if len(cuda) > 1 else '0'}",
        CUDA_RUNTIME_VERSION_MAJOR_LABEL: cuda[0],
        CUDA_RUNTIME_VERSION_MINOR_LABEL: cuda[1] if len(cuda) > 1 else "0",
        CUDA_RUNTIME_MAJOR_LABEL: cuda[0],
        CUDA_RUNTIME_MINOR_LABEL: cuda[1] if len(cuda) > 1 else "0",
        GFD_TIMESTAMP_LABEL: str(int(hw.get("gfd_timestamp") or 0)),
        GPU_DRIVER_UPGRADE_STATE_LABEL: DRIVER_UPGRADE_DONE,
        GPU_COMPUTE_MAJOR_LABEL: str(product.compute_capability[0]),
        GPU_COMPUTE_MINOR_LABEL: str(product.compute_capability[1]),
        GPU_FAMILY_LABEL: product.family,
        GPU_MACHINE_LABEL: sanitise_product_name(gpu.get("machine") or "Standard-PC"),
        GPU_PRESENT_LABEL: "true",
        MIG_CAPABLE_LABEL: "true" if product.mig_capable else "false",
        MPS_CAPABLE_LABEL: "true" if mps else "false",
    }
    if hw.get("driver_upgrade_state"):
        labels[GPU_DRIVER_UPGRADE_STATE_LABEL] = str(hw["driver_upgrade_state"])
    if hw.get("clique"):
        labels[GPU_CLIQUE_LABEL] = str(hw["clique"])
    switched_off = set(hw.get("operands_off") or [])
    operands = list(DEPLOY_OPERANDS) + (["mig-manager"] if product.mig_capable else [])
    reconfiguring = bool(hw.get("mig_op"))
    for operand in operands:
        value = "true"
        if operand in switched_off or DEPLOY_OPERANDS_SWITCH in switched_off:
            value = "false"
        elif reconfiguring and operand in PAUSED_FOR_MIG:
            value = DEPLOY_PAUSED_FOR_MIG
        labels[gpu_deploy_label(operand)] = value
    if product.mig_capable:
        labels[MIG_CONFIG_STATE_LABEL] = mig.get("state") or MIG_CONFIG_SUCCESS
    if strategy in (MIG_STRATEGY_SINGLE, MIG_STRATEGY_MIXED):
        labels[MIG_STRATEGY_LABEL] = strategy

    resources: dict[str, int] = {}
    mig_gpus = [devices for devices in gpus if devices is not None] if product.mig_capable else []
    full_gpus = count - len(mig_gpus)
    gpu_replicas = int(replicas_of.get(GPU_RESOURCE, 1))

    def whole_gpu_labels(product_label: str, replicas_label: int) -> None:
        labels[GPU_PRODUCT_LABEL] = product_label
        labels[GPU_COUNT_LABEL] = str(count)
        labels[GPU_MEMORY_LABEL] = str(gpu.get("memory_mb") or product.memory_mib)
        labels[GPU_REPLICAS_LABEL] = str(replicas_label)
        labels[GPU_SHARING_STRATEGY_LABEL] = (
            SHARING_MPS if mps and replicas_label > 1 else sharing_strategy(replicas_label)
        )

    if strategy == MIG_STRATEGY_SINGLE and mig_gpus:
        profiles = {name for devices in mig_gpus for name, n in devices.items() if n}
        empty = any(not any(devices.values()) for devices in mig_gpus)
        if full_gpus or empty or len(profiles) != 1:
            # GFD's verdict for a node the single strategy cannot describe; the device plugin refuses to start.
            labels[GPU_PRODUCT_LABEL] = mig_product(base, MIG_INVALID_PROFILE)
            labels[GPU_COUNT_LABEL] = "0"
            labels[GPU_REPLICAS_LABEL] = "0"
            labels[GPU_MEMORY_LABEL] = "0"
            labels[GPU_SHARING_STRATEGY_LABEL] = SHARING_NONE
        else:
            profile = product.mig_profiles[profiles.pop()]
            devices_total = sum(sum(devices.values()) for devices in mig_gpus)
            labels[GPU_PRODUCT_LABEL] = shared_product(mig_product(base, profile.name), gpu_replicas, rename)
            labels[GPU_COUNT_LABEL] = str(devices_total)
            labels[GPU_REPLICAS_LABEL] = str(gpu_replicas)
            labels[GPU_SHARING_STRATEGY_LABEL] = sharing_strategy(gpu_replicas)
            labels.update(_mig_attribute_labels(GPU_RESOURCE, profile))
            resources[time_sliced_resource_name(GPU_RESOURCE, gpu_replicas, rename)] = devices_total * gpu_replicas
    elif strategy == MIG_STRATEGY_MIXED and mig_gpus:
        whole_gpu_labels(
            shared_product(base, gpu_replicas, rename) if full_gpus else base, gpu_replicas if full_gpus else 0
        )
        if full_gpus:
            resources[time_sliced_resource_name(GPU_RESOURCE, gpu_replicas, rename)] = full_gpus * gpu_replicas
        counts: Counter[str] = Counter()
        for devices in mig_gpus:
            counts.update({name: n for name, n in devices.items() if n})
        for name in sorted(counts):
            profile = product.mig_profiles[name]
            resource = profile.resource_name
            replicas = int(replicas_of.get(resource, 1))
            prefix = resource
            labels[mig_label(prefix, MIG_ATTRIBUTE_COUNT)] = str(counts[name])
            labels[mig_label(prefix, MIG_ATTRIBUTE_PRODUCT)] = shared_product(mig_product(base, name), replicas, rename)
            labels[mig_label(prefix, MIG_ATTRIBUTE_REPLICAS)] = str(replicas)
            labels[mig_label(prefix, MIG_ATTRIBUTE_SHARING_STRATEGY)] = sharing_strategy(replicas)
            labels.update(_mig_attribute_labels(prefix, profile))
            resources[time_sliced_resource_name(resource, replicas, rename)] = counts[name] * replicas
    else:
        whole_gpu_labels(shared_product(base, gpu_replicas, rename), gpu_replicas)
        resources[time_sliced_resource_name(GPU_RESOURCE, gpu_replicas, rename)] = count * gpu_replicas

    if DEPLOY_OPERANDS_SWITCH in switched_off:
        labels[gpu_deploy_label(DEPLOY_OPERANDS_SWITCH)] = "false"
    if not hw.get("device_plugin", True) or switched_off & {"device-plugin", DEPLOY_OPERANDS_SWITCH}:
        resources = {}
    return labels, resources


def render_node(tx: Txn, name: str, announce: bool = True) -> None:
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
    # GPUs the device plugin marked unhealthy (XID): capacity keeps them, allocatable drops all their replicas.
    replicas = int(((hw.get("sharing") or {}).get("resources") or {}).get(GPU_RESOURCE, 1))
    sick = {r: int(hw.get("unhealthy") or 0) * replicas for r in resources if unshared_resource_name(r) == GPU_RESOURCE}
    for resource, amount in resources.items():
        status["capacity"][resource] = str(amount)
        status["allocatable"][resource] = "0" if paused else str(max(0, amount - sick.get(resource, 0)))
    hw["gpu_resources"] = sorted(set(hw.get("gpu_resources") or []) | set(resources))
    # The API server serialises maps with sorted keys.
    node["metadata"]["labels"] = dict(sorted(metadata_labels.items()))
    status["capacity"] = dict(sorted(status["capacity"].items()))
    status["allocatable"] = dict(sorted(status["allocatable"].items()))
    metadata_labels = node["metadata"]["labels"]
    tx.dirty = True
    if announce and before != (metadata_labels, status["capacity"], status["allocatable"]):
        touch(tx, node)


def _gpu_pods_on(tx: Txn, node_name: str) -> list[str]:
    names = []
    for pod in tx.state["pods"].values():
        if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in TERMINAL:
            continue
        if any(is_nvidia(r) for r in pod_requests(pod["spec"])):
            names.append(object_key(pod["metadata"]["namespace"], pod["metadata"]["name"]))
    return sorted(names)


def _sync_mig_manager(tx: Txn, name: str) -> None:
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
            if hw["mig"].get("state") != MIG_CONFIG_SUCCESS:
                hw["mig"]["state"] = MIG_CONFIG_SUCCESS
                hw["mig_failed_config"] = None
                render_node(tx, name)
            return
        if wanted == hw.get("mig_failed_config"):
            return  # MIG Manager only tries again when the label changes
        hw["mig_op"] = {"config": wanted, "started": tx.now, "reboots": _mig_mode_changes(tx, hw, wanted)}
        hw["mig"]["state"] = MIG_CONFIG_PENDING
        render_node(tx, name)
        return
    if op["config"] != wanted:
        op.update(config=wanted, started=tx.now, reboots=_mig_mode_changes(tx, hw, wanted), phase=None)
        if hw["mig"].get("state") != MIG_CONFIG_PENDING:
            hw["mig"]["state"] = MIG_CONFIG_PENDING
            render_node(tx, name)
        tx.dirty = True
        return
    seconds = tx.state["timing"]["mig_reconfigure_seconds"]
    if op.get("reboots") and op.get("phase") != MIG_CONFIG_REBOOTING and tx.now >= op["started"] + seconds / 2:
        # Turning MIG mode on or off needs a GPU reset; MIG Manager (WITH_REBOOT=true) reboots the node for it.
        op["phase"] = MIG_CONFIG_REBOOTING
        hw["mig"]["state"] = MIG_CONFIG_REBOOTING
        render_node(tx, name)
    if tx.now < op["started"] + seconds:
        return
    layout = _resolve_mig_config(tx, hw, wanted)
    busy = _gpu_pods_on(tx, name)
    injected = hw.pop("mig_fail_next", None)
    hw["mig_op"] = None
    if isinstance(layout, str) or busy or injected:
        hw["mig"]["state"] = MIG_CONFIG_FAILED
        hw["mig_failed_config"] = wanted
        hw["mig_failure"] = (
            layout if isinstance(layout, str) else f"GPUs in use by {', '.join(busy)}" if busy else injected
        )
    else:
        hw["mig"].update(config=wanted, gpus=layout, state=MIG_CONFIG_SUCCESS)
        hw["mig_failed_config"] = None
        hw["mig_failure"] = None
    render_node(tx, name)
    mark_changed(tx)  # the scheduler sees the new resources on its next round


def _mig_mode_changes(tx: Txn, hw: dict[str, Any], config_name: str) -> bool:
    """Whether applying the config turns MIG mode on or off on some GPU (which takes a reboot)."""
    layout = _resolve_mig_config(tx, hw, config_name)
    if isinstance(layout, str):
        return False
    current = hw["mig"].get("gpus") or [None] * len(layout)
    return any((a is None) != (b is None) for a, b in zip(current, layout, strict=False))


def _resolve_mig_config(tx: Txn, hw: dict[str, Any], config_name: str) -> list[dict[str, int] | None] | str:
    """The per-GPU layout of a named mig-parted config, or why it cannot be applied."""
    product = lookup_product(hw["gpu"]["product"])
    count = int(hw["gpu"]["count"])
    for key in sorted(tx.state["configmaps"]):
        config_map = tx.state["configmaps"][key]
        if config_map["metadata"]["namespace"] != GPU_OPERATOR_NAMESPACE:
            continue
        text = (config_map.get("data") or {}).get(MIG_PARTED_CONFIG_KEY)
        if not text:
            continue
        try:
            parsed = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        entries = (parsed.get(MIG_PARTED_CONFIGS) or {}).get(config_name) if isinstance(parsed, dict) else None
        if entries:
            return _layout_from_mig_parted(product, count, hw["mig"].get("gpus") or [None] * count, entries)
    presets = preset_mig_configs(product)
    if config_name not in presets:
        return f'no MIG configuration named "{config_name}" for {product.name}'
    devices = presets[config_name]
    return [None if devices is None else dict(devices) for _ in range(count)]


def _layout_from_mig_parted(
    product: GpuProduct, count: int, current: list[Any], entries: list[Any]
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


def _sync_device_plugin(tx: Txn, name: str) -> None:
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
        if flags.get("migStrategy") in (MIG_STRATEGY_NONE, MIG_STRATEGY_SINGLE, MIG_STRATEGY_MIXED):
            strategy = flags["migStrategy"]
        shared = config.get("sharing") or {}
        mps = bool(shared.get("mps"))
        time_slicing = shared.get("mps") or shared.get("timeSlicing") or {}
        resources = {
            str(r.get("name")): int(r.get("replicas") or 1)
            for r in time_slicing.get("resources") or []
            if isinstance(r, dict) and r.get("name")
        }
        if mps and any(replicas < 2 for replicas in resources.values()):
            return  # "number of replicas must be >= 2" (api/config/v1/replicas.go): the config does not load
        if mps and strategy == MIG_STRATEGY_MIXED:
            # "using --mig-strategy=mixed is not supported with MPS" (cmd/nvidia-device-plugin/main.go): the plugin
            # refuses the config and keeps the one it runs with.
            return
        if any(replicas > 1 for replicas in resources.values()):
            sharing = {"resources": resources, "rename": bool(time_slicing.get("renameByDefault", False))}
            if mps:
                sharing["mps"] = True
    if hw["mig"].get("strategy") != strategy or (hw.get("sharing") or {}) != sharing:
        hw["mig"]["strategy"] = strategy
        hw["sharing"] = sharing
        render_node(tx, name)
        mark_changed(tx)


def _device_plugin_configs(tx: Txn) -> dict[str, str]:
    """Config name -> text, from the first ConfigMap (by namespace/name) in the gpu-operator namespace that has it."""
    texts: dict[str, str] = {}
    for key in sorted(tx.state["configmaps"]):
        config_map = tx.state["configmaps"][key]
        if config_map["metadata"]["namespace"] == GPU_OPERATOR_NAMESPACE:
            for name, text in (config_map.get("data") or {}).items():
                texts.setdefault(name, text)
    return texts


def reconcile(tx: Txn) -> None:
    """One round of GFD, the device plugin's config-manager and MIG Manager over the GPU nodes, by node name."""
    state = tx.state
    texts = _device_plugin_configs(tx)
    for name in sorted(state["hw"]):
        node, hw = state["nodes"].get(name), state["hw"][name]
        if node is None or hw.get("gpu") is None:
            continue
        if not hw.get("rendered"):
            # GFD's first pass over a node that has just joined (what it reports before anyone watched the node).
            render_node(tx, name, announce=False)
            hw["rendered"] = True
            mark_changed(tx)
        labels = node["metadata"].get("labels") or {}
        wanted = labels.get(DEVICE_PLUGIN_CONFIG_LABEL)
        seen = [wanted, texts.get(wanted) if wanted is not None else None]
        if "device_plugin_seen" not in hw:
            hw["device_plugin_seen"] = seen  # the config the plugin started with
        elif hw["device_plugin_seen"] != seen:
            hw["device_plugin_seen"] = seen
            tx.dirty = True
            _sync_device_plugin(tx, name)
        mig_config = labels.get(MIG_CONFIG_LABEL)
        if "mig_label_seen" not in hw:
            hw["mig_label_seen"] = mig_config  # the label the node joined with was applied at boot
        if hw.get("mig_op") or hw["mig_label_seen"] != mig_config:
            hw["mig_label_seen"] = mig_config
            tx.dirty = True
            _sync_mig_manager(tx, name)


def next_due(tx: Txn) -> float | None:
    """When a MIG reconfiguration in progress next moves on (to rebooting, or to its end)."""
    timing = tx.state["timing"]
    times: list[float] = []
    for hw in tx.state["hw"].values():
        op = hw.get("mig_op")
        if op:
            times.append(op["started"] + timing["mig_reconfigure_seconds"])
            if op.get("reboots") and op.get("phase") != MIG_CONFIG_REBOOTING:
                times.append(op["started"] + timing["mig_reconfigure_seconds"] / 2)
    return min(times) if times else None

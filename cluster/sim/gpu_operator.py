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

from vocab.products import GpuProduct, layout_fits, lookup_product, preset_mig_configs, sanitise_product_name

from .constants import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_OPERATOR_NAMESPACE,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    TERMINAL,
)
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
    operands = list(DEPLOY_OPERANDS) + (["mig-manager"] if product.mig_capable else [])
    reconfiguring = bool(hw.get("mig_op"))
    for operand in operands:
        value = "true"
        if operand == "device-plugin" and not hw.get("device_plugin", True):
            value = "false"
        elif reconfiguring and operand in PAUSED_FOR_MIG:
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
    if announce and before != (metadata_labels, status["capacity"], status["allocatable"]):
        touch(tx, node)


def _gpu_pods_on(tx: Txn, node_name: str) -> list[str]:
    names = []
    for pod in tx.state["pods"].values():
        if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in TERMINAL:
            continue
        if any(r.startswith("nvidia.com/") for r in pod_requests(pod["spec"])):
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
            if hw["mig"].get("state") != "success":
                hw["mig"]["state"] = "success"
                hw["mig_failed_config"] = None
                render_node(tx, name)
            return
        if wanted == hw.get("mig_failed_config"):
            return  # MIG Manager only tries again when the label changes
        hw["mig_op"] = {"config": wanted, "started": tx.now, "reboots": _mig_mode_changes(tx, hw, wanted)}
        hw["mig"]["state"] = "pending"
        render_node(tx, name)
        return
    if op["config"] != wanted:
        op.update(config=wanted, started=tx.now, reboots=_mig_mode_changes(tx, hw, wanted), phase=None)
        if hw["mig"].get("state") != "pending":
            hw["mig"]["state"] = "pending"
            render_node(tx, name)
        tx.dirty = True
        return
    seconds = tx.state["timing"]["mig_reconfigure_seconds"]
    if op.get("reboots") and op.get("phase") != "rebooting" and tx.now >= op["started"] + seconds / 2:
        # Turning MIG mode on or off needs a GPU reset; MIG Manager (WITH_REBOOT=true) reboots the node for it.
        op["phase"] = "rebooting"
        hw["mig"]["state"] = "rebooting"
        render_node(tx, name)
    if tx.now < op["started"] + seconds:
        return
    layout = _resolve_mig_config(tx, hw, wanted)
    busy = _gpu_pods_on(tx, name)
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
        text = (config_map.get("data") or {}).get("config.yaml")
        if not text:
            continue
        try:
            parsed = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        entries = (parsed.get("mig-configs") or {}).get(config_name) if isinstance(parsed, dict) else None
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
            if op.get("reboots") and op.get("phase") != "rebooting":
                times.append(op["started"] + timing["mig_reconfigure_seconds"] / 2)
    return min(times) if times else None

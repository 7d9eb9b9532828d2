"""NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu): its DeviceClasses and its kubelet plugins' slices.

Reads each node's ``hw`` record: a node with a ``dra`` section (the scenario's ``dra:``) runs the GPU kubelet plugin
and, with ``compute_domains``, the ComputeDomain kubelet plugin. Writes, as the driver does:

* The DeviceClasses its Helm chart installs (templates/deviceclass-*.yaml) once any node runs the driver:
  ``gpu.nvidia.com``, ``mig.nvidia.com``, ``vfio.gpu.nvidia.com`` and, with ComputeDomains, the default channel
  and daemon classes.
* Per node, the ResourceSlices of its pool (pool name = node name, ``spec.nodeName`` set): whole GPUs
  (``gpu-<minor>``) with their attributes and memory; with static MIG the MIG devices of the node's layout
  (``gpu-<minor>-mig-<profile>-<profile id>-<start>``, with ``parentUUID`` and ``profile``); with dynamic MIG every
  placement each GPU could hold, plus the whole GPU, all consuming one counter set per GPU (a slice of
  ``sharedCounters`` and one slice of devices per GPU, since a slice holds one or the other). Device taints from
  the scenario. The ComputeDomain plugin's slice holds an IMEX channel (``channel-0``) and a daemon device.
* Slices of a node that is gone are deleted (they are owned by the Node).

Names, attributes and capacities are vocab.dra's (sources cited there); product facts vocab.products'.
"""

from __future__ import annotations

from typing import Any

from vocab.dra import (
    ARCHITECTURE_ATTRIBUTE,
    BRAND_ATTRIBUTE,
    COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS,
    COMPUTE_DOMAIN_DAEMON_DEVICE_CLASS,
    COMPUTE_DOMAIN_DRIVER,
    CUDA_COMPUTE_CAPABILITY_ATTRIBUTE,
    CUDA_DRIVER_VERSION_ATTRIBUTE,
    DEVICE_CLASS_KIND,
    DEVICE_TYPE_CHANNEL,
    DEVICE_TYPE_DAEMON,
    DEVICE_TYPE_GPU,
    DEVICE_TYPE_MIG,
    DEVICE_TYPE_VFIO,
    DRIVER_VERSION_ATTRIBUTE,
    GPU_DEVICE_CLASS,
    GPU_DRIVER,
    GPU_EXTENDED_RESOURCE,
    ID_ATTRIBUTE,
    MEMORY_CAPACITY,
    MIG_DEVICE_CLASS,
    MIG_ENGINE_CAPACITIES,
    MULTIPROCESSORS_CAPACITY,
    PARENT_UUID_ATTRIBUTE,
    PCI_BUS_ID_ATTRIBUTE,
    PCIE_ROOT_ATTRIBUTE,
    PRODUCT_NAME_ATTRIBUTE,
    PROFILE_ATTRIBUTE,
    RESOURCE_API_VERSION,
    RESOURCE_SLICE_KIND,
    TYPE_ATTRIBUTE,
    UUID_ATTRIBUTE,
    VFIO_DEVICE_CLASS,
    channel_device_name,
    counter_name,
    counter_set_name,
    daemon_device_name,
    gpu_device_name,
    memory_slice_counter,
    mig_device_name,
)
from vocab.mig import place
from vocab.products import GpuProduct, MigProfile, lookup_product

from ..base import KubeObject
from .store import Txn, bump_rv, gpu_uuid, new_metadata, stable_hex

#: The brand NVML reports for data-centre GPUs, as go-nvlib spells it (vocab.dra.BRAND_ATTRIBUTE).
DATA_CENTRE_BRAND = "Nvidia"


def reconcile(tx: Txn) -> None:
    state = tx.state
    slices = state.setdefault("resourceslices", {})
    classes = state.setdefault("deviceclasses", {})
    dra_nodes = {
        name: hw for name, hw in state["hw"].items() if hw.get("dra") and hw.get("gpu") and name in state["nodes"]
    }
    for key in [k for k, s in slices.items() if s["spec"].get("nodeName") not in dra_nodes]:
        del slices[key]
        bump_rv(tx)
    with_domains = any(hw["dra"].get("compute_domains") for hw in dra_nodes.values())
    installed = state.setdefault("dra_classes_installed", [])
    if dra_nodes:
        # Helm installs each class once; one an admin deletes or edits afterwards stays as the admin left it.
        for name, selector in _device_classes(with_domains).items():
            if name not in installed:
                device_class = {"apiVersion": RESOURCE_API_VERSION, "kind": DEVICE_CLASS_KIND}
                device_class["metadata"] = new_metadata(tx, name)
                device_class["spec"] = selector
                classes[name] = device_class
                installed.append(name)
    for name, hw in sorted(dra_nodes.items()):
        if hw["dra"].get("published"):
            continue
        node = state["nodes"][name]
        for slice_object in node_slices(name, node, hw):
            slice_object["metadata"] = {
                **new_metadata(tx, slice_object["metadata"]["name"]),
                **slice_object["metadata"],
            }
            slices[slice_object["metadata"]["name"]] = slice_object
        hw["dra"]["published"] = True
        bump_rv(tx)


def next_due(tx: Txn) -> None:
    """The plugins publish when a node joins; nothing is due by itself."""
    return None


def _device_classes(with_domains: bool) -> dict[str, dict[str, Any]]:
    """The Helm chart's DeviceClasses (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml)."""

    def of_type(driver: str, kind: str, extra: str = "") -> dict[str, Any]:
        expression = f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{kind}'{extra}"
        return {"selectors": [{"cel": {"expression": expression}}]}

    classes = {
        GPU_DEVICE_CLASS: {**of_type(GPU_DRIVER, DEVICE_TYPE_GPU), "extendedResourceName": GPU_EXTENDED_RESOURCE},
        MIG_DEVICE_CLASS: of_type(GPU_DRIVER, DEVICE_TYPE_MIG),
        VFIO_DEVICE_CLASS: of_type(GPU_DRIVER, DEVICE_TYPE_VFIO),
    }
    if with_domains:
        classes[COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS] = of_type(
            COMPUTE_DOMAIN_DRIVER, DEVICE_TYPE_CHANNEL, f" && device.attributes['{COMPUTE_DOMAIN_DRIVER}'].id == 0"
        )
        classes[COMPUTE_DOMAIN_DAEMON_DEVICE_CLASS] = of_type(COMPUTE_DOMAIN_DRIVER, DEVICE_TYPE_DAEMON)
    return classes


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _quantity(value: int) -> dict[str, str]:
    return {"value": str(value)}


def _semver(text: str) -> str:
    """The driver writes versions through semver.MustParse(...).String(): "12.4" becomes "12.4.0"."""
    parts = (text.split(".") + ["0", "0"])[:3]
    return ".".join(str(int(part)) for part in parts)


def _gpu_attributes(node_name: str, hw: dict[str, Any], product: GpuProduct, minor: int) -> dict[str, Any]:
    bus = f"0000:{0x18 + minor * 0x10:02x}:00.0"
    return {
        TYPE_ATTRIBUTE: _string(DEVICE_TYPE_GPU),
        UUID_ATTRIBUTE: _string(gpu_uuid(node_name, minor)),
        PRODUCT_NAME_ATTRIBUTE: _string(hw["gpu"]["product"]),
        BRAND_ATTRIBUTE: _string(DATA_CENTRE_BRAND),
        ARCHITECTURE_ATTRIBUTE: _string(product.family.replace("-", " ").title()),
        CUDA_COMPUTE_CAPABILITY_ATTRIBUTE: {"version": "{}.{}.0".format(*product.compute_capability)},
        DRIVER_VERSION_ATTRIBUTE: {"version": _semver(hw["driver"])},
        CUDA_DRIVER_VERSION_ATTRIBUTE: {"version": _semver(hw["cuda"])},
        PCI_BUS_ID_ATTRIBUTE: _string(bus),
        PCIE_ROOT_ATTRIBUTE: _string(f"pci0000:{0x10 + minor // 2 * 0x10:02x}"),
    }


def _mig_attributes(gpu: dict[str, Any], profile: str) -> dict[str, Any]:
    """CommonAttributesMig: the parent's attributes, type mig, its profile and the parent's UUID."""
    attributes = {k: v for k, v in gpu.items() if k != UUID_ATTRIBUTE}
    attributes[TYPE_ATTRIBUTE] = _string(DEVICE_TYPE_MIG)
    attributes[PARENT_UUID_ATTRIBUTE] = gpu[UUID_ATTRIBUTE]
    attributes[PROFILE_ATTRIBUTE] = _string(profile)
    return attributes


def _mig_capacity(profile: MigProfile) -> dict[str, dict[str, str]]:
    """CommonCapacitiesMig: SMs, engines and memory (MiB from NVML, announced in bytes)."""
    capacity = {MULTIPROCESSORS_CAPACITY: _quantity(profile.multiprocessors)}
    for name, engine in MIG_ENGINE_CAPACITIES:
        capacity[name] = _quantity(profile.engines.get(engine, 0))
    capacity[MEMORY_CAPACITY] = _quantity(profile.memory_mb * 2**20)
    return capacity


def _taint(hw: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    taints = [
        {k: v for k, v in taint.items() if k != "device"}
        for taint in hw["dra"].get("taints") or []
        if taint["device"] == device["name"]
    ]
    if taints:
        device["taints"] = taints
    return device


def node_slices(node_name: str, node: KubeObject, hw: dict[str, Any]) -> list[KubeObject]:
    """The ResourceSlices the node's plugins publish (metadata holds only name and owner; the store adds the rest)."""
    product = lookup_product(hw["gpu"]["product"])
    count = int(hw["gpu"]["count"])
    mig = hw["dra"]["mig"]
    gpus = [_gpu_attributes(node_name, hw, product, minor) for minor in range(count)]
    full_memory = int(hw["gpu"].get("memory_mb") or product.memory_mib) * 2**20
    groups: list[dict[str, Any]] = []  # slice specs (without pool), each "devices" or "sharedCounters"
    if mig == "dynamic":
        counter_sets = []
        for minor, attributes in enumerate(gpus):
            devices, counter_set = _dynamic_gpu(product, minor, attributes)
            counter_sets.append(counter_set)
            groups.append({"devices": [_taint(hw, d) for d in devices]})
        groups.insert(0, {"sharedCounters": counter_sets})
    else:
        devices = []
        layout = hw["mig"]["gpus"] if mig == "static" else [None] * count
        for minor, attributes in enumerate(gpus):
            if layout[minor] is None:
                devices.append(
                    {"name": gpu_device_name(minor), "attributes": attributes,
                     "capacity": {MEMORY_CAPACITY: _quantity(full_memory)}}
                )  # fmt: skip
                continue
            devices.extend(_static_mig_devices(node_name, product, minor, attributes, layout[minor]))
        groups.append({"devices": [_taint(hw, d) for d in devices]})
    slices = [_slice(node_name, node, GPU_DRIVER, index, len(groups), group) for index, group in enumerate(groups)]
    if hw["dra"].get("compute_domains"):
        devices = [
            {"name": channel_device_name(0), "attributes": {
                TYPE_ATTRIBUTE: _string(DEVICE_TYPE_CHANNEL), ID_ATTRIBUTE: {"int": 0}}},
            {"name": daemon_device_name(0), "attributes": {
                TYPE_ATTRIBUTE: _string(DEVICE_TYPE_DAEMON), ID_ATTRIBUTE: {"int": 0}}},
        ]  # fmt: skip
        slices.append(_slice(node_name, node, COMPUTE_DOMAIN_DRIVER, 0, 1, {"devices": devices}))
    return slices


def _slice(node_name: str, node: KubeObject, driver: str, index: int, count: int, body: dict) -> KubeObject:
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node_name,
        "uid": node["metadata"]["uid"],
        "controller": True,
    }
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": RESOURCE_SLICE_KIND,
        "metadata": {
            "name": f"{node_name}-{driver}-{stable_hex(node_name, driver, index, length=5)}",
            "ownerReferences": [owner],
        },
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": count},
            **body,
        },
    }


def _static_mig_devices(
    node_name: str, product: GpuProduct, minor: int, attributes: dict[str, Any], counts: dict[str, int]
) -> list[dict[str, Any]]:
    """The MIG devices of one GPU's layout, where the driver placed them; with the memory slices they cover."""
    geometry = product.geometry
    placements = place(geometry, counts) if geometry else None
    devices = []
    for placement in placements or []:
        profile = product.mig_profiles[placement.profile]
        uuid = "MIG-" + stable_hex("mig", node_name, minor, placement.profile, placement.start, length=32)
        uuid = f"{uuid[:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:24]}-{uuid[24:]}"
        capacity = _mig_capacity(profile)
        for slot in range(placement.start, placement.start + placement.size):
            capacity[f"memorySlice{slot}"] = _quantity(1)
        devices.append(
            {
                "name": mig_device_name(minor, profile.name, profile.profile_id, placement.start),
                "attributes": {**_mig_attributes(attributes, profile.name), UUID_ATTRIBUTE: _string(uuid)},
                "capacity": capacity,
            }
        )
    return devices


def _dynamic_gpu(product: GpuProduct, minor: int, attributes: dict[str, Any]) -> tuple[list[dict], dict]:
    """Dynamic MIG (partitions.go): every placement of every profile, and the whole GPU, consuming the GPU's
    counter set: per capacity the largest any profile has, one counter per memory slice."""
    geometry = product.geometry
    assert geometry is not None
    most: dict[str, int] = {}
    for profile in product.mig_profiles.values():
        for name, value in _mig_capacity(profile).items():
            most[name] = max(most.get(name, 0), int(value["value"]))
    slices = geometry.memory_slices
    set_name = counter_set_name(minor)

    def consumes(capacity: dict[str, int], start: int, size: int) -> list[dict[str, Any]]:
        counters = {counter_name(name): _quantity(value) for name, value in capacity.items()}
        counters.update({memory_slice_counter(i): _quantity(1) for i in range(start, start + size)})
        return [{"counterSet": set_name, "counters": counters}]

    whole = {
        "name": gpu_device_name(minor),
        "attributes": attributes,
        "capacity": {name: _quantity(value) for name, value in most.items()},
        "consumesCounters": consumes(most, 0, slices),
    }
    devices = [whole]
    for profile in sorted(product.mig_profiles.values(), key=lambda p: (p.slices, p.memory_slices, p.name)):
        capacity = _mig_capacity(profile)
        for start in profile.starts:
            devices.append(
                {
                    "name": mig_device_name(minor, profile.name, profile.profile_id, start),
                    "attributes": _mig_attributes(attributes, profile.name),
                    "capacity": capacity,
                    "consumesCounters": consumes(
                        {name: int(value["value"]) for name, value in capacity.items()}, start, profile.memory_slices
                    ),
                }
            )
    counter_set = {
        "name": set_name,
        "counters": consumes(most, 0, slices)[0]["counters"],
    }
    return devices, counter_set

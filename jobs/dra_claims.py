"""How a workload asks for its GPUs on a Dynamic Resource Allocation cluster (issue 33, item 3).

A job whose resource class is a DRA class (its key starts with gpus.dra_inventory.CLASS_KEY_PREFIX; the class's
``resource_name`` is the device class) asks through a ResourceClaimTemplate instead of an extended-resource limit:

* one template per workload, in the team's namespace, named ``<workload>-gpus`` (``template_name``): one request
  ``gpus`` of ``exactly`` the class's device class, ``allocationMode: ExactCount`` with the job's count, and CEL
  selectors for the class's product (the ``productName`` attribute) and, for a MIG class, its profile;
* a class an admin shares (``sharing_strategy`` time-slicing or MPS among ``replicas`` users per device,
  gpus.class_admin) asks through a ResourceClaim instead: a workload's pods (one pod of a job or a rank, at most
  ``replicas`` replicas of a service) share one claim, ``<workload>-gpus`` (``shared_claim_name``), of one device
  with NVIDIA's opaque configuration for the request: ``GpuConfig`` (whole GPUs) or
  ``MigDeviceConfig`` (MIG devices, which take MPS only) of ``resource.nvidia.com/v1beta1`` with
  ``sharing.strategy`` and, for MPS, each client's share of threads and memory (vocab.dra, from the driver's
  api/nvidia.com/resource/v1beta1). Pods name their claim (``resourceClaimName``); the portal creates the claims
  and deletes them when the workload ends (jobs.kinds.base). A claim is one workload's, so pods of two workloads
  never share a device (admission counts so: jobs.scheduling.dra);
* the pod's ``spec.resourceClaims`` entry ``{name: gpus, resourceClaimTemplateName}`` and the container's
  ``resources.claims: [{name: gpus}]``, and no GPU limit.

Where every pool the work may land on maps ``nvidia.com/gpu`` onto DRA (NodePool.gpu_request ``dra-extended``), a
whole-GPU class without sharing keeps the plain limit, named by the extended resource of the gpu.nvidia.com class
(its ``extendedResourceName``): the scheduler turns it into a claim itself. A device-plugin class renders exactly as
before.

Alternatives: ``render_claim_template`` given ``alternatives`` (the classes that may serve the request after ``rc``,
in priority order, gpus.class_admin) renders the request as ``firstAvailable``: one subrequest per class
(``choice-1`` for ``rc``, ``choice-2``… for the alternatives), each with its own device class, selectors,
``ExactCount`` and count; the sharing configuration names the request, so it applies to whichever subrequest is
allocated (alternatives share their kind of unit, so one configuration fits all). The portal's own launches pass
none: admission has already chosen the alternative a job gets on the node it pins the pod to and charged that
class's quota, so the job's template asks ``exactly`` that class (``chosen_class``; docs/design.md, "Alternatives of
a DRA class", says why).

Nothing a user typed reaches a selector: the product label and profile are the class's, discovered from the
slices, checked against the characters a label value and a MIG profile may hold, and written as CEL string
literals; a class that fails the check cannot be rendered (``ValueError``).

Multi-node NVLink gangs also get a ComputeDomain (``render_compute_domain``); see jobs.distributed.render.

Pure Python over the rows' attributes: no queries.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gpus.choices import GpuRequestMode, ResourceKind
from gpus.dra_inventory import CLASS_KEY_PREFIX
from vocab.dra import (
    ALLOCATION_MODE_EXACT_COUNT,
    COMPUTE_DOMAIN_KIND,
    GPU_CONFIG_KIND,
    GPU_DEVICE_CLASS,
    GPU_DRIVER,
    GPU_EXTENDED_RESOURCE,
    MIG_DEVICE_CONFIG_KIND,
    MPS_ACTIVE_THREAD_PERCENTAGE_FIELD,
    MPS_CONFIG_FIELD,
    MPS_PINNED_MEMORY_LIMIT_FIELD,
    MPS_STRATEGY,
    NVIDIA_CONFIG_API_VERSION,
    PRODUCT_NAME_ATTRIBUTE,
    PROFILE_ATTRIBUTE,
    RESOURCE_API_VERSION,
    RESOURCE_CLAIM_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    SHARING_FIELD,
    STRATEGY_FIELD,
    TIME_SLICING_STRATEGY,
)
from vocab.names import SHARING_MPS, SHARING_TIME_SLICING

#: The pod's claim of its GPUs, and the request in its template.
GPU_CLAIM = "gpus"
#: A ComputeDomain member's claim of its IMEX channel (the channel template's request is vocab.dra's "channel").
CHANNEL_CLAIM = "channel"
#: The characters a product label (a Kubernetes label value) and a MIG profile ("1g.10gb", "1g.10gb+me") may hold.
_PRODUCT_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_PROFILE = re.compile(r"[0-9]+g\.[0-9]+gb(\+[a-z]+)?")
#: The portal's sharing strategies and the driver's (GpuSharing.strategy).
_STRATEGIES = {SHARING_TIME_SLICING: TIME_SLICING_STRATEGY, SHARING_MPS: MPS_STRATEGY}


def is_dra_class(rc) -> bool:
    """Whether ``rc`` (a ResourceClass or anything with its ``key``) is a class of DRA devices."""
    return str(rc.key).startswith(CLASS_KEY_PREFIX)


def uses_claims(rc, maps_extended: bool) -> bool:
    """Whether pods of class ``rc`` ask through a ResourceClaimTemplate: a DRA class, unless the pools map
    ``nvidia.com/gpu`` onto DRA (``maps_extended``) and the class is plain whole GPUs of the gpu.nvidia.com class,
    the only one with an extended resource name."""
    if not is_dra_class(rc):
        return False
    plain_gpu = rc.resource_name == GPU_DEVICE_CLASS and not _strategy(rc)
    return not (maps_extended and plain_gpu)


def gpu_limits(rc, count: int, claims: bool) -> dict[str, int]:
    """The container's GPU limit: the device plugin's resource for a device-plugin class, none for a DRA class
    asked for through a claim (``claims``: ``uses_claims``), else the extended resource DRA maps."""
    if not is_dra_class(rc):
        return {rc.resource_name: count}
    return {} if claims else {GPU_EXTENDED_RESOURCE: count}


def template_name(workload: str) -> str:
    """The GPU claim template of a workload (a workload name is a DNS label, so this is a valid object name)."""
    return f"{workload}-{GPU_CLAIM}"


def channel_template_name(workload: str) -> str:
    """The channel claim template a gang's ComputeDomain asks its controller to make."""
    return f"{workload}-{CHANNEL_CLAIM}"


def _cel_string(text: str) -> str:
    """A CEL string literal holding ``text`` (double-quoted; backslash and quote escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _attribute(name: str) -> str:
    return f"device.attributes[{_cel_string(GPU_DRIVER)}].{name}"


def selectors(rc) -> list[str]:
    """The CEL selectors of the class: its product and, for MIG, its profile. The product label is GFD's spelling
    of ``productName`` (spaces as hyphens, gpus.dra_inventory.product_label), so the name is matched with a space
    or a hyphen wherever the label has a hyphen; the label's other characters are letters, digits, '_' and '.'."""
    label = str(rc.product_label)
    if not _PRODUCT_LABEL.fullmatch(label):
        raise ValueError(f"Resource class {rc.key} has the product label {label!r}, which is not a label value.")
    pattern = "^" + "[ -]".join(part.replace(".", "\\.") for part in label.split("-")) + "$"
    out = [f"{_attribute(PRODUCT_NAME_ATTRIBUTE)}.matches({_cel_string(pattern)})"]
    if rc.kind == ResourceKind.MIG or rc.profile:
        profile = str(rc.profile)
        if not _PROFILE.fullmatch(profile):
            raise ValueError(f"Resource class {rc.key} has the MIG profile {profile!r}, which is not a MIG profile.")
        # Guarded: a device of the driver without a profile (a whole GPU) reads as no match, not a runtime error.
        present = f"{_cel_string(PROFILE_ATTRIBUTE)} in device.attributes[{_cel_string(GPU_DRIVER)}]"
        out.append(f"{present} && {_attribute(PROFILE_ATTRIBUTE)} == {_cel_string(profile)}")
    return out


def _strategy(rc) -> str:
    return _STRATEGIES.get(getattr(rc, "sharing_strategy", "") or "", "")


def sharing_config(rc) -> dict[str, Any] | None:
    """NVIDIA's opaque configuration of the class's sharing for the GPU request, or None. A MIG device takes MPS
    only (MigDeviceSharing has no time-slicing; the driver says time-slicing has no effect on MIG devices). With MPS
    among ``replicas`` users each client gets 1/replicas of the device's threads and, where the class knows the
    device's memory, of its memory (MpsConfig's defaultActiveThreadPercentage and defaultPinnedDeviceMemoryLimit),
    as the device plugin's MPS sharing splits a GPU."""
    strategy = _strategy(rc)
    mig = rc.resource_name != GPU_DEVICE_CLASS
    if not strategy or (mig and strategy != MPS_STRATEGY):
        return None
    sharing: dict[str, Any] = {STRATEGY_FIELD: strategy}
    replicas = int(getattr(rc, "replicas", 1) or 1)
    if strategy == MPS_STRATEGY and replicas > 1:
        limits: dict[str, Any] = {MPS_ACTIVE_THREAD_PERCENTAGE_FIELD: 100 // replicas}
        if getattr(rc, "memory_mb", None):
            limits[MPS_PINNED_MEMORY_LIMIT_FIELD] = f"{int(rc.memory_mb) // replicas}Mi"
        sharing[MPS_CONFIG_FIELD] = limits
    return {
        "requests": [GPU_CLAIM],
        "opaque": {
            "driver": GPU_DRIVER,
            "parameters": {
                "apiVersion": NVIDIA_CONFIG_API_VERSION,
                "kind": MIG_DEVICE_CONFIG_KIND if mig else GPU_CONFIG_KIND,
                SHARING_FIELD: sharing,
            },
        },
    }


def subrequest_name(position: int) -> str:
    """The name of the ``position``-th (0 first) subrequest of a prioritized list: ``choice-1``, ``choice-2``…"""
    return f"choice-{position + 1}"


def _device_request(rc, count: int) -> dict[str, Any]:
    return {
        "deviceClassName": str(rc.resource_name),
        "selectors": [{"cel": {"expression": expression}} for expression in selectors(rc)],
        "allocationMode": ALLOCATION_MODE_EXACT_COUNT,
        "count": int(count),
    }


def render_claim_template(
    rc, count: int, name: str, namespace: str, labels: dict[str, str], alternatives: Sequence = ()
) -> dict[str, Any]:
    """The ResourceClaimTemplate each of a workload's pods gets its claim of ``count`` devices of ``rc`` from; with
    ``alternatives`` (classes of the same kind of unit, in priority order), of the first of ``rc`` and them that
    the scheduler can allocate on the pod's node (``firstAvailable``)."""
    request: dict[str, Any] = {"name": GPU_CLAIM}
    if alternatives:
        request["firstAvailable"] = [
            {"name": subrequest_name(position), **_device_request(choice, count)}
            for position, choice in enumerate((rc, *alternatives))
        ]
    else:
        request["exactly"] = _device_request(rc, count)
    devices: dict[str, Any] = {"requests": [request]}
    config = sharing_config(rc)
    if config is not None:
        devices["config"] = [config]
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": RESOURCE_CLAIM_TEMPLATE_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"metadata": {"labels": dict(labels)}, "spec": {"devices": devices}},
    }


# -- Shared classes: pods share a device through one ResourceClaim ------------------------------------------------


def shares_devices(rc) -> bool:
    """Whether pods of ``rc`` share devices through ResourceClaims the portal makes: a DRA class an admin shares
    (time-slicing or MPS among ``replicas`` users per device, gpus.class_admin)."""
    return is_dra_class(rc) and int(getattr(rc, "replicas", 1) or 1) > 1 and sharing_config(rc) is not None


def shared_claim_name(workload: str) -> str:
    """The one claim a workload's pods share, ``<workload>-gpus`` (a ResourceClaim is another kind than a template of
    the same name, which a shared class never renders)."""
    return template_name(workload)


def render_shared_claim(rc, name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """The ResourceClaim up to ``rc.replicas`` pods of one workload share: one device of the class (its device class
    and selectors, ExactCount 1) with NVIDIA's sharing config. The portal creates it in the team's namespace and
    deletes it when the workload ends; kube-scheduler allocates it once, for the first pod, and reserves it for each
    pod that uses it (``status.reservedFor``); it is deallocated when the last of them ends."""
    if not shares_devices(rc):
        raise ValueError(f"Resource class {rc.key} is not shared: its pods claim from a template.")
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": RESOURCE_CLAIM_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "devices": {
                "requests": [{"name": GPU_CLAIM, "exactly": _device_request(rc, 1)}],
                "config": [sharing_config(rc)],
            }
        },
    }


def add_shared_claim(pod_spec: dict[str, Any], container: dict[str, Any], claim: str) -> None:
    """The pod uses the shared ResourceClaim ``claim`` (by name, not from a template) as its ``gpus`` claim."""
    pod_spec["resourceClaims"] = [{"name": GPU_CLAIM, "resourceClaimName": claim}]
    container["resources"]["claims"] = [{"name": GPU_CLAIM}]


def add_claims(pod_spec: dict[str, Any], container: dict[str, Any], claims: dict[str, str]) -> None:
    """The pod's claims from templates (``claims``: pod claim name → template name), each used by the container."""
    pod_spec["resourceClaims"] = [
        {"name": claim, "resourceClaimTemplateName": template} for claim, template in claims.items()
    ]
    container["resources"]["claims"] = [{"name": claim} for claim in claims]


def render_compute_domain(name: str, namespace: str, nodes: int, labels: dict[str, str]) -> dict[str, Any]:
    """NVIDIA's ComputeDomain of a multi-node NVLink gang: ``nodes`` nodes, and the channel claim template its
    controller makes (``channel_template_name``), which each member pod claims."""
    return {
        "apiVersion": NVIDIA_CONFIG_API_VERSION,
        "kind": COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"numNodes": int(nodes), "channel": {"resourceClaimTemplate": {"name": channel_template_name(name)}}},
    }


def request_mode(rc, maps_extended: bool) -> str:
    """How the work asks for its GPUs, in GpuRequestMode's words (for the timeline and tests)."""
    if not is_dra_class(rc):
        return GpuRequestMode.DEVICE_PLUGIN
    return GpuRequestMode.DRA if uses_claims(rc, maps_extended) else GpuRequestMode.DRA_EXTENDED

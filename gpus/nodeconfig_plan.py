"""Planning a node's GPU carving: pure checks of an admin's request against the node, nothing sent.

A request (a MIG preset, per-GPU MIG layouts, or time-slicing replicas) becomes a ``Plan``: what the node will
advertise afterwards and the warnings an admin should read first — resource classes that disappear with the
layout, and the quotas and queued jobs that refer to them (asked of the jobs app through ``gpus.seams``, which
it fills at start-up; the inventory never imports jobs). ``gpus.nodeconfig`` carries the plan out. A node whose
GPUs NVIDIA's DRA driver carves itself (dynamic MIG) is refused here, with what to do instead (gpus.dra_carving).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from vocab import mig
from vocab.names import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    MIG_CONFIG_LABEL,
    NVIDIA_PREFIX,
    SHARED_GPU_RESOURCE,
    SHARED_PRODUCT_SUFFIX,
)
from vocab.names import MIG_CONFIG_STATE_LABEL as MIG_STATE_LABEL

from . import seams
from .choices import NodeConfigKind
from .dra_carving import carve_refusal
from .models import Node, ResourceClass
from .resources import class_key

__all__ = [
    "DEVICE_PLUGIN_CONFIG_LABEL", "GPU_RESOURCE", "MIG_CONFIG_LABEL", "MIG_STATE_LABEL", "SHARED_GPU_RESOURCE",
    "MPS_CAVEAT", "MPS_MAX_CLIENTS", "TIME_SLICING_CAVEAT", "ConfigRefused", "Plan", "current_mig_layout",
    "current_mig_placements",
    "node_geometry", "orphaned_class_warnings", "plan_from_request", "plan_mig", "plan_time_slicing",
    "quota_problems", "vanishing_class_warnings", "vanishing_classes",
]  # fmt: skip

#: The caveat every page that offers a time-sliced class repeats.
TIME_SLICING_CAVEAT = (
    "Time-sliced GPUs are shared in turns with no memory isolation: every job on a GPU sees all of its memory, "
    "one job can run another out of memory, and a slow neighbour makes yours slower."
)


#: What MPS sharing gives and does not (NVIDIA/k8s-device-plugin README, "With CUDA MPS"; the GPU Operator runs
#: the MPS control daemon, assets/state-mps-control-daemon, on nodes labelled nvidia.com/mps.capable=true).
MPS_CAVEAT = (
    "MPS shares each GPU between jobs that run at the same time: the MPS control daemon (which the GPU Operator "
    "starts on the node) limits each to an equal share of the GPU's memory and compute, but a fault in one job can "
    "end the others on that GPU. The device plugin calls its MPS support experimental."
)
#: Clients one GPU serves through MPS (CUDA MPS on Volta and newer; GKE's MPS allows the same 2-48).
MPS_MAX_CLIENTS = 48


class ConfigRefused(Exception):
    """The request cannot be applied; ``errors`` say why, in sentences an admin can act on."""

    def __init__(self, errors: list[str]):
        super().__init__(" ".join(errors))
        self.errors = errors


@dataclass
class Plan:
    kind: str
    requested: dict
    expected_resources: dict[str, int]
    expected_product_label: str
    warnings: list[str] = field(default_factory=list)
    #: What draining the node touches (gpus.nodeconfig_control.drain_preview), filled in for previews.
    drain: object | None = None


def _short(name: str, limit: int = 63) -> str:
    """A label value (≤ 63 characters) made from a longer name, kept unique with a hash."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def node_geometry(node: Node) -> mig.MigProduct | None:
    return mig.product_geometry(node.product)


def current_mig_layout(node: Node) -> list[dict[str, int] | None]:
    """The node's per-GPU MIG devices as the inventory has them (None: MIG off)."""
    layouts: list[dict[str, int] | None] = []
    for gpu in node.gpus.all().prefetch_related("mig_partitions"):
        if gpu.mig_enabled:
            layouts.append(dict(Counter(p.profile for p in gpu.mig_partitions.all())))
        else:
            layouts.append(None)
    return layouts or [None] * node.gpu_count


def current_mig_placements(node: Node) -> list[list[list]]:
    return [
        [[p.profile, p.start] for p in gpu.mig_partitions.order_by("start")] if gpu.mig_enabled else []
        for gpu in node.gpus.all()
    ]


def plan_mig(
    node: Node, *, preset: str | None = None, placements: list[list[tuple[str, int]] | None] | None = None
) -> Plan:
    """Check a MIG request for ``node`` and work out what it will advertise. Either a GPU Operator preset name
    for the whole node, or per GPU a list of (profile, start slot) / None for MIG off. Raises ConfigRefused."""
    geometry = node_geometry(node)
    if geometry is None or not node.mig_capable:
        raise ConfigRefused([f"{node.name} has {node.product or 'no GPUs'}, which cannot be partitioned with MIG."])
    count = node.gpu_count
    errors: list[str] = []
    if preset:
        presets = mig.preset_layouts(geometry)
        if preset not in presets:
            raise ConfigRefused(
                [f"{preset} is not a GPU Operator preset for {geometry.key}; choose one of {', '.join(presets)}."]
            )
        layout = presets[preset]
        per_gpu = [None if layout is None else dict(layout) for _ in range(count)]
        chosen = [[(p.profile, p.start) for p in mig.place(geometry, layout)] if layout else [] for _ in range(count)]
        config = preset
    else:
        if placements is None or len(placements) != count:
            raise ConfigRefused([f"{node.name} has {count} GPUs; give a layout (or 'off') for each of them."])
        per_gpu, chosen = [], []
        for index, gpu_placements in enumerate(placements):
            if not gpu_placements:
                per_gpu.append(None)
                chosen.append([])
                continue
            problems = mig.validate_placements(geometry, list(gpu_placements))
            errors.extend(f"GPU {index}: {problem}" for problem in problems)
            per_gpu.append(dict(Counter(name for name, _ in gpu_placements)))
            chosen.append(sorted(gpu_placements, key=lambda p: p[1]))
        config = None
    if errors:
        raise ConfigRefused(errors)
    resources, product_label, problems = mig.advertised_after(
        geometry, per_gpu, node.mig_strategy, node.product_label or node.product
    )
    if problems:
        raise ConfigRefused(problems)
    requested = {
        "config": config or "",  # a custom layout's name is given when the operation is saved
        "preset": bool(preset),
        "gpus": per_gpu,
        "placements": [[[name, start] for name, start in gpu] for gpu in chosen],
    }
    plan = Plan(NodeConfigKind.MIG, requested, resources, product_label)
    plan.warnings = vanishing_class_warnings(node, resources, product_label)
    return plan


def plan_time_slicing(node: Node, *, replicas: int, rename: bool, mps: bool = False) -> Plan:
    """Check a device-plugin sharing request (replicas per GPU; 1 turns sharing off) and work out what it
    advertises: time-slicing (``sharing.timeSlicing``) or, with ``mps``, CUDA MPS (``sharing.mps``)."""
    errors = []
    what = "MPS" if mps else "time-slicing"
    if not node.gpu_count:
        errors.append(f"{node.name} has no GPUs to share.")
    if node.provider:
        errors.append(
            f"{node.name} belongs to a managed {node.provider.upper()} node pool: the provider runs its device "
            "plugin, so its GPU sharing is a node pool setting, not the GPU Operator's ConfigMap the portal writes."
        )
    if mps and replicas != 1 and not 2 <= replicas <= MPS_MAX_CLIENTS:
        # The device plugin refuses fewer than 2 replicas (api/config/v1/replicas.go); CUDA MPS serves at most
        # 48 clients per GPU (Volta and newer).
        errors.append(f"MPS needs between 2 and {MPS_MAX_CLIENTS} clients per GPU (1 turns sharing off).")
    elif not 1 <= replicas <= 64:
        errors.append("Replicas must be between 1 (no sharing) and 64 per GPU.")
    if node.gpus.filter(mig_enabled=True).exists():
        errors.append(
            f"{node.name} has MIG enabled; {what} here would share MIG devices"
            + (", which the device plugin does not support with MPS" if mps else "")
            + ". Apply all-disabled first, then share the whole GPUs."
        )
    if mps and replicas > 1 and node.mig_strategy == "mixed":
        errors.append(
            f"{node.name}'s device plugin runs the mixed MIG strategy, which it refuses to combine with MPS; "
            "switch the node to the single strategy (all-disabled) first."
        )
    if errors:
        raise ConfigRefused(errors)
    base = (node.product_label or node.product).removesuffix(SHARED_PRODUCT_SUFFIX)
    strategy = node.mig_strategy or "none"
    mps = bool(mps and replicas > 1)
    if replicas > 1:
        resource = SHARED_GPU_RESOURCE if rename else GPU_RESOURCE
        resources = {resource: replicas * node.gpu_count}
        label = base if rename else f"{base}{SHARED_PRODUCT_SUFFIX}"
        key = f"portal-{'mps' if mps else 'ts'}{replicas}{'-renamed' if rename else ''}-{strategy}"
    else:
        resources, label, key = {GPU_RESOURCE: node.gpu_count}, base, f"portal-exclusive-{strategy}"
    requested = {"config": key, "replicas": replicas, "rename": bool(rename and replicas > 1), "strategy": strategy}
    if mps:
        requested["mps"] = True
    plan = Plan(NodeConfigKind.TIME_SLICING, requested, resources, label)
    plan.warnings = vanishing_class_warnings(node, resources, label)
    if replicas > 1:
        plan.warnings.append(
            f"{node.name} will advertise {replicas * node.gpu_count} × {resources and next(iter(resources))} "
            f"({replicas} per GPU × {node.gpu_count} GPUs). {MPS_CAVEAT if mps else TIME_SLICING_CAVEAT}"
        )
    return plan


def vanishing_classes(node: Node, resources: dict[str, int], product_label: str) -> list[ResourceClass]:
    """Resource classes only this node offers that it will not offer once it advertises ``resources`` under
    ``product_label``: after the change no node in the fleet offers them."""
    after = {class_key(r, product_label) for r, n in resources.items() if n > 0}
    now = {
        class_key(r, node.product_label)
        for r, v in (node.capacity or {}).items()
        if r.startswith(NVIDIA_PREFIX) and str(v).isdigit() and int(v) > 0
    }
    gone = now - after
    if not gone:
        return []
    return list(ResourceClass.objects.filter(key__in=gone, node_count__lte=1).order_by("key"))


def vanishing_class_warnings(node: Node, resources: dict[str, int], product_label: str) -> list[str]:
    """Resource classes only this node offers that it will not offer afterwards, with the quotas that refer to them
    and the work the change strands (queued, admitted or running work asking for them, by name): these need an
    admin's attention (move the quota, tell the owners, or keep the class)."""
    classes = vanishing_classes(node, resources, product_label)
    claims = seams.claims_on(rc.pk for rc in classes)
    warnings = []
    for rc in classes:
        claim = claims.get(rc.pk, seams.ClassClaims())
        parts = [f"{rc.display_name} ({rc.resource_name}) is offered only by {node.name} and will disappear."]
        if claim.quota_teams:
            teams = ", ".join(sorted(claim.quota_teams))
            parts.append(f"Quotas of {teams} refer to it; move them to a class that remains.")
        if claim.unfinished:
            named = ", ".join(claim.work)
            more = f" and {claim.unfinished - len(claim.work)} more" if claim.unfinished > len(claim.work) else ""
            parts.append(
                f"This layout strands {claim.unfinished} workload(s) that ask for it: {named}{more}. No node could run "
                "them afterwards (those on this node are requeued and then wait with the rest); tell their owners to "
                "submit them again with a class that remains, or choose a layout that keeps this one."
            )
        elif claim.queued:
            parts.append(f"{claim.queued} queued job(s) ask for it and will wait until some node offers it again.")
        warnings.append(" ".join(parts))
    return warnings


def orphaned_class_warnings() -> list[str]:
    """Quotas and queued jobs whose resource class no node offers any more."""
    classes = list(ResourceClass.objects.filter(present=False).order_by("key"))
    claims = seams.claims_on(rc.pk for rc in classes)
    out = []
    for rc in classes:
        claim = claims.get(rc.pk, seams.ClassClaims())
        quotas, queued = len(claim.quota_ids), claim.queued
        if quotas or queued:
            out.append(
                f"{rc.display_name} is no longer offered by any node: {quotas} quota(s) and {queued} queued job(s) "
                "refer to it."
            )
    return out


def quota_problems() -> dict[int, str]:
    """Quota id -> why it needs an admin: its class is no longer offered by any node."""
    classes = list(ResourceClass.objects.filter(present=False))
    claims = seams.claims_on(rc.pk for rc in classes)
    return {
        quota_id: f"{rc.display_name} is no longer offered by any node."
        for rc in classes
        for quota_id in claims.get(rc.pk, seams.ClassClaims()).quota_ids
    }


def plan_from_request(
    node: Node,
    kind: str,
    *,
    preset: str = "",
    gpus: list[str] | None = None,
    replicas: int | None = None,
    rename: bool = False,
    mps: bool = False,
) -> Plan:
    """The plan for what a form or an API call asks: a MIG preset, per-GPU typed layouts
    (``"3g.40gb@0, 3g.40gb@4"``, ``"off"``), or time-slicing / MPS replicas. Raises ConfigRefused with every problem."""
    if refusal := carve_refusal(node):
        raise ConfigRefused([refusal])
    if kind == NodeConfigKind.TIME_SLICING:
        if replicas is None:
            raise ConfigRefused(["Say how many replicas each GPU should be shared into (1 turns sharing off)."])
        return plan_time_slicing(node, replicas=int(replicas), rename=rename, mps=mps)
    if kind != NodeConfigKind.MIG:
        raise ConfigRefused([f"Unknown kind {kind!r}: use 'mig' or 'time-slicing'."])
    if preset and gpus:
        raise ConfigRefused(["Give either a preset for the whole node or a layout per GPU, not both."])
    if preset:
        return plan_mig(node, preset=preset)
    if not gpus:
        raise ConfigRefused(["Choose a preset or give a layout for each GPU."])
    geometry = node_geometry(node)
    if geometry is None or not node.mig_capable:
        raise ConfigRefused([f"{node.name} has {node.product or 'no GPUs'}, which cannot be partitioned with MIG."])
    if len(gpus) != node.gpu_count:  # before parsing any of them (audit finding 9: bound the input first)
        raise ConfigRefused([f"{node.name} has {node.gpu_count} GPUs; give a layout (or 'off') for each of them."])
    placements, errors = [], []
    for index, text in enumerate(gpus):
        parsed, problems = mig.parse_slots(geometry, str(text or ""))
        if not problems and parsed:
            # A GPU whose text reads well may still be refused by the hardware: said now, with every other GPU's
            # problems, not in a second round once the text of the others is fixed.
            problems = mig.validate_placements(geometry, parsed)
        errors.extend(f"GPU {index}: {problem}" for problem in problems)
        placements.append(parsed)
    if errors:
        raise ConfigRefused(errors)
    return plan_mig(node, placements=placements)

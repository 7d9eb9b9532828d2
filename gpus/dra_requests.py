"""Whether a DRA resource class can be served where work asks for it (issue 33, item 7): refused at submission, and
when an admin offers or scopes the class, with what to do, every problem at once.

A DRA class (key ``dra:…``, gpus.dra_inventory) is claimed through Dynamic Resource Allocation: its cluster must serve
``resource.k8s.io/v1`` and have the class's DeviceClass (``gpu.nvidia.com`` or ``mig.nvidia.com``, installed by
NVIDIA's DRA driver), both recorded by the cluster's last check (Cluster.capabilities); the claim's selector (device
class, product, MIG profile) must match some device the cluster publishes, that is the cluster's last sync counted the
class there (Cluster.class_totals, which leaves out a dynamic-MIG profile its node pool's policy does not let teams
claim); and a sharing mode must be one the driver there can run. NVIDIA's driver refuses to start with the DynamicMIG
and MPSSupport feature gates together ("feature gate DynamicMIG is currently mutually exclusive with MPSSupport",
``ValidateFeatureGates`` in pkg/featuregates/featuregates.go, kubernetes-sigs/dra-driver-nvidia-gpu at tag v0.4.1),
so no device of a dynamic-MIG node can be shared with MPS; and a MIG device takes MPS only (``MigDeviceSharing`` has no
time-slicing settings, api/nvidia.com/resource/v1beta1/sharing.go there).

An admin shares a DRA class (``sharing_offer_problems``, gpus.class_admin) under the same rules, so what cannot be
claimed with its sharing is never offered.

``problems_on`` is the rule over plain data; ``dra_class_problems`` reads what it needs (one query, and a second only
for a class shared with MPS).
"""

from __future__ import annotations

from dataclasses import dataclass

from vocab.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS, RESOURCE_API_VERSION
from vocab.names import SHARING_MPS, SHARING_NONE, SHARING_TIME_SLICING

from .dra_inventory import CLASS_KEY_PREFIX
from .models import GPU, Cluster, ResourceClass


@dataclass(frozen=True)
class ClusterView:
    """What the portal last learnt of one cluster, as the rule needs it."""

    name: str
    dra_versions: tuple[str, ...]
    device_classes: tuple[str, ...]
    #: The class keys (unscoped) its last sync counted.
    class_keys: frozenset[str]
    #: Whether every node publishing the class's product runs the driver with dynamic MIG (None: not asked).
    only_dynamic_mig: bool | None = None


@dataclass(frozen=True)
class ClassNeed:
    """What a DRA class asks of a cluster."""

    name: str  # as people read it
    key: str  # unscoped
    device_class: str
    product_label: str
    profile: str = ""
    sharing: str = ""


def problems_on(cluster: ClusterView, need: ClassNeed) -> list[str]:
    """Every reason ``need`` cannot be claimed on ``cluster`` ([] when it can), each saying what to do."""
    problems = []
    if RESOURCE_API_VERSION not in cluster.dra_versions:
        found = ", ".join(cluster.dra_versions) or "no version"
        problems.append(
            f"Cluster {cluster.name} does not serve {RESOURCE_API_VERSION} (its last check found {found}), and "
            f"{need.name} is claimed through Dynamic Resource Allocation. Pick a device-plugin class (nvidia.com/gpu) "
            "there, or another cluster."
        )
        return problems  # without the API nothing else there can be asked
    if need.device_class not in cluster.device_classes:
        problems.append(
            f"Cluster {cluster.name} has no DeviceClass {need.device_class}, which {need.name} is claimed from: "
            "NVIDIA's DRA driver is not installed there (or not its "
            f"{'MIG support' if need.device_class == MIG_DEVICE_CLASS else 'GPU plugin'}). Pick another cluster, or "
            "ask an admin to install the driver and check the cluster again."
        )
    elif need.key not in cluster.class_keys:
        what = f"a {need.profile} MIG device of" if need.profile else "a whole"
        problems.append(
            f"No device on cluster {cluster.name} matches {need.name} ({what} {need.product_label}): its claim's "
            "selector would match nothing there"
            + (", or the node pools there do not let teams claim that profile" if need.profile else "")
            + ". Pick a class its nodes offer, or another cluster."
        )
    if need.sharing == SHARING_MPS and cluster.only_dynamic_mig:
        problems.append(
            f"{need.name} is shared with MPS, but on cluster {cluster.name} NVIDIA's DRA driver runs its "
            f"{need.product_label} GPUs with dynamic MIG, and the driver cannot run MPS with dynamic MIG (its feature "
            "gates DynamicMIG and MPSSupport are mutually exclusive). Pick a class without MPS, or a cluster whose "
            "nodes run static MIG or whole GPUs."
        )
    return problems + sharing_problems(need)


def sharing_problems(need: ClassNeed) -> list[str]:
    """What the driver refuses of the class's sharing wherever it runs: time-slicing of a MIG device."""
    if need.sharing == SHARING_TIME_SLICING and need.device_class == MIG_DEVICE_CLASS:
        return [
            f"{need.name} is a MIG device shared by time-slicing, which NVIDIA's DRA driver does not offer for MIG "
            "devices (they take MPS only). Ask an admin to drop the sharing mode, or pick a whole-GPU class."
        ]
    return []


#: The most users an admin may let share one device of a DRA class (as the device plugin's sharing form allows).
MAX_SHARING_REPLICAS = 64
SHARING_MODES = (SHARING_NONE, SHARING_TIME_SLICING, SHARING_MPS)


def sharing_offer_problems(rc: ResourceClass, sharing: str, replicas: int) -> list[str]:
    """Every reason an admin cannot offer ``rc`` shared ``sharing`` (none, time-slicing, MPS) among ``replicas`` users
    per device ([] when it can): only a DRA class takes a sharing mode here (a device-plugin class follows its nodes'
    time-slicing); 2 to MAX_SHARING_REPLICAS users with a mode, 1 without; the driver's rules (``sharing_problems``,
    and MPS with dynamic MIG, ``problems_on``) where the class may be claimed; and no unit of it in use, since what a
    unit is changes under the work holding it."""
    problems = []
    changes = (sharing, replicas) != (rc.sharing_strategy, rc.replicas)
    if not rc.key.startswith(CLASS_KEY_PREFIX):
        if changes:
            problems.append(
                f"{rc.display_name} is a device-plugin class: its sharing follows its nodes' time-slicing or MPS. "
                "Share its GPUs from the node's carving page, or pick a DRA class."
            )
        return problems
    if sharing not in SHARING_MODES:
        problems.append(f"Pick a sharing mode among {', '.join(SHARING_MODES)}, not {sharing!r}.")
        return problems
    if sharing == SHARING_NONE and replicas != 1:
        problems.append(
            f"Without a sharing mode each device is one user's: leave 1 user per device, or pick time-slicing or MPS "
            f"to let {replicas} share one."
        )
    if sharing != SHARING_NONE and not 2 <= replicas <= MAX_SHARING_REPLICAS:
        problems.append(
            f"With {sharing} pick 2 to {MAX_SHARING_REPLICAS} users per device (not {replicas}): 1 is a whole device, "
            "so leave the mode at none for that."
        )
    if changes and rc.in_use:
        problems.append(
            f"{rc.in_use} units of {rc.display_name} are in use now, and changing its sharing changes what a unit is "
            "under that work. Let it finish (or hide the class until it has) and change the sharing then."
        )
    if sharing == SHARING_NONE or not changes:
        return problems
    candidate = ResourceClass(
        key=rc.key, kind=rc.kind, resource_name=rc.resource_name, product=rc.product, product_label=rc.product_label,
        profile=rc.profile, alias=rc.alias, cluster=rc.cluster, sharing_strategy=sharing, replicas=replicas,
    )  # fmt: skip
    own = sharing_problems(_need(candidate))
    return problems + own + [p for p in dra_class_problems(candidate) if p not in own]


def _need(rc: ResourceClass) -> ClassNeed:
    return ClassNeed(
        name=rc.display_name,
        key=rc.fleet_key,
        device_class=rc.resource_name or GPU_DEVICE_CLASS,
        product_label=rc.product_label,
        profile=rc.profile,
        sharing=rc.sharing_strategy if rc.sharing_strategy in (SHARING_MPS, SHARING_TIME_SLICING) else "",
    )


def _only_dynamic_mig(cluster_names: list[str], product_label: str) -> dict[str, bool]:
    """Cluster name -> whether every present node there publishing DRA GPUs of ``product_label`` is dynamic-MIG."""
    seen: dict[str, dict[str, bool]] = {}
    rows = (
        GPU.objects.filter(node__cluster__name__in=cluster_names, node__gone_at__isnull=True, product=product_label)
        .exclude(dra={})
        .values_list("node__cluster__name", "node__name", "dra")
    )
    for cluster, node, dra in rows:
        seen.setdefault(cluster, {})
        seen[cluster][node] = seen[cluster].get(node, False) or bool(dra.get("counters"))
    return {cluster: bool(nodes) and all(nodes.values()) for cluster, nodes in seen.items()}


def dra_class_problems(rc: ResourceClass, clusters: list[str] | None = None) -> list[str]:
    """Why ``rc`` cannot be claimed where the work may go ([] when it can, and for a class that is not DRA).

    ``clusters``: the clusters the work names (most preferred first; unknown names are cluster_problems' business):
    each that cannot serve the class is a problem. Without them, the class's own cluster when it is scoped to one,
    else the fleet: a problem only when no cluster can serve it."""
    if not rc.key.startswith(CLASS_KEY_PREFIX):
        return []
    need = _need(rc)
    rows = Cluster.objects.order_by("name").values_list("name", "capabilities", "class_totals")
    if clusters:
        rows = rows.filter(name__in=clusters)
    elif rc.cluster_id is not None:
        rows = rows.filter(pk=rc.cluster_id)
    views = [
        ClusterView(
            name=name,
            dra_versions=tuple((caps or {}).get("dra_versions") or ()),
            device_classes=tuple((caps or {}).get("dra_device_classes") or ()),
            class_keys=frozenset(totals or {}),
        )
        for name, caps, totals in rows
    ]
    if need.sharing == SHARING_MPS and views:
        dynamic = _only_dynamic_mig([v.name for v in views], need.product_label)
        views = [
            ClusterView(v.name, v.dra_versions, v.device_classes, v.class_keys, dynamic.get(v.name, False))
            for v in views
        ]
    problems = []
    if clusters and rc.cluster_id is not None and rc.cluster.name not in clusters:
        problems.append(
            f"{rc.display_name} counts the devices of cluster {rc.cluster.name} only: name {rc.cluster.name} among "
            "the clusters, or pick the class of the cluster you want."
        )
    found = {v.name: problems_on(v, need) for v in views}
    if clusters:
        return problems + [p for v in views for p in found[v.name]]
    if any(not p for p in found.values()):
        return problems
    return problems + [p for v in views for p in found[v.name]]


def shared_count_problems(rc: ResourceClass, count: int) -> list[str]:
    """A pod of a shared DRA class takes one share (its claim's device, shared with the workload's other pods)."""
    shared = rc.sharing_strategy in (SHARING_TIME_SLICING, SHARING_MPS) and rc.replicas > 1
    if rc.key.startswith(CLASS_KEY_PREFIX) and shared and count != 1:
        return [
            f"Each pod of {rc.display_name} takes one share (1/{rc.replicas} of a device, {rc.sharing_strategy}): "
            f"ask for 1, not {count}. For more of a GPU pick a whole-GPU class."
        ]
    return []

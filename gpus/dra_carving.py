"""Carving on a DRA node (issue 33, item 6): who carves a GPU depends on how NVIDIA's DRA driver runs there.

With dynamic MIG (the driver's DynamicMIG feature gate) the driver announces every MIG placement a GPU could hold,
with shared counters, creates the MIG device when the scheduler allocates a claim and destroys it when the claim is
released; it also destroys MIG devices it did not create. So the portal does not drive MIG Manager on such a node:
``carve_refusal`` says why and what to do instead, and the carve path (gpus.nodeconfig.request_operation,
gpus.nodeconfig_plan.plan_from_request) refuses with it. What the admin decides there is which profiles teams may
claim, per node pool (NodePool.mig_profiles, gpus.node_pools.choose_mig_profiles); ``claimable_now`` shows, per GPU,
what can be claimed now from its free counters under that policy. A node is dynamic-MIG when one of its GPUs is
partitionable (GPU.dra has counters, gpus.dra_inventory). Static MIG devices are a snapshot of the layout when the
driver started, so a static-MIG node, like a device-plugin node, keeps the existing carve path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.urls import reverse

from vocab.mig import product_geometry

from .models import Node, NodePool


def dynamic_mig(node: Node) -> bool:
    """Whether NVIDIA's DRA driver runs ``node``'s GPUs with dynamic MIG (one of them publishes counters)."""
    return node.gpus.filter(dra__has_key="counters").exists()


def carve_refusal(node: Node) -> str:
    """'' when the portal may carve ``node``'s GPUs (MIG Manager, the device plugin's sharing); else why not and what
    to do instead."""
    if not dynamic_mig(node):
        return ""
    return (
        f"{node.name} runs NVIDIA's DRA driver with dynamic MIG: the driver creates a MIG device when a claim is "
        "allocated and destroys it when the claim ends (and destroys MIG devices it did not create), so the portal "
        "does not reconfigure it through MIG Manager, and sharing is set in a claim's configuration, not the device "
        "plugin's. Choose which MIG profiles teams may claim on the Node pools page instead; to carve a fixed layout "
        "here, run the driver with static MIG on this node (DynamicMIG off) and carve it again once its slices show "
        "the layout."
    )


@dataclass
class GpuClaimable:
    """One dynamic-MIG GPU on the carve page: what can be claimed of it now, each profile marked with whether the
    pool lets teams claim it."""

    index: int
    device: str
    whole_free: bool
    #: (profile, how many more could be carved now, whether teams may claim it), in the order of the GPU's profiles.
    profiles: list[tuple[str, int, bool]] = field(default_factory=list)


@dataclass
class NodeClaimable:
    pool: str
    #: The pool's policy (None: every profile the GPUs support).
    policy: list[str] | None
    policy_url: str
    gpus: list[GpuClaimable] = field(default_factory=list)


def claimable_now(node: Node) -> NodeClaimable:
    """Per dynamic-MIG GPU of ``node``, what can be claimed now (from its free counters) under its pool's policy."""
    row = NodePool.objects.filter(cluster_id=node.cluster_id, name=node.pool).values_list("mig_profiles").first()
    policy = row[0] if row else None
    out = NodeClaimable(node.pool, policy, reverse("gpus:nodepool-list"))
    for gpu in node.gpus.filter(dra__has_key="counters").order_by("index"):
        dra = gpu.dra
        geometry = product_geometry(gpu.product)
        order = [p.name for p in geometry.profiles] if geometry else sorted(dra.get("carvable") or {})
        carvable = dra.get("carvable") or {}
        out.gpus.append(
            GpuClaimable(
                index=gpu.index,
                device=dra.get("device", ""),
                whole_free=dra.get("free_counters") == dra.get("counters"),
                profiles=[(p, int(carvable[p]), policy is None or p in policy) for p in order if p in carvable],
            )
        )
    return out

"""The devices NVIDIA's DRA driver publishes, as the inventory recorded them, read the way admission counts them
(jobs.scheduling.dra): by the job cycle's snapshot (jobs.cycle.admit) and by submission's checks of what a class's
nodes can hold (jobs.validation.class_limits), so both count a DRA class's units alike."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Q

from gpus.dra_inventory import CLASS_KEY_PREFIX
from gpus.models import GPU, MigPartition, Node, ResourceClass
from jobs.scheduling import dra
from vocab.dra import MIG_DEVICE_CLASS
from vocab.names import SHARING_MPS, SHARING_TIME_SLICING


def is_dra(rc: ResourceClass) -> bool:
    return rc.key.startswith(CLASS_KEY_PREFIX)


def resource_of(rc: ResourceClass) -> str:
    """The resource admission counts a class's units under on a node: the advertised resource, or for a DRA class
    its device class and profile (jobs.scheduling.dra.resource: each MIG profile apart), and for a DRA class an
    admin shares (time-slicing or MPS, gpus.class_admin) the shared resource of ``replicas`` units per device."""
    if not is_dra(rc):
        return rc.resource_name
    base = dra.resource(rc.resource_name, rc.profile)
    if is_shared_dra(rc):
        return dra.shared_resource(base, rc.sharing_strategy, rc.replicas)
    return base


def is_shared_dra(rc) -> bool:
    """Whether ``rc`` is a DRA class an admin shares among ``replicas`` users per device."""
    return is_dra(rc) and rc.sharing_strategy in (SHARING_TIME_SLICING, SHARING_MPS) and rc.replicas > 1


def shared_resources() -> tuple[str, ...]:
    """The shared resources of the DRA classes admins share (one query)."""
    rows = ResourceClass.objects.filter(
        key__startswith=CLASS_KEY_PREFIX, sharing_strategy__in=(SHARING_TIME_SLICING, SHARING_MPS), replicas__gt=1
    ).only("key", "resource_name", "profile", "sharing_strategy", "replicas")
    return tuple(sorted({resource_of(rc) for rc in rows}))


def dra_devices(nodes: Q | None = None) -> dict[int, dra.DraDevices]:
    """Node id → the devices NVIDIA's DRA driver publishes there, as the inventory recorded them (GPU rows with
    ``dra``, and their static MIG devices), less what allocated claims the portal did not make hold (and, on
    partitionable GPUs, with the portal's allocated instances where they are: jobs.scheduling.dra), offered as the
    shared classes' units too; ``nodes``: only on the Node rows it selects. Three queries, whatever the number of
    nodes."""
    on = Q(node__gone_at__isnull=True)
    if nodes is not None:
        on &= Q(node__in=Node.objects.filter(nodes))
    static: dict[int, list[str]] = defaultdict(list)
    partitions = MigPartition.objects.filter(resource_name=MIG_DEVICE_CLASS, gpu__in=GPU.objects.filter(on))
    for gpu_id, profile in partitions.values_list("gpu_id", "profile"):
        static[gpu_id].append(profile)
    rows: dict[int, list[dra.DraGpuRow]] = defaultdict(list)
    products: dict[int, str] = {}
    gpus = GPU.objects.filter(on).exclude(dra={}).order_by("node_id", "index")
    for gpu_id, node_id, product, info in gpus.values_list("id", "node_id", "product", "dra"):
        products.setdefault(node_id, product)
        rows[node_id].append(
            dra.DraGpuRow(
                taints=tuple(info.get("taints") or ()),
                static=tuple(static.get(gpu_id, ())),
                partitionable=bool(info.get("counters")),
                profiles=tuple(info.get("carvable") or ()),
                foreign=tuple((str(p), int(s)) for p, s in info.get("foreign") or ()),
                placed=tuple((str(p), int(s)) for p, s in info.get("placed") or ()),
            )
        )
    shared = shared_resources() if rows else ()
    return {node_id: dra.DraDevices.of(products[node_id], gpus, shared) for node_id, gpus in rows.items()}

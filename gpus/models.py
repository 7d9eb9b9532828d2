"""The GPU inventory: nodes, their GPUs and MIG partitions, and the resource classes users request.

Rows are observed state, written by the reconcile task (gpus.reconcile) from the cluster; people edit only
a resource class's alias, description and visibility.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from vocab.cloud import GKE, GKE_MPS_NEEDS_HOST_IPC
from vocab.names import GPU_RESOURCE, SHARING_MPS, SHARING_NONE, class_default_name, is_nvidia
from vocab.taints import Taint

from .choices import (
    ABORTABLE_CONFIG_STATES,
    ACTIVE_CONFIG_STATES,
    CLUSTER_HEALTH_BADGE,
    CONFIG_STEPS,
    NODE_CONFIG_BADGE,
    NODE_HEALTH_BADGE,
    RESOURCE_KIND_BADGE,
    SETTINGS_CLUSTER,
    SMOKE_TEST_BADGE,
    ClusterConnection,
    ClusterHealth,
    GpuRequestMode,
    MigStrategy,
    NodeConfigKind,
    NodeConfigState,
    NodeHealth,
    ResourceKind,
    SharingMode,
    SmokeTestState,
)
from .dra_inventory import CLASS_KEY_PREFIX as DRA_CLASS_KEY_PREFIX


class ClusterQuerySet(models.QuerySet):
    def reachable(self):
        """The clusters that take new work: those the inventory has not found unreachable."""
        return self.exclude(health=ClusterHealth.UNREACHABLE)


class Cluster(models.Model):
    """One Kubernetes cluster of the fleet: how to reach it (the token sealed, core.sealed) and what the portal last
    found there. Registered by admins (gpus.fleet); the cluster configured in settings is the row named
    ``SETTINGS_CLUSTER`` with connection ``settings``."""

    name = models.SlugField(max_length=63, unique=True, help_text="Lower-case letters, digits and hyphens.")
    display_name = models.CharField(max_length=100, blank=True)
    region = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    connection = models.CharField(max_length=12, choices=ClusterConnection.choices)
    #: KUBECONFIG: a file on the portal's machines and a context in it.
    kubeconfig_path = models.CharField(max_length=500, blank=True)
    kube_context = models.CharField(max_length=200, blank=True)
    #: TOKEN: the API server, its CA certificate (public) and the bearer token, sealed (never shown again).
    server = models.URLField(max_length=500, blank=True)
    ca_certificate = models.TextField(blank=True)
    token_sealed = models.TextField(blank=True)
    #: SIMULATED: the scenario file the embedded cluster starts from (its state lives beside the portal's data).
    sim_scenario = models.CharField(max_length=500, blank=True)

    health = models.CharField(max_length=12, choices=ClusterHealth.choices, default=ClusterHealth.UNKNOWN)
    capabilities = models.JSONField(default=dict, blank=True)
    server_version = models.CharField(max_length=64, blank=True)
    last_error = models.TextField(blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    #: This cluster's share of each resource class at its last sync (gpus.resources.class_share), summed over the
    #: fleet into ResourceClass rows.
    class_totals = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name

    def get_absolute_url(self) -> str:
        return reverse("gpus:cluster-detail", args=[self.name])

    @property
    def audit_cluster(self) -> str:
        """The cluster an audit record of this object names (core.audit)."""
        return self.name

    @property
    def health_badge(self) -> str:
        return CLUSTER_HEALTH_BADGE.get(self.health, "grey")

    @property
    def has_token(self) -> bool:
        return bool(self.token_sealed)


def settings_cluster_pk() -> int:
    """The primary key of the cluster configured in settings, made on first use: the default cluster of a node
    row (the inventory always names one; rows made elsewhere, such as fixtures, belong to this one)."""
    cluster, _ = Cluster.objects.get_or_create(
        name=SETTINGS_CLUSTER,
        defaults={"display_name": "Default cluster", "connection": ClusterConnection.SETTINGS},
    )
    return cluster.pk


class NodeQuerySet(models.QuerySet):
    def present(self):
        return self.filter(gone_at__isnull=True)

    def named(self, name: str, cluster: str = ""):
        """The node called ``name``: in cluster ``cluster`` when given; otherwise the only one of that name, or the
        one of the cluster configured in settings when several clusters have it. Raises DoesNotExist, or
        MultipleObjectsReturned naming the clusters to choose from."""
        found = list(
            self.filter(name=name, **({"cluster__name": cluster} if cluster else {})).select_related("cluster")
        )
        if len(found) > 1:
            home = [node for node in found if node.cluster.connection == ClusterConnection.SETTINGS]
            if len(home) == 1:
                return home[0]
            names = ", ".join(sorted(node.cluster.name for node in found))
            raise self.model.MultipleObjectsReturned(f"Nodes named {name} are in clusters {names}: say which one.")
        if not found:
            raise self.model.DoesNotExist(f"No node {name}" + (f" in cluster {cluster}." if cluster else "."))
        return found[0]

    def admissible(self):
        """Present nodes of the clusters that take new work (ClusterQuerySet.reachable)."""
        return self.present().exclude(cluster__health=ClusterHealth.UNREACHABLE)

    def visible_to(self, user):
        """Admins see every node; others see shared nodes and nodes dedicated to one of their teams."""
        if user.is_staff:
            return self
        return self.filter(models.Q(team__isnull=True) | models.Q(team__memberships__user=user)).distinct()

    def gke_mps_class_keys(self) -> set[str]:
        """Keys of the classes a GKE MPS node pool offers: portal jobs cannot use them, since GKE's MPS needs pods
        with hostIPC (vocab.cloud.GKE_MPS_NEEDS_HOST_IPC). One query, for the class and submit pages."""
        rows = self.present().filter(provider=GKE, sharing_strategy=SHARING_MPS).values_list("product_label", flat=True)
        return {f"{GPU_RESOURCE}@{label}" for label in rows if label}


class Node(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes", default=settings_cluster_pk)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    capacity = models.JSONField(default=dict)
    allocatable = models.JSONField(default=dict)
    conditions = models.JSONField(default=list)
    #: GPU resources requested by bound, unfinished pods on this node: {"nvidia.com/gpu": 3}.
    gpu_in_use = models.JSONField(default=dict)
    #: What pods the portal did not create hold on this node: NVIDIA resources, "cpu_m", "memory_mb".
    external_requests = models.JSONField(default=dict)
    unschedulable = models.BooleanField(default=False)
    ready = models.BooleanField(default=False)
    # GPU Feature Discovery facts
    product = models.CharField(max_length=100, blank=True, db_index=True)
    product_label = models.CharField(max_length=150, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveIntegerField(null=True, blank=True)
    gpu_family = models.CharField(max_length=30, blank=True)
    compute_capability = models.CharField(max_length=10, blank=True)
    driver_version = models.CharField(max_length=30, blank=True)
    cuda_version = models.CharField(max_length=10, blank=True)
    mig_capable = models.BooleanField(default=False)
    mig_strategy = models.CharField(max_length=10, choices=MigStrategy.choices, default=MigStrategy.NONE)
    mig_config = models.CharField(max_length=100, blank=True)
    mig_config_state = models.CharField(max_length=20, blank=True)
    sharing_strategy = models.CharField(max_length=20, default=SHARING_NONE)
    replicas = models.PositiveIntegerField(default=1)
    device_plugin_ok = models.BooleanField(default=False)
    health = models.CharField(max_length=10, choices=NodeHealth.choices, default=NodeHealth.NO_GPU, db_index=True)
    diagnosis = models.JSONField(default=list)
    #: "gke", "eks", "aks" for a node of a managed node pool (its stack has no GPU Feature Discovery), else "".
    provider = models.CharField(max_length=10, blank=True)
    instance_type = models.CharField(max_length=64, blank=True)
    #: Where the GPU model came from: "gfd" or the provider's "<label>=<value>".
    product_source = models.CharField(max_length=200, blank=True)
    #: CPU architecture (kubernetes.io/arch): amd64, arm64 (Grace Hopper / Grace Blackwell).
    architecture = models.CharField(max_length=16, blank=True, db_index=True)
    #: NVLink domain (nvidia.com/gpu.clique); nodes of one clique share an NVLink fabric.
    clique = models.CharField(max_length=100, blank=True)
    #: Whole GPUs the device plugin marked unhealthy (capacity minus allocatable).
    unhealthy_gpus = models.PositiveIntegerField(default=0)
    driver_upgrade_state = models.CharField(max_length=40, blank=True)
    #: Why the node's GPU stack cannot take new work now ("" when it can); placement keeps work off it.
    blocked_reason = models.CharField(max_length=200, blank=True)
    #: The node pool, from the provider's pool label (vocab.taints.POOL_LABELS); "" when it carries none.
    pool = models.CharField(max_length=253, blank=True, db_index=True)
    #: Set when the node carries the team label (settings.PORTAL_TEAM_NODE_LABEL): only that team may use it.
    team = models.ForeignKey("portal.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes")
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField()
    #: When the node disappeared from the cluster; the row is kept for history.
    gone_at = models.DateTimeField(null=True, blank=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_name_per_cluster")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("gpus:node-detail", args=[self.name])

    @property
    def audit_cluster(self) -> str:
        """The cluster an audit record of this node names (core.audit)."""
        return self.cluster.name

    @property
    def health_badge(self) -> str:
        return NODE_HEALTH_BADGE.get(self.health, "grey")

    @property
    def cluster_query(self) -> str:
        """What a link to one of this node's pages adds to say which cluster it is in ("?cluster=<name>"; "" for the
        cluster configured in settings, whose names win where names collide: NodeQuerySet.named)."""
        cluster = self.cluster
        return "" if cluster.connection == ClusterConnection.SETTINGS else f"?cluster={cluster.name}"

    def operated_here(self) -> str:
        """'' when the portal can carve and smoke-test this node now; else why not. Node operations run against the
        node's own cluster (gpus.tasks), so they wait while the inventory finds that cluster unreachable."""
        cluster = self.cluster
        if cluster.health != ClusterHealth.UNREACHABLE:
            return ""
        since = f" since {cluster.unreachable_since:%Y-%m-%d %H:%M} UTC" if cluster.unreachable_since else ""
        return (
            f"{self.name} is in cluster {cluster.name}, which the portal cannot reach{since}: nothing can be changed "
            "or tested there until it answers again (its page says what the last attempt found)."
        )

    @property
    def gpus_allocatable(self) -> int:
        return sum(int(v) for k, v in self.allocatable.items() if is_nvidia(k) and str(v).isdigit())

    @property
    def gpus_in_use(self) -> int:
        return sum(self.gpu_in_use.values())

    @property
    def taint_strings(self) -> list[str]:
        return [str(Taint.of(t)) for t in self.taints]


class NodePool(models.Model):
    """A node pool of one cluster (the nodes of that cluster sharing a provider pool label, Node.pool) and the taints
    an admin declares that GPU workloads should tolerate there, beside the GPU conventions the portal knows
    (vocab.taints): a pool's GPU-keeping taints are those conventions as observed on its nodes plus these
    (gpus.node_pools). A row exists once an admin saved the pool's declaration; pools are otherwise known from their
    nodes alone. Two clusters may have pools of the same name (every GKE cluster has a ``default-pool``): each is its
    own pool."""

    cluster = models.ForeignKey(
        Cluster, default=settings_cluster_pk, on_delete=models.CASCADE, related_name="node_pools"
    )
    #: The pool's name as its nodes' label gives it; "" for the nodes that carry no pool label.
    name = models.CharField(max_length=253, blank=True)
    #: [{"key", "value", "effect"}], sorted: each tolerated exactly (key, value and effect) by GPU workloads.
    declared_taints = models.JSONField(default=list, blank=True)
    #: How workloads ask for the pool's GPUs (choices.GpuRequestMode); DRA ones only where the cluster serves
    #: resource.k8s.io/v1 (gpus.node_pools.choose_gpu_request).
    gpu_request = models.CharField(max_length=16, choices=GpuRequestMode.choices, default=GpuRequestMode.DEVICE_PLUGIN)
    #: The MIG profiles teams may claim from the pool's dynamic-MIG GPUs (gpus.node_pools.choose_mig_profiles);
    #: None: every profile its GPUs support. The inventory offers no other profile of the pool (gpus.reconcile).
    mig_profiles = models.JSONField(null=True, blank=True, default=None)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_pool_per_cluster")]

    def __str__(self) -> str:
        return self.name or "nodes without a pool label"

    @property
    def declared_strings(self) -> list[str]:
        return [str(Taint.of(t)) for t in self.declared_taints]


class GPU(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    #: Filled by the node agent / DCGM exporter; labels alone do not carry UUIDs.
    uuid = models.CharField(max_length=64, blank=True)
    product = models.CharField(max_length=100)
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    mig_enabled = models.BooleanField(default=False)
    sharing = models.CharField(max_length=12, choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    replicas = models.PositiveIntegerField(default=1)
    #: A GPU NVIDIA's DRA driver publishes (gpus.dra_inventory): {"device", "architecture", "taints", and for a
    #: partitionable GPU (dynamic MIG) "counters", "free_counters", "carvable" {profile: n}; where allocated claims
    #: hold some of it, "foreign" (not the portal's) and, partitionable, "placed" (the portal's): [[profile, start]],
    #: profile "" for the whole GPU}; {} otherwise.
    dra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["node__name", "index"]
        verbose_name = "GPU"
        verbose_name_plural = "GPUs"
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="unique_gpu_index_per_node")]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class MigPartition(models.Model):
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="mig_partitions")
    profile = models.CharField(max_length=30)
    resource_name = models.CharField(max_length=80)
    start = models.PositiveSmallIntegerField()
    size = models.PositiveSmallIntegerField()
    compute_slices = models.PositiveSmallIntegerField()
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    uuid = models.CharField(max_length=80, blank=True)
    #: True while the slot comes from the layout the node advertises (the driver's placement rule), False
    #: once a node agent has reported the real placement.
    placement_inferred = models.BooleanField(default=True)

    class Meta:
        ordering = ["gpu__node__name", "gpu__index", "start"]
        verbose_name = "MIG partition"
        constraints = [models.UniqueConstraint(fields=["gpu", "start"], name="unique_mig_start_per_gpu")]

    def __str__(self) -> str:
        return f"{self.gpu} {self.profile}@{self.start}"

    @property
    def end(self) -> int:
        return self.start + self.size


class ResourceClassQuerySet(models.QuerySet):
    def on_node(self, node):
        """The classes a node's devices count in: those of its product scoped to its cluster, and the fleet-wide
        ones of its product that no class scoped to its cluster takes over (same resource)."""
        mine = self.filter(product_label=node.product_label)
        scoped = mine.filter(cluster_id=node.cluster_id)
        return mine.filter(
            models.Q(cluster_id=node.cluster_id)
            | (models.Q(cluster__isnull=True) & ~models.Q(resource_name__in=scoped.values("resource_name")))
        )

    def visible_to(self, user):
        """The classes ``user`` may see: admins all, everyone else only those not hidden (issue 16 finding 8)."""
        return self if getattr(user, "is_staff", False) else self.filter(hidden=False)


class ResourceClass(models.Model):
    """What users request and quotas count: a GPU model as whole devices, a MIG profile of a model, or a
    time-sliced share. Derived from what nodes advertise; admins may alias, describe and hide classes."""

    key = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=ResourceKind.choices)
    resource_name = models.CharField(max_length=80)
    product = models.CharField(max_length=100)
    #: The node label value that pins work to this class's nodes (nvidia.com/gpu.product).
    product_label = models.CharField(max_length=150)
    profile = models.CharField(max_length=30, blank=True)
    replicas = models.PositiveIntegerField(default=1)
    memory_mb = models.PositiveIntegerField(null=True, blank=True)
    #: Share of one physical GPU a unit of this class is (3g.40gb = 3/7; time-sliced ×4 = 1/4).
    gpu_fraction = models.FloatField(default=1.0)
    #: How a unit shares its GPU: "none", "time-slicing" or "mps" (nvidia.com/gpu.sharing-strategy).
    sharing_strategy = models.CharField(max_length=20, default=SHARING_NONE)
    #: The CPU architectures of the class's nodes, comma-separated ("amd64", "arm64", "amd64,arm64").
    architectures = models.CharField(max_length=40, blank=True)
    alias = models.CharField(max_length=100, blank=True, help_text="A friendlier name shown to users.")
    description = models.TextField(blank=True)
    hidden = models.BooleanField(default=False, help_text="Hidden classes are not offered to non-admins.")
    total = models.PositiveIntegerField(default=0)
    allocatable = models.PositiveIntegerField(default=0)
    in_use = models.PositiveIntegerField(default=0)
    free = models.PositiveIntegerField(default=0)
    node_count = models.PositiveIntegerField(default=0)
    #: False once no node advertises the class any more (kept so quotas and history still resolve).
    present = models.BooleanField(default=True)
    #: The one cluster whose nodes the class counts (its key then ends in "@<cluster>"); null: every cluster's
    #: nodes of its resource and product that no class scoped to their cluster counts (gpus.class_admin).
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="scoped_classes")
    #: A DRA class's alternatives: the ids of other DRA classes of the same cluster and kind of unit that may serve a
    #: request of this one when it cannot start, in priority order (gpus.class_admin.resolve_alternatives; admission
    #: tries them in turn, jobs.scheduling.decide). Empty: the class alone.
    alternatives = models.JSONField(default=list, blank=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ResourceClassQuerySet.as_manager()

    class Meta:
        ordering = ["kind", "product", "profile"]
        verbose_name_plural = "resource classes"

    def __str__(self) -> str:
        return self.display_name

    def get_absolute_url(self) -> str:
        return reverse("gpus:resourceclass-list") + f"#rc-{self.pk}"

    @property
    def kind_badge(self) -> str:
        return RESOURCE_KIND_BADGE.get(self.kind, "grey")

    def nodes_q(self) -> models.Q:
        """Which Node rows the class counts: those of its product on its cluster when it is scoped to one; else on
        every cluster but those where a class of the same resource and product is scoped (one query, as a
        subquery)."""
        q = models.Q(product_label=self.product_label)
        if self.cluster_id is not None:
            return q & models.Q(cluster_id=self.cluster_id)
        scoped = ResourceClass.objects.filter(
            resource_name=self.resource_name, product_label=self.product_label, cluster__isnull=False
        ).values("cluster_id")
        return q & ~models.Q(cluster_id__in=scoped)

    @property
    def default_name(self) -> str:
        """The class's name before an admin gives it one; a class claimed through DRA says so ("H100 80GB HBM3 ·
        DRA"), so it reads apart from the same product offered by a device plugin."""
        name = class_default_name(
            self.product, self.kind, self.profile, self.replicas, mps=self.sharing_strategy == SHARING_MPS
        )
        if self.kind == ResourceKind.MIG and self.sharing_strategy == SHARING_MPS and self.replicas > 1:
            name = f"{name} · 1/{self.replicas} MPS share"  # a MIG class an admin shares (gpus.class_admin)
        return f"{name} · DRA" if self.key.startswith(DRA_CLASS_KEY_PREFIX) else name

    @property
    def is_mps(self) -> bool:
        return self.kind == ResourceKind.MPS or self.sharing_strategy == SHARING_MPS

    @property
    def architecture_list(self) -> list[str]:
        return [a for a in self.architectures.split(",") if a]

    @property
    def fleet_key(self) -> str:
        """The key the clusters count the class under (Cluster.class_totals): its own, less the ``@<cluster>`` of a
        class scoped to one cluster (gpus.resources.scoped_class_key)."""
        if self.cluster_id is not None and self.key.endswith(f"@{self.cluster.name}"):
            return self.key[: -len(self.cluster.name) - 1]
        return self.key

    #: Shown next to a class a GKE MPS pool offers (gpus.models.NodeQuerySet.gke_mps_class_keys).
    GKE_MPS_NOTE = GKE_MPS_NEEDS_HOST_IPC.replace("so it keeps its jobs off this node", "so portal jobs cannot use it")

    @property
    def sharing_caveat(self) -> str:
        """What a user should know before asking for a unit of this class ("" for a whole GPU or MIG device)."""
        if self.kind not in (ResourceKind.SHARED, ResourceKind.MPS) and not (self.is_mps and self.replicas > 1):
            return ""
        if self.is_mps:
            return (
                f"MPS share: up to {self.replicas} jobs run on one GPU at once, each limited to 1/{self.replicas} of "
                "its memory and compute, but not isolated from each other's faults."
            )
        return (
            f"Time-sliced: up to {self.replicas} jobs take turns on one GPU with no memory or fault isolation; "
            "another job can use all of its memory."
        )

    @property
    def architecture_note(self) -> str:
        """Set when the class's nodes are not (all) amd64: images must be built for that architecture."""
        archs = self.architecture_list
        if not archs or archs == ["amd64"]:
            return ""
        if len(archs) == 1:
            return f"Runs on {archs[0]} nodes: the container image must be built for {archs[0]}."
        return f"Nodes of several architectures ({', '.join(archs)}): use a multi-architecture image or pin one."

    @property
    def display_name(self) -> str:
        return self.alias or self.default_name

    @property
    def used_percent(self) -> int:
        return round(100 * self.in_use / self.allocatable) if self.allocatable else 0


class NodeConfigOperation(models.Model):
    """One reconfiguration of a node's GPUs (a MIG layout or time-slicing), a background operation with a
    lifecycle: pending → draining → applying → waiting → refreshing → done, or failed with the reason.

    ``requested`` and ``previous`` have the same shape, so reverting is requesting ``previous``:
    MIG: {"config": "<mig-parted config name>", "preset": bool, "gpus": [{profile: count} | None per GPU],
    "placements": [[[profile, start], ...] per GPU]}; time-slicing: {"config": "<device-plugin config key>",
    "replicas": N, "rename": bool}."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="config_operations")
    kind = models.CharField(max_length=20, choices=NodeConfigKind.choices)
    state = models.CharField(
        max_length=20, choices=NodeConfigState.choices, default=NodeConfigState.PENDING, db_index=True
    )
    requested = models.JSONField(default=dict)
    previous = models.JSONField(default=dict)
    #: What the node should advertise afterwards: {"nvidia.com/mig-1g.10gb": 16, ...}, and its product label.
    expected_resources = models.JSONField(default=dict)
    expected_product_label = models.CharField(max_length=150, blank=True)
    #: Sentences for admins: resource classes that disappear, with the quotas and queued jobs that use them.
    warnings = models.JSONField(default=list)
    #: The last nvidia.com/mig.config.state seen on the node (pending, rebooting, success, failed).
    cluster_state = models.CharField(max_length=20, blank=True)
    #: nvidia.com/mig.config.state when the label was set: until it moves, it describes the previous attempt.
    cluster_state_at_apply = models.CharField(max_length=20, blank=True)
    reason = models.TextField(blank=True)
    #: [{"at": iso time, "message": ...}]: what the operation did, for the progress page.
    log = models.JSONField(default=list)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revert_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reverts")
    created = models.DateTimeField(auto_now_add=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    #: After this, preemptible work still on the node is requeued.
    drain_grace_until = models.DateTimeField(null=True, blank=True)
    #: After this, an operation still draining (non-preemptible work) or waiting for the operator fails.
    deadline = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: An admin forced the drain: the portal's work still on the node is stopped now, with this reason told to
    #: its owners (gpus publishes the fact; the job cycle does the stopping).
    forced_at = models.DateTimeField(null=True, blank=True)
    forced_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    force_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [
            # At most one operation in progress per node: two would fight over the same labels.
            models.UniqueConstraint(
                fields=["node"],
                condition=models.Q(state__in=[s.value for s in ACTIVE_CONFIG_STATES]),
                name="one_active_config_operation_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk} on {self.node.name}"

    def get_absolute_url(self) -> str:
        return reverse("gpus:nodeconfig-detail", args=[self.pk])

    @property
    def audit_cluster(self) -> str:
        """The cluster an audit record of this reconfiguration names (core.audit): its node's."""
        return self.node.cluster.name

    @property
    def state_badge(self) -> str:
        return NODE_CONFIG_BADGE.get(self.state, "grey")

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_CONFIG_STATES

    @property
    def can_revert(self) -> bool:
        """The node's latest operation, once it failed or finished, can be undone by requesting ``previous``
        (an older one cannot: the node has moved on since)."""
        if not self.previous or self.state not in (NodeConfigState.FAILED, NodeConfigState.DONE):
            return False
        latest = NodeConfigOperation.objects.filter(node_id=self.node_id).exclude(state=NodeConfigState.ABORTED)
        return latest.values_list("pk", flat=True).first() == self.pk

    @property
    def can_abort(self) -> bool:
        return self.state in ABORTABLE_CONFIG_STATES

    @property
    def can_force(self) -> bool:
        return self.state == NodeConfigState.DRAINING and self.forced_at is None

    @property
    def config_name(self) -> str:
        return str(self.requested.get("config", ""))

    @property
    def steps(self) -> list[dict]:
        """The progress bar: each step done, current, failed or to do."""
        order = list(CONFIG_STEPS)
        reached = order.index(self.state) if self.state in order else None
        failed_at = None
        if self.state in (NodeConfigState.FAILED, NodeConfigState.ABORTED):
            failed_at = next((e.get("state") for e in reversed(self.log) if e.get("state")), NodeConfigState.PENDING)
        out = []
        for i, step in enumerate(order):
            if failed_at is not None:
                f = order.index(failed_at) if failed_at in order else 0
                status = "done" if i < f else ("failed" if i == f else "todo")
            else:
                status = (
                    "done"
                    if i < reached or self.state == NodeConfigState.DONE
                    else ("current" if i == reached else "todo")
                )
            out.append({"state": step, "label": NodeConfigState(step).label, "status": status})
        return out


class NodeSmokeTest(models.Model):
    """One run of the node smoke test (gpus.smoketest): a pod pinned to the node, tolerating its GPU taint,
    holding one GPU or one MIG slice, that runs ``nvidia-smi`` and a small CUDA program. The latest finished run
    feeds the node's diagnosis; every run stays in the node's history."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="smoke_tests")
    state = models.CharField(max_length=10, choices=SmokeTestState.choices, default=SmokeTestState.PENDING)
    #: The extended resource the pod asked one unit of (a whole GPU or a MIG slice).
    resource = models.CharField(max_length=80)
    namespace = models.CharField(max_length=63)
    workload_name = models.CharField(max_length=63, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    #: The container's output (nvidia-smi and the CUDA check), the last lines kept.
    output = models.TextField(blank=True)
    #: Why it failed, in words (exit code, pod never scheduled, timed out).
    reason = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"Smoke test #{self.pk} on {self.node.name}"

    def get_absolute_url(self) -> str:
        return self.node.get_absolute_url() + "#smoke-test"  # the node's page shows its last smoke test

    @property
    def audit_cluster(self) -> str:
        """The cluster an audit record of this run names (core.audit): its node's."""
        return self.node.cluster.name

    @property
    def finished(self) -> bool:
        return self.state in (SmokeTestState.PASSED, SmokeTestState.FAILED)

    @property
    def badge(self) -> str:
        return SMOKE_TEST_BADGE.get(self.state, "grey")

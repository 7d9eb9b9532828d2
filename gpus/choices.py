"""States and kinds of the inventory, declared once with the labels and badge colours the UI shows."""

from django.db import models

from vocab.names import MIG_STRATEGY_MIXED, MIG_STRATEGY_NONE, MIG_STRATEGY_SINGLE


class NodeHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    WARNING = "warning", "Needs attention"
    ERROR = "error", "Broken"
    NO_GPU = "no-gpu", "No GPUs"
    GONE = "gone", "Gone"
    #: The GPU Operator's per-node switches turn the device plugin off on purpose.
    DISABLED = "disabled", "GPUs switched off"


NODE_HEALTH_BADGE = {
    NodeHealth.HEALTHY: "green",
    NodeHealth.WARNING: "amber",
    NodeHealth.ERROR: "red",
    NodeHealth.NO_GPU: "grey",
    NodeHealth.GONE: "grey",
    NodeHealth.DISABLED: "grey",
}


class ResourceKind(models.TextChoices):
    GPU = "gpu", "Whole GPU"
    MIG = "mig", "MIG partition"
    SHARED = "shared", "Time-sliced share"
    #: A share of a GPU under the device plugin's MPS: concurrent, memory- and compute-limited, not fault-isolated.
    MPS = "mps", "MPS share"


RESOURCE_KIND_BADGE = {
    ResourceKind.GPU: "blue",
    ResourceKind.MIG: "violet",
    ResourceKind.SHARED: "teal",
    ResourceKind.MPS: "teal",
}


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole GPU"
    MIG = "mig", "MIG partitioned"
    TIME_SLICED = "time-sliced", "Time-sliced"
    MPS = "mps", "MPS shared"


class GpuRequestMode(models.TextChoices):
    """How workloads ask for a node pool's GPUs (issue 33): the device plugin's extended resources (nvidia.com/gpu),
    ResourceClaims of Dynamic Resource Allocation, or nvidia.com/gpu mapped onto DRA by the gpu.nvidia.com device
    class's ``extendedResourceName`` (Kubernetes' DRAExtendedResource, beta in 1.36)."""

    DEVICE_PLUGIN = "device-plugin", "Device plugin (nvidia.com/gpu)"
    DRA = "dra", "Dynamic Resource Allocation (ResourceClaims)"
    DRA_EXTENDED = "dra-extended", "The device plugin's resource mapped onto DRA (extended-resource mapping)"


class MigStrategy(models.TextChoices):
    NONE = MIG_STRATEGY_NONE, "None"
    SINGLE = MIG_STRATEGY_SINGLE, "Single"
    MIXED = MIG_STRATEGY_MIXED, "Mixed"


class NodeConfigKind(models.TextChoices):
    MIG = "mig", "MIG layout"
    TIME_SLICING = "time-slicing", "Time-slicing"


class NodeConfigState(models.TextChoices):
    """A node reconfiguration, in the order it happens (gpus.nodeconfig advances it)."""

    #: Saved; the portal already places no new work on the node.
    PENDING = "pending", "Pending"
    #: Waiting for the GPU work on the node to finish; preemptible work is requeued after the grace period.
    DRAINING = "draining", "Draining"
    #: Writing the ConfigMap and the node label.
    APPLYING = "applying", "Applying"
    #: The GPU Operator is reconfiguring (follows nvidia.com/mig.config.state: pending, rebooting, success, failed).
    WAITING = "waiting", "Waiting for the GPU Operator"
    #: Reading the node back into the inventory and the resource classes.
    REFRESHING = "refreshing", "Refreshing inventory"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    #: An admin stopped it before anything was written to the node (pending or draining only).
    ABORTED = "aborted", "Aborted"


#: States of an operation still in progress: the node takes no new work while one exists.
ACTIVE_CONFIG_STATES = (
    NodeConfigState.PENDING,
    NodeConfigState.DRAINING,
    NodeConfigState.APPLYING,
    NodeConfigState.WAITING,
    NodeConfigState.REFRESHING,
)
TERMINAL_CONFIG_STATES = (NodeConfigState.DONE, NodeConfigState.FAILED, NodeConfigState.ABORTED)
#: States in which nothing has been written to the node yet, so stopping the operation changes nothing there.
ABORTABLE_CONFIG_STATES = (NodeConfigState.PENDING, NodeConfigState.DRAINING)
#: The steps as the progress bar draws them.
CONFIG_STEPS = (*ACTIVE_CONFIG_STATES, NodeConfigState.DONE)

NODE_CONFIG_BADGE = {
    NodeConfigState.PENDING: "grey",
    NodeConfigState.DRAINING: "amber",
    NodeConfigState.APPLYING: "blue",
    NodeConfigState.WAITING: "blue",
    NodeConfigState.REFRESHING: "blue",
    NodeConfigState.DONE: "green",
    NodeConfigState.FAILED: "red",
    NodeConfigState.ABORTED: "grey",
}


class InventoryAuditAction(models.TextChoices):
    """Audit verbs of the inventory and carving (registered with core.audit in GpusConfig.ready)."""

    NODE_GONE = "node.gone", "Node gone from cluster"
    NODE_BACK = "node.back", "Node back in cluster"
    NODE_CONFIG_REQUEST = "node.config.request", "Node reconfiguration requested"
    NODE_CONFIG_REVERT = "node.config.revert", "Node reconfiguration reverted"
    NODE_CONFIG_APPLY = "node.config.apply", "Node configuration written to the cluster"
    NODE_CONFIG_DRAIN = "node.config.drain", "Node drained for reconfiguration"
    NODE_CONFIG_DONE = "node.config.done", "Node reconfiguration finished"
    NODE_CONFIG_FAIL = "node.config.fail", "Node reconfiguration failed"
    NODE_CONFIG_ABORT = "node.config.abort", "Node reconfiguration aborted"
    NODE_CONFIG_FORCE = "node.config.force", "Node drain forced"
    NODE_SMOKE_TEST = "node.smoke_test", "Node smoke test run"
    CLASS_UPDATE = (
        "resource_class.update",
        "Resource class alias, description, visibility, cluster or alternatives changed",
    )
    CLUSTER_REGISTER = "cluster.register", "Cluster registered"
    CLUSTER_UPDATE = "cluster.update", "Cluster changed"
    CLUSTER_REMOVE = "cluster.remove", "Cluster removed"
    CLUSTER_UNREACHABLE = "cluster.unreachable", "Cluster unreachable"
    CLUSTER_BACK = "cluster.back", "Cluster reachable again"
    NODE_POOL_TAINTS = "node_pool.taints", "Taints GPU work tolerates in a node pool changed"
    NODE_POOL_GPU_REQUEST = "node_pool.gpu_request", "How a node pool's GPUs are requested changed"
    NODE_POOL_MIG_PROFILES = "node_pool.mig_profiles", "MIG profiles teams may claim in a node pool changed"


class SmokeTestState(models.TextChoices):
    """A node smoke test: a pod pinned to the node runs nvidia-smi and a small CUDA program."""

    PENDING = "pending", "Starting"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"


SMOKE_TEST_BADGE = {
    SmokeTestState.PENDING: "grey",
    SmokeTestState.RUNNING: "blue",
    SmokeTestState.PASSED: "green",
    SmokeTestState.FAILED: "red",
}


#: The name of the cluster configured in settings (every install has it; a single-cluster install has only it).
SETTINGS_CLUSTER = "default"


class ClusterConnection(models.TextChoices):
    """How the portal reaches a cluster of the fleet (cluster.connect)."""

    #: The cluster configured in settings (PORTAL_CLUSTER_BACKEND and friends), as a single-cluster install has it.
    SETTINGS = "settings", "Configured in settings"
    SIMULATED = "simulated", "Simulated (embedded)"
    IN_CLUSTER = "in_cluster", "In-cluster service account"
    KUBECONFIG = "kubeconfig", "Kubeconfig context"
    TOKEN = "token", "API server URL, CA and token"


class ClusterHealth(models.TextChoices):
    UNKNOWN = "unknown", "Not checked yet"
    REACHABLE = "reachable", "Reachable"
    UNREACHABLE = "unreachable", "Unreachable"


CLUSTER_HEALTH_BADGE = {
    ClusterHealth.UNKNOWN: "grey",
    ClusterHealth.REACHABLE: "green",
    ClusterHealth.UNREACHABLE: "red",
}

"""The planner's inputs and proposals as plain data: the contract between the history reader (planner.history),
the replay engine (planner.engine), the layout search (planner.layouts) and the Django app around them.

Pure Python, no Django. Times are epoch seconds (floats). The cluster is described with the scheduling core's own
views (jobs.scheduling.snapshot: NodeView, ClassView, QuotaView), so the replay hands the admission code exactly
what the cycle would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView


@dataclass(frozen=True)
class PastJob:
    """One piece of work from the window's history (a job, a gang, a notebook session, a service's minimum)."""

    id: int
    team: int
    class_id: int
    #: Units per pod (rank) and pods: a gang is workers > 1, admitted all-or-nothing.
    count: int
    submitted: float
    #: How long it ran (observed), or its requested maximum runtime for work that never ran.
    run_s: float
    workers: int = 1
    cpu_m: int = 0
    memory_mb: int = 0
    priority: int = 0
    preemptible: bool = False
    kind: str = "batch"
    #: When it observably started, or None when it never ran (the fidelity check compares against these).
    started: float | None = None
    max_runtime_s: int = 3600
    group: int | None = None
    architecture: str = ""
    cuda: tuple[int, ...] = ()
    topology_key: str = ""
    topology_mode: str = ""
    #: Whether it goes to the dedicated service node pool (admission's JobView.pool: a service while a pool is in use).
    pool: bool = False
    #: The cluster of the fleet it ran on (its name; the default cluster's for work that never ran and named none:
    #: planner.history says how it is read), and where it may run, most preferred first (admission's
    #: JobView.clusters: () for anywhere).
    cluster: str = ""
    clusters: tuple[str, ...] = ()


@dataclass
class NodeShape:
    """What a node is made of, beyond what admission sees: what MIG and time-slicing changes act on."""

    name: str
    #: The GFD product (sanitised, e.g. "NVIDIA-A100-SXM4-80GB"); vocab.mig.product_geometry takes it.
    product: str
    gpu_count: int
    mig_capable: bool = False
    #: How the node's device plugin advertises MIG devices ("mixed", "single" or "none"; gpus.models.Node's
    #: mig_strategy): a MIG change advertises what the portal's carving of this node would.
    mig_strategy: str = "mixed"


@dataclass
class Cluster:
    """What a replay runs on: one cluster of the fleet or the whole fleet. Admission's views of nodes (keyed as
    admission keys them: "<cluster>/<node>", plain names for the default cluster), classes and quotas (fleet-wide),
    plus each node's shape under the same key."""

    nodes: dict[str, NodeView]
    shapes: dict[str, NodeShape]
    classes: dict[int, ClassView]
    quotas: dict[tuple[int, int], QuotaView]
    team_names: dict[int, str] = field(default_factory=dict)
    #: Admission's patience (seconds a job may wait before smaller jobs stop passing it).
    patience: float = 900.0
    #: The default cluster's name (its nodes' keys are their plain names), and the clusters this model holds, in
    #: order (every cluster of the fleet, or the one a replay is limited to).
    home: str = ""
    clusters: tuple[str, ...] = ()

    def node_key(self, cluster: str, name: str) -> str:
        """The key of node ``name`` of ``cluster`` (jobs.cycle.admit.FleetKeys' rule)."""
        return name if not cluster or cluster == self.home else f"{cluster}/{name}"

    def node_name(self, key: str) -> str:
        """A node's own name (its key without the cluster)."""
        return key.partition("/")[2] or key


@dataclass
class History:
    start: float
    end: float
    jobs: list[PastJob]
    #: Group (job array) → most of its jobs active at once (admission's Snapshot.group_caps), for the groups in jobs.
    group_caps: dict[int, int] = field(default_factory=dict)


# Proposal changes. A proposal is a name and a list of these, applied in order to a copy of the cluster. Their
# JSON form (the API's and the page's) is the dataclass's fields plus "type": the class's TYPE.


@dataclass(frozen=True)
class MigChange:
    """Carve the named nodes' GPUs: a preset ("all-1g.10gb", "all-balanced", "all-disabled") or one layout per
    GPU ({profile: count}), validated with vocab.mig's geometry exactly as carving is."""

    TYPE = "mig"
    nodes: tuple[str, ...]
    preset: str = ""
    per_gpu: tuple[dict, ...] = ()


@dataclass(frozen=True)
class TimeSlicingChange:
    TYPE = "time_slicing"
    nodes: tuple[str, ...]
    #: 1 turns time-slicing off.
    replicas: int


@dataclass(frozen=True)
class QuotaChange:
    TYPE = "quota"
    team: int
    class_id: int
    guaranteed: int
    limit: int


@dataclass(frozen=True)
class AddNodes:
    """``count`` more nodes like ``like`` (an existing node: same product, GPUs, CPU, memory and carving)."""

    TYPE = "add_nodes"
    like: str
    count: int


@dataclass(frozen=True)
class RemoveNodes:
    TYPE = "remove_nodes"
    nodes: tuple[str, ...]


Change = MigChange | TimeSlicingChange | QuotaChange | AddNodes | RemoveNodes


@dataclass
class Proposal:
    name: str
    changes: list[Change] = field(default_factory=list)
    #: The cluster its changes are made to (node names are that cluster's); "" for the default cluster. Quota
    #: changes are fleet-wide wherever the proposal is.
    cluster: str = ""

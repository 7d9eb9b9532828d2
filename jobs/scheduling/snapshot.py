"""The scheduling core's shared types: the snapshot one admission cycle decides over (nodes, classes, quotas,
queued and active jobs, as plain views) and the decisions it returns. Pure Python, no Django; every module of
jobs.scheduling and the planner's replay speak in these, and none of them is defined anywhere else.

The job cycle (jobs.cycle.admit) builds the views from the database with a constant number of queries; the planner
(planner.engine_replay) builds them from history and proposals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.scheduling.dra import DRA_PREFIX, DraDevices
from vocab.waits import WaitReason


@dataclass
class NodeView:
    name: str
    product_label: str
    #: None: shared by all teams; else the only team (id) allowed on it.
    team: int | None
    schedulable: bool
    #: Units the node advertises per resource (allocatable), and what is still free for the portal.
    allocatable: dict[str, int]
    free: dict[str, int]
    cpu_free_m: int
    memory_free_mb: int
    #: CPU and memory the portal's jobs could have on this node if none of them ran there.
    cpu_capacity_m: int = 0
    memory_capacity_mb: int = 0
    #: The newest CUDA version (major, minor) the node's driver supports; () when unknown.
    cuda: tuple[int, ...] = ()
    #: The node's CPU architecture (kubernetes.io/arch); "" when unknown.
    architecture: str = ""
    #: Why the node's GPU stack takes no new work (gpus.models.Node.blocked_reason); "" when it can.
    kept_off: str = ""
    #: The node's values of the admin's topology labels (settings.PORTAL_TOPOLOGY_KEYS) it carries.
    topology: dict[str, str] = field(default_factory=dict)
    #: The node belongs to the dedicated service pool: only jobs whose kind uses the pool are placed on it.
    pool: bool = False
    #: The cluster of the fleet the node is in (its name).
    cluster: str = ""
    #: The devices NVIDIA's DRA driver publishes here and what of them is taken (jobs.scheduling.dra); None for a
    #: node without. Its resources are in ``allocatable`` and ``free`` like any other, and change through ``take``.
    dra: DraDevices | None = None

    @property
    def idle(self) -> bool:
        return all(self.free.get(r, 0) >= n for r, n in self.allocatable.items())

    def take(self, resource: str, units: int) -> None:
        """``units`` of ``resource`` are taken on the node. A DRA resource goes through the node's devices, so what
        its other DRA resources have free follows (a dynamic MIG instance uses counters the others would use)."""
        if self.dra is not None and resource in self.allocatable and resource.startswith(DRA_PREFIX):
            self.dra = self.dra.taking(resource, units) if units >= 0 else self.dra.giving_back(resource, -units)
            self.free.update(self.dra.free())
        else:
            self.free[resource] = self.free.get(resource, 0) - units

    def give_back(self, resource: str, units: int) -> None:
        """The mirror of ``take``."""
        self.take(resource, -units)


@dataclass(frozen=True)
class ClassView:
    id: int
    resource_name: str
    product_label: str
    gpu_fraction: float
    name: str = ""
    #: Whether any node of the fleet offers the class (False once the last one stopped advertising it: a carve
    #: took it away); work for a class nobody offers waits with ``class_gone``.
    offered: bool = True
    #: The one cluster whose nodes the class counts ("" for a fleet-wide class: every cluster's nodes of its
    #: product), and for a fleet-wide class the clusters whose nodes of its product are their own, scoped class.
    cluster: str = ""
    not_on: frozenset[str] = frozenset()

    #: The classes that may serve a job of this one when it cannot start, in priority order (a DRA class's
    #: alternatives, gpus.models.ResourceClass.alternatives; jobs.scheduling.decide rule 6).
    alternatives: tuple[int, ...] = ()

    def counts_on(self, cluster: str) -> bool:
        """Whether a node of the class's product in ``cluster`` is the class's."""
        return cluster == self.cluster if self.cluster else cluster not in self.not_on


@dataclass(frozen=True)
class QuotaView:
    guaranteed: int
    limit: int
    #: Normalised GPU-hours per month; None = no budget.
    budget_hours: float | None = None
    used_hours: float = 0.0
    #: cluster → the most units the team may hold of the class there (the fleet-wide ``limit`` still holds);
    #: clusters without a cap are absent.
    caps: dict[str, int] = field(default_factory=dict)


@dataclass
class JobView:
    """A job as admission sees it: ``workers`` pods (ranks) of ``count`` units, ``cpu_m`` and ``memory_mb``
    each. One worker is a single job; more are a gang, placed on that many distinct nodes or not at all."""

    id: int
    team: int
    class_id: int
    count: int
    cpu_m: int
    memory_mb: int
    priority: int
    preemptible: bool
    #: Submission time, epoch seconds.
    submitted: float
    max_runtime_s: int = 3600
    # Active jobs only:
    node: str = ""
    borrowed: bool = False
    preempting: bool = False
    #: The CUDA version (major, minor) the job's image needs, when known.
    cuda: tuple[int, ...] = ()
    #: The group the job belongs to (a job array's id), or None.
    group: int | None = None
    #: The CPU architecture the job is pinned to; "" for any.
    architecture: str = ""
    #: Pods (ranks) of ``count`` units each, on distinct nodes; and the node label their nodes should share
    #: one value of, "prefer" or "require" ("" for none).
    workers: int = 1
    topology_key: str = ""
    topology_mode: str = ""
    #: Active jobs: the node of each rank, rank 0 first; (node,) for a one-pod job.
    nodes: tuple[str, ...] = ()
    #: The job goes to the dedicated service pool's nodes (and only there); every other job keeps off them.
    pool: bool = False
    #: The clusters the job may run on, most preferred first; () for any. A gang's ranks share one cluster.
    clusters: tuple[str, ...] = ()
    #: Clusters it may not use this cycle, though its preferences allow them: its team's cap for the class there
    #: is reached (set by admission's cap gate, jobs.scheduling.clusters).
    barred: frozenset[str] = frozenset()
    #: Active jobs: the cluster they run on ("" when unknown: then the cluster of their node in the snapshot).
    cluster: str = ""
    #: The user whose work it is (the member of ``team`` whose fair share it counts against); 0 when unknown (a
    #: service's replica views, the planner's replay): all such work of a team is one member's.
    owner: int = 0
    #: Active jobs: the normalised GPU-seconds stopping it now would lose (its GPUs × the seconds since the later of
    #: its start and its last checkpoint); reclaim stops those that lose least first.
    at_risk: float = 0.0
    #: Active jobs: younger than its team's minimum runtime, so never a victim of reclaim.
    protected: bool = False
    #: Queued jobs: the cluster of its soonest estimated start (jobs.scheduling.estimate; "" when not estimated or on
    #: one cluster): where a starving gang holds nodes (jobs.scheduling.gangs.reserve).
    estimated_cluster: str = ""
    #: Queued jobs: whether its class's alternatives may serve it (its pods are pinned to the nodes admission picks,
    #: so they ask exactly the class admission chose: jobs.scheduling.decide rule 6). False for work the cluster's
    #: scheduler places (a service's replicas).
    alternatives: bool = False

    @property
    def total(self) -> int:
        """Units the job holds of its class: workers × count (what quota, shares and budgets count)."""
        return self.count * self.workers

    @property
    def placed_on(self) -> tuple[str, ...]:
        return self.nodes or ((self.node,) if self.node else ())


@dataclass
class Snapshot:
    now: float
    nodes: dict[str, NodeView]
    classes: dict[int, ClassView]
    #: (team, class) → quota
    quotas: dict[tuple[int, int], QuotaView]
    queued: list[JobView]
    active: list[JobView]
    #: team → decayed average of normalised GPUs held
    recent_average: dict[int, float] = field(default_factory=dict)
    team_names: dict[int, str] = field(default_factory=dict)
    patience: float = 900.0
    #: group → most of its jobs active at once (a job array's parallelism); groups without a cap are absent.
    group_caps: dict[int, int] = field(default_factory=dict)
    #: Fair share among a team's members (jobs.scheduling.members): whether it orders a team's queue, each
    #: (team, owner)'s decayed average of normalised GPUs held, the weights leads set (absent: 1), the owners'
    #: names, and the half-life of the averages in seconds (the sentence a waiting job's owner reads names it).
    member_share: bool = True
    member_average: dict[tuple[int, int], float] = field(default_factory=dict)
    member_weights: dict[tuple[int, int], float] = field(default_factory=dict)
    user_names: dict[int, str] = field(default_factory=dict)
    half_life: float = 3600.0


@dataclass
class Wait:
    """Why a queued job waits this cycle: the reason, the sentence its owner reads, the numbers behind it and the
    job's place in its class's queue."""

    reason: WaitReason
    message: str
    detail: dict = field(default_factory=dict)
    position: int | None = None


@dataclass
class Decisions:
    #: job id → (node, borrowed); a gang's node is its rank 0's
    admit: dict[int, tuple[str, bool]] = field(default_factory=dict)
    #: gang job id → the node of each rank, rank 0 first (every admitted gang, and only gangs)
    ranks: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: starving gang job id → the nodes held for it: jobs after it in its class are not placed there
    reserved: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: job id (running, borrowed) → job id it makes room for
    preempt: dict[int, int] = field(default_factory=dict)
    wait: dict[int, Wait] = field(default_factory=dict)
    #: class id → job id that is starving (holding back its class)
    starving: dict[int, int] = field(default_factory=dict)
    #: admitted job id → the class it got instead of its own (one of its class's alternatives): the class whose quota,
    #: shares and devices it counts against from now on
    served_by: dict[int, int] = field(default_factory=dict)

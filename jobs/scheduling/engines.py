"""Admission's placement engines: one ``ClassIndex`` per resource class (the jobs.scheduling.placement engine
over the class's nodes) and the ``Engines`` that build them on demand and keep every class that shares a node in
step. Pure Python, no Django.

The cycle (jobs.scheduling.decide on a fresh snapshot) builds them from the snapshot every time. A caller that
runs many cycles over a state it keeps itself (the planner's replay) builds them once, tells them what left
(``Engines.release``) and hands them to ``decide``, which records its admissions in them as it makes them (the
units taken on the nodes); jobs.scheduling.tallies does the same for what teams hold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from jobs.scheduling import dra, node_trust, placement
from jobs.scheduling.snapshot import ClassView, Decisions, JobView, NodeView


class ClassIndex:
    """The schedulable nodes of one resource class, as a jobs.scheduling.placement engine: one device per unit of the
    class's resource (a whole GPU, a MIG slice, a time-sliced replica), with the node's free CPU and memory.

    The engine scores nodes by how much they fragment the class's demand (queued and running jobs' sizes, see
    ``_workload``: a node left with 3 free units when the jobs ask for 4s has 3 stranded units) plus a small
    pull towards the tightest fit, then nodes already running work before idle ones (idle nodes stay whole
    for big jobs), then by name. Nodes in the same state are one group, so a placement looks at each distinct
    state once.
    """

    def __init__(self, cls: ClassView, nodes: list[NodeView], jobs: list[JobView] = ()) -> None:
        self.cls = cls
        self.resource = cls.resource_name
        self.nodes = sorted(
            (
                n
                for n in nodes
                if n.product_label == cls.product_label
                and n.allocatable.get(self.resource, 0) > 0
                and cls.counts_on(n.cluster)  # a class scoped to a cluster counts that cluster's nodes only
            ),
            key=lambda n: n.name,
        )
        #: The clusters the class's nodes are in, by name.
        self.clusters = sorted({n.cluster for n in self.nodes})
        self.by_name = {n.name: n for n in self.nodes}
        #: free units → how many schedulable nodes have that many; each such node's count
        self._free_counts: dict[int, int] = defaultdict(int)
        self._counted: dict[str, int] = {}
        self.total_free = 0
        workload = placement.Workload.from_demands(self._workload(jobs))
        self.placer = placement.Placer(
            (self._engine_node(n) for n in self.nodes if n.schedulable),
            workload,
            policy=placement.POLICY_PORTAL,
            rank=lambda engine_node: (engine_node.tag[2], engine_node.name),
        )
        for node in self.nodes:
            self._count(node)
        #: (team) → the distinct shapes (units, cpu, memory, cuda) of nodes the team may use
        self._shapes: dict[int, set[tuple]] = {}
        #: a worker's (team, count, cpu, memory, cuda, architecture) → the nodes that could ever hold it (gangs)
        self.usable: dict[tuple, list[NodeView]] = {}
        self._kept_off: dict[int, dict[str, list[str]]] = {}
        #: a job's shape → per cluster, the nodes that could hold it (jobs.scheduling.clusters)
        self.cluster_shapes: dict[tuple, dict[str, tuple[int, int, int]]] = {}
        #: Bumped whenever a node of the engine changes or leaves or rejoins it: what was counted over the engine's
        #: states at one value still holds (jobs.scheduling.clusters memoises per-cluster room with it).
        self.changes = 0
        self.room_memo: dict[tuple, tuple[int, dict[str, tuple[int, int]]]] = {}

    def _workload(self, jobs: list[JobView]):
        """The job sizes fragmentation is measured against: the class's queued and running jobs, plus one job
        of each power-of-two size a node of the class can hold (so a lone job is not measured against itself
        alone, and leftovers small jobs can use are not counted as lost)."""
        for j in jobs:
            yield from [self._demand(j)] * j.workers
        biggest = max((n.allocatable.get(self.resource, 0) for n in self.nodes), default=0)
        size = 1
        while size <= biggest:
            yield placement.Demand(size, placement.WHOLE)
            size *= 2

    @staticmethod
    def _demand(job: JobView) -> placement.Demand:
        return placement.Demand(job.count, placement.WHOLE, job.cpu_m, job.memory_mb)

    def _engine_node(self, node: NodeView) -> placement.Node:
        free = max(0, node.free.get(self.resource, 0))
        units = max(free, node.allocatable.get(self.resource, 0))
        return placement.Node(
            node.name,
            node.product_label,
            [placement.WHOLE] * free + [0] * (units - free),
            node.cpu_free_m,
            node.memory_free_mb,
            tag=(
                node.team,
                node.cuda,
                node.idle,
                node.architecture,
                frozenset(node.topology.items()),
                node.pool,
                node.cluster,
            ),  # fmt: skip
        )

    def _count(self, node: NodeView) -> None:
        """(Re)count a schedulable node's free units of the class in ``_free_counts`` and ``total_free``."""
        before = self._counted.get(node.name)
        if before is not None:
            self._free_counts[before] -= 1
            self.total_free -= before
        elif not node.schedulable:
            return
        free = self._counted[node.name] = max(0, node.free.get(self.resource, 0))
        self._free_counts[free] += 1
        self.total_free += free

    def shapes(self, team: int) -> set[tuple]:
        if team not in self._shapes:
            self._shapes[team] = {
                (n.allocatable.get(self.resource, 0), n.cpu_capacity_m, n.memory_capacity_mb, n.cuda)
                for n in self.nodes
                if n.schedulable and (n.team is None or n.team == team)
            }
        return self._shapes[team]

    @staticmethod
    def allow(job: JobView, cluster: str | None = None):
        """The engine's filter on a node state's tag: the nodes ``job`` may use (team, CUDA, architecture, the
        clusters it may run on; ``cluster``: only that one)."""
        clusters = (cluster,) if cluster is not None else job.clusters
        barred = job.barred

        def allow(tag: tuple) -> bool:
            team, cuda, _idle, arch, _topology, pool, in_cluster = tag
            return (
                (team is None or team == job.team)
                and pool == job.pool
                and (not job.cuda or not cuda or cuda >= job.cuda)
                and (not job.architecture or arch == job.architecture)
                and (not clusters or in_cluster in clusters)
                and in_cluster not in barred
            )

        return allow

    @staticmethod
    def allows_cluster(job: JobView, cluster: str) -> bool:
        """Whether ``job`` may use a node of ``cluster`` now: its preferences allow it and no cap bars it."""
        return (not job.clusters or cluster in job.clusters) and cluster not in job.barred

    @staticmethod
    def spill_order(job: JobView) -> list[str | None]:
        """The clusters to try, in turn: the job's preferences one by one (spill-over to the next only when none
        of the earlier ones has room now; those a cap bars are skipped), or [None]: every cluster at once, the
        placement score choosing."""
        if len(job.clusters) > 1:
            return [cluster for cluster in job.clusters if cluster not in job.barred]
        return [None]

    def may_use(self, node: NodeView, job: JobView) -> bool:
        """Whether ``job`` may ever run on ``node`` (schedulable, team, CUDA, architecture, size)."""
        return (
            node.schedulable
            and (node.team is None or node.team == job.team)
            and node.pool == job.pool
            and (not job.cuda or not node.cuda or node.cuda >= job.cuda)
            and (not job.architecture or node.architecture == job.architecture)
            and self.allows_cluster(job, node.cluster)
            and node.allocatable.get(self.resource, 0) >= job.count
            and node.cpu_capacity_m >= job.cpu_m
            and node.memory_capacity_mb >= job.memory_mb
        )

    def place(self, job: JobView) -> NodeView | None:
        """The node the engine picks for the job among those it may use (team, CUDA, clusters: the preferred
        first), or None."""
        demand = self._demand(job)
        for cluster in self.spill_order(job):
            choice = self.placer.choose(demand, self.allow(job, cluster))
            if choice is not None:
                return self.by_name[choice.node]
        return None

    def take(self, node: NodeView, job: JobView) -> None:
        node.take(self.resource, job.count)
        node.cpu_free_m -= job.cpu_m
        node.memory_free_mb -= job.memory_mb
        self.refresh(node)

    def release(self, node: NodeView, job: JobView) -> None:
        """The mirror of ``take``: one rank of ``job`` left ``node``."""
        node.give_back(self.resource, job.count)
        node.cpu_free_m += job.cpu_m
        node.memory_free_mb += job.memory_mb
        self.refresh(node)

    def kept_off(self, team: int) -> dict[str, list[str]]:
        """The class's nodes the team may use that placement keeps work off, by reason (node_trust); what
        nodes are kept off does not change while the index lives."""
        found = self._kept_off.get(team)
        if found is None:
            found = self._kept_off[team] = node_trust.kept_off(self.nodes, team)
        return found

    def refresh(self, node: NodeView) -> None:
        """Re-read a node after work of any class was placed on it (CPU, memory and idleness are shared; on a DRA
        node, taking a dynamic MIG instance changes what the other profiles have free)."""
        if node.name in self._counted:
            self._count(node)
        if node.name in self.placer.nodes:
            self.placer.update(self._engine_node(node))
            self.changes += 1

    def most_free(self) -> int:
        return max((free for free, n in self._free_counts.items() if n > 0), default=0)


class Engines:
    """The class indices of the nodes, built when a class is first asked for (a cycle only pays for the classes
    that have queued work), over one set of NodeViews that every class of a node shares.

    ``copy``: work on copies of the nodes (the cycle's snapshot stays what was observed), or on the caller's own
    views (the replay's state). ``workloads``: class → the jobs whose sizes its placement measures fragmentation
    against (the cycle: that class's queued and running jobs)."""

    def __init__(
        self,
        nodes: Iterable[NodeView],
        classes: dict[int, ClassView],
        workloads: dict[int, list[JobView]] | None = None,
        copy: bool = True,
    ) -> None:
        self.nodes: dict[str, NodeView] = {
            n.name: n for n in ((replace(n, free=dict(n.free)) for n in nodes) if copy else nodes)
        }
        self.classes = classes
        self.workloads = workloads if workloads is not None else {}
        self.by_product: dict[str, list[NodeView]] = defaultdict(list)
        for node in self.nodes.values():
            self.by_product[node.product_label].append(node)
        self._index: dict[int, ClassIndex] = {}
        #: node name → the built indices that have it among their schedulable nodes
        self.indices_of: dict[str, list[ClassIndex]] = defaultdict(list)
        #: DRA nodes held this cycle for a starving gang of a DRA class (``hold``)
        self.held_dra: set[str] = set()

    def index(self, class_id: int) -> ClassIndex:
        idx = self._index.get(class_id)
        if idx is None:
            cls = self.classes[class_id]
            idx = self._index[class_id] = ClassIndex(
                cls, self.by_product.get(cls.product_label, []), self.workloads.get(class_id, [])
            )
            for name in idx.placer.nodes:
                self.indices_of[name].append(idx)
            if self.held_dra and _is_dra(idx):
                for name in self.held_dra & set(idx.placer.nodes):
                    idx.placer.remove(name)
        return idx

    def hold(self, idx: ClassIndex, names: Iterable[str]) -> None:
        """The nodes gangs.reserve took out of ``idx``'s engine for a starving gang of a DRA class leave every other
        DRA class's engine too, built now or later this cycle: on a DRA node the classes share the GPUs (a dynamic-MIG
        GPU's counters serve every profile and the whole GPU; a shared class takes the same devices as its base), so
        another class placed there would take what the gang waits for. Device-plugin classes count resources of
        their own and keep the node. Put back with the rest at ``end_cycle``."""
        if not _is_dra(idx):
            return
        names = set(names)
        self.held_dra |= names
        for name in names:
            for other in self.indices_of[name]:
                if other is not idx and _is_dra(other) and name in other.placer.nodes:
                    other.placer.remove(name)

    def take(self, idx: ClassIndex, node: NodeView, job: JobView) -> None:
        """One rank of ``job`` placed on ``node``; the other classes of the node re-read its CPU and memory."""
        idx.take(node, job)
        for other in self.indices_of[node.name]:
            if other is not idx:
                other.refresh(node)

    def release(self, job: JobView, names: Iterable[str]) -> None:
        """``job`` left these nodes (one rank on each): its units, CPU and memory are free again."""
        cls = self.classes.get(job.class_id)
        idx = self._index.get(job.class_id)
        for name in names:
            node = self.nodes.get(name)
            if node is None:
                continue
            if idx is not None and name in idx.by_name:
                idx.release(node, job)
            else:
                if cls is not None:
                    node.give_back(cls.resource_name, job.count)
                node.cpu_free_m += job.cpu_m
                node.memory_free_mb += job.memory_mb
            for other in self.indices_of[name]:
                if other is not idx:
                    other.refresh(node)

    def begin_cycle(self) -> None:
        """Before a cycle on kept engines: each class's nodes in the order a fresh build would have them."""
        for idx in self._index.values():
            idx.placer.renew_order()

    def end_cycle(self, decisions: Decisions) -> None:
        """Put back the nodes held for starving gangs: they are held for one cycle at a time."""
        self.held_dra.clear()
        for names in decisions.reserved.values():
            for name in names:
                node = self.nodes[name]
                for idx in self.indices_of[name]:
                    if name not in idx.placer.nodes:
                        idx.placer.add(idx._engine_node(node))
                        idx.changes += 1


def _is_dra(idx: ClassIndex) -> bool:
    return idx.resource.startswith(dra.DRA_PREFIX)

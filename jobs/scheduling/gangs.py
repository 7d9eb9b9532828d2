"""Gangs in admission: placing W workers of one job on W distinct nodes together, or not at all. Pure Python.

A gang's view (jobs.scheduling.snapshot.JobView) asks for ``workers`` pods of ``count`` units, ``cpu_m`` and
``memory_mb`` each. Admission (jobs.scheduling.decide and its gates) calls this module when ``workers > 1``, on
the class's placement engine (jobs.scheduling.engines.ClassIndex), and commits what it returns; nothing here
changes the engine's state except ``reserve``, which takes the held nodes out of the class's engine for the rest
of the cycle.

- ``place``: ranks are chosen one at a time with the engine's own choice (fragmentation, then tightest fit,
  then busy before idle, then name), each among the nodes not chosen yet; the chosen nodes are taken out of
  the engine while the next rank is chosen and put back afterwards, so a failed attempt leaves it unchanged.
  Rank 0 is the first (best-scored) node. With a topology key, each value of the key (a *domain*; nodes
  without the label are in none) that has W nodes fitting now is tried, and the domain whose ranks add the
  least to the score wins (least fragmentation left, busy nodes before idle ones), then the smallest value.
  "require" admits only within one domain; "prefer" falls back to any W nodes.
- ``never_fits``: fewer than W nodes the job may use could ever hold one worker (allocatable ≥ count, CPU and
  memory capacity, team, CUDA, architecture; within one domain for "require").
- ``explain``: "why is this waiting" in gang terms, with the numbers in the detail.
- ``reserve``: the starvation bound. A gang that has waited the patience holds the W nodes nearest to fitting
  it (most free units, then name; within the domain with the most free for "require"/"prefer"); jobs
  after it in its class are placed on other nodes, so the held ones only drain towards it.
"""

from __future__ import annotations

from collections import defaultdict

from jobs.scheduling import placement
from jobs.scheduling.engines import ClassIndex
from jobs.scheduling.snapshot import JobView, NodeView


def _short(key: str) -> str:
    """The readable part of a label name: "zone" for topology.kubernetes.io/zone."""
    return key.rsplit("/", 1)[-1]


def _in_domain(allow, key: str, value: str):
    pair = (key, value)
    return lambda tag: allow(tag) and pair in tag[4]


def fitting_now(idx: ClassIndex, job: JobView) -> tuple[int, dict[str, int]]:
    """How many nodes could take one worker now, and how many of those each value of the job's topology key
    has. Counted per node state (the engine's groups), not per node."""
    demand = idx._demand(job)
    allow = idx.allow(job)
    total, per_domain = 0, defaultdict(int)
    for sig, group in idx.placer.states():
        if allow(sig[1]) and placement.fits(sig, demand):
            total += len(group)
            if job.topology_key:
                value = dict(sig[1][4]).get(job.topology_key)
                if value is not None:
                    per_domain[value] += len(group)
    return total, dict(per_domain)


def _ranks(idx: ClassIndex, demand: placement.Demand, allow, workers: int) -> tuple[float, list[str]] | None:
    """W distinct nodes chosen one at a time by the engine, and their summed score; None if fewer fit. The
    engine is left as it was."""
    removed: list[placement.Node] = []
    total = 0.0
    try:
        for _ in range(workers):
            choice = idx.placer.choose(demand, allow)
            if choice is None:
                return None
            total += choice.score[0]
            removed.append(idx.placer.remove(choice.node))
        return total, [node.name for node in removed]
    finally:
        for node in removed:
            idx.placer.add(node)


def place(idx: ClassIndex, job: JobView) -> list[NodeView] | None:
    """The nodes of the job's ranks, rank 0 first, or None when the whole gang does not fit now. The ranks share one
    cluster: the job's preferred clusters are tried in turn; without preferences, every cluster that could hold
    the gang is tried and the best-scored placement wins."""
    demand = idx._demand(job)
    total, _ = fitting_now(idx, job)
    if total < job.workers:
        return None
    ordered = idx.spill_order(job)
    clusters = ordered if ordered != [None] else sorted({n.cluster for n in _usable(idx, job)})
    best = None
    for cluster in clusters:
        found = _in_cluster(idx, job, demand, idx.allow(job, cluster))
        if found is not None and (best is None or found[0] < best[0]):
            best = found
        if best is not None and ordered != [None]:
            break  # spill-over: the first preferred cluster that holds the gang
    return [idx.by_name[name] for name in best[1]] if best is not None else None


def _in_cluster(idx: ClassIndex, job: JobView, demand, allow) -> tuple[float, list[str]] | None:
    """The gang's ranks on nodes ``allow`` admits (one cluster), within one topology domain when the job asks."""
    if job.topology_key and job.topology_mode:
        per_domain: dict[str, int] = defaultdict(int)
        for sig, group in idx.placer.states():
            if allow(sig[1]) and placement.fits(sig, demand):
                value = dict(sig[1][4]).get(job.topology_key)
                if value is not None:
                    per_domain[value] += len(group)
        best = None
        for value in sorted(v for v, n in per_domain.items() if n >= job.workers):
            found = _ranks(idx, demand, _in_domain(allow, job.topology_key, value), job.workers)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is not None or job.topology_mode == "require":
            return best
    return _ranks(idx, demand, allow, job.workers)


def _usable(idx: ClassIndex, job: JobView) -> list[NodeView]:
    """The nodes that could ever hold one worker (what they are does not change within a cycle: memoised)."""
    key = (job.team, job.count, job.cpu_m, job.memory_mb, job.cuda, job.architecture, job.clusters, job.barred)
    found = idx.usable.get(key)
    if found is None:
        found = idx.usable[key] = [n for n in idx.nodes if idx.may_use(n, job)]
    return found


def never_fits(idx: ClassIndex, job: JobView, team_name: str, class_name: str) -> tuple[str, dict] | None:
    """(message, detail) when fewer than W nodes the job may use could ever hold a worker; else None."""
    usable = _usable(idx, job)
    need = {"nodes_needed": job.workers, "requested_per_node": job.count, "nodes_able": len(usable)}
    if len(usable) < job.workers:
        return (
            f"It needs {job.workers} nodes that can each hold {job.count} × {class_name}, and only {len(usable)} "
            f"schedulable node(s) that team {team_name} may use can. It waits until enough are; or cancel it and "
            "ask for fewer workers or fewer GPUs per worker.",
            need,
        )
    if job.topology_mode == "require":
        per_domain: dict[str, int] = defaultdict(int)
        for node in usable:
            if job.topology_key in node.topology:
                per_domain[node.topology[job.topology_key]] += 1
        most = max(per_domain.values(), default=0)
        if most < job.workers:
            return (
                f"It must run within one {_short(job.topology_key)} ({job.topology_key}), and no "
                f"{_short(job.topology_key)} has {job.workers} nodes that can each hold {job.count} × {class_name} "
                f"(the most is {most}). It waits until one has; or resubmit it with the topology as a preference.",
                need | {"topology_key": job.topology_key, "best_domain_able": most},
            )
    return None


def explain(idx: ClassIndex, job: JobView, class_name: str) -> tuple[str, dict]:
    """Why a gang that could fit some day waits now, in its own terms: (message, detail)."""
    now, per_domain = fitting_now(idx, job)
    message = f"Needs {job.workers} nodes with {job.count} free × {class_name} each; {now} have that now"
    detail = {"nodes_needed": job.workers, "nodes_fitting_now": now}
    if job.topology_key and job.topology_mode:
        best = max(per_domain.values(), default=0)
        message += f"; the most in one {_short(job.topology_key)} ({job.topology_key}) is {best}"
        detail |= {"topology_key": job.topology_key, "best_domain_count": best}
    return message + ".", detail


def reserve(idx: ClassIndex, job: JobView, soonest: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Hold the W nodes nearest to fitting the starving gang, all in one cluster (its ranks share one): the first of
    ``soonest`` (the clusters by the job's estimated start, soonest first: jobs.scheduling.estimate) that has W
    nodes the gang may use; else the cluster whose W nearest nodes have the most free units, then name. Within it:
    most free units first, then name (within the domain with the most free for a topology, when one has W usable
    nodes). They leave the class's engine for the rest of the cycle, so no job after the gang is placed there."""

    def key(node: NodeView):
        return (-node.free.get(idx.resource, 0), node.name)

    usable = sorted(_usable(idx, job), key=key)
    by_cluster: dict[str, list[NodeView]] = defaultdict(list)
    for node in usable:
        by_cluster[node.cluster].append(node)
    able = {name: nodes for name, nodes in by_cluster.items() if len(nodes) >= job.workers}
    if able:
        rank = {name: i for i, name in enumerate(soonest)}
        cluster = min(
            able,
            key=lambda name: (
                rank.get(name, len(rank)),
                -sum(n.free.get(idx.resource, 0) for n in able[name][: job.workers]),
                name,
            ),
        )
        usable = able[cluster]
    chosen = usable[: job.workers]
    if job.topology_key and job.topology_mode:
        domains: dict[str, list[NodeView]] = defaultdict(list)
        for node in usable:
            if job.topology_key in node.topology:
                domains[node.topology[job.topology_key]].append(node)
        fitting = [nodes[: job.workers] for _, nodes in sorted(domains.items()) if len(nodes) >= job.workers]
        if fitting:
            chosen = max(fitting, key=lambda nodes: sum(n.free.get(idx.resource, 0) for n in nodes))
    for node in chosen:
        idx.placer.remove(node.name)
    idx.changes += 1
    return tuple(node.name for node in chosen)

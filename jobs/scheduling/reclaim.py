"""Reclaim: which borrowed, preemptible jobs of other teams to stop so that a job within its team's guarantee
fits. Pure Python over admission's class index (jobs.scheduling.engines.ClassIndex) and views.

``borrowed_on`` maps a node to the borrowed preemptible jobs on it and ``returning_on`` to the units that jobs
already being preempted will hand back there; a gang is on each of its ranks' nodes with its per-rank
``count``, so stopping it frees that much on every one of them (it is one job: one preemption). Victims are
those whose stopping loses the fewest GPU-hours since their last checkpoint first (``JobView.at_risk``; ties: the
youngest first, then the smallest), and a job younger than its team's minimum runtime (``JobView.protected``) is never
one. A single job looks for one node, a gang for W (within one domain of its topology key
when it requires one, and first when it prefers one); either way the nodes where the fewest units must go.
A node that fits already costs nothing.
"""

from __future__ import annotations

from collections import defaultdict

from jobs.scheduling import placement
from jobs.scheduling.engines import ClassIndex
from jobs.scheduling.snapshot import JobView


def victim_order(job: JobView) -> tuple:
    """The order reclaim takes victims in: least work lost since the last checkpoint, then the youngest, then the
    smallest."""
    return (job.at_risk, -job.submitted, job.count)


def stoppable(jobs, team: int, reclaimed) -> list[JobView]:
    """The jobs reclaim may stop for a job of ``team``, in ``victim_order``: other teams' jobs not already stopped
    for another and not protected by their team's minimum runtime."""
    return sorted((j for j in jobs if j.team != team and j.id not in reclaimed and not j.protected), key=victim_order)


def for_job(idx, job, borrowed_on, returning_on, reclaimed) -> tuple[list[int], bool]:
    """The borrowed preemptible jobs of other teams to stop on one node so that ``job`` fits there, choosing
    the node that needs the fewest units stopped ([] if none can be freed that way), and whether jobs already
    being preempted will free enough on some node anyway. Only nodes with such jobs are looked at."""
    best: list[int] = []
    best_units = None
    for name in sorted(set(borrowed_on) | set(returning_on)):
        node = idx.by_name.get(name)
        if (
            node is None
            or not node.schedulable
            or (node.team is not None and node.team != job.team)
            or (node.pool != job.pool)
            or not idx.allows_cluster(job, node.cluster)  # a cluster it may not use (its preferences, a cap)
        ):
            continue
        already = returning_on.get(name, 0)
        free = node.free.get(idx.resource, 0) + already
        if free >= job.count and already:
            return [], True
        chosen, units = [], 0
        for victim in stoppable(borrowed_on.get(name, []), job.team, reclaimed):
            if free + units >= job.count:
                break
            chosen.append(victim.id)
            units += victim.count
        if free + units >= job.count and (best_units is None or units < best_units):
            best, best_units = chosen, units
    return best, False


def for_gang(idx: ClassIndex, job: JobView, borrowed_on, returning_on, reclaimed) -> tuple[list[int], bool]:
    """The borrowed preemptible jobs of other teams to stop so that the gang fits on W nodes, choosing the
    nodes where the fewest units must go ([] if W cannot be freed that way), and whether jobs already being
    preempted free enough anyway (then nothing more is stopped). Looks at the nodes that fit a worker now and
    those with borrowed or returning work."""
    demand, allow = idx._demand(job), idx.allow(job)
    names = set(borrowed_on) | set(returning_on)
    if not names:
        return [], False
    for sig, group in idx.placer.states():
        if allow(sig[1]) and placement.fits(sig, demand):
            names.update(group)
    options = []  # (units to stop, node, victims, waits for returning units)
    for name in sorted(names):
        node = idx.by_name.get(name)
        if node is None or name not in idx.placer.nodes or not idx.may_use(node, job):
            continue
        free = node.free.get(idx.resource, 0)
        if node.cpu_free_m < job.cpu_m or node.memory_free_mb < job.memory_mb:
            continue
        if free >= job.count:
            options.append((0, node, [], False))
            continue
        already = returning_on.get(name, 0)
        if free + already >= job.count:
            options.append((0, node, [], True))
            continue
        chosen, units = [], 0
        for victim in stoppable(borrowed_on.get(name, []), job.team, reclaimed):
            if free + already + units >= job.count:
                break
            chosen.append(victim.id)
            units += victim.count
        if free + already + units >= job.count:
            options.append((units, node, chosen, bool(already)))
    candidates = [options]
    if job.topology_key and job.topology_mode:
        domains: dict[str, list] = defaultdict(list)
        for option in options:
            value = option[1].topology.get(job.topology_key)
            if value is not None:
                domains[value].append(option)
        in_one = [opts for _, opts in sorted(domains.items()) if len(opts) >= job.workers]
        candidates = in_one if in_one or job.topology_mode == "require" else candidates
    best = None
    for opts in candidates:
        picked = sorted(opts, key=lambda o: (o[0], o[1].name))[: job.workers]
        if len(picked) == job.workers and (best is None or sum(o[0] for o in picked) < sum(o[0] for o in best)):
            best = picked
    if best is None:
        return [], False
    victims = sorted({v for option in best for v in option[2]})
    if victims:
        return victims, False
    return [], any(option[3] for option in best)

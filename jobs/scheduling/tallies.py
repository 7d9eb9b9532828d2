"""What the active jobs hold, as admission counts it (``Tallies``, and ``held_units``: what a team holds). Pure
Python, no Django.

The cycle (jobs.scheduling.decide on a fresh snapshot) counts them from the snapshot's active jobs every time. A
caller that runs many cycles over a state it keeps itself (the planner's replay) counts them once, tells them
what left (``Tallies.remove``) and hands them to ``decide``, which records its admissions in them as it makes
them (the quota used and the GPUs held).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from jobs.scheduling.snapshot import ClassView, JobView, NodeView


def held_units(active: Iterable[JobView]) -> dict[tuple[int, int], int]:
    """Units of each class each team holds, (team, class) → units: the sum of the active views' ``total``
    (workers × count), a service's replicas granted above its minimum being views of their own (the kinds'
    ``elastic_views``). The one answer to what a team holds: admission's tallies start from it, and
    jobs.usage.held_units gives it from the database to the quota bars, the quotas API and the metrics."""
    held: dict[tuple[int, int], int] = defaultdict(int)
    for job in active:
        held[(job.team, job.class_id)] += job.total
    return dict(held)


@dataclass
class Tallies:
    """What the active jobs hold, as admission counts it: units per (team, class) and per (team, class, cluster)
    (what per-cluster caps count), active jobs per group, normalised GPUs per team and per member, and per class
    and node the borrowed preemptible jobs (what reclaiming may stop) and the units that jobs being preempted will
    hand back."""

    used: dict[tuple[int, int], int] = field(default_factory=lambda: defaultdict(int))
    used_on: dict[tuple[int, int, str], int] = field(default_factory=lambda: defaultdict(int))
    group_active: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    held: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    #: (team, owner) → normalised GPUs the member's active jobs hold (fair share among a team's members)
    member_held: dict[tuple[int, int], float] = field(default_factory=lambda: defaultdict(float))
    borrowed_on: dict[int, dict[str, list[JobView]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    returning_on: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    @classmethod
    def of(
        cls, active: Iterable[JobView], classes: dict[int, ClassView], nodes: dict[str, NodeView] | None = None
    ) -> Tallies:
        """``nodes``: the snapshot's, for the cluster of an active job that does not say its own."""
        out = cls()
        # A gang is on each of its ranks' nodes with ``count`` units: preempting it returns that much on each.
        active = list(active)
        for job in active:
            for name in job.placed_on:
                if job.preempting:
                    out.returning_on[job.class_id][name] += job.count
                elif job.borrowed and job.preemptible:
                    out.borrowed_on[job.class_id][name].append(job)
        out.used.update(held_units(active))
        for job in active:
            out._count(job, classes)
            cluster = job.cluster
            if not cluster and nodes and job.placed_on and (node := nodes.get(job.placed_on[0])) is not None:
                cluster = node.cluster
            out.used_on[(job.team, job.class_id, cluster)] += job.total
        return out

    def add(self, job: JobView, classes: dict[int, ClassView]) -> None:
        """Count an active job's units, group and GPUs (decide does this itself for what it admits)."""
        self.used[(job.team, job.class_id)] += job.total
        self.used_on[(job.team, job.class_id, job.cluster)] += job.total
        self._count(job, classes)

    def _count(self, job: JobView, classes: dict[int, ClassView]) -> None:
        """An active job's group and GPUs (its units are counted by the caller)."""
        if job.group is not None:
            self.group_active[job.group] += 1
        cls = classes.get(job.class_id)
        gpus = job.total * (cls.gpu_fraction if cls else 1.0)
        self.held[job.team] += gpus
        self.member_held[(job.team, job.owner)] += gpus

    def note_admitted(self, job: JobView) -> None:
        """An admitted job ran on borrowed capacity: reclaiming may stop it (decide counted the rest)."""
        if job.borrowed and job.preemptible:
            for name in job.placed_on:
                self.borrowed_on[job.class_id][name].append(job)

    def note_preempting(self, job: JobView) -> None:
        """A job is being preempted: its units are on their way back on each of its nodes."""
        for name in job.placed_on:
            self._unborrow(job, name)
            self.returning_on[job.class_id][name] += job.count

    def remove(self, job: JobView, classes: dict[int, ClassView]) -> None:
        """An active job ended or was stopped: take it out of every tally."""
        key = (job.team, job.class_id)
        self.used[key] -= job.total
        self.used_on[(*key, job.cluster)] -= job.total
        if job.group is not None:
            self.group_active[job.group] -= 1
        cls = classes.get(job.class_id)
        gpus = job.total * (cls.gpu_fraction if cls else 1.0)
        held = self.held[job.team] - gpus
        self.held[job.team] = held if abs(held) > 1e-9 else 0.0
        member = self.member_held[(job.team, job.owner)] - gpus
        self.member_held[(job.team, job.owner)] = member if abs(member) > 1e-9 else 0.0
        # Nodes left with nothing borrowed or returning are dropped, as a fresh count (``of``) would not have them:
        # reclaiming looks at every node these name.
        for name in job.placed_on:
            if job.preempting:
                returning = self.returning_on[job.class_id]
                returning[name] -= job.count
                if not returning[name]:
                    del returning[name]
            else:
                self._unborrow(job, name)

    def _unborrow(self, job: JobView, name: str) -> None:
        on = self.borrowed_on[job.class_id]
        jobs = on.get(name)
        if jobs and job in jobs:
            jobs.remove(job)
        if name in on and not on[name]:
            del on[name]

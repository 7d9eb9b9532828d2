"""Fair share among a team's members: inside a team, whose queued work goes first. Pure Python, no Django.

The rule (rule 1 of jobs.scheduling.decide): within one priority level and one team, the member whose *use* for
their weight is lowest goes first, and within one member, the oldest submission. A member's use is the normalised
GPUs their active jobs hold now plus the decayed average of what they held (``Snapshot.member_average``, with the
half-life of the team's share), over the weight a lead gave them (``Snapshot.member_weights``, 1 when not set).
Uses are updated as jobs are admitted within the cycle, so one member's 200-task array takes turns with a
colleague's single job instead of going before it. A job is its ``JobView.owner``'s; a job array's tasks are all
its submitter's.

It only orders: what a team may hold (guarantees, limits, caps, budgets) and where work fits are the gates',
whatever the order. ``Snapshot.member_share`` False: a team's jobs go oldest first, as before the rule.

A job that waits for capacity or for its team's quota while a teammate's job submitted after it went first this
cycle, by this order, is told so (``WaitReason.MEMBER_SHARE``): its owner's use as a multiple of their share (their
weight's part of the weights of the members in play: those with queued work, work running or recent use), and whose
job goes first.
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from jobs.scheduling.snapshot import JobView, Snapshot, Wait
from jobs.scheduling.tallies import Tallies
from vocab.durations import WORDS, duration_text
from vocab.waits import WaitReason

#: A member with neither work queued nor running is in play (counts towards the team's weights) while their decayed
#: use is at least this many GPUs: someone who left months ago does not shrink everyone's share.
IN_PLAY = 0.01
#: The waits a teammate going first can cause: the GPUs or the quota it took would otherwise have been this job's.
PASSED_BY = frozenset({WaitReason.CAPACITY, WaitReason.QUOTA})
#: The outcomes of a job that went first and took, or is first in line for, what frees up.
WENT_FIRST = frozenset({WaitReason.CAPACITY, WaitReason.QUOTA, WaitReason.RECLAIMING})


def _order(job: JobView) -> tuple[float, int]:
    return (job.submitted, job.id)


class MemberQueue:
    """One team's queued jobs of one priority level, member by member. ``pop`` hands out the job that goes next
    (the head of the member with the lowest use for their weight); once it was considered, ``done`` puts that
    member back with their use as it is then."""

    def __init__(self, shares: MemberShares, team: int, jobs: list[JobView]) -> None:
        self.shares, self.team = shares, team
        by_owner: dict[int, list[JobView]] = defaultdict(list)
        for job in jobs:
            by_owner[job.owner].append(job)
        self.queues = {owner: sorted(owned, key=_order) for owner, owned in by_owner.items()}
        self.cursor = dict.fromkeys(self.queues, 0)
        self.heap = [self._entry(owner) for owner in self.queues]
        heapq.heapify(self.heap)

    def _entry(self, owner: int) -> tuple:
        job = self.queues[owner][self.cursor[owner]]
        return (self.shares.key(self.team, owner), job.submitted, job.id, owner)

    def __bool__(self) -> bool:
        return bool(self.heap)

    def head(self) -> JobView:
        """The job that goes next (the queue is not empty)."""
        owner = self.heap[0][3]
        return self.queues[owner][self.cursor[owner]]

    def pop(self) -> JobView:
        owner = heapq.heappop(self.heap)[3]
        return self.queues[owner][self.cursor[owner]]

    def done(self, job: JobView) -> None:
        """``job`` (the last ``pop``) was considered: its owner's next job, if any, takes its place."""
        owner = job.owner
        self.cursor[owner] += 1
        if self.cursor[owner] < len(self.queues[owner]):
            heapq.heappush(self.heap, self._entry(owner))


class MemberShares:
    """The members' uses in one cycle (read from the snapshot and the cycle's tallies, which admission updates)
    and the jobs that went first: what a passed-over job's wait says."""

    def __init__(self, snap: Snapshot, tallies: Tallies) -> None:
        self.snap, self.tallies = snap, tallies
        #: team → the owners in play: queued work, active work or recent use
        self.members: dict[int, set[int]] = defaultdict(set)
        for job in (*snap.queued, *snap.active):
            self.members[job.team].add(job.owner)
        for (team, owner), average in snap.member_average.items():
            if average >= IN_PLAY:
                self.members[team].add(owner)
        #: team → its members' decayed averages and weights, summed (what the team holds now is the tallies')
        self.average_total: dict[int, float] = defaultdict(float)
        self.weight_total: dict[int, float] = defaultdict(float)
        for team, owners in self.members.items():
            for owner in owners:
                self.average_total[team] += snap.member_average.get((team, owner), 0.0)
                self.weight_total[team] += self.weight(team, owner)
        #: (team, class, level) → the latest-submitted jobs that went first, one per owner, the latest two
        self.went: dict[tuple[int, int, int], list[tuple[float, int, int]]] = {}
        self._memo: dict[tuple, tuple[str, dict]] = {}

    def weight(self, team: int, owner: int) -> float:
        return self.snap.member_weights.get((team, owner), 1.0)

    def use(self, team: int, owner: int) -> float:
        """Normalised GPUs held now plus the decayed average held."""
        key = (team, owner)
        return self.tallies.member_held.get(key, 0.0) + self.snap.member_average.get(key, 0.0)

    def key(self, team: int, owner: int) -> float:
        """What orders a team's members: use over weight (0 for everyone when the rule is off)."""
        return self.use(team, owner) / self.weight(team, owner) if self.snap.member_share else 0.0

    def ratio(self, team: int, owner: int) -> float:
        """The member's part of the team's use over their part of the weights (1: exactly their share)."""
        # Every GPU the team holds is one of its members' (Tallies counts both alike).
        total_use = self.tallies.held.get(team, 0.0) + self.average_total.get(team, 0.0)
        total_weight = self.weight_total.get(team, 0.0)
        if total_use <= 0 or total_weight <= 0:
            return 0.0
        return (self.use(team, owner) / total_use) / (self.weight(team, owner) / total_weight)

    def queue(self, team: int, jobs: list[JobView]) -> MemberQueue:
        return MemberQueue(self, team, jobs)

    def passed(self, job: JobView, wait: Wait | None) -> Wait | None:
        """Record how ``job`` fared, and its wait as its owner reads it: ``MEMBER_SHARE`` when a teammate's job
        submitted after it went first by the member order (admitted, or first in line for what frees up)."""
        if not self.snap.member_share:
            return wait
        slot = (job.team, job.class_id, job.priority)
        ahead = None
        if job.owner and self._passable(wait):
            ahead = next((e for e in self.went.get(slot, ()) if e[2] != job.owner and e[:2] > _order(job)), None)
        # Only a member's job passes a member's: a service's replicas above its minimum (views of no one, owner 0,
        # no job row of their own) are the team's, and its fair share among teams already orders them.
        if job.owner and (wait is None or wait.reason in WENT_FIRST):
            self._went(slot, job)
        if ahead is None:
            return wait
        return self.explain(job, wait, ahead[1], ahead[2])

    @staticmethod
    def _passable(wait: Wait | None) -> bool:
        """A wait a teammate going first may have caused: for capacity or quota (with the quota's numbers: not "no
        quota at all"), and not behind a starving job (that is the reason then)."""
        return (
            wait is not None
            and wait.reason in PASSED_BY
            and "requested" in wait.detail
            and "held_for" not in wait.detail
        )

    def _went(self, slot: tuple[int, int, int], job: JobView) -> None:
        """Keep, per slot, the latest job that went first of the two owners with the latest ones (a member's jobs of
        one class come in submission order, so a member's newer entry replaces their older one)."""
        entry = (job.submitted, job.id, job.owner)
        top = self.went.get(slot)
        if top is None:
            self.went[slot] = [entry]
            return
        for i, old in enumerate(top):
            if old[2] == job.owner:
                top[i] = max(old, entry)
                break
        else:
            top.append(entry)
        top.sort(reverse=True)
        del top[2:]

    def name(self, owner: int) -> str:
        return self.snap.user_names.get(owner) or ("the team's services" if not owner else f"user #{owner}")

    def explain(self, job: JobView, wait: Wait, ahead_id: int, ahead_owner: int) -> Wait:
        head, numbers = self._said(job.team, job.owner, ahead_id, ahead_owner)
        detail = wait.detail | {"member_share": numbers, "passed_by": wait.reason.value}
        return Wait(WaitReason.MEMBER_SHARE, f"{head} {wait.message}", detail, wait.position)

    def _said(self, team: int, owner: int, ahead_id: int, ahead_owner: int) -> tuple[str, dict]:
        """The sentence and numbers of one member passed by one job, while the team holds what it holds now (every
        task of an array passed by the same job reads the same)."""
        key = (team, owner, ahead_id, self.tallies.held.get(team, 0.0))
        found = self._memo.get(key)
        if found is not None:
            return found
        snap = self.snap
        ratio, ahead_ratio = self.ratio(team, owner), self.ratio(team, ahead_owner)
        who, other = self.name(owner), self.name(ahead_owner)
        weighted = self.weight(team, owner) != 1.0 or self.weight(team, ahead_owner) != 1.0
        head = (
            f"{who} has used {ratio:.1f}× their {'weighted ' if weighted else ''}share of team "
            f"{snap.team_names.get(team, team)}'s GPUs lately (use counts half after "
            f"{duration_text(snap.half_life, WORDS)}); {other}'s job #{ahead_id} goes first ({other}: "
            f"{ahead_ratio:.1f}×)."
        )
        numbers = {
            "user": who,
            "ratio": round(ratio, 2),
            "weight": self.weight(team, owner),
            "ahead_job": ahead_id,
            "ahead_user": other,
            "ahead_ratio": round(ahead_ratio, 2),
            "half_life_seconds": snap.half_life,
        }
        self._memo[key] = head, numbers
        return head, numbers

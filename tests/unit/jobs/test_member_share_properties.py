"""Fair share among a team's members over random queues (hypothesis), replayed cycle by cycle on the pure core:
no member starves (every job of every member is admitted in a finite replay, whatever the weights), a team never
holds more than its limit nor more than its guarantee outside borrowing, and a colleague's single job is admitted
within one job's runtime of its submission however long another member's array is. Pure Python."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import JobView, QuotaView
from tests.snapshots import H100, A, B, job, node, snapshot

STEP = 60.0  # seconds between cycles
HALF_LIFE = 3600.0
GPUS = 8


@dataclass
class Spec:
    id: int
    team: int
    owner: int
    count: int
    steps: int  # runtime, in cycles
    at: int  # submitted at this cycle
    preemptible: bool = False
    priority: int = 50


class Replay:
    """A queue replayed through ``decide`` on one node of ``GPUS`` H100s: jobs arrive at their cycle, run their
    steps and leave; preempted jobs go back to the queue at once; each member's use decays as the cycle does."""

    def __init__(self, specs: list[Spec], quotas: dict[int, tuple[int, int]], weights: dict) -> None:
        self.specs = {s.id: s for s in specs}
        self.quotas = {(team, H100.id): QuotaView(g, limit) for team, (g, limit) in quotas.items()}
        self.weights = weights
        self.active: dict[int, tuple[JobView, int]] = {}  # id → (view, ends at cycle)
        self.admitted: dict[int, int] = {}  # id → cycle first admitted
        self.done: set[int] = set()
        self.average: dict[tuple[int, int], float] = defaultdict(float)

    def view(self, spec: Spec) -> JobView:
        return job(spec.team, count=spec.count, owner=spec.owner, submitted=spec.at * STEP, id=spec.id,
                   preemptible=spec.preemptible, priority=spec.priority)  # fmt: skip

    def run(self, cycles: int) -> None:
        for cycle in range(cycles):
            for jid, (_, ends) in list(self.active.items()):
                if ends <= cycle:
                    del self.active[jid]
                    self.done.add(jid)
            queued = [
                self.view(s) for s in self.specs.values() if s.at <= cycle and s.id not in self.active
                and s.id not in self.done
            ]  # fmt: skip
            if not queued and len(self.done) == len(self.specs):
                return
            free = GPUS - sum(view.count for view, _ in self.active.values())
            snap = snapshot(
                [node("n1", free=free)], queued, [view for view, _ in self.active.values()], dict(self.quotas),
                now=cycle * STEP,
            )  # fmt: skip
            snap.member_average, snap.member_weights, snap.half_life = dict(self.average), self.weights, HALF_LIFE
            out = decide(snap)
            for victim in out.preempt:  # requeued at once: its units are free next cycle
                del self.active[victim]
            for jid, (name, borrowed) in out.admit.items():
                spec = self.specs[jid]
                self.active[jid] = (replace(self.view(spec), node=name, borrowed=borrowed), cycle + spec.steps)
                self.admitted.setdefault(jid, cycle)
            self.check_quotas()
            keep = 0.5 ** (STEP / HALF_LIFE)
            held: dict[tuple[int, int], float] = defaultdict(float)
            for view, _ in self.active.values():
                held[(view.team, view.owner)] += view.count
            for key in set(self.average) | set(held):
                self.average[key] = self.average[key] * keep + held[key] * (1 - keep)

    def check_quotas(self) -> None:
        held: dict[int, int] = defaultdict(int)
        within: dict[int, int] = defaultdict(int)
        for view, _ in self.active.values():
            held[view.team] += view.count
            if not view.borrowed:
                within[view.team] += view.count
        for (team, _), quota in self.quotas.items():
            assert held[team] <= quota.limit, f"team {team} holds {held[team]} > limit {quota.limit}"
            assert within[team] <= quota.guaranteed, f"team {team} holds {within[team]} unborrowed > guarantee"
        assert sum(held.values()) <= GPUS


@st.composite
def queues(draw):
    guarantees = {A: draw(st.integers(1, 6)), B: draw(st.integers(1, 6))}
    quotas = {team: (g, draw(st.integers(g, GPUS))) for team, g in guarantees.items()}
    owners = {A: list(range(1, draw(st.integers(2, 4)) + 1)), B: [10, 11]}
    specs = []
    for i in range(draw(st.integers(1, 40))):
        team = draw(st.sampled_from([A, A, B]))
        specs.append(
            Spec(
                id=i + 1,
                team=team,
                owner=draw(st.sampled_from(owners[team])),
                count=draw(st.integers(1, guarantees[team])),
                steps=draw(st.integers(1, 6)),
                at=draw(st.integers(0, 20)),
                preemptible=draw(st.booleans()),
                priority=draw(st.sampled_from([50, 50, 50, 90])),
            )
        )
    weights = {
        (team, owner): draw(st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0])) for team in owners for owner in owners[team]
    }
    return specs, quotas, weights


@settings(max_examples=80, deadline=None)
@given(queues())
def test_no_member_starves_and_quotas_hold(case):
    specs, quotas, weights = case
    replay = Replay(specs, quotas, weights)
    # While work is queued something runs, so the whole queue is done within all its runtimes after the last
    # arrival; preemptions give back at most one runtime each time a job is stopped, bounded by the guarantees.
    horizon = max(s.at for s in specs) + 4 * sum(s.steps for s in specs) + 10
    replay.run(horizon)
    assert set(replay.admitted) == set(replay.specs), "some member's job was never admitted"
    assert replay.done == set(replay.specs)


@settings(max_examples=60, deadline=None)
@given(
    array=st.integers(20, 200),
    steps=st.integers(1, 8),
    bob_at=st.integers(0, 30),
    alice_weight=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    gpus=st.integers(1, GPUS),
)
def test_a_colleagues_job_waits_at_most_one_runtime_behind_an_array(array, steps, bob_at, alice_weight, gpus):
    # Alice's array (all submitted first) fills the team's quota of ``gpus``; bob's one job arrives later. Whatever
    # alice's weight, bob (no use yet) goes first as soon as any of her tasks ends: within one runtime.
    alice = [Spec(i + 1, A, owner=1, count=1, steps=steps, at=0) for i in range(array)]
    bobs = Spec(array + 1, A, owner=2, count=1, steps=steps, at=bob_at)
    replay = Replay([*alice, bobs], {A: (gpus, gpus), B: (1, 1)}, {(A, 1): alice_weight})
    replay.run(bob_at + steps + 1)
    assert bobs.id in replay.admitted
    assert replay.admitted[bobs.id] - bob_at <= steps

"""Racing submissions and admission cycles can never admit past a quota limit or a node's capacity.

Many threads, each with its own database connection, submit jobs and run admission cycles at once against a
small quota; after every step each thread checks the invariants on what is committed. The second race mixes
gangs (2–4 workers on distinct nodes) with single jobs and cancels: no gang is ever admitted on fewer nodes than
its workers, twice, or past a node's or a team's units. Runs on PostgreSQL
(CI); the cycles are serialised by the AdmissionLock row, which this test would catch failing."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
from django.db import connection, connections
from django.db.models import Count, Q

from accounts.models import Team
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import ACTIVE_STATES, EventKind, JobKind
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.models import Job, JobEvent

pytestmark = pytest.mark.integration

A100_1G = "nvidia.com/gpu@NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"  # 28 units on one node


def invariants(limits: dict[int, int], allocatable: dict[str, int]) -> tuple[dict[int, int], dict[str, int]]:
    per_team: dict[int, int] = defaultdict(int)
    per_node: dict[str, int] = defaultdict(int)
    held = Job.objects.filter(state__in=ACTIVE_STATES).values_list("team_id", "node_name", "count")
    for team_id, node, count in held:
        per_team[team_id] += count
        per_node[node] += count
    for team_id, used in per_team.items():
        assert used <= limits[team_id], f"team {team_id} holds {used} > limit {limits[team_id]}"
    for node, used in per_node.items():
        assert used <= allocatable[node], f"{node} holds {used} > {allocatable[node]}"
    return per_team, per_node


def test_racing_submissions_and_cycles_never_pass_a_limit(transactional_db, sim_cluster, people):
    if connection.vendor != "postgresql":
        pytest.skip("the race is proven on PostgreSQL (CI runs it there); SQLite serialises all writers anyway")
    sync_inventory(sim_cluster)
    rc = ResourceClass.objects.get(key=A100_1G)
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    actions.set_quota(people["admin"], vision, rc, 3, 5)
    actions.set_quota(people["admin"], nlp, rc, 2, 4)
    limits = {vision.pk: 5, nlp.pk: 4}
    allocatable = {n.name: int(n.allocatable.get(rc.resource_name, 0)) for n in Node.objects.all()}
    users = {vision.pk: people["alice"], nlp.pk: people["bob"]}

    fields = dict(
        name="race", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[], env=[],
        cpu_millicores=500, memory_mb=1024, priority=50, max_runtime_seconds=3600,
    )  # fmt: skip
    errors: list[BaseException] = []
    steps = defaultdict(int)
    max_seen = defaultdict(int)
    start = threading.Barrier(10)

    def submitter(team: Team, seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(12):
                request = {**fields, "count": rng.choice([1, 1, 2]), "preemptible": rng.random() < 0.6}
                actions.submit_job(users[team.pk], team, rc, request)
                steps["submit"] += 1
                per_team, _ = invariants(limits, allocatable)
                for t, used in per_team.items():
                    max_seen[t] = max(max_seen[t], used)
                if rng.random() < 0.2:  # some people cancel, freeing quota mid-race
                    victim = Job.objects.filter(team=team).order_by("?").first()
                    if victim is not None and victim.is_cancellable:
                        try:
                            actions.cancel_job(users[team.pk], victim)
                            steps["cancel"] += 1
                        except Exception as error:  # a job that was cancelled meanwhile is fine
                            if "nothing to cancel" not in str(error):
                                raise
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    def cycler() -> None:
        try:
            start.wait()
            for _ in range(15):
                result = CycleResult()
                admit(result)
                steps["cycle"] += 1
                steps["admitted"] += result.admitted
                per_team, _ = invariants(limits, allocatable)
                for t, used in per_team.items():
                    max_seen[t] = max(max_seen[t], used)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submitter, args=(team, i)) for i, team in enumerate([vision, nlp] * 3)]
    threads += [threading.Thread(target=cycler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors, errors
    per_team, _ = invariants(limits, allocatable)
    # One more cycle after the race fills what the quotas allow: the limits were reachable, not just unreached.
    admit(CycleResult())
    per_team, _ = invariants(limits, allocatable)
    queued = Job.objects.filter(state="queued").count()
    print(
        f"\nrace: {steps['submit']} submissions, {steps['cancel']} cancels, {steps['cycle']} concurrent cycles, "
        f"{steps['admitted']} admitted; max held {dict(max_seen)} vs limits {limits}; {queued} still queued"
    )
    assert steps["submit"] == 72 and steps["cycle"] == 60
    assert per_team[vision.pk] >= 4 and per_team[nlp.pk] >= 3  # limits minus at most one 2-unit job


H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"  # 7 schedulable nodes of 8


def gang_invariants(limits: dict[int, int], allocatable: dict[str, int]) -> dict[int, int]:
    """Every active gang holds exactly W distinct nodes (rank 0 its node), was admitted once per attempt, and no
    node or team holds more than it may."""
    per_team: dict[int, int] = defaultdict(int)
    per_node: dict[str, int] = defaultdict(int)
    active = Job.objects.filter(state__in=ACTIVE_STATES).annotate(
        admissions=Count("events", filter=Q(events__kind=EventKind.ADMITTED))
    )
    for job in active.values("pk", "team_id", "node_name", "node_names", "workers", "count", "attempts", "admissions"):
        nodes = job["node_names"] or [job["node_name"]]
        if job["workers"] > 1:
            assert len(nodes) == job["workers"] == len(set(nodes)), f"gang {job['pk']} on {nodes}"
            assert job["node_name"] == nodes[0]
        assert job["admissions"] == job["attempts"], f"job {job['pk']} admitted {job['admissions']} times"
        per_team[job["team_id"]] += job["workers"] * job["count"]
        for node in nodes:
            per_node[node] += job["count"]
    for team_id, used in per_team.items():
        assert used <= limits[team_id], f"team {team_id} holds {used} > limit {limits[team_id]}"
    for node, used in per_node.items():
        assert used <= allocatable[node], f"{node} holds {used} > {allocatable[node]}"
    for job in Job.objects.exclude(state__in=ACTIVE_STATES).filter(workers__gt=1).values("pk", "state", "node_names"):
        assert job["state"] != "queued" or not job["node_names"], f"queued gang {job['pk']} keeps nodes"
    return per_team


def test_racing_gangs_cycles_and_cancels_never_leave_a_partial_or_double_admission(
    transactional_db, sim_cluster, people
):
    if connection.vendor != "postgresql":
        pytest.skip("the race is proven on PostgreSQL (CI runs it there); SQLite serialises all writers anyway")
    _race_gangs(sim_cluster, people)


def _race_gangs(sim_cluster, people) -> None:
    sync_inventory(sim_cluster)
    rc = ResourceClass.objects.get(key=H100)
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    actions.set_quota(people["admin"], vision, rc, 16, 32)
    actions.set_quota(people["admin"], nlp, rc, 8, 24)
    limits = {vision.pk: 32, nlp.pk: 24}
    allocatable = {n.name: int(n.allocatable.get(rc.resource_name, 0)) for n in Node.objects.all()}
    users = {vision.pk: people["alice"], nlp.pk: people["bob"]}
    fields = dict(
        name="ddp", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["torchrun", "train.py"], args=[], env=[],
        cpu_millicores=2000, memory_mb=8192, priority=50, max_runtime_seconds=3600,
    )  # fmt: skip
    errors: list[BaseException] = []
    steps = defaultdict(int)
    start = threading.Barrier(8)

    def submitter(team: Team, seed: int) -> None:
        rng = random.Random(seed)
        try:
            start.wait()
            for _ in range(10):
                count = rng.choice([2, 4, 8])
                workers = min(rng.choice([1, 2, 2, 3, 4]), limits[team.pk] // count)  # W × G within the limit
                request = {**fields, "count": count, "preemptible": rng.random() < 0.6,
                           "kind": JobKind.DISTRIBUTED, "workers": workers}  # fmt: skip
                actions.submit_job(users[team.pk], team, rc, request)
                steps["submit"] += 1
                gang_invariants(limits, allocatable)
                if rng.random() < 0.35:  # cancel some, admitted ones too: their whole gang goes
                    victim = Job.objects.filter(team=team).exclude(state__in=["cancelled"]).order_by("?").first()
                    if victim is not None and victim.is_cancellable:
                        try:
                            actions.cancel_job(users[team.pk], victim)
                            steps["cancel"] += 1
                        except Exception as error:  # a job that was cancelled or ended meanwhile is fine
                            if "nothing to cancel" not in str(error):
                                raise
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            connections.close_all()

    def cycler() -> None:
        try:
            start.wait()
            for _ in range(12):
                result = CycleResult()
                admit(result)
                steps["cycle"] += 1
                steps["admitted"] += result.admitted
                gang_invariants(limits, allocatable)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submitter, args=(team, i)) for i, team in enumerate([vision, nlp] * 2)]
    threads += [threading.Thread(target=cycler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors, errors
    admit(CycleResult())
    per_team = gang_invariants(limits, allocatable)
    gangs = JobEvent.objects.filter(kind=EventKind.ADMITTED, job__workers__gt=1).count()
    print(
        f"\ngang race: {steps['submit']} submissions, {steps['cancel']} cancels, {steps['cycle']} concurrent cycles, "
        f"{steps['admitted']} admitted, {gangs} of them gangs; held {dict(per_team)} vs limits {limits}"
    )
    assert steps["submit"] == 40 and steps["cycle"] == 48
    assert gangs >= 2  # gangs were admitted, not only single jobs

"""Racing submissions and admission cycles can never admit past a quota limit or a node's capacity.

Many threads, each with its own database connection, submit jobs and run admission cycles at once against a
small quota; after every step each thread checks the invariants on what is committed. Runs on PostgreSQL
(CI); the cycles are serialised by the AdmissionLock row, which this test would catch failing."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pytest
from django.db import connection, connections

from accounts.models import Team
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import services
from jobs.choices import ACTIVE_STATES
from jobs.cycle import CycleResult, admit
from jobs.models import Job

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
    services.set_quota(people["admin"], vision, rc, 3, 5)
    services.set_quota(people["admin"], nlp, rc, 2, 4)
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
                services.submit_job(users[team.pk], team, rc, request)
                steps["submit"] += 1
                per_team, _ = invariants(limits, allocatable)
                for t, used in per_team.items():
                    max_seen[t] = max(max_seen[t], used)
                if rng.random() < 0.2:  # some people cancel, freeing quota mid-race
                    victim = Job.objects.filter(team=team).order_by("?").first()
                    if victim is not None and victim.is_cancellable:
                        try:
                            services.cancel_job(users[team.pk], victim)
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

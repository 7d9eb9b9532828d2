"""planner.history: which jobs a window holds and how each kind of work becomes a PastJob (its kind's demand, its
observed times), in a constant number of queries without model instances; and the cluster as admission sees it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobKind, JobState
from jobs.cycle.admit import build_snapshot
from jobs.demo import A100_1G, DEMO_SERVICE, DEMO_SERVICE_SCALING, H100
from jobs.models import Job, Quota
from jobs.notebook.sessions import launch_notebook
from jobs.service.ops import create_service
from planner import model
from planner.history import current_cluster, window_history
from tests.factories import submit_job

START = datetime(2026, 10, 1, tzinfo=UTC)
END = START + timedelta(days=1)
NOW = START + timedelta(days=3)


def at(hours: float) -> datetime:
    return START + timedelta(hours=hours)


@pytest.fixture
def quotas(inventory, people):
    admin = people["admin"]
    for slug in ("vision", "nlp"):
        team = Team.objects.get(slug=slug)
        actions.set_quota(admin, team, ResourceClass.objects.get(key=H100), 16, 24, 5000)
        actions.set_quota(admin, team, ResourceClass.objects.get(key=A100_1G), 4, 8)
    return people


def submit(user, slug="vision", key=H100, **fields) -> Job:
    return submit_job(user, slug, key, **({"max_runtime_seconds": 7200} | fields))


def timed(job: Job, submitted, started=None, finished=None, state=JobState.SUCCEEDED) -> Job:
    Job.objects.filter(pk=job.pk).update(submitted_at=submitted, started_at=started, finished_at=finished, state=state)
    job.refresh_from_db()
    return job


def by_id(history: model.History) -> dict[int, model.PastJob]:
    return {j.id: j for j in history.jobs}


def test_the_window_holds_what_was_submitted_in_it_and_what_was_queued_or_running_at_its_start(quotas):
    alice = quotas["alice"]
    done_before = timed(submit(alice), at(-5), at(-4), at(-2))
    running_at_start = timed(submit(alice), at(-3), at(-2), at(2))
    queued_at_start = timed(submit(alice), at(-1), None, None, JobState.QUEUED)
    cancelled_after_start = timed(submit(alice), at(-1), None, at(1), JobState.CANCELLED)
    cancelled_before_start = timed(submit(alice), at(-2), None, at(-1), JobState.CANCELLED)
    first = timed(submit(alice), START, at(0.5), at(1.5))
    last = timed(submit(alice), at(23.9), at(24.5), at(25))
    after = timed(submit(alice), END, at(24.1), at(25))
    history = window_history(START, END, now=NOW)
    got = by_id(history)
    assert set(got) == {running_at_start.pk, queued_at_start.pk, cancelled_after_start.pk, first.pk, last.pk}
    assert done_before.pk not in got and cancelled_before_start.pk not in got and after.pk not in got
    assert (history.start, history.end) == (START.timestamp(), END.timestamp())
    # Carried-over work keeps its own times (before the window), so a replay can tell it from the arrivals.
    carried = got[running_at_start.pk]
    assert carried.submitted == at(-3).timestamp() and carried.started == at(-2).timestamp()
    assert carried.run_s == 4 * 3600
    assert [j.id for j in history.jobs] == sorted(got, key=lambda pk: (got[pk].submitted, pk))


def test_work_that_never_ran_counts_its_maximum_runtime_and_has_no_start(quotas):
    alice = quotas["alice"]
    queued = timed(submit(alice, max_runtime_seconds=5400), at(1), None, None, JobState.QUEUED)
    cancelled = timed(submit(alice, max_runtime_seconds=900), at(2), None, at(3), JobState.CANCELLED)
    got = by_id(window_history(START, END, now=NOW))
    assert (got[queued.pk].started, got[queued.pk].run_s) == (None, 5400.0)
    assert (got[cancelled.pk].started, got[cancelled.pk].run_s) == (None, 900.0)


def test_running_work_is_cut_at_the_windows_end_and_at_now(quotas):
    alice = quotas["alice"]
    past_end = timed(submit(alice), at(20), at(22), at(30))
    still_running = timed(submit(alice), at(20), at(23), None, JobState.RUNNING)
    finished = timed(submit(alice), at(1), at(2), at(3.25))
    got = by_id(window_history(START, END, now=NOW))
    assert got[past_end.pk].run_s == 2 * 3600 and got[past_end.pk].started == at(22).timestamp()
    assert got[still_running.pk].run_s == 3600
    assert got[finished.pk].run_s == 1.25 * 3600
    # A window reaching past now: what still runs is observed until now.
    later = by_id(window_history(START, NOW + timedelta(days=1), now=at(23.5)))
    assert later[still_running.pk].run_s == 1800


def test_work_that_started_only_after_the_window_has_no_start_but_its_observed_length(quotas):
    job = timed(submit(quotas["alice"], max_runtime_seconds=7200), at(23), at(26), at(26.5))
    got = by_id(window_history(START, END, now=NOW))[job.pk]
    assert got.started is None and got.run_s == 1800


def test_each_kind_becomes_what_its_kind_demands(quotas, settings):
    alice, bob = quotas["alice"], quotas["bob"]
    batch = submit(alice, count=2, cpu_millicores=6000, memory_mb=20000, priority=100, preemptible=True,
                   architecture="amd64", image="nvcr.io/nvidia/pytorch:23.08-py3")  # fmt: skip
    gang = submit(alice, name="ddp", kind=JobKind.DISTRIBUTED, workers=3, count=4, cpu_millicores=8000,
                  memory_mb=65536, topology_key="topology.kubernetes.io/zone", topology_mode="prefer")  # fmt: skip
    team, rc = Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100)
    array = actions.submit_array(alice, team, rc, {
        "name": "sweep", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "1"], "args": [],
        "env": [], "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "priority": 50, "preemptible": True,
        "max_runtime_seconds": 600}, size=3, parallelism=2).array  # fmt: skip
    session = launch_notebook(alice, team, ResourceClass.objects.get(key=A100_1G), {
        "name": "lab", "count": 1, "cpu_millicores": 4000, "memory_mb": 16384})  # fmt: skip
    service = create_service(bob, Team.objects.get(slug="nlp"), rc, DEMO_SERVICE,
                             DEMO_SERVICE_SCALING | {"min_replicas": 2, "max_replicas": 4})  # fmt: skip
    Job.objects.update(submitted_at=at(1))
    got = by_id(window_history(START, END, now=NOW))
    assert len(got) == 1 + 1 + 3 + 1 + 1
    b = got[batch.pk]
    assert (b.kind, b.count, b.workers, b.cpu_m, b.memory_mb, b.priority, b.preemptible) == (
        "batch", 2, 1, 6000, 20000, 100, True)  # fmt: skip
    assert (b.architecture, b.cuda, b.class_id, b.team, b.group) == ("amd64", (12, 2), rc.pk, team.pk, None)
    g = got[gang.pk]
    assert (g.kind, g.workers, g.count, g.cpu_m, g.memory_mb) == ("distributed", 3, 4, 8000, 65536)
    assert (g.topology_key, g.topology_mode) == ("topology.kubernetes.io/zone", "prefer")
    tasks = [j for j in got.values() if j.group == array.pk]
    assert len(tasks) == 3 and all(t.count == 1 and t.preemptible for t in tasks)
    n = got[session.notebook.session_id]
    assert (n.kind, n.count, n.workers, n.class_id) == ("notebook", 1, 1, ResourceClass.objects.get(key=A100_1G).pk)
    s = got[service.job_id]
    assert (s.kind, s.count, s.workers, s.team) == ("service", 1, 2, Team.objects.get(slug="nlp").pk)
    assert not s.pool  # no node carries the service pool's label in the demo cluster
    assert window_history(START, END, now=NOW).group_caps == {array.pk: 2}


def test_the_window_is_read_in_a_constant_number_of_queries_without_model_instances(quotas, monkeypatch):
    alice = quotas["alice"]
    team, rc = Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100)
    built: list[int] = []
    from_db = Job.from_db.__func__

    def counting(cls, db, field_names, values):
        built.append(1)
        return from_db(cls, db, field_names, values)

    def add(n: int) -> None:
        for i in range(n):
            timed(submit(alice, name=f"j{i}"), at(1 + i / 100), at(2), at(3))
        actions.submit_array(alice, team, rc, {
            "name": "sweep", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "1"], "args": [],
            "env": [], "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "priority": 50, "preemptible": True,
            "max_runtime_seconds": 600}, size=n, parallelism=2)  # fmt: skip
        Job.objects.filter(array__isnull=False).update(submitted_at=at(4))

    def read() -> tuple[int, int]:
        built.clear()
        with CaptureQueriesContext(connection) as queries:
            history = window_history(START, END, now=NOW)
        assert built == []  # plain rows, no Job instances
        return len(history.jobs), len(queries)

    monkeypatch.setattr(Job, "from_db", classmethod(counting))
    add(3)
    few, few_queries = read()
    add(12)
    many, many_queries = read()
    assert (few, many) == (6, 6 + 24)
    # The cluster names, where the team's presence is in step, its volumes and credentials (Reach), the rows.
    assert few_queries == many_queries <= 7


def test_work_of_a_kind_no_longer_installed_is_left_out(quotas, caplog):
    alice = quotas["alice"]
    kept, gone = timed(submit(alice), at(1), at(2), at(3)), timed(submit(alice), at(1), at(2), at(3))
    Job.objects.filter(pk=gone.pk).update(kind="retired")
    got = by_id(window_history(START, END, now=NOW))
    assert set(got) == {kept.pk}
    assert "kinds no longer registered: {'retired': 1}" in caplog.text


def test_a_window_must_start_before_it_ends(db):
    with pytest.raises(ValueError, match="must start before it ends"):
        window_history(END, START)


def test_the_current_cluster_is_what_admission_sees_with_every_unit_free_of_the_portals_work(quotas, settings):
    settings.PORTAL_BACKFILL_PATIENCE = 321.0
    alice = quotas["alice"]
    submit(alice, count=8)
    now = datetime.now(UTC)
    Job.objects.update(state=JobState.RUNNING, node_name="gpu-h100-01", started_at=now - timedelta(minutes=30))
    snapshot, _ = build_snapshot(now)
    cluster = current_cluster()
    assert set(cluster.nodes) == set(snapshot.nodes)
    assert cluster.classes == snapshot.classes
    # The running job holds 8 GPUs of gpu-h100-01 in the cycle's view; the planner's replay places work itself.
    h100 = ResourceClass.objects.get(key=H100)
    assert snapshot.nodes["gpu-h100-01"].free[h100.resource_name] == 0
    assert cluster.nodes["gpu-h100-01"].free[h100.resource_name] == 8
    for name, node in cluster.nodes.items():
        seen = snapshot.nodes[name]
        assert (node.allocatable, node.schedulable, node.cuda, node.product_label) == (
            seen.allocatable, seen.schedulable, seen.cuda, seen.product_label)  # fmt: skip
    assert not cluster.nodes["gpu-h100-08"].schedulable  # cordoned
    # Quotas as admission reads them, with no month's use: the replay counts its own.
    assert set(cluster.quotas) == set(snapshot.quotas)
    vision = Team.objects.get(slug="vision")
    quota = cluster.quotas[(vision.pk, h100.pk)]
    assert (quota.guaranteed, quota.limit, quota.budget_hours, quota.used_hours) == (16, 24, 5000.0, 0.0)
    assert snapshot.quotas[(vision.pk, h100.pk)].used_hours > 0  # the cycle counts this month's use
    assert Quota.objects.count() == len(cluster.quotas)
    assert cluster.team_names == {t.pk: t.name for t in Team.objects.all()}
    assert cluster.patience == 321.0
    mig = cluster.shapes["gpu-a100-mig-01"]
    assert (mig.product, mig.gpu_count, mig.mig_capable, mig.mig_strategy) == (
        "NVIDIA-A100-SXM4-80GB",
        8,
        True,
        "mixed",
    )
    # The device plugin's MIG strategy as the inventory read it (a MIG change is advertised the way carving would).
    assert cluster.shapes["gpu-a100-40g-01"].mig_strategy == "single"
    assert cluster.shapes["gpu-h100-01"] == model.NodeShape("gpu-h100-01", "NVIDIA-H100-80GB-HBM3", 8, True, "single")
    assert cluster.shapes["gpu-a10-01"] == model.NodeShape("gpu-a10-01", "NVIDIA-A10", 4, False, "none")
    assert set(cluster.shapes) == set(cluster.nodes)

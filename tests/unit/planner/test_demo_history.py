"""The demo's month of history: plausible finished work that never runs more than a node advertises or a team's
quota allows, seeded and idempotent, and invisible to the live demo's admission."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from django.core.management import call_command
from django.db.models import Avg, F
from django.test import TestCase
from django.utils import timezone

from accounts.demo import seed_people
from accounts.models import Team
from cluster import get_backend
from cluster.sim import SimulatedCluster
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs.choices import TERMINAL_STATES, EventKind, JobKind, JobState
from jobs.cycle.admit import build_snapshot
from jobs.demo import H100, seed_quotas_and_jobs
from jobs.models import Job, JobArray, JobEvent, Notebook, Quota
from jobs.scheduling.decide import decide
from jobs.usage import month_gpu_hours, team_usage_rows
from planner import demo_history, demo_synth, engine
from planner.history import current_cluster, window_history
from telemetry.choices import RollupPeriod
from telemetry.models import GpuRollup
from tests.sim_objects import DEMO_SCENARIO


@pytest.fixture
def demo(inventory, tmp_path):
    """The demo as `make demo` seeds it, up to its history: people, quotas and the live jobs."""
    seed_people(tmp_path / "creds.txt")
    seed_quotas_and_jobs()
    return inventory


def history_rows(seeded):
    return Job.objects.exclude(id__in=seeded["live"])


def decision_of(now) -> tuple:
    """What admission decides at ``now``: its admissions, ranks, preemptions and each wait's reason and message."""
    decision = decide(build_snapshot(now)[0])
    waits = {k: (w.reason, w.message) for k, w in decision.wait.items()}
    return decision.admit, decision.ranks, decision.preempt, waits


def live_jobs(ids) -> dict:
    return {j.pk: (j.state, j.queue_position, j.node_name) for j in Job.objects.filter(pk__in=ids)}


def quota_rows() -> list:
    return list(
        Quota.objects.order_by("pk").values_list(
            "team_id", "resource_class_id", "guaranteed", "limit", "monthly_gpu_hours"
        )
    )


def test_a_portal_with_a_past_of_its_own_gets_no_history(demo):
    now = timezone.now()
    Job.objects.filter(pk=Job.objects.order_by("pk").first().pk).update(submitted_at=now - timedelta(days=2))
    jobs = Job.objects.count()
    assert demo_history.seed_history(now) == 0
    assert Job.objects.count() == jobs


def test_the_synthesis_is_seeded(demo):
    cluster = current_cluster()
    start, end = demo_history.window(datetime(2026, 11, 24, 8, tzinfo=UTC))
    one = demo_synth.synthesise(cluster, start.timestamp(), end.timestamp(), 7, {})
    again = demo_synth.synthesise(cluster, start.timestamp(), end.timestamp(), 7, {})
    other = demo_synth.synthesise(cluster, start.timestamp(), end.timestamp(), 8, {})
    assert one == again and one.jobs != other.jobs
    assert not [j for j in one.jobs if j.kind == JobKind.NOTEBOOK]  # no notebook policies given: no sessions


@pytest.fixture
def own_backend():
    """The cluster backend is built once per process: the test builds its own on the state file it sets, and leaves
    none behind, so the seed's pods cannot reach a later test's cluster through a shared state file."""
    get_backend.cache_clear()
    yield
    get_backend.cache_clear()


@pytest.mark.django_db
def test_seed_demo_writes_the_history_once_and_the_first_cycle_still_runs(settings, tmp_path, own_backend):
    settings.DATA_DIR = tmp_path
    settings.PORTAL_SIM_STATE = tmp_path / "sim.json"
    first, second = StringIO(), StringIO()
    call_command("seed_demo", stdout=first)
    made = Job.objects.filter(labels__source="demo-history").count()
    assert f"Demo history: {made} finished jobs over the last 30 days" in first.getvalue() and made > 1500
    assert "first job cycle admitted" in first.getvalue()
    # The live demo is there too: its jobs were seeded first (they look for a portal without jobs).
    assert Job.objects.filter(name="resnet50-train", state=JobState.ADMITTED).exists()
    call_command("seed_demo", stdout=second)
    assert "Demo history" not in second.getvalue()
    assert Job.objects.filter(labels__source="demo-history").count() == made


@pytest.mark.xdist_group("demo-month")  # one worker runs them all, so the month is seeded once, not once a worker
class TestTheSeededMonth(TestCase):
    """The month seeded once for the tests that only read it (Django's setUpTestData: seeding takes a while, and
    each test's changes are rolled back to the seeded state)."""

    @classmethod
    def setUpTestData(cls):
        cls.state_dir = TemporaryDirectory()
        sync_inventory(SimulatedCluster(Path(cls.state_dir.name) / "sim.json", scenario=DEMO_SCENARIO))
        seed_people(Path(cls.state_dir.name) / "creds.txt")
        seed_quotas_and_jobs()
        now = timezone.now()
        live = set(Job.objects.values_list("id", flat=True))
        # The live demo as it was before its history, for test_the_history_leaves_the_live_demo_as_it_was.
        cls.before = {
            "decision": decision_of(now),
            "jobs": live_jobs(live),
            "quotas": quota_rows(),
        }
        made = demo_history.seed_history(now)
        start, end = demo_history.window(now)
        cls.seeded = {"now": now, "start": start, "end": end, "made": made, "live": live}

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.state_dir.cleanup()

    def test_the_history_is_a_month_of_finished_work_of_every_kind_with_timelines(self):
        seeded = self.seeded
        rows = list(history_rows(seeded).select_related("team"))
        assert len(rows) == seeded["made"] > 1500
        assert all(j.state in TERMINAL_STATES and j.labels == demo_history.LABEL for j in rows)
        assert all(seeded["start"] <= j.submitted_at < j.admitted_at < j.started_at <= j.finished_at <= seeded["end"]
                   for j in rows)  # fmt: skip
        kinds = {j.kind for j in rows}
        assert kinds == {JobKind.BATCH, JobKind.DISTRIBUTED, JobKind.NOTEBOOK}
        assert any(j.array_id for j in rows)
        states = {j.state for j in rows}
        assert {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED} <= states
        assert {j.team.slug for j in rows} == {"vision", "nlp", "platform"}
        assert all(j.workload_name == f"gpj-{j.pk}-{j.name}" and j.pod_name.startswith(j.workload_name) for j in rows)
        # Each timeline: submitted first, how it ended last, and a line for each step between.
        events = defaultdict(list)
        for job_id, kind, at in JobEvent.objects.filter(job__in=rows).values_list("job_id", "kind", "at"):
            events[job_id].append((at, kind))
        ending = {JobState.SUCCEEDED: {EventKind.SUCCEEDED}, JobState.FAILED: {EventKind.FAILED},
                  JobState.CANCELLED: {EventKind.CANCELLED, EventKind.STOPPED}}  # fmt: skip
        waited = 0
        for job in rows:
            timeline = [kind for _, kind in sorted(events[job.pk])]
            assert timeline[0] == EventKind.SUBMITTED and timeline[-1] in ending[job.state]
            assert timeline[-3:-1] == [EventKind.ADMITTED, EventKind.STARTED]
            waited += EventKind.WAITING in timeline
        # Some work waited (a team's afternoon above its guarantee), most did not.
        assert 0.02 * len(rows) < waited < 0.5 * len(rows)
        # A working day and a working week: weekday afternoons see far more submissions than nights and weekends.
        busy = sum(1 for j in rows if j.submitted_at.weekday() < 5 and 11 <= j.submitted_at.hour < 17)
        quiet = sum(1 for j in rows if j.submitted_at.weekday() < 5 and j.submitted_at.hour < 6)
        assert busy > 2 * quiet

    def test_the_history_never_runs_more_than_a_node_has_or_a_quota_allows(self):
        seeded = self.seeded
        rows = list(history_rows(seeded).select_related("resource_class"))
        allocatable = {n.name: n.allocatable for n in Node.objects.all()}
        quotas = {(q.team_id, q.resource_class_id): q for q in Quota.objects.all()}
        steps: dict[tuple, list] = defaultdict(list)
        for job in rows:
            resource = job.resource_class.resource_name
            for node in job.node_names or [job.node_name]:
                steps[("node", node, resource)] += [(job.admitted_at, job.count), (job.finished_at, -job.count)]
            total = job.count * job.workers
            steps[("team", job.team_id, job.resource_class_id)] += [(job.admitted_at, total), (job.finished_at, -total)]
            if not job.preemptible:
                key = ("guaranteed", job.team_id, job.resource_class_id)
                steps[key] += [(job.admitted_at, total), (job.finished_at, -total)]
            if job.array_id:
                steps[("array", job.array_id)] += [(job.admitted_at, 1), (job.finished_at, -1)]
            if job.notebook_id:
                steps[("notebook", job.notebook_id)] += [(job.admitted_at, 1), (job.finished_at, -1)]
        parallelism = dict(JobArray.objects.values_list("id", "parallelism"))
        for key, changes in steps.items():
            peak = level = 0
            for _, delta in sorted(changes, key=lambda c: (c[0], c[1])):  # ends before starts at the same moment
                level += delta
                peak = max(peak, level)
            if key[0] == "node":
                assert peak <= int(allocatable[key[1]][key[2]]), key
            elif key[0] == "team":
                assert peak <= quotas[key[1:]].limit, key
            elif key[0] == "guaranteed":
                assert peak <= quotas[key[1:]].guaranteed, key
            elif key[0] == "array":
                assert peak <= (parallelism[key[1]] or 10**6), key
            else:
                assert peak == 1, key  # one session of a notebook at a time
        gangs = [j for j in rows if j.kind == JobKind.DISTRIBUTED]
        assert gangs and all(len(set(j.node_names)) == j.workers > 1 for j in gangs)
        # Work is only on nodes that take work now (the cordoned H100 node got none).
        assert not [j for j in rows if "gpu-h100-08" in (j.node_names or [j.node_name])]

    def test_the_history_leaves_the_live_demo_as_it_was(self):
        seeded, before = self.seeded, self.before
        assert seeded["made"] > 0
        # Admission decides as it did before the history was written: the same admissions, ranks, preemptions
        # and reasons to wait.
        assert decision_of(seeded["now"]) == before["decision"]
        assert live_jobs(seeded["live"]) == before["jobs"]
        assert quota_rows() == before["quotas"]
        # The budgeted class keeps most of its month for the live demo.
        vision, h100 = Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100)
        used = month_gpu_hours([vision.pk], seeded["now"]).get((vision.pk, h100.pk), 0.0)
        budget = float(Quota.objects.get(team=vision, resource_class=h100).monthly_gpu_hours)
        assert used <= demo_synth.BUDGET_SHARE * budget

    def test_seeding_twice_adds_nothing(self):
        seeded = self.seeded
        counts = (Job.objects.count(), JobEvent.objects.count(), JobArray.objects.count(), Notebook.objects.count())
        assert demo_history.seed_history(seeded["now"]) == 0
        assert demo_history.seed_history(timezone.now()) == 0
        assert (
            Job.objects.count(),
            JobEvent.objects.count(),
            JobArray.objects.count(),
            Notebook.objects.count(),
        ) == counts

    def test_the_planner_reads_the_demo_history_back(self):
        seeded = self.seeded
        history = window_history(seeded["start"], seeded["end"], now=seeded["now"])
        assert len(history.jobs) == seeded["made"]
        assert all(j.started is not None and j.run_s >= 0 for j in history.jobs)
        gangs = [j for j in history.jobs if j.kind == JobKind.DISTRIBUTED]
        assert gangs and all(j.workers > 1 for j in gangs)
        assert history.group_caps and set(history.group_caps) <= set(JobArray.objects.values_list("id", flat=True))

    def test_the_planner_replays_the_demo_month_and_compares_it_with_what_happened(self):
        seeded = self.seeded
        history = window_history(seeded["start"], seeded["end"], now=seeded["now"])
        result = engine.run_plan(history, current_cluster(), [])
        baseline = result["scenarios"][0]["totals"]
        assert baseline["jobs"] == seeded["made"] and baseline["never_ran"] == 0
        fidelity = result["fidelity"]
        assert fidelity["jobs_compared"] == seeded["made"]
        # Two different rules (the demo's strict submission order, admission's backfill and fair share) on the same
        # work: the same GPUs held over the month, waits that differ.
        assert abs(fidelity["allocation_mean_diff"]) < 0.02
        assert fidelity["observed"]["wait_p95_s"] > 0 and fidelity["baseline"]["wait_p95_s"] > 0

    def test_the_history_has_utilisation_so_the_showback_reads_a_plausible_efficiency(self):
        """ux-walk-2: the demo's showback said "1450.2 GPU-hours allocated, 4.0 used (0%)" because the history had no
        utilisation. Each history job now has 5-minute and hourly rollups over its run, as the rollup task writes them
        from a GPU's readings."""
        seeded = self.seeded
        end = seeded["end"]
        for team in Team.objects.filter(slug__in=["vision", "nlp", "platform"]):
            rows = team_usage_rows(team, (end - timedelta(days=13)).date(), end.date(), seeded["now"])
            allocated, used = sum(r["allocated"] for r in rows), sum(r["used"] for r in rows)
            assert allocated > 0, team.slug
            assert 0.3 < used / allocated < 0.9, (team.slug, allocated, used)
        history = history_rows(seeded)
        rollups = GpuRollup.objects.filter(job_id__in=history.values("id"))
        assert set(rollups.values_list("period", flat=True)) == {RollupPeriod.FIVE_MINUTES, RollupPeriod.HOUR}
        # On the demo cluster's nodes, so its node charts and the fleet's overview show them.
        assert set(rollups.values_list("cluster__name", flat=True)) == {"default"}
        assert set(rollups.values_list("job_id", flat=True).distinct()) == set(
            history.filter(finished_at__gt=F("started_at")).values_list("id", flat=True)
        ), "every job that ran has readings"
        assert all(0 <= u <= 100 for u in rollups.values_list("util_avg", flat=True))
        notebooks = rollups.filter(job_id__in=history.filter(kind=JobKind.NOTEBOOK).values("id"))
        trainings = rollups.filter(job_id__in=history.filter(kind=JobKind.DISTRIBUTED).values("id"))
        assert notebooks.aggregate(u=Avg("util_avg"))["u"] < trainings.aggregate(u=Avg("util_avg"))["u"]

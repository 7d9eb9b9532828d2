"""planner.tasks.run_plan on a real (small) history and the real engine: queued → running → succeeded with the
results kept, cancelled when asked while it runs, failed with a sentence on an error; progress and the cancel check
are throttled (one UPDATE of two fields, one read)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from planner import tasks
from planner.choices import PlanState
from planner.models import PlanRun


@pytest.fixture
def queued(people, history_jobs):
    def make(proposals=(), **options):
        now = timezone.now()
        return PlanRun.objects.create(
            created_by=people["admin"],
            window_start=now - timedelta(hours=8),
            window_end=now,
            proposals=list(proposals),
            options={"preemption": True, "borrowing": True, "suggest": 0, **options},
        )

    return make


SHARE = {"name": "Share H100", "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 2}]}


def test_a_run_replays_and_keeps_its_results(queued):
    run = queued([SHARE])
    assert tasks.run_plan(run.pk) == PlanState.SUCCEEDED
    run.refresh_from_db()
    assert run.state == PlanState.SUCCEEDED and run.progress == 1.0 and run.error == ""
    assert run.started_at and run.finished_at and run.started_at <= run.finished_at
    names = [s["name"] for s in run.results["scenarios"]]
    assert names == ["baseline", "Share H100"]
    assert run.results["window"]["jobs"] == 8
    assert run.results["scenarios"][0]["totals"]["jobs"] == 8
    assert run.results["fidelity"]["jobs_compared"] > 0 and run.results["fidelity"]["sentence"]


def test_a_run_no_longer_queued_is_left_alone(queued):
    run = queued()
    PlanRun.objects.filter(pk=run.pk).update(state=PlanState.CANCELLED)
    assert tasks.run_plan(run.pk) == "not queued"
    run.refresh_from_db()
    assert run.state == PlanState.CANCELLED and run.results is None


def test_cancel_while_it_runs_ends_it_cancelled(queued, monkeypatch):
    run = queued([SHARE])
    real = tasks.history.window_history

    def read_then_cancel(start, end):
        past = real(start, end)
        PlanRun.objects.filter(pk=run.pk).update(cancel_requested=True)  # an admin presses Cancel meanwhile
        return past

    monkeypatch.setattr(tasks.history, "window_history", read_then_cancel)
    assert tasks.run_plan(run.pk) == PlanState.CANCELLED
    run.refresh_from_db()
    assert run.state == PlanState.CANCELLED and run.results is None and run.finished_at


def test_an_error_fails_the_run_with_a_sentence(queued, monkeypatch, caplog):
    run = queued()

    def broken():
        raise RuntimeError("inventory unreadable")

    monkeypatch.setattr(tasks.history, "current_cluster", broken)
    assert tasks.run_plan(run.pk) == PlanState.FAILED
    run.refresh_from_db()
    assert run.state == PlanState.FAILED and "RuntimeError: inventory unreadable" in run.error
    assert "plan run" in caplog.text


def test_proposals_that_no_longer_fit_fail_with_their_problems(queued):
    run = queued([{"name": "Gone", "changes": [{"type": "remove_nodes", "nodes": ["gpu-was-here"]}]}])
    assert tasks.run_plan(run.pk) == PlanState.FAILED
    run.refresh_from_db()
    assert run.error.startswith("The proposals no longer fit the cluster") and "gpu-was-here" in run.error


def test_progress_and_cancel_checks_are_throttled(queued):
    run = queued()
    PlanRun.objects.filter(pk=run.pk).update(state=PlanState.RUNNING)
    clock = [100.0]
    hooks = tasks._Throttled(run.pk, clock=lambda: clock[0])
    with CaptureQueriesContext(connection) as queries:
        for i in range(10):
            hooks.progress(i / 10, f"step {i}")
            hooks.cancelled()
            clock[0] += 0.05
    assert len(queries) == 2  # one UPDATE and one read in the first second
    update = next(q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE"))
    assert update.count("=") >= 2 and '"progress"' in update and '"message"' in update and "results" not in update
    clock[0] += 1.0
    PlanRun.objects.filter(pk=run.pk).update(cancel_requested=True)
    hooks.progress(0.9, "nearly")
    assert hooks.cancelled() is True
    run.refresh_from_db()
    assert (run.progress, run.message) == (0.9, "nearly")


def test_stale_runs_fail_with_a_reason_and_live_ones_are_left(make_run, settings):
    now = timezone.now()
    lost = make_run(state=PlanState.RUNNING, results=None, started_at=now - timedelta(hours=1))
    busy = make_run(state=PlanState.RUNNING, results=None, started_at=now - timedelta(minutes=5))
    forgotten = make_run(state=PlanState.QUEUED, results=None)
    PlanRun.objects.filter(pk=forgotten.pk).update(created_at=now - timedelta(hours=2))
    fresh = make_run(state=PlanState.QUEUED, results=None)
    assert tasks.fail_stale_runs() == 2
    states = dict(PlanRun.objects.values_list("pk", "state"))
    assert states[lost.pk] == states[forgotten.pk] == PlanState.FAILED
    assert states[busy.pk] == PlanState.RUNNING and states[fresh.pk] == PlanState.QUEUED
    assert "stopped" in PlanRun.objects.get(pk=lost.pk).error
    assert "No worker started this run" in PlanRun.objects.get(pk=forgotten.pk).error
    assert settings.CELERY_BEAT_SCHEDULE["planner-stale-runs"]["task"] == "planner.tasks.fail_stale_runs"


def test_a_broker_that_does_not_answer_fails_the_new_run(
    people, inventory, monkeypatch, django_capture_on_commit_callbacks
):
    from planner import runs, validation

    def down(*args, **kwargs):
        raise OSError("connection refused")

    monkeypatch.setattr("planner.runs.current_app.send_task", down)
    with django_capture_on_commit_callbacks(execute=True):
        run = runs.create_run(people["admin"], validation.validate_request({"days": 1}))
    run.refresh_from_db()
    assert run.state == PlanState.FAILED and "could not hand the run to a worker" in run.error

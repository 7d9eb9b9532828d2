"""Notebooks end to end on the simulated cluster, with the clock moved by time-machine (the simulated cluster
reads time.time, so the portal and the cluster move together): launch, the warning, extend, the maximum age,
idleness by GPU and kernels, stop and start again on the same volume, and the culler's one-stop guarantees."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.core.exceptions import ValidationError
from django.test import override_settings

from accounts.models import Team
from cluster.sim import SimulatedCluster
from core.models import AuditEvent, Notification
from gpus.models import Cluster, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobKind, JobState, NotebookState, StopReason
from jobs.cycle.run import run_cycle
from jobs.models import Job, Notebook, NotebookPolicy
from jobs.notebook import culling
from jobs.notebook.sessions import (
    check_token,
    cull_notebooks,
    extend_notebook,
    launch_notebook,
    start_notebook,
    stop_notebook,
)
from telemetry.models import GpuSample
from tests.sim_objects import DEMO_SCENARIO, H100

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


@pytest.fixture
def travel():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


@pytest.fixture
def sim(db, tmp_path, travel, people, settings):
    settings.PORTAL_NOTEBOOK_WARNING_SECONDS = 15 * 60
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 3600
    settings.PORTAL_DCGM_SCRAPE_INTERVAL = 30
    cluster = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    team = Team.objects.get(slug="vision")
    actions.set_quota(people["admin"], team, ResourceClass.objects.get(key=H100), 1, 1)
    NotebookPolicy.objects.create(
        team=team, ttl_seconds=2 * 3600, max_ttl_seconds=3 * 3600, idle_timeout_seconds=1800,
        max_idle_timeout_seconds=3600,
    )  # fmt: skip
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    return cluster


def launch(user, name="scratch", **fields):
    values = {"name": name, "count": 1, "cpu_millicores": 2000, "memory_mb": 8192} | fields
    return launch_notebook(user, Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100), values)


def settle(cluster, travel, seconds=0):
    travel.shift(seconds)
    run_cycle(cluster)
    travel.shift(6)
    run_cycle(cluster)


def samples(job, start, end, util):
    """One reading every 30 s from start to end (inclusive) at ``util`` percent."""
    rows, at = [], start
    while at <= end:
        rows.append(
            GpuSample(ts=at, node_name=job.node_name, gpu_uuid="GPU-x", job_id=job.pk, util_pct=util, source="dcgm")
        )
        at += timedelta(seconds=30)
    GpuSample.objects.bulk_create(rows)


def test_launch_runs_on_its_volume_behind_a_service_without_the_token_in_the_manifest(sim, travel, people):
    session = launch(people["alice"])
    nb = session.notebook
    assert check_token(nb.token_hash, session.token) and session.token not in nb.token_hash
    settle(sim, travel)
    nb.refresh_from_db()
    job = nb.session
    assert job.kind == JobKind.NOTEBOOK and job.state == JobState.RUNNING
    claim = sim.get_pvc("team-vision", nb.volume_name)
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    service = sim.get_service("team-vision", nb.resource_name)
    assert service["spec"]["clusterIP"].startswith("10.96.")
    assert nb.url == f"https://{nb.resource_name}.team-vision.notebooks.example.org/"
    # In a fleet, the template names the cluster whose ingress serves the notebook's host.
    with override_settings(PORTAL_NOTEBOOK_URL_TEMPLATE="https://{name}.{namespace}.{cluster}.nb.example.org/"):
        assert nb.url == f"https://{nb.resource_name}.team-vision.default.nb.example.org/"
        nb.cluster = Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="cloud")
        assert nb.url == f"https://{nb.resource_name}.team-vision.cloud.nb.example.org/"
        nb.cluster = None
    [workload] = sim.list_workloads("team-vision")
    pod = workload["spec"]["template"]["spec"]
    assert "activeDeadlineSeconds" in workload["spec"]
    assert pod["volumes"][0] == {"name": "home", "persistentVolumeClaim": {"claimName": nb.volume_name}}
    assert [v["name"] for v in pod["volumes"]] == ["home", "dshm", "scratch"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["hostNetwork"] is False
    container = pod["containers"][0]
    assert container["securityContext"]["privileged"] is False
    assert f"--PasswordIdentityProvider.hashed_password={nb.token_hash}" in container["args"]
    assert session.token not in str(workload)
    assert service["spec"]["selector"].items() <= workload["spec"]["template"]["metadata"]["labels"].items()
    assert AuditEvent.objects.filter(action="notebook.launch", object_id=str(nb.pk)).exists()


def test_ttl_warns_once_extends_to_the_maximum_and_stops_then_starts_again_on_the_same_volume(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    assert nb.expires_at == nb.running_since + timedelta(hours=2)
    travel.move_to(nb.expires_at - 16 * MIN)
    assert cull_notebooks(sim)["warned"] == 0
    travel.move_to(nb.expires_at - 15 * MIN)
    assert cull_notebooks(sim)["warned"] == 1
    assert cull_notebooks(sim)["warned"] == 0  # once per deadline
    assert len(mail.outbox) == 1 and "maximum age" in mail.outbox[0].subject
    assert Notification.objects.filter(user=people["alice"], kind="notebook.limit").count() == 1
    nb = extend_notebook(people["alice"], nb)
    assert nb.expires_at == nb.running_since + timedelta(hours=3) and nb.ttl_warned_at is None
    with pytest.raises(ValidationError, match="maximum age of 3 hours"):
        extend_notebook(people["alice"], nb)
    assert AuditEvent.objects.filter(action="notebook.extend").count() == 1
    travel.move_to(nb.expires_at - MIN)
    assert cull_notebooks(sim) | {} == {"checked": 1, "warned": 1, "stopped": 0, "ended": 0, "repaired": 0}
    travel.move_to(nb.expires_at + 30 * timedelta(seconds=1))
    assert cull_notebooks(sim)["stopped"] == 1
    assert cull_notebooks(sim)["stopped"] == 0  # never twice
    nb.refresh_from_db()
    assert (nb.state, nb.stop_reason) == (NotebookState.STOPPED, StopReason.TTL)
    first = Job.objects.get(pk=nb.session_id)
    assert first.state == JobState.CANCELLED and sim.list_workloads("team-vision") == []
    claim_uid = sim.get_pvc("team-vision", nb.volume_name)["metadata"]["uid"]
    # The quota (1 H100) is free at once: another notebook can start.
    other = launch(people["alice"], name="other").notebook
    settle(sim, travel)
    other.refresh_from_db()
    assert other.session.state == JobState.RUNNING
    stop_notebook(people["alice"], other, StopReason.USER, sim)
    session = start_notebook(people["alice"], nb)
    settle(sim, travel)
    nb.refresh_from_db()
    assert nb.session_id != first.pk and nb.session.state == JobState.RUNNING
    assert check_token(nb.token_hash, session.token)
    assert sim.get_pvc("team-vision", nb.volume_name)["metadata"]["uid"] == claim_uid
    claims = sim.list_workloads("team-vision")[0]["spec"]["template"]["spec"]["volumes"]
    assert claims[0]["persistentVolumeClaim"]["claimName"] == nb.volume_name


def test_the_ttl_is_not_overrun_when_the_warning_was_missed(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    travel.move_to(nb.expires_at + 20 * timedelta(seconds=1))  # the culler was down for the whole warning period
    counts = cull_notebooks(sim)
    assert (counts["warned"], counts["stopped"]) == (1, 1)
    nb.refresh_from_db()
    assert nb.ttl_warned_at is not None and nb.stop_reason == StopReason.TTL


def test_idle_gpus_and_idle_kernels_stop_it_after_the_warning(sim, travel, people):
    nb = launch(people["alice"], env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    job, since = nb.session, nb.running_since
    samples(job, since, since + 60 * MIN, 1.0)
    travel.move_to(since + 14 * MIN)
    cull_notebooks(sim)
    nb.refresh_from_db()
    assert nb.idle_deadline == since + 30 * MIN and nb.idle_warned_at is None
    travel.move_to(since + 15 * MIN)
    assert cull_notebooks(sim)["warned"] == 1
    assert "idle" in mail.outbox[-1].subject
    travel.move_to(since + 29 * MIN)
    assert cull_notebooks(sim)["stopped"] == 0
    travel.move_to(since + 30 * MIN)
    assert cull_notebooks(sim)["stopped"] == 1
    nb.refresh_from_db()
    assert nb.stop_reason == StopReason.IDLE and nb.session.state == JobState.CANCELLED


def test_a_busy_kernel_keeps_a_notebook_with_quiet_gpus(sim, travel, people):
    nb = launch(people["alice"], env=[{"name": "SIM_GPU_LOAD", "value": "train"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    samples(nb.session, nb.running_since, nb.running_since + 60 * MIN, 1.0)  # GPUs quiet, kernel "busy"
    travel.move_to(nb.running_since + 45 * MIN)
    counts = cull_notebooks(sim)
    nb.refresh_from_db()
    assert (counts["warned"], counts["stopped"]) == (0, 0)
    assert nb.last_activity_at == nb.running_since + 45 * MIN


def test_activity_after_the_warning_withdraws_it(sim, travel, people):
    nb = launch(people["alice"], env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    since = nb.running_since
    samples(nb.session, since, since + 20 * MIN, 1.0)
    travel.move_to(since + 20 * MIN)
    cull_notebooks(sim)
    nb.refresh_from_db()
    assert nb.idle_warned_at is not None
    samples(nb.session, since + 20 * MIN + timedelta(seconds=30), since + 21 * MIN, 95.0)
    travel.move_to(since + 21 * MIN)
    cull_notebooks(sim)
    nb.refresh_from_db()
    assert nb.idle_warned_at is None and nb.state == NotebookState.ACTIVE


def test_without_gpu_readings_a_notebook_is_never_idle(sim, travel, people):
    nb = launch(people["alice"], env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    travel.shift(3600)
    counts = cull_notebooks(sim)
    nb.refresh_from_db()
    assert counts["stopped"] == 0 and nb.idle_deadline is None and nb.state == NotebookState.ACTIVE


def test_a_stop_that_died_half_way_is_finished_and_stops_happen_once(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    assert stop_notebook(people["alice"], nb, StopReason.USER, sim) is True
    assert stop_notebook(people["admin"], nb, StopReason.ADMIN, sim) is False
    nb2 = launch(people["alice"], name="second").notebook
    settle(sim, travel)
    nb2.refresh_from_db()
    Notebook.objects.filter(pk=nb2.pk).update(state=NotebookState.STOPPED, stop_reason=StopReason.USER)  # crash
    assert cull_notebooks(sim)["repaired"] == 1
    assert Job.objects.get(pk=nb2.session_id).state == JobState.CANCELLED
    assert AuditEvent.objects.filter(action="notebook.stop").count() == 1


def test_a_session_that_ends_by_itself_stops_the_notebook(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    nb.refresh_from_db()
    actions.cancel_job(people["alice"], nb.session)
    assert cull_notebooks(sim)["ended"] == 1
    nb.refresh_from_db()
    assert nb.stop_reason == StopReason.ENDED


def test_launch_refuses_limits_above_the_team_maximum_and_duplicate_names(sim, people):
    with pytest.raises(ValidationError) as error:
        launch(people["alice"], ttl_seconds=4 * 3600, idle_timeout_seconds=7200)
    assert set(error.value.message_dict) == {"ttl_seconds", "idle_timeout_seconds"}
    launch(people["alice"])
    with pytest.raises(ValidationError, match="already has a notebook called scratch"):
        launch(people["alice"])


# -- the rule on its own ----------------------------------------------------------------------------------------

T0 = START
LEAD = timedelta(minutes=15)
SLACK = timedelta(seconds=60)


def evidence(**changes):
    values = dict(
        running_since=T0, extended_at=None, idle_timeout=timedelta(minutes=30), gpu_oldest=T0,
        gpu_newest=T0 + 60 * MIN, gpu_last_busy=None, kernels=None,
    )  # fmt: skip
    return culling.Evidence(**(values | changes))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, T0),
        ({"gpu_last_busy": T0 + 10 * MIN}, T0 + 10 * MIN),
        ({"extended_at": T0 + 20 * MIN, "gpu_last_busy": T0 + 10 * MIN}, T0 + 20 * MIN),
        ({"kernels": [{"execution_state": "idle", "last_activity": "2026-03-02T09:40:00Z"}]}, T0 + 40 * MIN),
        ({"kernels": [{"execution_state": "idle"}, {"execution_state": "starting"}]}, T0 + 60 * MIN),
        ({"kernels": []}, T0),
        ({"gpu_newest": T0 + 58 * MIN}, None),  # readings stopped two minutes ago: unknown
        ({"gpu_oldest": T0 + 32 * MIN}, None),  # readings do not reach back to the span's start
        ({"gpu_oldest": None, "gpu_newest": None}, None),
    ],
)
def test_last_activity(changes, expected):
    assert culling.last_activity(evidence(**changes), T0 + 60 * MIN, SLACK) == expected


@pytest.mark.parametrize(
    ("now", "expires", "idle", "ttl_warned", "idle_warned", "warn", "stop", "withdraw"),
    [
        (T0, T0 + 16 * MIN, None, None, None, [], None, False),
        (T0, T0 + 15 * MIN, None, None, None, ["ttl"], None, False),
        (T0, T0, None, None, None, ["ttl"], "ttl", False),  # missed warning: recorded and stopped together
        (T0, T0, None, T0 - LEAD, None, [], "ttl", False),
        (T0, None, T0 + 15 * MIN, None, None, ["idle"], None, False),
        (T0, None, T0, None, None, ["idle"], None, False),  # idle waits a full lead after a late warning
        (T0, None, T0, T0, T0 - 14 * MIN, [], None, False),
        (T0, None, T0, None, T0 - LEAD, [], "idle", False),
        (T0, None, T0 + 16 * MIN, None, T0 - MIN, [], None, True),
        (T0, None, None, None, T0 - MIN, [], None, True),
        (T0, T0, T0, T0 - LEAD, T0 - LEAD, [], "ttl", False),  # both due: the maximum age is the reason
    ],
)
def test_decide(now, expires, idle, ttl_warned, idle_warned, warn, stop, withdraw):
    decision = culling.decide(now, LEAD, expires, idle, ttl_warned, idle_warned)
    assert (decision.warn, decision.stop, decision.withdraw_idle_warning) == (warn, stop, withdraw)


def test_a_session_is_not_resubmitted_as_a_batch_job_and_the_job_idle_flag_stays_quiet(sim, travel, people):
    from jobs.idle import detect_idle

    nb = launch(people["alice"], env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    nb.refresh_from_db()
    samples(nb.session, nb.session.started_at, nb.session.started_at + 40 * MIN, 0.0)
    travel.move_to(nb.session.started_at + 40 * MIN)
    assert detect_idle()["flagged"] == 1  # the job's idle flag is still set (charts, lists) ...
    assert not Notification.objects.filter(kind="job.idle").exists()  # ... but the culler does the talking
    stop_notebook(people["alice"], nb, StopReason.USER, sim)
    with pytest.raises(ValidationError, match="notebook session"):
        actions.resubmit_job(people["alice"], Job.objects.get(pk=nb.session_id))


def test_two_culler_runs_at_once_warn_once_and_an_extend_in_between_wins(sim, travel, people):
    from jobs.notebook.sessions import _warn

    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    travel.move_to(nb.expires_at - 10 * MIN)
    # Two runs read the same row, then both try to warn: one wins, one mail.
    first, second = Notebook.objects.get(pk=nb.pk), Notebook.objects.get(pk=nb.pk)
    assert [_warn(first, "ttl", START, first.expires_at), _warn(second, "ttl", START, second.expires_at)] == [
        True,
        False,
    ]
    assert len(mail.outbox) == 1
    # A run that judged the old deadline must not stop the notebook the owner just extended.
    stale = Notebook.objects.get(pk=nb.pk)
    extend_notebook(people["alice"], nb)
    travel.move_to(stale.expires_at)
    judged = {"expires_at": stale.expires_at, "extended_at": stale.extended_at}
    assert stop_notebook(None, stale, StopReason.TTL, sim, expected=judged) is False
    assert _warn(stale, "ttl", START, stale.expires_at) is False
    nb.refresh_from_db()
    assert nb.state == NotebookState.ACTIVE


def test_beat_runs_the_culler_task(sim, travel, people, settings, monkeypatch):
    from jobs import tasks

    entry = settings.CELERY_BEAT_SCHEDULE["cull-notebooks"]
    assert entry["task"] == "jobs.tasks.cull_notebooks" and entry["schedule"] == settings.PORTAL_NOTEBOOK_CULL_INTERVAL
    monkeypatch.setattr(tasks, "get_backend", lambda: sim)
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    assert tasks.cull_notebooks.apply().get()["checked"] == 1
    nb.refresh_from_db()
    assert nb.expires_at is not None


def test_one_notebook_failing_does_not_keep_others_past_their_limit(sim, travel, people, monkeypatch):
    settings_team = Team.objects.get(slug="vision")
    actions.set_quota(people["admin"], settings_team, ResourceClass.objects.get(key=H100), 2, 2)
    broken, fine = launch(people["alice"], name="broken").notebook, launch(people["alice"], name="fine").notebook
    settle(sim, travel)
    cull_notebooks(sim)
    broken.refresh_from_db()
    real = culling.decide

    def decide(now, lead, expires_at, *rest):
        if expires_at == broken.expires_at and now > expires_at:
            raise RuntimeError("a bug that only this notebook hits")
        return real(now, lead, expires_at, *rest)

    monkeypatch.setattr(culling, "decide", decide)
    Notebook.objects.filter(pk=fine.pk).update(expires_at=broken.expires_at - timedelta(seconds=1))
    travel.move_to(broken.expires_at + timedelta(seconds=5))
    assert cull_notebooks(sim)["stopped"] == 1
    fine.refresh_from_db()
    broken.refresh_from_db()
    assert fine.stop_reason == StopReason.TTL and broken.state == NotebookState.ACTIVE


def test_a_session_that_fails_tells_its_owner(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    nb.refresh_from_db()
    Job.objects.filter(pk=nb.session_id).update(state=JobState.FAILED)
    cull_notebooks(sim)
    assert Notification.objects.filter(user=people["alice"], title__contains="its session failed").exists()


def test_a_server_that_cannot_be_asked_still_stops_at_its_maximum_age(sim, travel, people, monkeypatch):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()

    def refuse(*args):
        raise ConnectionError("proxy said 502")

    monkeypatch.setattr(sim, "notebook_kernels", refuse)
    travel.move_to(nb.expires_at)
    assert cull_notebooks(sim)["stopped"] == 1

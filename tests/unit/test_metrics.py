"""The /metrics endpoint: who may read it, that its values move with what happens (a job queued, admitted, idle; a
node's reconfiguration failing; a task failing), that a scrape costs the same queries however much is queued, that
counters written by several processes are summed, and the worker's own metrics port."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from gpus.choices import NodeConfigKind, NodeConfigState
from gpus.models import Node, NodeConfigOperation
from jobs.choices import JobState
from jobs.cycle.metrics import run_observed_cycle
from jobs.models import Job
from portal.celery import app as celery_app
from portal.exposition import serve_worker_metrics
from tests.factories import submit_job
from tests.sim_objects import H100

TOKEN = "s3cret-prometheus-token"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of an exposition, keyed by (sample name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client, **extra) -> dict:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return samples(response.content.decode())


# The demo cluster (tests/conftest.py) with H100 quotas of 4 guaranteed and 8 at most for vision and nlp.
pytestmark = pytest.mark.cluster(quotas={"vision": (4, 8), "nlp": (4, 8)})


# -- access ---------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_who_may_read_the_metrics(client, settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_METRICS_ALLOW_LOCAL = True
    assert client.get("/metrics").status_code == 200  # the test client is 127.0.0.1
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403  # via a local proxy
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 403
    refused = client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer wrong")
    assert refused.status_code == 403 and b"PORTAL_METRICS_TOKEN" in refused.content
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    settings.PORTAL_METRICS_ALLOW_LOCAL = False
    assert client.get("/metrics").status_code == 403
    settings.PORTAL_METRICS_TOKEN = "CHANGE-ME"  # the example Secret's placeholder is no key
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer CHANGE-ME").status_code == 403
    settings.PORTAL_METRICS_TOKEN = ""  # no token configured: an empty bearer is no key
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer ").status_code == 403


# -- values ---------------------------------------------------------------------------------------------------------


def test_values_move_when_a_job_is_queued_admitted_and_idle(client, cluster, people):
    before = scrape(client)
    team_class = {"team": "vision", "resource_class": H100}
    assert value(before, "gpuportal_quota_guaranteed", **team_class) == 4
    assert value(before, "gpuportal_quota_limit", **team_class) == 8
    assert value(before, "gpuportal_quota_held", **team_class) == 0
    nodes = Node.objects.filter(gone_at__isnull=True).count()
    assert sum(v for (name, _), v in before.items() if name == "gpuportal_nodes") == nodes > 0
    assert ("gpuportal_inventory_reconcile_lag_seconds", ()) in before

    job = submit_job(people["alice"], count=2)
    queued = scrape(client)
    assert value(queued, "gpuportal_queue_depth", **team_class) == 1
    assert value(queued, "gpuportal_jobs", state="queued") == value(before, "gpuportal_jobs", state="queued") + 1

    run_observed_cycle(cluster)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    after = scrape(client)
    assert value(after, "gpuportal_queue_depth", **team_class) == 0
    assert value(after, "gpuportal_quota_held", **team_class) == 2
    for name, labels in (
        ("gpuportal_admission_decisions_total", {"decision": "admitted"}),
        ("gpuportal_admission_decisions_total", {"decision": "launched"}),
        ("gpuportal_admission_cycle_duration_seconds_count", {}),
        ("gpuportal_job_wait_seconds_count", team_class),
    ):
        assert value(after, name, **labels) == value(before, name, **labels) + 1, name
    assert value(after, "gpuportal_allocated_idle_gpus", **team_class) == 0

    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, idle_since=timezone.now() - timedelta(hours=1))
    assert value(scrape(client), "gpuportal_allocated_idle_gpus", **team_class) == 2


def test_a_failed_reconfiguration_is_flagged_until_a_later_one_succeeds(client, cluster):
    node = Node.objects.filter(gone_at__isnull=True).first()
    NodeConfigOperation.objects.create(node=node, kind=NodeConfigKind.MIG, state=NodeConfigState.FAILED)
    assert value(scrape(client), "gpuportal_node_reconfiguration_failed", node=node.name) == 1
    NodeConfigOperation.objects.create(node=node, kind=NodeConfigKind.MIG, state=NodeConfigState.DONE)
    assert ("gpuportal_node_reconfiguration_failed", (("node", node.name),)) not in scrape(client)


def test_a_scrape_costs_the_same_queries_however_much_is_queued(client, cluster, people):
    submit_job(people["alice"])
    with CaptureQueriesContext(connection) as few:
        scrape(client)
    for _ in range(5):
        submit_job(people["bob"], "nlp")
        submit_job(people["alice"])
    with CaptureQueriesContext(connection) as many:
        scrape(client)
    assert len(many) == len(few) <= 10


@pytest.mark.django_db
def test_a_failing_task_is_counted(client):
    @celery_app.task(name="tests.metrics.boom")
    def boom():
        raise RuntimeError("boom")

    before = value(scrape(client), "gpuportal_celery_task_failures_total", task="tests.metrics.boom")
    boom.apply()
    assert value(scrape(client), "gpuportal_celery_task_failures_total", task="tests.metrics.boom") == before + 1


def test_telemetry_samples_are_counted(client, cluster):
    from telemetry.choices import TelemetrySource
    from telemetry.samples import Reading, store

    node = Node.objects.filter(gone_at__isnull=True, gpu_count__gt=0).first()
    before = value(scrape(client), "gpuportal_telemetry_samples_ingested_total", source="agent")
    reading = Reading(ts=timezone.now(), node_name=node.name, gpu_uuid="GPU-metrics-test", gpu_index=0, util_pct=50.0)
    assert store([reading, reading], TelemetrySource.AGENT) == 2
    assert value(scrape(client), "gpuportal_telemetry_samples_ingested_total", source="agent") == before + 2


def test_failed_webhook_deliveries_are_counted(client, people, settings, monkeypatch):
    from core import webhooks
    from core.models import Delivery, Webhook

    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS, settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 0, 3
    answers = [503, 503, 200]
    monkeypatch.setattr(webhooks, "post", lambda webhook, delivery: webhooks.Outcome(answers.pop(0), "", ""))
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)
    webhook = Webhook.objects.create(
        team=people["vision"], name="ci", url="https://hooks.example.org/x", events=["job.*"]
    )
    Delivery.objects.create(
        webhook=webhook, event_id="00000000-0000-0000-0000-000000000001", event_type="job.failed", payload={}
    )
    before = value(scrape(client), "gpuportal_webhook_delivery_failures_total")
    while webhooks.send_due(webhook.pk) is not None:
        pass
    assert value(scrape(client), "gpuportal_webhook_delivery_failures_total") == before + 2  # two failed, one sent


# -- several processes ----------------------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from core.metrics import TASK_FAILURES, WEBHOOK_DELIVERY_FAILURES
    for _ in range(int(sys.argv[1])):
        WEBHOOK_DELIVERY_FAILURES.inc()
    TASK_FAILURES.labels(task="jobs.tasks.run_cycle").inc()
    """
)


def test_counters_written_by_several_processes_are_summed(client, tmp_path, monkeypatch, settings, db):
    """Two real processes (as gunicorn's or Celery's children) each write their counters to the multiprocess
    directory and exit; the endpoint, reading that directory, reports the sums."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(settings.BASE_DIR), "PATH": "/usr/bin:/bin"}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(n)], env=env) for n in (3, 4)]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # one file per process

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    scraped = scrape(client)
    assert value(scraped, "gpuportal_webhook_delivery_failures_total") == 7
    assert value(scraped, "gpuportal_celery_task_failures_total", task="jobs.tasks.run_cycle") == 2
    assert ("gpuportal_quota_held", ()) not in scraped  # the database facts are served beside them
    assert any(name == "gpuportal_nodes" for name, _ in scraped)


# -- the worker's port ----------------------------------------------------------------------------------------------


def test_the_worker_serves_its_metrics_behind_the_same_rule(settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    settings.PORTAL_METRICS_ALLOW_LOCAL = False
    server = serve_worker_metrics(0, "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 403
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        names = {family.name for family in text_string_to_metric_families(text)}
        assert {"gpuportal_admission_cycle_duration_seconds", "gpuportal_celery_task_failures"} <= names
        assert "gpuportal_queue_depth" not in names  # the database facts are the web process's
    finally:
        server.shutdown()
        server.server_close()

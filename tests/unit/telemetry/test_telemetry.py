"""Telemetry storage: dcgm-exporter readings attributed to jobs, rollups that are exact and idempotent,
retention, and the series the charts draw."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from cluster.gpu_metrics import scrape
from gpus.models import GPU, ResourceClass
from jobs.choices import JobState
from jobs.models import Job
from telemetry import samples
from telemetry.choices import TelemetrySource
from telemetry.models import GpuRollup, GpuSample, RollupWatermark
from tests.realdata import real_text
from vocab import dcgm

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
A100_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"


def running_job(people, team="vision", node="gpu-h100-01", pod="", name="train", started=T0) -> Job:
    owner = people["alice"] if team == "vision" else people["bob"]
    return Job.objects.create(
        team=people[team], owner=owner, name=name, image="nvcr.io/nvidia/pytorch:24.01-py3",
        resource_class=ResourceClass.objects.filter(kind="gpu").first(), state=JobState.RUNNING,
        node_name=node, pod_name=pod, started_at=started,
    )  # fmt: skip


def reading(ts, util, uuid="GPU-11111111-0000-0000-0000-000000000000", node="gpu-h100-01", gi=None, profile="", **kw):
    return samples.Reading(
        ts=ts, node_name=node, gpu_uuid=uuid, gpu_instance_id=gi, mig_profile=profile, util_pct=util, **kw
    )


def test_dcgm_capture_with_mig_is_stored_with_parent_activity_and_instance_weight(inventory):
    readings = samples.readings_from_dcgm(dcgm.parse_scrape(real_text("08")), T0)
    assert samples.store(readings, TelemetrySource.DCGM) == 2
    parent = GpuSample.objects.get(gpu_instance_id__isnull=True)
    instance = GpuSample.objects.get(gpu_instance_id=13)
    assert (parent.node_name, parent.gpu_uuid, parent.gpu_index) == ("ub20-a100-k8s", A100_UUID, 0)
    assert parent.util_pct == pytest.approx(99.563) and parent.mem_total_mb == 4845 + 35690
    assert (instance.mig_profile, instance.weight) == ("1g.5gb", pytest.approx(1 / 7))
    assert instance.util_pct == pytest.approx(99.5687)


def test_dcgm_pod_labels_attribute_samples_to_the_portal_job(inventory, people):
    from accounts.models import Team

    ray = Team.objects.create(slug="ray", name="Ray", namespace="ray-llm")
    people["ray"] = ray
    job = Job.objects.create(
        team=ray, owner=people["bob"], name="llm", image="x/y:1", state=JobState.RUNNING,
        resource_class=ResourceClass.objects.first(), node_name="ip-11111", pod_name="ray-1111111", started_at=T0,
    )  # fmt: skip
    samples.store(samples.readings_from_dcgm(dcgm.parse_scrape(real_text("09")), T0), TelemetrySource.DCGM)
    attributed = GpuSample.objects.filter(job_id=job.pk)
    assert attributed.count() == 1
    assert attributed.get().gpu_uuid == "GPU-abc" and attributed.get().team == ray
    assert GpuSample.objects.filter(job_id__isnull=True).count() == GpuSample.objects.count() - 1


def test_agent_samples_go_to_the_only_running_job_on_the_node(inventory, people):
    job = running_job(people)
    samples.store([reading(T0, 50.0)], TelemetrySource.AGENT)
    assert GpuSample.objects.get().job_id == job.pk
    running_job(people, team="nlp", name="second")
    samples.store([reading(T0 + timedelta(seconds=10), 50.0)], TelemetrySource.AGENT)
    # Two jobs on the node and no pod label: the portal cannot tell whose GPU it is.
    assert GpuSample.objects.get(ts=T0 + timedelta(seconds=10)).job_id is None


def test_uuids_are_learned_only_for_the_reported_index(inventory):
    samples.store([reading(T0, 1.0, gpu_index=3, node="gpu-h100-02")], TelemetrySource.AGENT)
    gpus = dict(GPU.objects.filter(node__name="gpu-h100-02").values_list("index", "uuid"))
    assert gpus[3] == "GPU-11111111-0000-0000-0000-000000000000"
    assert sum(1 for uuid in gpus.values() if uuid == "GPU-11111111-0000-0000-0000-000000000000") == 1


def test_rollups_are_exact_idempotent_and_wait_for_the_lag(db, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 120
    rows = [reading(T0 + timedelta(seconds=10 * i), float(i % 30)) for i in range(60)]  # 10 minutes, 10 s apart
    rows += [reading(T0 + timedelta(seconds=10 * i), 80.0, gi=1, profile="3g.40gb") for i in range(30)]
    samples.store(rows, TelemetrySource.AGENT)
    # At 10:11 minus the 2-minute lag only the 10:00 bucket counts as finished.
    assert samples.rollup(now=T0 + timedelta(minutes=11)) == {"5m": 2, "1h": 0}
    # At 10:12 the 10:05 bucket is too; no hour is.
    assert samples.rollup(now=T0 + timedelta(minutes=12)) == {"5m": 1, "1h": 0}
    whole = GpuRollup.objects.filter(period="5m", gpu_instance_id__isnull=True).order_by("start")
    assert [(r.start, r.samples, r.util_max) for r in whole] == [
        (T0, 30, 29.0),
        (T0 + timedelta(minutes=5), 30, 29.0),
    ]
    assert whole[0].util_avg == pytest.approx(sum(range(30)) / 30)
    # Running again (or concurrently, after the first committed) writes nothing twice.
    assert samples.rollup(now=T0 + timedelta(minutes=12)) == {"5m": 0, "1h": 0}
    assert GpuRollup.objects.filter(period="5m").count() == 3
    assert RollupWatermark.objects.get(period="5m").done_until == T0 + timedelta(minutes=10)
    written = samples.rollup(now=T0 + timedelta(hours=1, minutes=3))
    assert written["1h"] == 2
    hour = GpuRollup.objects.get(period="1h", gpu_instance_id__isnull=True)
    assert (hour.samples, hour.util_avg) == (60, pytest.approx(14.5))


def test_prune_keeps_raw_for_its_retention_and_rollups_for_theirs(db, settings):
    settings.PORTAL_TELEMETRY_RAW_DAYS = 7
    settings.PORTAL_TELEMETRY_ROLLUP_DAYS = 365
    now = T0
    samples.store([reading(now - timedelta(days=8), 5.0), reading(now - timedelta(days=6), 5.0)], "agent")
    GpuRollup.objects.create(period="1h", start=now - timedelta(days=400), node_name="n", gpu_uuid="GPU-x", samples=1)
    GpuRollup.objects.create(period="1h", start=now - timedelta(days=300), node_name="n", gpu_uuid="GPU-x", samples=1)
    assert samples.prune(now) == {"samples": 1, "rollups": 1}
    assert GpuSample.objects.get().ts == now - timedelta(days=6)
    assert GpuRollup.objects.get().start == now - timedelta(days=300)


def test_series_weights_mig_instances_and_joins_rollups_with_the_raw_tail(db, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    # A whole GPU at 100% and a 1g instance at 0%: the weighted mean is 100 × 1 / (1 + 1/7).
    rows = [reading(T0 + timedelta(minutes=m), 100.0) for m in range(0, 120)]
    rows += [reading(T0 + timedelta(minutes=m), 0.0, uuid="GPU-22222222-0000-0000-0000-000000000000", gi=9,
                     profile="1g.10gb") for m in range(0, 120)]  # fmt: skip
    samples.store(rows, "agent")
    step, points = samples.series({}, T0, T0 + timedelta(hours=1), step=600)
    assert step == 600 and len(points) == 6
    assert [p.util for p in points] == [pytest.approx(100 / (1 + 1 / 7), abs=0.05)] * 6
    # Long ranges read 5-minute rollups up to the watermark and raw samples after it: same answer.
    samples.rollup(now=T0 + timedelta(hours=1))
    assert RollupWatermark.objects.get(period="5m").done_until == T0 + timedelta(hours=1)
    step, long_points = samples.series({}, T0 - timedelta(hours=10), T0 + timedelta(hours=2), step=1800)
    assert [p.t for p in long_points] == [T0 + timedelta(minutes=30 * i) for i in range(4)]
    assert [p.util for p in long_points] == [pytest.approx(100 / (1 + 1 / 7), abs=0.05)] * 4
    # Only the whole GPU:
    _, whole = samples.series({"gpu_instance_id__isnull": True}, T0, T0 + timedelta(hours=1), step=600)
    assert {p.util for p in whole} == {100.0}


def test_sparklines_fill_gaps_with_none(db):
    now = T0 + timedelta(minutes=10)
    samples.store([reading(T0 + timedelta(minutes=1), 40.0), reading(T0 + timedelta(minutes=9), 60.0)], "agent")
    lines = samples.sparklines("node_name", ["gpu-h100-01", "elsewhere"], since=timedelta(minutes=10), step=120,
                                 now=now)  # fmt: skip
    assert lines["elsewhere"] == [None] * 6
    assert lines["gpu-h100-01"] == [40.0, None, None, None, 60.0, None]


class _Exporter(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path != "/metrics":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


def test_scraping_exporters_by_url_reads_text_and_reports_failures(settings):
    _Exporter.body = real_text("08").encode()
    server = HTTPServer(("127.0.0.1", 0), _Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        settings.PORTAL_DCGM_URLS = [
            f"gpu-a=http://127.0.0.1:{port}/metrics",
            f"http://127.0.0.1:{port}/wrong",
            "http://127.0.0.1:9/metrics",  # nothing listens on the discard port
        ]
        results = scrape(backend=object())
    finally:
        server.shutdown()
    ok, missing, refused = results
    assert ok.node_name == "gpu-a" and not ok.error and "DCGM_FI_DEV_GPU_TEMP" in ok.text
    assert missing.node_name == "" and missing.error == "HTTP 404"
    assert refused.error and not refused.text


def test_scrape_task_stores_the_simulated_exporters_readings(inventory, settings, monkeypatch):
    from telemetry import tasks

    monkeypatch.setattr(tasks, "get_backend", lambda: inventory)
    result = tasks.scrape_dcgm()
    assert result["failed"] == 0 and result["stored"] > 50
    nodes = set(GpuSample.objects.values_list("node_name", flat=True))
    assert {"gpu-h100-01", "gpu-a100-mig-01"} <= nodes
    # MIG instances arrive with their profile; idle GPUs read (near) zero.
    assert GpuSample.objects.filter(node_name="gpu-a100-mig-01", gpu_instance_id__isnull=False).exists()
    assert max(GpuSample.objects.values_list("util_pct", flat=True)) < 5


@pytest.mark.parametrize(
    ("age", "expected"),
    [(timedelta(minutes=20), "1h"), (timedelta(hours=3), "6h"), (timedelta(days=2), "7d"), (timedelta(days=99), "30d")],
)
def test_a_jobs_chart_opens_on_the_shortest_range_covering_its_run(age, expected):
    assert samples.covering_range(datetime.now(UTC) - age) == expected
    assert samples.covering_range(None) == "1h"


@pytest.mark.parametrize(
    ("profile", "product", "weight"),
    [
        ("1g.5gb", "NVIDIA-A100-SXM4-40GB", 1 / 7),
        ("1g.23gb", "NVIDIA-B200", 1 / 7),
        ("3g.71gb", "NVIDIA-H200", 3 / 7),
        ("1g.6gb", "NVIDIA-A30", 1 / 4),
        # RTX PRO 6000 Blackwell: 4 compute slices, like the A30 (issue 31 item 17).
        ("1g.24gb", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 1 / 4),
        ("2g.48gb+gfx", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 2 / 4),
        ("1g.10gb", "", 1 / 7),
    ],
)
def test_a_mig_instance_weighs_its_share_of_the_gpus_compute_slices(profile, product, weight):
    from telemetry.samples import mig_weight

    assert mig_weight(profile, product) == pytest.approx(weight)

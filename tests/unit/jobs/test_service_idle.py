"""Allocated but idle, for services: a running service whose every replica's GPUs stayed under the idle threshold
for the idle window gets ``idle_since`` (the jobs' rule, jobs.idle); a busy reading clears it; after a day idle
the page suggests lowering the minimum; the owner gets no "cancel it" notice and nothing is culled."""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.models import Notification
from jobs.choices import JobState, ServiceState
from jobs.idle import detect_idle
from jobs.service import summary as service_summary
from telemetry.models import GpuSample
from tests.factories import inference_service
from tests.unit.jobs.service_kit import SMALL_CLUSTER, cycle, fresh

# The service tests' small cluster: 4 nodes of 2 H100s, vision's H100 quota 2 guaranteed, 4 limit.
pytestmark = [pytest.mark.clock(hour=9), SMALL_CLUSTER]


def readings(service, start, end, util):
    rows, at = [], start
    while at <= end:
        rows += [GpuSample(ts=at, node_name=pod["node"], gpu_uuid=f"GPU-{pod['pod']}", job_id=service.job_id,
                           util_pct=util, source="dcgm") for pod in service.observed["replica_pods"]]  # fmt: skip
        at += timedelta(seconds=30)
    GpuSample.objects.bulk_create(rows)


def test_an_idle_service_is_flagged_the_suggestion_comes_after_a_day_and_busy_clears_it(cluster, clock, people):
    clock.advance(18 * 3600)  # the night: one replica
    service = inference_service(people["alice"], min_replicas=2, max_replicas=2)
    cycle(cluster, clock, 30, times=4)
    service = fresh(service)
    assert service.job.state == JobState.RUNNING and len(service.observed["replica_pods"]) == 2
    start = service.job.started_at
    readings(service, start, start + timedelta(minutes=40), 2.0)
    detect_idle(now=start + timedelta(minutes=40))
    service = fresh(service)
    assert service.idle_since is not None and service.idle_since <= start + timedelta(minutes=1)
    assert not service_summary.idle_for_a_day(service, now=start + timedelta(minutes=40))
    assert service_summary.idle_for_a_day(service, now=service.idle_since + timedelta(days=1))
    assert not Notification.objects.filter(kind="job.idle").exists()
    assert service.state == ServiceState.ACTIVE and service.job.state == JobState.RUNNING  # never culled
    # One replica gets busy: the service is no longer idle.
    GpuSample.objects.create(ts=start + timedelta(minutes=41), node_name=service.observed["replica_pods"][0]["node"],
                             gpu_uuid="GPU-busy", job_id=service.job_id, util_pct=60.0, source="dcgm")  # fmt: skip
    detect_idle(now=start + timedelta(minutes=42))
    assert fresh(service).idle_since is None


def test_a_service_with_one_busy_replica_is_not_idle(cluster, clock, people):
    clock.advance(18 * 3600)
    service = inference_service(people["alice"], min_replicas=2, max_replicas=2)
    cycle(cluster, clock, 30, times=4)
    service = fresh(service)
    start = service.job.started_at
    readings(service, start, start + timedelta(minutes=40), 2.0)
    busy = service.observed["replica_pods"][1]
    GpuSample.objects.bulk_create([
        GpuSample(ts=start + timedelta(minutes=m), node_name=busy["node"], gpu_uuid="GPU-busy",
                  job_id=service.job_id, util_pct=70.0, source="dcgm") for m in range(0, 41, 5)
    ])  # fmt: skip
    detect_idle(now=start + timedelta(minutes=40))
    assert fresh(service).idle_since is None

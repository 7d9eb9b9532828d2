"""Job kinds plug in through jobs.kinds: a third kind, registered by a test, is admitted, launched and followed
by the unchanged cycle, which asks the kind what it demands, what it becomes and what its workload shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import kinds
from jobs.choices import EventKind, JobState
from jobs.cycle.admit import build_snapshot
from jobs.cycle.run import run_cycle
from jobs.kinds.base import Demand, WorkloadKind
from jobs.models import Job
from jobs.render import KIND_LABEL, render_job
from tests.factories import submit_job

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
ROOT = Path(__file__).resolve().parents[3]


class DummyKind(WorkloadKind):
    """Asks for its GPUs twice over (say, two workers) and runs as one batch/v1 Job with its own label."""

    name = "dummy"

    def __init__(self):
        self.rendered, self.ended = [], []

    def demand(self, job) -> Demand:
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=2)

    def render(self, job, forms=None) -> list[dict]:
        self.rendered.append(job.pk)
        manifest = render_job(job)
        manifest["metadata"]["labels"]["example.com/dummy"] = "yes"
        return [manifest]

    def on_end(self, job) -> None:
        self.ended.append(job.pk)


@pytest.fixture
def dummy():
    kind = kinds.register(DummyKind())
    yield kind
    kinds.unregister("dummy")


def submit_dummy(people, count=1) -> Job:
    job = submit_job(people["alice"], "vision", H100, name="dummy", count=count)
    Job.objects.filter(pk=job.pk).update(kind="dummy")
    job.refresh_from_db()
    return job


def test_a_new_kind_is_admitted_launched_and_followed_by_the_unchanged_cycle(cluster, people, clock, dummy):
    job = submit_dummy(people, count=2)
    snapshot, _ = build_snapshot(clock.now)
    (view,) = [v for v in snapshot.queued if v.id == job.pk]
    # What the kind demands: two pods (workers, each on its own node) of the job's request.
    assert (view.workers, view.count, view.cpu_m, view.memory_mb) == (2, 2, 2000, 8192)

    run_cycle(cluster, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.workload_created_at is not None
    assert dummy.rendered == [job.pk]
    (workload,) = [w for w in cluster.list_workloads() if w["metadata"]["name"] == job.workload_name]
    assert workload["metadata"]["labels"]["example.com/dummy"] == "yes"
    assert workload["metadata"]["labels"][KIND_LABEL] == "dummy"

    clock.advance(6)
    run_cycle(cluster, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    clock.advance(40)
    run_cycle(cluster, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert dummy.ended == [job.pk]
    assert list(job.events.values_list("kind", flat=True)) == [
        EventKind.SUBMITTED, EventKind.ADMITTED, EventKind.CREATED, EventKind.STARTED, EventKind.SUCCEEDED,
    ]  # fmt: skip


def test_an_unknown_kind_is_refused_by_the_registry_with_the_known_ones():
    with pytest.raises(LookupError, match="batch, distributed, notebook"):
        kinds.get("nonsense")


def test_the_scheduler_never_names_a_kind():
    jobs = ROOT / "jobs"
    scheduler = [*(jobs / "cycle").glob("*.py"), *(jobs / "scheduling").glob("*.py")]
    assert len(scheduler) >= 12
    for path in scheduler:
        assert not re.search(r"JobKind\.|kind ==", path.read_text()), path


def test_every_kind_is_complete_once_django_has_started_and_importing_registers_nothing():
    """In a fresh interpreter: importing the registry registers no kind; django.setup() registers one per
    ``JobKind``, each a class of its own package whose hooks need nothing else imported first."""
    program = """
import django, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
from jobs import kinds
assert kinds.registered() == {}, kinds.registered()
django.setup()
from jobs.choices import JobKind
from jobs.kinds.base import WorkloadKind
found = kinds.registered()
assert sorted(found) == sorted(JobKind.values), sorted(found)
for name, kind in found.items():
    assert type(kind).__module__ == f"jobs.{name}.kind", (name, type(kind).__module__)
service = found["service"]
assert type(service).follow is not WorkloadKind.follow and type(service).elastic_views is not WorkloadKind.elastic_views
assert type(found["batch"]).follow is WorkloadKind.follow
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")

"""One pod state, one sentence, whatever the kind (vocab.pod_states through jobs.pod_states): a pod of a batch
job, a rank of a distributed job, a replica of an inference service and a notebook's session whose Secret is
missing all wait with the same sentence, run through the job cycle on the simulated cluster (its kubelet leaves the
container in CreateContainerConfigError with kubelet's own message). A gang or a service names the rank or the
replica first."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import lifecycle, pod_states
from jobs.choices import JobKind, JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from jobs.service import ops as service_ops
from tests.factories import notebook_session
from tests.sim_objects import H100, h100_node
from vocab.pod_states import Verdict

SECRET_ENV = [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}]
#: What a batch job has always said of it (word for word), now the table's sentence for every kind.
SAID = (
    "Waiting: the pod cannot start because secret wandb does not exist in namespace team-vision. A lead of team "
    "Computer Vision can create it on the team's Secrets page; the job starts when it exists. "
    'Kubernetes: secret "wandb" not found'
)
SPEC = dict(image="registry.example/train:1", command=["sleep", "600"], count=1, cpu_millicores=1000, memory_mb=4096)


# The small hours (a service's traffic asks for no more than its minimum), on 4 nodes of 2 H100s; vision may use 8.
pytestmark = [
    pytest.mark.clock(hour=3),
    pytest.mark.cluster(
        scenario={"namespaces": ["team-vision"], "nodes": [h100_node(f"gpu-{i}", count=2) for i in range(4)]},
        quotas={"vision": (8, 8)},
    ),
]


@pytest.fixture
def world(cluster, clock, people):
    """The ``cluster`` above, its clock and the people, as the kinds' builders below take them."""
    return cluster, clock, people


def _submit(people, kind: str, **extra) -> Job:
    return lifecycle.submit(
        people["alice"], "Submitted.", team=people["vision"], owner=people["alice"],
        resource_class=ResourceClass.objects.get(key=H100), kind=kind, name="train", max_runtime_seconds=3600,
        secret_env=SECRET_ENV, **SPEC, **extra,
    )  # fmt: skip


def batch(people) -> Job:
    return _submit(people, JobKind.BATCH)


def rank(people) -> Job:
    return _submit(people, JobKind.DISTRIBUTED, workers=2)


def notebook(people) -> Job:
    # The notebook form offers no secrets; its session is a batch/v1 Job rendered as every job is, so a Secret
    # reference on its row reaches the pod the same way.
    session = notebook_session(people["alice"], name="lab", image=SPEC["image"], cpu_millicores=1000, memory_mb=4096)
    Job.objects.filter(pk=session.notebook.session_id).update(secret_env=SECRET_ENV)
    return Job.objects.get(pk=session.notebook.session_id)


def replica(people) -> Job:
    service = service_ops.create_service(
        people["alice"], people["vision"], ResourceClass.objects.get(key=H100),
        {"name": "llm", **SPEC, "preemptible": False},
        {"port": 8080, "readiness": {"type": "tcp", "period_seconds": 5}, "min_replicas": 1, "max_replicas": 1},
    )  # fmt: skip
    Job.objects.filter(pk=service.job_id).update(secret_env=SECRET_ENV)
    return Job.objects.get(pk=service.job_id)


@pytest.mark.parametrize(
    "make, prefix",
    [(batch, ""), (rank, "Rank 0: "), (notebook, ""), (replica, "Replica ")],
    ids=["batch", "rank", "notebook", "service replica"],
)
def test_a_missing_secret_reads_the_same_for_every_kind(world, make, prefix):
    sim, clock, people = world
    job = make(people)
    for _ in range(4):
        clock.advance(10)
        run_cycle(sim, clock.now)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.wait_message
    assert job.wait_message.startswith(prefix) and job.wait_message.endswith(SAID), job.wait_message
    assert job.wait_detail == {"reason": "CreateContainerConfigError"}
    assert job.events.filter(message=job.wait_message).count() == 1  # said once, not every cycle


def test_the_jobs_side_names_the_teams_login_and_unbound_claims_only_when_asked(people):
    job = Job(team=people["vision"], image="nvcr.io/acme/model:1", memory_mb=2048, max_runtime_seconds=600)
    subject = pod_states.subject(job)
    assert (subject.namespace, subject.team, subject.image) == ("team-vision", "Computer Vision", job.image)
    assert subject.login("nvcr.io") is None and subject.unbound_claims() == []
    meaning = pod_states.why_failed(job, "DeadlineExceeded", None)
    assert meaning.verdict == Verdict.FAIL and "maximum runtime of 10 minutes" in meaning.sentence

"""Builders of the portal's main objects for tests (Kueue's pkg/util/testing/wrappers.go, Nautobot's factory.py):
people and teams, a resource class, a simulated cluster reconciled into the inventory, and jobs of every kind (a
batch job, a gang, a notebook, an inference service). Each goes through the domain function the product uses
(jobs.actions.submit_job, launch_notebook, create_service, set_quota, sync_inventory), so what it builds is what a
person could have made; the few that write a row directly say so and why. Keyword arguments override the
defaults, which are the constants below. The simulated cluster's own objects (nodes, claims, workloads) are plain
dicts in tests/sim_objects.py."""

from __future__ import annotations

import time

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.choices import MembershipRole
from accounts.models import Membership, Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobKind, JobState
from jobs.cycle.result import CycleResult
from jobs.cycle.run import run_cycle
from jobs.models import Job
from jobs.models.service import InferenceService
from jobs.notebook.sessions import Session, launch_notebook
from jobs.service import ops as service_ops
from jobs.service.render import Probe, ServiceSpec
from jobs.service.render import ResourceClass as RenderedClass
from jobs.storage.volumes import reconcile_volumes
from tests.sim_objects import DEMO_SCENARIO, H100
from vocab.taints import Taint

#: A job's request as the form and the API take it (jobs.actions.submit_job): submit_job's defaults.
JOB_REQUEST = {
    "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "30"], "args": [], "env": [],
    "count": 1, "cpu_millicores": 2000, "memory_mb": 8192, "priority": 50, "preemptible": False,
    "max_runtime_seconds": 3600,
}  # fmt: skip
#: A job as the API's POST /api/v1/jobs/ takes it (CPUs in cores, env as a mapping): api_job_body's defaults.
API_JOB_BODY = {
    "team": "vision", "name": "resnet", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["python", "train.py"],
    "env": {"EPOCHS": "10"}, "resource_class": H100, "count": 2, "cpu": 4, "memory_mb": 16384,
}  # fmt: skip
#: A service as the API's POST /api/v1/services/ takes it: a vLLM chat server of one H100 a replica, 1-2 replicas.
API_SERVICE_BODY = {
    "team": "vision", "name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": ["python", "s.py"],
    "resource_class": H100, "count": 1, "port": 8000, "min_replicas": 1, "max_replicas": 2,
}  # fmt: skip
#: A distributed job's own fields on top of JOB_REQUEST: submit_gang's defaults (2 workers, torchrun).
GANG_REQUEST = {"kind": JobKind.DISTRIBUTED, "workers": 2, "name": "ddp", "command": ["torchrun", "train.py"]}
#: The simulated process prints training steps unless it only sleeps; this environment makes a sleeping command train.
TRAINING_ENV = [{"name": "SIM_GPU_LOAD", "value": "train"}]
#: A notebook's request (jobs.notebook.sessions.launch_notebook): notebook_session's defaults.
NOTEBOOK_REQUEST = {"name": "scratch", "count": 1, "cpu_millicores": 2000, "memory_mb": 8192}
#: An inference service's replica spec and its service fields (jobs.service.ops.create_service): an LLM server of one
#: preemptible H100 per replica, ready on HTTP /health, scaled 1-8 on requests per second.
SERVICE_REPLICA = dict(name="llm", image="registry.example/llm:1", command=["serve"], count=1, cpu_millicores=2000,
                       memory_mb=8192, preemptible=True)  # fmt: skip
SERVICE_AUTOSCALE = dict(port=8080, readiness={"type": "http", "path": "/health", "period_seconds": 5},
                         min_replicas=1, max_replicas=8, metric="pods", metric_name="requests_per_second",
                         metric_target=5.0)  # fmt: skip
#: A job row as the renderers read it, written directly by placed_job: 2 H100s on gpu-h100-03 for two hours.
PLACED_JOB = dict(
    name="resnet-train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"],
    args=["--epochs", "10"], env=[{"name": "EPOCHS", "value": "10"}], count=2, cpu_millicores=8000, memory_mb=65536,
    max_runtime_seconds=7200, node_name="gpu-h100-03",
)  # fmt: skip
#: The demo quotas of simulated_cluster (and the root conftest's ``cluster``): team slug → (guaranteed, limit) H100s.
DEMO_QUOTAS = {"vision": (8, 16), "nlp": (8, 16)}


# -- people, teams, resource classes -------------------------------------------------------------------------------


class UserFactory(factory.django.DjangoModelFactory):
    """A user ``user<n>`` with the tests' password, on no team."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("correct-horse-battery")


class TeamFactory(factory.django.DjangoModelFactory):
    """A team ``team<n>`` in namespace ``team-team<n>``."""

    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    namespace = factory.LazyAttribute(lambda t: f"team-{t.slug}")


class MembershipFactory(factory.django.DjangoModelFactory):
    """A new user's plain membership of a new team (pass ``user``, ``team``, ``role`` to choose)."""

    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = MembershipRole.MEMBER


class ResourceClassFactory(factory.django.DjangoModelFactory):
    """A resource class row without nodes: whole H100s (the demo's key). Classes a cluster advertises come from
    simulated_cluster (the inventory's reconcile writes them); this one is for tests of the class alone."""

    class Meta:
        model = ResourceClass
        django_get_or_create = ("key",)

    key = H100
    kind = "gpu"
    resource_name = factory.LazyAttribute(lambda c: c.key.partition("@")[0])
    product_label = factory.LazyAttribute(lambda c: c.key.partition("@")[2])
    product = factory.LazyAttribute(lambda c: c.product_label.replace("-", " "))


def member(team: Team, username: str = "carol", role: str = MembershipRole.MEMBER):
    """A user ``username`` (carol) with ``role`` (a plain member) in ``team``; returns the user."""
    return MembershipFactory(user=UserFactory(username=username), team=team, role=role).user


# -- the simulated cluster -----------------------------------------------------------------------------------------


def simulated_cluster(
    path, clock=None, *, admin=None, scenario=DEMO_SCENARIO, quotas=None, claims=()
) -> SimulatedCluster:
    """A simulated cluster keeping its state in ``path``, on ``clock`` (the wall clock when None), reconciled into the
    inventory: ``scenario`` a scenario file or dict (the demo's), ``claims`` PersistentVolumeClaims
    (tests/sim_objects.py's claim) made in their namespaces and reconciled into the teams' volumes, ``quotas``
    {team slug: (guaranteed, limit)} of H100s set by ``admin`` (none when None)."""
    sim = SimulatedCluster(path, scenario=scenario, clock=clock or time.time)
    sync_inventory(sim)
    for claim in claims:
        sim.ensure_namespace(claim["metadata"]["namespace"])
        sim.ensure_pvc(claim)
    if claims:
        reconcile_volumes(sim)
    if quotas:
        h100 = ResourceClass.objects.get(key=H100)
        for slug, (guaranteed, limit) in quotas.items():
            actions.set_quota(admin, Team.objects.get(slug=slug), h100, guaranteed, limit)
    return sim


def cycle(sim, clock, seconds: float = 0) -> CycleResult:
    """Moves ``clock`` on by ``seconds``, then runs one job cycle on ``sim`` at that moment."""
    clock.advance(seconds)
    return run_cycle(sim, now=clock.now)


def run_until(sim, clock, job: Job, *states: str, step: float = 6, limit: int = 20) -> Job:
    """Cycles every ``step`` seconds until ``job`` is in one of ``states``; fails after ``limit`` cycles."""
    for _ in range(limit):
        cycle(sim, clock, step)
        job.refresh_from_db()
        if job.state in states:
            return job
    raise AssertionError(f"job stayed {job.state}")


# -- jobs of every kind --------------------------------------------------------------------------------------------


def _team_and_class(team, resource_class) -> tuple[Team, ResourceClass]:
    if isinstance(team, str):
        team = Team.objects.get(slug=team)
    if isinstance(resource_class, str):
        resource_class = ResourceClass.objects.get(key=resource_class)
    return team, resource_class


def submit_job(user, team="vision", resource_class=H100, **fields) -> Job:
    """A job ``user`` submitted the way the form and the API do (jobs.actions.submit_job, so validated, audited
    and queued): ``team`` a Team or its slug, ``resource_class`` a ResourceClass or its key, ``fields`` over
    JOB_REQUEST."""
    team, resource_class = _team_and_class(team, resource_class)
    return actions.submit_job(user, team, resource_class, JOB_REQUEST | fields).job


def submit_gang(user, team="vision", resource_class=H100, **fields) -> Job:
    """A distributed job ``user`` submitted through jobs.actions.submit_job: ``fields`` over JOB_REQUEST and
    GANG_REQUEST (2 workers of 1 GPU each, running torchrun)."""
    return submit_job(user, team, resource_class, **(GANG_REQUEST | fields))


def running_job(sim, clock, user, **fields) -> Job:
    """A job submitted with submit_job (``fields`` over an hour's sleep with TRAINING_ENV) and cycled on ``sim`` until
    it runs."""
    job = submit_job(user, **({"command": ["sleep", "3600"], "env": TRAINING_ENV} | fields))
    cycle(sim, clock)
    return run_until(sim, clock, job, JobState.RUNNING)


def job_in_state(user, state: str, team="vision", resource_class=H100, *, node="gpu-h100-01", **fields) -> Job:
    """A job submitted with submit_job, then written straight into ``state`` on ``node`` (admitted now and, past
    admission, started now): for tests of what follows a state, without cycles to reach it. Queued stays as
    submitted."""
    job = submit_job(user, team, resource_class, **fields)
    if state != JobState.QUEUED:
        now = timezone.now()
        started = now if state != JobState.ADMITTED else None
        Job.objects.filter(pk=job.pk).update(state=state, node_name=node, admitted_at=now, started_at=started)
        job.refresh_from_db()
    return job


def placed_job(owner, resource_class=H100, team="vision", **fields) -> Job:
    """A job row as admission leaves it (on its node, its workload named), written directly with ``fields`` over
    PLACED_JOB: what the renderers read. Not through submit_job, so classes without a quota render too."""
    team, resource_class = _team_and_class(team, resource_class)
    job = Job.objects.create(team=team, owner=owner, resource_class=resource_class, **(PLACED_JOB | fields))
    job.workload_name = job.default_workload_name()
    return job


def finished_job(team, owner, resource_class, submitted, started_after, ran_for, **fields) -> Job:
    """A job that ran and succeeded in the past: submitted at ``submitted`` (submitted_at defaults to now on
    create, so it is set afterwards), started ``started_after`` later, ran for ``ran_for`` (timedeltas). Written
    directly, as history is: the planner's tests build their history from these."""
    started = submitted + started_after
    job = Job.objects.create(
        team=team, owner=owner, resource_class=resource_class, image=fields.pop("image", "x/y:1"),
        state=JobState.SUCCEEDED, node_name=fields.pop("node_name", "gpu-h100-01"),
        started_at=started, finished_at=started + ran_for, **fields,
    )  # fmt: skip
    Job.objects.filter(pk=job.pk).update(submitted_at=submitted)
    job.submitted_at = submitted
    return job


def notebook_session(user, team="vision", resource_class=H100, **fields) -> Session:
    """A notebook ``user`` launched the way the form and the API do (jobs.notebook.sessions.launch_notebook: its
    volume, token and queued session), ``fields`` over NOTEBOOK_REQUEST; the Session holds the notebook and its
    token in clear."""
    team, resource_class = _team_and_class(team, resource_class)
    return launch_notebook(user, team, resource_class, NOTEBOOK_REQUEST | fields)


def inference_service(user, team="vision", resource_class=H100, **changes) -> InferenceService:
    """An inference service ``user`` created the way the form and the API do (jobs.service.ops.create_service: its
    queued job and its row): ``changes`` over SERVICE_REPLICA (plus priority, labels) or SERVICE_AUTOSCALE."""
    team, resource_class = _team_and_class(team, resource_class)
    spec = SERVICE_REPLICA | {k: v for k, v in changes.items() if k in SERVICE_REPLICA or k in ("priority", "labels")}
    service_fields = SERVICE_AUTOSCALE | {k: v for k, v in changes.items() if k in SERVICE_AUTOSCALE}
    return service_ops.create_service(user, team, resource_class, spec, service_fields)


def service_spec(**changes) -> ServiceSpec:
    """What the service renderer reads (jobs.service.render.ServiceSpec, no database): vision's vLLM chat server,
    2-6 replicas of one H100 on the dedicated pool, scaled on requests per second, tolerating the H100 pool's GPU
    taint; ``changes`` replace fields."""
    values = dict(
        name="llm-chat",
        namespace="team-vision",
        team="vision",
        owner="alice",
        image="registry.example.com/vision/vllm:0.4.2",
        command=("python", "-m", "vllm.entrypoints.openai.api_server"),
        args=("--model", "/models/llama", "--port", "8000"),
        port=8000,
        resource_class=RenderedClass(key=H100, resource_name="nvidia.com/gpu", product_label="NVIDIA-H100-80GB-HBM3"),
        count=1,
        cpu_millicores=8000,
        memory_mb=65536,
        min_replicas=2,
        max_replicas=6,
        readiness=Probe(port=8000, path="/health", initial_delay_seconds=30, period_seconds=10),
        liveness=Probe(port=8000, initial_delay_seconds=60, period_seconds=20),
        env=({"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},),
        secret_env=({"name": "HF_TOKEN", "secret": "hf", "key": "token"},),
        volumes=({"claim": "models", "mount_path": "/models", "read_only": True},),
        pull_secrets=("portal-registry-registry.example.com",),
        metric="requests_per_second",
        metric_target="20",
        dedicated_pool=True,
        # The H100 pool's GPU taint, as the GPU Operator docs recommend it (what PoolTaints.for_product finds).
        gpu_taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    )
    return ServiceSpec(**(values | changes))


def api_job_body(**overrides) -> dict:
    """A valid body for POST /api/v1/jobs/: ``overrides`` over API_JOB_BODY, where None leaves a field out."""
    return {k: v for k, v in (API_JOB_BODY | overrides).items() if v is not None}

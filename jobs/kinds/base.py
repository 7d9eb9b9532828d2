"""What a kind of workload must tell the scheduler (Kueue's jobframework.GenericJob, in this portal's terms).

Admission, placement and the job cycle never ask which kind a job is: they ask its kind what it demands of
quota and placement, which Kubernetes objects it becomes, and what the cluster's objects say about its state.
A new kind (distributed training, an inference service) is a new subclass registered in ``jobs.kinds``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from cluster.base import WorkloadForms
from jobs.choices import JobState
from jobs.dra_claims import is_dra_class, shared_claim_name, shares_devices, template_name
from vocab.dra import COMPUTE_DOMAIN_KIND, RESOURCE_CLAIM_KIND, RESOURCE_CLAIM_TEMPLATE_KIND
from vocab.pod_states import container_state, waiting_reason

#: What the cluster shows of a workload, reduced to the portal's words.
PENDING, RUNNING, SUCCEEDED, FAILED = "pending", "running", "succeeded", "failed"
#: A gang whose rank went with its node (or whose workload vanished): requeued whole, not counted as a retry.
LOST = "lost"
#: The reason of a rank that did not fail itself but was stopped because another rank of its gang failed.
STOPPED_WITH_GANG = "StoppedWithGang"


@dataclass(frozen=True)
class Demand:
    """What a job asks of quota and placement: ``units`` of its resource class in each of ``pods`` pods."""

    resource_class_id: int
    units: int
    cpu_m: int
    memory_mb: int
    pods: int = 1
    #: Whether the class's alternatives may serve it: the portal pins its pods to the nodes admission picks, so they
    #: ask exactly the class admission chose (jobs.scheduling.decide rule 6). A kind whose pods the cluster's
    #: scheduler places says False.
    alternatives: bool = True

    @property
    def total_units(self) -> int:
        return self.units * self.pods

    @property
    def total_cpu_m(self) -> int:
        return self.cpu_m * self.pods

    @property
    def total_memory_mb(self) -> int:
        return self.memory_mb * self.pods


@dataclass(frozen=True)
class Observation:
    """The state the cluster shows. ``reason``/``message`` are the cluster's words (a container's waiting or
    terminated reason, a scheduling condition); ``condition_message`` is the workload's Failed condition text."""

    phase: str
    pod_name: str = ""
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    condition_message: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in (SUCCEEDED, FAILED)

    @property
    def failed(self) -> bool:
        return self.phase == FAILED


def timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def condition(obj: dict, kind: str) -> dict | None:
    """The object's status condition ``kind`` if it is True."""
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind and entry.get("status") == "True":
            return entry
    return None


def observe_batch_job(workload: dict, pod: dict | None) -> Observation:
    """A batch/v1 Job with one pod: its Complete/Failed conditions and its container tell the state."""
    kind, detail = container_state(pod)
    pod_name = pod["metadata"]["name"] if pod else ""
    complete, failed = condition(workload, "Complete"), condition(workload, "Failed")
    if complete or failed or kind == "terminated":
        if kind == "terminated":
            exit_code = detail.get("exitCode")
            reason = detail.get("reason") or ""
            finished = timestamp(detail.get("finishedAt"))
            started = timestamp(detail.get("startedAt"))
        else:
            exit_code, reason, started = None, "", None
            finished = timestamp((complete or failed).get("lastTransitionTime"))
        if failed and failed.get("reason") == "DeadlineExceeded":
            reason = "DeadlineExceeded"
        succeeded = bool(complete) or (kind == "terminated" and exit_code == 0 and not failed)
        return Observation(
            SUCCEEDED if succeeded else FAILED,
            pod_name,
            reason,
            exit_code=exit_code,
            started_at=started,
            finished_at=finished,
            condition_message=(failed or {}).get("message") or "",
        )
    if kind == "running":
        return Observation(RUNNING, pod_name, started_at=timestamp(detail.get("startedAt")))
    reason, message = waiting_reason(pod)
    return Observation(PENDING, pod_name, reason, message)


@dataclass(frozen=True)
class GangObservation:
    """What the cluster shows of a gang (a job whose pods, its ranks, live and die together): the state of the
    whole (PENDING, RUNNING when every rank runs, SUCCEEDED when every rank succeeded, FAILED when a rank failed,
    LOST when a rank went with its node or its workload vanished), each rank for ``Job.ranks``, and for a
    failure or a loss which rank and why. ``pods``: every rank's pod name (their logs are kept)."""

    phase: str
    ranks: list[dict]
    rank: int | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    node: str = ""
    pod_name: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pods: tuple[str, ...] = ()


@dataclass
class ElasticViews:
    """What an elastic kind adds to one admission pass beside its jobs' own rows (as Kueue's elastic workloads):
    the units it was granted above its jobs' admitted minimum, and the next unit it wants."""

    #: Admission's views (JobView) of the units already granted: they hold capacity and may be reclaimed.
    active: list = field(default_factory=list)
    #: Admission's views of the units wanted next (one per job at a time).
    queued: list = field(default_factory=list)
    #: (node, resource name, units, cpu_m, memory_mb) the granted units hold.
    holds: list[tuple[str, str, int, int, int]] = field(default_factory=list)


class WorkloadKind(ABC):
    """One kind of job. Subclasses set ``name`` (a ``JobKind`` value) and implement ``render``."""

    name: ClassVar[str]
    #: Relations ``render`` reads, fetched with the jobs the cycle launches (``select_related`` paths).
    related: ClassVar[tuple[str, ...]] = ()
    #: What one of the job's pods is called in its timeline when it has several ("4 workers on …").
    pod_noun: ClassVar[str] = "worker"

    def workload_text(self, job) -> str:
        """The job's objects in the cluster, in words, for the timeline ("Workload gpj-7-train")."""
        return f"Workload {job.workload_name}"

    #: Whether the kind's pods go to the dedicated service pool (settings.PORTAL_SERVICE_POOL_LABEL) when it has
    #: nodes; every other kind's work is kept off the pool's nodes.
    uses_service_pool: ClassVar[bool] = False
    #: Whether the kind's active jobs are followed by a step of their own (``follow``) instead of the batch
    #: reconcile, which then neither observes nor loses them.
    followed_elsewhere: ClassVar[bool] = False

    def follow(self, backend, result, now: datetime | None, cluster=None, home_id=None) -> None:  # noqa: B027 - a hook
        """The cycle's own step for a kind that is ``followed_elsewhere``: reconcile its jobs' objects with the
        cluster, counting into ``result`` (jobs.cycle.result.CycleResult). Raises ClusterError when the cluster
        cannot be read. Nothing by default."""

    def elastic_views(self, now: datetime, classes: dict, pool: bool) -> ElasticViews | None:
        """For a kind granted units one by one above its admitted minimum: what it holds and wants, as admission's
        views for this pass (``classes``: resource class id → view; ``pool``: whether the dedicated pool is in
        use). None by default."""
        return None

    def take_elastic(self, decisions, now: datetime) -> None:  # noqa: B027 - a hook, empty by default
        """Apply what admission decided about this kind's elastic views and remove them from ``decisions``, before
        the cycle applies the rest to jobs. Nothing by default."""

    def demand(self, job) -> Demand:
        """What the job asks of quota and placement (one pod with the job's request, by default)."""
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb)

    @abstractmethod
    def render(self, job, forms: WorkloadForms | None = None) -> list[dict[str, Any]]:
        """The Kubernetes objects the job becomes: what it needs first (volumes, Services; ensured, idempotent),
        then its workloads (created; named from the job's ``workload_name``). ``forms``: what the cluster's API
        server supports (cluster.base.forms_for), for kinds that render differently by version."""

    def launch(self, backend, job, forms: WorkloadForms | None = None) -> dict | None:
        """Create what ``render`` returns: the objects it needs first (ensured), then its workloads (created,
        idempotent). Returns the first workload created (its uid is recorded), or None when nothing was. A job that
        reports its checkpoints by token gets the attempt's token Secret first, owned by the workloads once they
        exist (jobs.checkpoint_tokens)."""
        # It reads models: imported here, since the kind registry is imported before Django has started.
        from jobs import checkpoint_tokens  # noqa: PLC0415

        prepared = checkpoint_tokens.prepare(backend, job)
        created = []
        for manifest in self.render(job, forms):
            if manifest["kind"] == "Job":
                created.append(backend.create_workload(manifest))
            else:
                ensure(backend, manifest)
        if prepared is not None:
            checkpoint_tokens.hand_over(backend, job, prepared, created)
        return created[0] if created else None

    def observe(self, workload: dict, pod: dict | None) -> Observation:
        """The state the cluster shows for the workload and its newest pod."""
        return observe_batch_job(workload, pod)

    def owns(self, job, workload_name: str) -> bool:
        """Whether the workload named so belongs to the job's current attempt (one workload by default)."""
        return workload_name == job.workload_name

    def leftover_is_stale(self, job, workload_name: str) -> bool:
        """Whether the cycle deletes this workload of the job (keeping its log first): an earlier attempt's, or
        any of a job that was cancelled or requeued. A finished one-pod job's workload stays until its TTL."""
        return not self.owns(job, workload_name) or job.state in (JobState.CANCELLED, JobState.QUEUED)

    def observe_gang(self, job, workloads: list[dict], pods: list[dict], lost_nodes: set[str]):
        """A ``GangObservation`` for a kind whose job is several pods that live and die together, from the
        current attempt's workloads and their pods (found by the job-id label); None for one-pod kinds, which
        the cycle follows with ``observe``. ``lost_nodes``: nodes that are gone or not Ready."""
        return None

    def attempt_objects(self, job) -> list[tuple[str, str]]:
        """(kind, name) of the objects beside its workloads that belong to one attempt and are deleted with them
        (``delete_attempt_objects``): by default a DRA class's GPU claim template (jobs.dra_claims); a notebook's
        Service and volume outlive its sessions. Names only, no query: called before a transition renames the
        attempt."""
        if is_dra_class(job.resource_class) and job.workload_name:
            if shares_devices(job.resource_class):  # the claim its pod shares a device through
                return [(RESOURCE_CLAIM_KIND, shared_claim_name(job.workload_name))]
            return [(RESOURCE_CLAIM_TEMPLATE_KIND, template_name(job.workload_name))]
        return []

    def on_start(self, jobs) -> None:  # noqa: B027 - a hook: kinds override it when they keep bookkeeping
        """Called once when jobs of this kind started running (admitted → running), inside the transition's
        transaction, with the jobs that moved: models or jobs.lifecycle_bulk.StartingJob rows (``pk`` and
        ``started_at``). Nothing by default."""

    def on_end(self, job) -> None:  # noqa: B027 - a hook: kinds override it when they keep bookkeeping
        """Called once when the job reached a final state (succeeded, failed, lost). Nothing by default."""


def ensure(backend, manifest: dict) -> None:
    """Create-or-keep one of the objects a workload needs first (idempotent)."""
    apply = {
        "PersistentVolumeClaim": backend.ensure_pvc,
        "Service": backend.ensure_service,
        RESOURCE_CLAIM_TEMPLATE_KIND: backend.apply_resource_claim_template,
        RESOURCE_CLAIM_KIND: backend.apply_resource_claim,
        COMPUTE_DOMAIN_KIND: backend.apply_compute_domain,
    }.get(manifest["kind"])
    if apply is None:
        raise ValueError(f"The portal cannot create a {manifest['kind']} before a workload.")
    apply(manifest)


def delete_attempt_objects(backend, namespace: str, objects: list[tuple[str, str]]) -> None:
    """Delete what ``WorkloadKind.attempt_objects`` named, in the team's ``namespace`` (each gone already is fine)."""
    delete = {
        "Service": backend.delete_service,
        RESOURCE_CLAIM_TEMPLATE_KIND: backend.delete_resource_claim_template,
        RESOURCE_CLAIM_KIND: backend.delete_resource_claim,
        COMPUTE_DOMAIN_KIND: backend.delete_compute_domain,
    }
    for kind, name in objects:
        delete[kind](namespace, name)

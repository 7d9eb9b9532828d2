from django.db import models

from vocab import waits


class JobKind(models.TextChoices):
    BATCH = "batch", "Batch job"
    NOTEBOOK = "notebook", "Notebook"
    #: W workers × G GPUs each, one pod per node, admitted and stopped as one gang (torchrun/NCCL).
    DISTRIBUTED = "distributed", "Distributed training"
    #: A long-running Deployment + Service + HorizontalPodAutoscaler (jobs.models.service.InferenceService).
    SERVICE = "service", "Inference service"


class JobState(models.TextChoices):
    #: Waiting in the portal's queue; nothing exists in the cluster.
    QUEUED = "queued", "Queued"
    #: Admitted against quota and placed on a node; the workload exists or is being created, its pod has not
    #: started yet (it may be Pending in the cluster, with the scheduler's reason).
    ADMITTED = "admitted", "Admitted"
    RUNNING = "running", "Running"
    #: Running on borrowed capacity that a guaranteed job needs back; stopped and requeued after the grace period.
    PREEMPTING = "preempting", "Being preempted"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    #: The workload disappeared from the cluster without the portal deleting it.
    LOST = "lost", "Lost"


#: States that hold quota and capacity.
ACTIVE_STATES = (JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING)
#: States a job never leaves (except by resubmitting, which makes a new job).
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST)
#: States a job can be cancelled from.
CANCELLABLE_STATES = (JobState.QUEUED, *ACTIVE_STATES)

STATE_BADGE = {
    JobState.QUEUED: "amber",
    JobState.ADMITTED: "blue",
    JobState.RUNNING: "green",
    JobState.PREEMPTING: "amber",
    JobState.SUCCEEDED: "green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "grey",
    JobState.LOST: "red",
}

#: Kinds whose jobs end by being stopped, not cancelled (a notebook's session, a service's replicas): a cancelled
#: one reads "Stopped" (Job.state_label); its stored state stays "cancelled" (its quota was freed at once).
STOPPED_NOT_CANCELLED_KINDS = (JobKind.NOTEBOOK, JobKind.SERVICE)


#: The order a job array's summary counts states in ("3 running, 10 queued, 1 failed").
SUMMARY_ORDER = (
    JobState.RUNNING, JobState.PREEMPTING, JobState.ADMITTED, JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED,
    JobState.CANCELLED, JobState.LOST,
)  # fmt: skip


class Priority(models.IntegerChoices):
    LOW = 0, "Low"
    NORMAL = 50, "Normal"
    HIGH = 100, "High"


class Architecture(models.TextChoices):
    """CPU architectures a job can be pinned to (the kubernetes.io/arch node label's values)."""

    ANY = "", "Any"
    AMD64 = "amd64", "amd64 (x86-64)"
    ARM64 = "arm64", "arm64 (Grace Hopper / Grace Blackwell)"


#: Why a queued (or admitted but not yet running) job is not running: the choices of ``Job.wait_reason``, built
#: from the plain enum the scheduling core returns (vocab.waits.WaitReason: same names, values and labels).
WaitReason = models.TextChoices(
    "WaitReason", [(reason.name, (reason.value, reason.label)) for reason in waits.WaitReason], module=__name__
)


class EventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    WAITING = "waiting", "Waiting"
    ADMITTED = "admitted", "Admitted"
    CREATED = "created", "Workload created"
    PENDING = "pending", "Pending in the cluster"
    STARTED = "started", "Started"
    PREEMPT_NOTICE = "preempt_notice", "Preemption notice"
    REQUEUED = "requeued", "Requeued"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    LOST = "lost", "Workload lost"
    RESUBMITTED = "resubmitted", "Resubmitted"
    LIMIT_WARNING = "limit_warning", "Stop warning"
    EXTENDED = "extended", "Extended"
    STOPPED = "stopped", "Notebook stopped"
    PRIORITY = "priority", "Priority changed"
    CHECKPOINT = "checkpoint", "Checkpoint reported"
    #: An inference service's change: created, rolled out, scaled, paused, resumed, rolled back, a replica granted,
    #: given back or reclaimed (jobs.service.ops, jobs.service.follow).
    SERVICE = "service", "Service changed"


class NotebookState(models.TextChoices):
    #: A session exists (its job is queued, starting or running).
    ACTIVE = "active", "Active"
    #: No workload; the home volume is kept for "Start again".
    STOPPED = "stopped", "Stopped"


class WorkspaceKind(models.TextChoices):
    """The server a notebook runs (jobs.notebook.workspaces holds each one's image, port, command and idle signal)."""

    JUPYTER = "jupyter", "JupyterLab"
    CODE_SERVER = "code-server", "VS Code (code-server)"
    RSTUDIO = "rstudio", "RStudio Server"


class StopReason(models.TextChoices):
    TTL = "ttl", "Reached its maximum age"
    IDLE = "idle", "Idle too long"
    USER = "user", "Stopped by its owner"
    ADMIN = "admin", "Stopped by an admin or team lead"
    RECLAIM = "reclaim", "Quota reclaimed"
    ENDED = "ended", "Its workload ended"


class NotebookLimit(models.TextChoices):
    TTL = "ttl", "Maximum age"
    IDLE = "idle", "Idle timeout"


class JobAuditAction(models.TextChoices):
    """Audit verbs of jobs, notebooks and quotas (registered with core.audit in JobsConfig.ready)."""

    JOB_SUBMIT = "job.submit", "Job submitted"
    JOB_CANCEL = "job.cancel", "Job cancelled"
    JOB_RESUBMIT = "job.resubmit", "Job resubmitted"
    JOB_PREEMPT = "job.preempt", "Job preempted"
    JOB_PRIORITY = "job.priority", "Job priority changed"
    ARRAY_SUBMIT = "job_array.submit", "Job array submitted"
    ARRAY_CANCEL = "job_array.cancel", "Job array cancelled"
    NOTEBOOK_LAUNCH = "notebook.launch", "Notebook launched"
    NOTEBOOK_START = "notebook.start", "Notebook started again"
    NOTEBOOK_EXTEND = "notebook.extend", "Notebook extended"
    NOTEBOOK_WARN = "notebook.warn", "Notebook stop warning sent"
    NOTEBOOK_STOP = "notebook.stop", "Notebook stopped"
    NOTEBOOK_OPEN = "notebook.open", "Notebook opened (one-time ticket issued)"
    NOTEBOOK_POLICY = "notebook.policy", "Notebook policy set"
    SERVICE_CREATE = "service.create", "Inference service created"
    SERVICE_UPDATE = "service.update", "Inference service updated"
    SERVICE_SCALE = "service.scale", "Inference service replica bounds changed"
    SERVICE_PAUSE = "service.pause", "Inference service rollouts paused"
    SERVICE_RESUME = "service.resume", "Inference service rollouts resumed"
    SERVICE_ROLLBACK = "service.rollback", "Inference service rolled back"
    SERVICE_STOP = "service.stop", "Inference service stopped"
    SERVICE_RECLAIM = "service.reclaim", "Inference service replica reclaimed"
    QUOTA_SET = "quota.set", "Quota set"
    QUOTA_DELETE = "quota.delete", "Quota removed"
    MEMBER_WEIGHTS = "team.member_weights", "Members' fair-share weights set"
    MIN_RUNTIME = "team.min_runtime", "Minimum runtime before preemption set"
    DATASET_PUBLISH = "dataset.publish", "Dataset published"
    DATASET_CHANGE = "dataset.change", "Dataset changed or published to other teams"
    DATASET_DELETE = "dataset.delete", "Dataset unpublished and removed"
    SECRET_CREATE = "secret.create", "Team secret created"
    SECRET_ROTATE = "secret.rotate", "Team secret rotated"
    SECRET_DELETE = "secret.delete", "Team secret deleted"
    REGISTRY_CREATE = "registry.create", "Registry credential added"
    REGISTRY_ROTATE = "registry.rotate", "Registry credential rotated"
    REGISTRY_DELETE = "registry.delete", "Registry credential deleted"
    PRESENCE_IN_STEP = "presence.in_step", "Team presence in step on a cluster"
    PRESENCE_ERROR = "presence.error", "Team presence on a cluster failed"
    TEMPLATE_SAVE = "template.save", "Workload template saved (a new version)"
    TEMPLATE_DELETE = "template.delete", "Workload template removed"


class TemplateKind(models.TextChoices):
    """What a workload template makes (jobs.workload_templates): its spec is in the shape of that kind's create API."""

    #: POST /api/v1/jobs/ (and /api/v1/job-arrays/): a job, a distributed job or a job array.
    JOB = "job", "Job"
    #: POST /api/v1/notebooks/.
    NOTEBOOK = "notebook", "Notebook"
    #: POST /api/v1/services/.
    SERVICE = "service", "Inference service"


class PresenceState(models.TextChoices):
    """Whether a team's namespace, secrets and registry credentials on one cluster match the portal's record
    (``TeamPresence``; jobs.teams.presence keeps them in step)."""

    PENDING = "pending", "Pending"
    IN_STEP = "in_step", "In step"
    ERROR = "error", "Error"


class TopologyMode(models.TextChoices):
    """How a distributed job's workers relate to an admin-configured node label (PORTAL_TOPOLOGY_KEYS)."""

    NONE = "", "No constraint"
    #: All workers on nodes with one value of the label when such a set exists, else anywhere.
    PREFER = "prefer", "Prefer one value"
    #: All workers on nodes with one value of the label, or the job waits.
    REQUIRE = "require", "Require one value"


class RankState(models.TextChoices):
    """What the cluster shows of one rank (worker pod) of a distributed job (``Job.ranks``)."""

    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    #: Its pod or its node is gone.
    LOST = "lost", "Lost"


class ServiceState(models.TextChoices):
    """What the owner asked of an inference service (its replicas' state comes from its job and the cluster)."""

    ACTIVE = "active", "Active"
    #: Rollouts held (Deployment spec.paused); replicas keep running.
    PAUSED = "paused", "Paused"
    #: Deleted by its owner or a lead: the Deployment, Service and HPA are removed.
    STOPPED = "stopped", "Stopped"


class ServiceMetric(models.TextChoices):
    """What the HorizontalPodAutoscaler scales on."""

    CPU = "cpu", "CPU utilisation (%)"
    #: A per-pod custom metric served by the cluster's metrics adapter (e.g. requests_per_second).
    PODS = "pods", "Per-replica custom metric"
    #: A metric of something outside the pods (e.g. a queue's depth) from an external metrics adapter.
    EXTERNAL = "external", "External metric"

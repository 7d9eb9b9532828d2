"""Quotas, jobs and their timelines.

A Job row is the portal's record of one piece of GPU work: what was asked for, where the admission cycle
put it, what the cluster says about it, and why it waits. The workload in the cluster (a batch/v1 Job) is
named after the row (``Job.workload_name``), so creating it twice can never make twins.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from gpus.choices import SETTINGS_CLUSTER
from jobs import estimate_words
from jobs.choices import (
    ACTIVE_STATES,
    CANCELLABLE_STATES,
    STATE_BADGE,
    STOPPED_NOT_CANCELLED_KINDS,
    SUMMARY_ORDER,
    TERMINAL_STATES,
    Architecture,
    EventKind,
    JobKind,
    JobState,
    NotebookState,
    Priority,
    StopReason,
    TopologyMode,
    WaitReason,
    WorkspaceKind,
)


class Quota(models.Model):
    """What one team may use of one resource class.

    ``guaranteed`` units are the team's whatever else runs; above that, up to ``limit``, a team may borrow
    capacity nobody with a guarantee is waiting for, with preemptible jobs only (they are reclaimed when a
    guaranteed job needs the room). ``monthly_gpu_hours`` caps use per calendar month (UTC) in normalised
    GPU-hours: one unit of the class for one hour counts ``resource_class.gpu_fraction`` hours.
    """

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="quotas")
    resource_class = models.ForeignKey("gpus.ResourceClass", on_delete=models.PROTECT, related_name="quotas")
    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(default=0)
    monthly_gpu_hours = models.DecimalField(max_digits=10, decimal_places=1, null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["team__slug", "resource_class__kind", "resource_class__product", "resource_class__profile"]
        constraints = [
            models.UniqueConstraint(fields=["team", "resource_class"], name="unique_quota_per_team_class"),
            models.CheckConstraint(condition=Q(limit__gte=models.F("guaranteed")), name="quota_limit_gte_guaranteed"),
            models.CheckConstraint(
                condition=Q(monthly_gpu_hours__isnull=True) | Q(monthly_gpu_hours__gte=0), name="quota_budget_gte_0"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug} · {self.resource_class.display_name}: {self.guaranteed}/{self.limit}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:team-detail", args=[self.team.slug])  # quotas are listed and changed on the team page


class QuotaClusterCap(models.Model):
    """The most units of its class a quota's team may hold on one cluster (as Run:ai sets quota per node pool).

    The quota itself stays fleet-wide: its guarantee and limit count what the team holds on every cluster, and a
    cap only narrows where its jobs may go (admission, jobs.scheduling.clusters). A cap is at most the limit."""

    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="cluster_caps")
    cluster = models.ForeignKey("gpus.Cluster", on_delete=models.CASCADE, related_name="quota_caps")
    limit = models.PositiveIntegerField()

    class Meta:
        ordering = ["quota", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["quota", "cluster"], name="unique_cap_per_quota_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.quota} · at most {self.limit} on {self.cluster.name}"


class JobQuerySet(models.QuerySet):
    """Who may see which jobs is jobs.access's answer (``visible_jobs``), not the queryset's."""

    def active(self):
        return self.filter(state__in=ACTIVE_STATES)


class Job(models.Model):
    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_jobs")
    kind = models.CharField(max_length=12, choices=JobKind.choices, default=JobKind.BATCH)
    name = models.CharField(max_length=40)
    image = models.CharField(max_length=255)
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    #: [{"name": "EPOCHS", "value": "10"}, ...] in the order given.
    env = models.JSONField(default=list, blank=True)
    #: Environment from team secrets: [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}, ...].
    secret_env = models.JSONField(default=list, blank=True)
    #: Team secrets as read-only files: [{"secret": "gcs", "path": "/secrets/gcs", "keys": ["key.json"]}, ...]
    #: (no keys: every key of the secret, one file each).
    secret_files = models.JSONField(default=list, blank=True)
    resource_class = models.ForeignKey("gpus.ResourceClass", on_delete=models.PROTECT, related_name="jobs")
    count = models.PositiveSmallIntegerField(default=1)
    cpu_millicores = models.PositiveIntegerField(default=2000)
    memory_mb = models.PositiveIntegerField(default=8192)
    priority = models.IntegerField(choices=Priority.choices, default=Priority.NORMAL)
    preemptible = models.BooleanField(default=False)
    max_runtime_seconds = models.PositiveIntegerField(default=4 * 3600)
    #: The CUDA version (major, minor) the image needs, when the image is one whose version is known.
    image_cuda = models.CharField(max_length=10, blank=True)
    #: The CPU architecture the job must run on (kubernetes.io/arch); blank: any node of the class.
    architecture = models.CharField(max_length=16, choices=Architecture.choices, blank=True, default="")

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    #: The latest answer to "why is this not running"; blank once it runs.
    wait_reason = models.CharField(max_length=12, choices=WaitReason.choices, blank=True)
    wait_message = models.TextField(blank=True)
    wait_detail = models.JSONField(default=dict, blank=True)
    #: 1-based position among the queued jobs of the same resource class, in admission order.
    queue_position = models.PositiveIntegerField(null=True, blank=True)

    #: A queued job's estimated start (jobs.cycle.estimates): likely between low and high; high empty: possibly
    #: later than the horizon; both empty with ``estimated_at`` set: not within the horizon. Set while queued.
    estimated_start_low = models.DateTimeField(null=True, blank=True)
    estimated_start_high = models.DateTimeField(null=True, blank=True)
    estimated_at = models.DateTimeField(null=True, blank=True)
    #: On a fleet: the cluster the estimate starts it on (blank on one cluster, or with no estimate).
    estimated_cluster = models.CharField(max_length=63, blank=True)

    #: The clusters of the fleet the job may run on, most preferred first (names; empty: the portal chooses where it
    #: can start soonest). Admission tries them in order (spill-over).
    clusters = models.JSONField(default=list, blank=True)
    #: The cluster the job was placed on (admission sets it with the node); None until then.
    cluster = models.ForeignKey("gpus.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")
    node_name = models.CharField(max_length=253, blank=True)
    #: Admitted above the team's guarantee (on idle capacity); may be reclaimed.
    borrowed = models.BooleanField(default=False)
    preempt_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    workload_name = models.CharField(max_length=63, blank=True)
    workload_uid = models.CharField(max_length=64, blank=True)
    workload_created_at = models.DateTimeField(null=True, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    failure_reason = models.CharField(max_length=60, blank=True)

    idempotency_key = models.CharField(max_length=100, blank=True)
    #: SHA-256 of the submitted fields, so a reused Idempotency-Key with a different body is refused.
    request_hash = models.CharField(max_length=64, blank=True)
    resubmitted_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    submitted_at = models.DateTimeField(default=timezone.now, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    #: GPU-seconds (normalised) of earlier attempts that were preempted and requeued.
    charged_gpu_seconds = models.FloatField(default=0.0)
    #: Mean utilisation (%) of the job's GPUs over the idle window, from telemetry; None without data.
    gpu_util_recent = models.FloatField(null=True, blank=True)
    #: Set while the job's GPUs have stayed under the idle threshold for the whole idle window: since when.
    idle_since = models.DateTimeField(null=True, blank=True)
    #: For kind=notebook: the notebook this job is one session of.
    notebook = models.ForeignKey("Notebook", null=True, blank=True, on_delete=models.CASCADE, related_name="sessions")
    #: The user's own labels, {key: value} in Kubernetes label grammar, put on the workload and its pods.
    labels = models.JSONField(default=dict, blank=True)
    #: The container's working directory (an absolute path); blank: the image's own.
    working_dir = models.CharField(max_length=255, blank=True)
    #: For a task of a job array: the array and the task's index (0-based; the pod sees it as PORTAL_ARRAY_INDEX).
    array = models.ForeignKey("JobArray", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks")
    array_index = models.PositiveIntegerField(null=True, blank=True)
    #: The team's claims mounted into the container: [{"claim", "mount_path", "read_only"}] (jobs.storage.volumes).
    volumes = models.JSONField(default=list, blank=True)
    #: Size of the memory-backed /dev/shm in MiB; None: PORTAL_SHM_FRACTION of memory_mb
    #: (jobs.storage.volumes.shm_mebibytes).
    shm_mb = models.PositiveIntegerField(null=True, blank=True)

    # Distributed training (kind=distributed): ``workers`` pods (ranks), one per node, ``count`` GPUs each.
    workers = models.PositiveSmallIntegerField(default=1)
    #: An admin-configured node label (one of PORTAL_TOPOLOGY_KEYS) the workers should share one value of.
    topology_key = models.CharField(max_length=317, blank=True)
    topology_mode = models.CharField(max_length=8, choices=TopologyMode.choices, blank=True, default="")
    #: How many times the portal restarts the whole job after a failure (a failed rank stops every rank).
    max_retries = models.PositiveSmallIntegerField(default=0)
    #: The node of each rank, in rank order, while admitted ([] for one-pod jobs, whose node is ``node_name``;
    #: for a gang ``node_name`` is rank 0's).
    node_names = models.JSONField(default=list, blank=True)
    #: What the cluster shows of each rank, rank order: [{"rank", "node", "pod", "state" (RankState),
    #: "exit_code", "reason"}] (empty for one-pod jobs).
    ranks = models.JSONField(default=list, blank=True)
    #: The rank whose failure stopped the gang (None otherwise).
    failed_rank = models.PositiveSmallIntegerField(null=True, blank=True)

    # Checkpoint-aware preemption (jobs.checkpoints): how the job checkpoints, {} when it did not say:
    # {"signal": "SIGUSR1", "grace_seconds": 300, "report": "api"}. A preemption notice delivers the signal at once
    # and stops the job ``grace_seconds`` later.
    checkpoint = models.JSONField(default=dict, blank=True)
    #: When the job last reported a checkpoint (POST /api/v1/jobs/<id>/checkpoint/); kept across attempts.
    last_checkpoint_at = models.DateTimeField(null=True, blank=True)
    #: Normalised GPU-seconds lost to preemption: at each preemption, the time since the later of its start and its
    #: last checkpoint × its GPUs (showback, jobs.usage).
    preemption_lost_gpu_seconds = models.FloatField(default=0.0)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"], condition=~Q(idempotency_key=""), name="unique_idempotency_key"
            ),
            models.CheckConstraint(condition=Q(count__gte=1), name="job_count_gte_1"),
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_gte_1"),
        ]
        # The lists (API and pages) read the newest first (ordering above) under their filters: each index below
        # hands a filter's first page over in order, without sorting every visible job (tests/unit/jobs/
        # test_api_plans.py EXPLAINs them on PostgreSQL). The labels' GIN index is PostgreSQL-only, so it is made
        # by migration 0012's SQL instead of here.
        indexes = [
            models.Index(fields=["state", "resource_class"]),
            models.Index(fields=["team", "state"]),
            models.Index(fields=["-submitted_at", "-id"], name="job_newest"),
            models.Index(fields=["team", "-submitted_at", "-id"], name="job_team_newest"),
            models.Index(fields=["team", "state", "-submitted_at", "-id"], name="job_team_state_newest"),
            models.Index(fields=["state", "-submitted_at", "-id"], name="job_state_newest"),
            models.Index(fields=["owner", "-submitted_at", "-id"], name="job_owner_newest"),
            models.Index(fields=["team", "priority"], name="job_team_priority"),
            models.Index(fields=["team", "id"], name="job_team_id"),
            models.Index(fields=["priority"], name="job_priority"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:job-detail", args=[self.pk])

    @property
    def estimated_start(self) -> str:
        """The start-time estimate in words while queued ("likely between 14:20 and 15:05"); "" otherwise."""
        if self.state != JobState.QUEUED:
            return ""
        return estimate_words.phrase(
            self.estimated_start_low, self.estimated_start_high, self.estimated_at, cluster=self.estimated_cluster
        )

    @property
    def audit_cluster(self) -> str:
        """The cluster an audit record of this job names (core.audit): where it was placed; "" before that."""
        return self.cluster.name if self.cluster_id is not None else ""

    @property
    def state_badge(self) -> str:
        return STATE_BADGE.get(self.state, "grey")

    def owner_words(self) -> tuple[str, str]:
        """How its owner knows this work, and its page: a notebook's session is "notebook #<the notebook's id>
        <name>" (never the session job's id), anything else "<kind> #<job id> <name>"."""
        if self.notebook_id is not None:
            notebook = self.notebook
            return f"notebook #{notebook.pk} {notebook.name}", notebook.get_absolute_url()
        noun = "job" if self.kind == JobKind.BATCH else self.get_kind_display().lower()
        return f"{noun} #{self.pk} {self.name}", self.get_absolute_url()

    @property
    def state_label(self) -> str:
        """The state in words. A notebook session or a service's replicas end by being stopped (the job is cancelled
        so its quota is free at once): they read "Stopped", not "Cancelled"."""
        if self.state == JobState.CANCELLED and self.kind in STOPPED_NOT_CANCELLED_KINDS:
            return "Stopped"
        return self.get_state_display()

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def is_cancellable(self) -> bool:
        return self.state in CANCELLABLE_STATES

    @property
    def gpu_units(self) -> float:
        """Normalised GPUs this job holds while active: workers × count × the class's fraction of a physical GPU."""
        return self.workers * self.count * self.resource_class.gpu_fraction

    @property
    def total_count(self) -> int:
        """Units of the class the job holds while active (W × G for a gang)."""
        return self.workers * self.count

    @property
    def is_gang(self) -> bool:
        return self.workers > 1 or self.kind == JobKind.DISTRIBUTED

    def default_workload_name(self) -> str:
        """``gpj-<id>-<name>``, cut to 63 characters: a DNS label, unique and stable for the row."""
        return f"gpj-{self.pk}-{self.name}"[:63].rstrip("-")

    def gpu_seconds(self, until=None) -> float:
        """Normalised GPU-seconds used so far: earlier attempts plus the current run."""
        used = self.charged_gpu_seconds
        if self.started_at:
            end = self.finished_at or until or timezone.now()
            used += max(0.0, (end - self.started_at).total_seconds()) * self.gpu_units
        return used


class JobArray(models.Model):
    """One submission of ``size`` tasks with the same spec. Each task is a Job of its own (``Job.array``) that
    queues, counts against quota and runs like any job; ``parallelism`` caps how many run at once (admission
    honours it). Cancelling the array cancels every task that has not ended."""

    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="job_arrays")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays")
    name = models.CharField(max_length=40)
    size = models.PositiveIntegerField()
    #: Most tasks admitted (holding GPUs) at once; None: no cap beyond quota and capacity.
    parallelism = models.PositiveIntegerField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)
    idempotency_key = models.CharField(max_length=100, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"], condition=~Q(idempotency_key=""), name="unique_array_idem_key"
            ),
            models.CheckConstraint(condition=Q(size__gte=1), name="job_array_size_gte_1"),
            models.CheckConstraint(
                condition=Q(parallelism__isnull=True) | Q(parallelism__gte=1), name="job_array_parallelism_gte_1"
            ),
        ]

    def __str__(self) -> str:
        return f"array #{self.pk} {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:array-detail", args=[self.pk])

    def state_counts(self) -> dict[str, int]:
        counts = dict(self.tasks.values_list("state").annotate(n=models.Count("id")).values_list("state", "n"))
        return {state: counts[state] for state in SUMMARY_ORDER if counts.get(state)}

    @staticmethod
    def summary_text(counts: dict[str, int]) -> str:
        """{"running": 3, "queued": 10, "failed": 1} → '3 running, 10 queued, 1 failed'."""
        labels = dict(JobState.choices)
        parts = [f"{counts[s]} {labels[s].lower()}" for s in SUMMARY_ORDER if counts.get(s)]
        return ", ".join(parts) or "no tasks"

    @property
    def summary(self) -> str:
        return self.summary_text(self.state_counts())


class JobEvent(models.Model):
    """One line of a job's timeline: what happened, in words a user reads, with the numbers behind it."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind}: {self.message[:60]}"


class JobLog(models.Model):
    """The kept log of one pod of a job (one container per pod today), written by ``jobs.logkeeping`` when the
    container ended or before the portal deleted its workload. Only the last ``PORTAL_LOG_MAX_BYTES`` are kept:
    ``cut_bytes`` says how many bytes from the start were cut. ``note`` says why there is no text, when there is
    none (the container never started, the node could not serve its log)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField(default=1)
    pod_name = models.CharField(max_length=253)
    container = models.CharField(max_length=63, blank=True)
    text = models.TextField(blank=True)
    total_bytes = models.BigIntegerField(default=0)
    cut_bytes = models.BigIntegerField(default=0)
    note = models.TextField(blank=True)
    kept_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["job", "attempt", "kept_at", "id"]
        constraints = [models.UniqueConstraint(fields=["job", "pod_name"], name="joblog_one_per_pod")]

    def __str__(self) -> str:
        return f"log of job {self.job_id} pod {self.pod_name}"

    @property
    def cut_notice(self) -> str:
        """What was cut, in words; empty when the whole log was kept."""
        if not self.cut_bytes:
            return ""
        return (
            f"The first {self.cut_bytes:,} bytes of this log were cut: the portal keeps the last "
            f"{self.total_bytes - self.cut_bytes:,} of the {self.total_bytes:,} bytes the container wrote."
        )


class FairShare(models.Model):
    """A team's recent use, decayed: the exponentially weighted average of the normalised GPUs it held,
    with half-life ``PORTAL_FAIR_SHARE_HALF_LIFE``. Updated by every admission cycle."""

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="fair_share")
    average_units = models.FloatField(default=0.0)
    updated = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.team_id}: {self.average_units:.2f}"


class MemberShare(models.Model):
    """One member's part of their team's fair share (jobs.scheduling.members): the decayed average of the normalised
    GPUs their jobs of the team held (half-life ``PORTAL_FAIR_SHARE_HALF_LIFE``; updated by every admission cycle,
    as ``FairShare`` is for the team) and the weight the team's leads gave them (1: an equal share; 2: twice one).
    A member without a row has weight 1 and no recent use."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="member_shares")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="member_shares")
    weight = models.FloatField(default=1.0)
    average_units = models.FloatField(default=0.0)
    updated = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="member_share_once"),
            models.CheckConstraint(condition=Q(weight__gt=0), name="member_share_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.team_id}: weight {self.weight:g}, {self.average_units:.2f}"


class TeamPreemption(models.Model):
    """A team's protection from preemption: none of its jobs is preempted before it ran ``min_runtime_seconds``
    (0: no protection). Its leads and the admins set it (jobs.checkpoints.set_min_runtime); audited."""

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="preemption")
    min_runtime_seconds = models.PositiveIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"{self.team.slug}: protected for {self.min_runtime_seconds} s"


class AdmissionLock(models.Model):
    """A single row every admission cycle updates first, inside its transaction. On PostgreSQL the row lock,
    on SQLite the database write lock, makes cycles run one at a time, so no two can admit past a limit."""

    cycle = models.PositiveBigIntegerField(default=0)
    at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"admission cycle {self.cycle}"


class NotebookPolicy(models.Model):
    """A team's notebook limits, set by admins. Without a row the PORTAL_NOTEBOOK_* settings apply.

    ``ttl_seconds`` is the maximum age a session gets when it starts, ``max_ttl_seconds`` how far "Extend" may
    push it (counted from the session's start); ``idle_timeout_seconds`` is what a launch gets unless it asks for
    less or more, up to ``max_idle_timeout_seconds``."""

    team = models.OneToOneField("portal.Team", on_delete=models.CASCADE, related_name="notebook_policy")
    ttl_seconds = models.PositiveIntegerField()
    max_ttl_seconds = models.PositiveIntegerField()
    idle_timeout_seconds = models.PositiveIntegerField()
    max_idle_timeout_seconds = models.PositiveIntegerField()
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "notebook policies"
        constraints = [
            models.CheckConstraint(condition=Q(max_ttl_seconds__gte=models.F("ttl_seconds")), name="nb_max_ttl_gte"),
            models.CheckConstraint(
                condition=Q(max_idle_timeout_seconds__gte=models.F("idle_timeout_seconds")), name="nb_max_idle_gte"
            ),
        ]

    def __str__(self) -> str:
        return f"notebook policy of {self.team_id}"

    @classmethod
    def for_team(cls, team) -> NotebookPolicy:
        """The team's row, or an unsaved one holding the settings' defaults."""
        policy = cls.objects.filter(team=team).first()
        if policy is None:
            policy = cls(
                team=team,
                ttl_seconds=settings.PORTAL_NOTEBOOK_TTL_SECONDS,
                max_ttl_seconds=max(settings.PORTAL_NOTEBOOK_MAX_TTL_SECONDS, settings.PORTAL_NOTEBOOK_TTL_SECONDS),
                idle_timeout_seconds=settings.PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS,
                max_idle_timeout_seconds=max(
                    settings.PORTAL_NOTEBOOK_MAX_IDLE_TIMEOUT_SECONDS, settings.PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS
                ),
            )
        return policy


class Notebook(models.Model):
    """A Jupyter server with a home volume. Each start makes a new Job (kind=notebook, ``session``) that goes
    through admission like any job; stopping ends that job and keeps the volume.

    The access token is never stored: ``token_hash`` is Jupyter's salted ``sha256:<salt>:<hex>`` password hash,
    which the workload gets as ``--PasswordIdentityProvider.hashed_password``; the token itself is shown to the
    owner once, when the session is created. A session someone else starts (a lead, an admin) has a token derived
    from the portal's SECRET_KEY and ``owner_token_salt``, kept until the owner collects it once
    (jobs.notebook.sessions.collect_token)."""

    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="notebooks")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="notebooks")
    name = models.CharField(max_length=30)
    #: The server it runs (jobs.notebook.workspaces): Jupyter, VS Code in the browser or RStudio.
    workspace = models.CharField(max_length=12, choices=WorkspaceKind.choices, default=WorkspaceKind.JUPYTER)
    image = models.CharField(max_length=255)
    resource_class = models.ForeignKey("gpus.ResourceClass", on_delete=models.PROTECT, related_name="notebooks")
    count = models.PositiveSmallIntegerField(default=1)
    cpu_millicores = models.PositiveIntegerField(default=4000)
    memory_mb = models.PositiveIntegerField(default=16384)
    volume_gib = models.PositiveIntegerField(default=20)
    #: Extra environment for the server, [{"name", "value"}].
    env = models.JSONField(default=list, blank=True)
    #: The team's claims mounted besides the home volume: [{"claim", "mount_path", "read_only"}] (jobs.storage.volumes).
    volumes = models.JSONField(default=list, blank=True)
    #: The clusters its sessions may run on, most preferred first (names; empty: the portal chooses).
    clusters = models.JSONField(default=list, blank=True)
    #: The cluster of its home volume, set when its first session is placed; every later session runs there.
    cluster = models.ForeignKey(
        "gpus.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="notebooks"
    )
    preemptible = models.BooleanField(default=False)
    ttl_seconds = models.PositiveIntegerField()
    idle_timeout_seconds = models.PositiveIntegerField()
    token_hash = models.CharField(max_length=120, blank=True)
    #: Set while the token of a session someone else started waits for its owner; emptied when collected or stopped.
    owner_token_salt = models.CharField(max_length=32, blank=True, default="")

    state = models.CharField(max_length=10, choices=NotebookState.choices, default=NotebookState.ACTIVE)
    #: The current session (while active) or the last one.
    session = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created = models.DateTimeField(default=timezone.now)
    #: When the current session started running (TTL and idle are counted from here); None until it runs.
    running_since = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    #: The latest "Extend" of the current session (it counts as activity for the idle limit).
    extended_at = models.DateTimeField(null=True, blank=True)
    #: Latest activity the portal saw: the session start, an extension, busy GPUs or a busy kernel.
    last_activity_at = models.DateTimeField(null=True, blank=True)
    #: The latest request the portal's sign-in endpoint let through to the session (jobs.notebook.workspace),
    #: written at most once a minute: RStudio's activity signal.
    last_request_at = models.DateTimeField(null=True, blank=True)
    #: When the idle limit falls due at the current rate of activity (None: unknown, e.g. no telemetry).
    idle_deadline = models.DateTimeField(null=True, blank=True)
    ttl_warned_at = models.DateTimeField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=10, choices=StopReason.choices, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    stopped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_notebook_name_per_team")]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"notebook {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:notebook-detail", args=[self.pk])

    @property
    def resource_name(self) -> str:
        """``nb-<id>-<name>``: the Service, the URL's host part and the base of the volume's name."""
        return f"nb-{self.pk}-{self.name}"[:50].rstrip("-")

    @property
    def volume_name(self) -> str:
        return f"{self.resource_name}-home"

    @property
    def url(self) -> str:
        """Its address (settings.PORTAL_NOTEBOOK_URL_TEMPLATE): ``{cluster}`` is the cluster its sessions run on, so a
        fleet's clusters each serve their own notebooks' hosts."""
        cluster = self.cluster.name if self.cluster_id is not None else SETTINGS_CLUSTER
        return settings.PORTAL_NOTEBOOK_URL_TEMPLATE.format(
            name=self.resource_name, namespace=self.team.namespace, cluster=cluster
        )

    @property
    def is_active(self) -> bool:
        return self.state == NotebookState.ACTIVE

    @property
    def status_badge(self) -> str:
        if not self.is_active or self.session is None:
            return "grey"
        return self.session.state_badge

    @property
    def status(self) -> str:
        """What a person wants to know: Stopped, or the session's job state (Queued, Admitted, Running)."""
        if not self.is_active or self.session is None:
            return "Stopped"
        return self.session.get_state_display()


class WorkspaceTicket(models.Model):
    """A one-time pass from the portal to a notebook's address (jobs.notebook.workspace): made when the owner clicks
    Open, carried in the URL to the workspace's host, and exchanged there once, within seconds, for the workspace's
    own cookie. Only the SHA-256 of the ticket is kept; the row says who it was for and which session it opens."""

    digest = models.CharField(max_length=64, unique=True)
    notebook = models.ForeignKey(Notebook, on_delete=models.CASCADE, related_name="+")
    #: The session it opens: a ticket for a session that has since stopped opens nothing.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    expires_at = models.DateTimeField(db_index=True)
    #: Set by the one exchange that succeeds (a conditional UPDATE: two at once cannot both use it).
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"ticket for notebook #{self.notebook_id}"

"""What a team keeps in its namespace besides jobs: volumes (the claims the volume reconcile saw), datasets,
secrets and registry credentials (names and metadata only; the values live in Kubernetes Secrets). Split from
jobs.models to keep each module short; jobs.models re-exports them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from gpus.models import settings_cluster_pk
from jobs.choices import PresenceState, TemplateKind


class TeamVolume(models.Model):
    """A PersistentVolumeClaim in a team's namespace as the volume reconcile last saw it (jobs.storage.volumes).

    Level-triggered: each reconcile makes the rows of a namespace equal to the claims listed there, whoever made
    them (an admin with kubectl, a notebook's home volume, a published dataset). Only these claims may be mounted
    by the team's jobs and notebooks."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="volumes")
    #: The cluster whose namespace holds the claim: a volume lives on one cluster, and work mounting it runs there.
    cluster = models.ForeignKey(
        "gpus.Cluster", on_delete=models.CASCADE, default=settings_cluster_pk, related_name="team_volumes"
    )
    name = models.CharField(max_length=253)
    phase = models.CharField(max_length=12, blank=True)
    #: The bound volume's capacity as Kubernetes prints it ("2Ti"); the request until it is bound.
    capacity = models.CharField(max_length=32, blank=True)
    capacity_bytes = models.BigIntegerField(null=True, blank=True)
    access_modes = models.JSONField(default=list, blank=True)
    storage_class = models.CharField(max_length=253, blank=True)
    volume_name = models.CharField(max_length=253, blank=True)
    #: The notebook whose home this is, when it is one.
    notebook = models.ForeignKey("Notebook", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    #: The published dataset this claim gives the team, when it is one (always mounted read-only).
    dataset = models.ForeignKey("Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="claims")
    created_at = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "cluster", "name"], name="unique_team_volume")]

    def __str__(self) -> str:
        return f"{self.team_id}/{self.name}"

    @property
    def read_only_only(self) -> bool:
        """Mountable read-only only: a published dataset, or a claim whose volume offers no writable mode."""
        return self.dataset_id is not None or (
            bool(self.access_modes) and not {"ReadWriteOnce", "ReadWriteMany"} & set(self.access_modes)
        )


class Dataset(models.Model):
    """A shared data set an admin publishes read-only to chosen teams.

    A claim can only be mounted in its own namespace, so publishing makes, per team, a PersistentVolume that
    points at the same storage (``source``: an NFS export or a CSI volume handle, read-only) pre-bound to a
    ReadOnlyMany claim ``dataset-<name>`` in the team's namespace (static provisioning; docs/design.md). The
    volume reconcile makes the cluster match ``teams``; unpublishing removes that team's pair, never the data."""

    class Source(models.TextChoices):
        NFS = "nfs", "NFS export"
        CSI = "csi", "CSI volume"

    name = models.CharField(max_length=40, unique=True)
    description = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=4, choices=Source.choices, default=Source.NFS)
    #: NFS: the server's host name; CSI: the driver's name.
    server = models.CharField(max_length=253)
    #: NFS: the exported path; CSI: the volume handle.
    path = models.CharField(max_length=1024)
    capacity_gib = models.PositiveIntegerField(default=100)
    teams = models.ManyToManyField("portal.Team", blank=True, related_name="datasets")
    #: The clusters that can reach the storage, where the dataset is published to its teams.
    clusters = models.ManyToManyField("gpus.Cluster", blank=True, related_name="datasets")
    created = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"dataset {self.name}"

    @property
    def claim_name(self) -> str:
        return f"dataset-{self.name}"

    def volume_name(self, team) -> str:
        """The PersistentVolume for one team (cluster-scoped, so the team is part of the name)."""
        return f"ds-{self.name}-{team.slug}"[:253]


class TeamSecret(models.Model):
    """A team's Secret: its name and key names only. The values live in the Kubernetes Secret of the same name in
    the team's namespace and nowhere else (not here, not in logs, not in audit records)."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="secrets")
    #: The Kubernetes Secret's name (a DNS-1123 subdomain).
    name = models.CharField(max_length=253)
    #: The key names, sorted.
    keys = models.JSONField(default=list)
    description = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rotated_at = models.DateTimeField(null=True, blank=True)
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["team__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_secret_name_per_team")]

    def __str__(self) -> str:
        return f"secret {self.name}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:team-secrets", args=[self.team.slug])


class RegistryCredential(models.Model):
    """A team's credential for one container registry: the registry and user name only. The token lives in a
    kubernetes.io/dockerconfigjson Secret (``secret_name``) in the team's namespace, which every workload of the
    team whose image is on ``registry`` gets as an imagePullSecret."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="registry_credentials")
    #: host[:port] as vocab.images.registry_of gives it (lowercase; docker.io for Docker Hub).
    registry = models.CharField(max_length=255)
    username = models.CharField(max_length=255)
    secret_name = models.CharField(max_length=253)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rotated_at = models.DateTimeField(null=True, blank=True)
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["team__slug", "registry"]
        constraints = [models.UniqueConstraint(fields=["team", "registry"], name="unique_registry_credential_per_team")]

    def __str__(self) -> str:
        return f"registry credential {self.registry}"

    def get_absolute_url(self) -> str:
        return reverse("jobs:team-secrets", args=[self.team.slug])  # listed with the team's secrets


class TeamPresence(models.Model):
    """Whether a team's namespace, secrets and registry credentials exist on one registered cluster as the portal
    records them (jobs.teams.presence keeps them in step; the cluster configured in settings is written directly and
    has no row). Work that uses the team's secrets or registry credentials may run only where this is in step."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="presence")
    cluster = models.ForeignKey("gpus.Cluster", on_delete=models.CASCADE, related_name="team_presence")
    state = models.CharField(max_length=8, choices=PresenceState.choices, default=PresenceState.PENDING)
    #: When a change to the team's secrets or credentials last asked for this cluster to be brought in step: a pass
    #: that started before it cannot mark the row in step (it may have copied the old values).
    wanted_at = models.DateTimeField(default=timezone.now)
    synced_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["team__slug", "cluster__name"]
        constraints = [models.UniqueConstraint(fields=["team", "cluster"], name="unique_team_presence")]

    def __str__(self) -> str:
        return f"presence of team {self.team_id} on cluster {self.cluster_id}"


class WorkloadTemplate(models.Model):
    """A named spec of a job, a notebook or a service a team keeps ("new from template"; jobs.workload_templates):
    the team's leads save and remove them, every member submits from them. Each save of a name is a new version;
    the spec of each version is kept as the create API of its kind takes it, so a submission from a template is an
    ordinary submission."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="workload_templates")
    name = models.SlugField(max_length=60)
    #: What it makes; every version's spec is of this kind (a name keeps its kind). The database's own default lets
    #: code from before the kind (a rolling upgrade) still save job templates.
    kind = models.CharField(
        max_length=8, choices=TemplateKind.choices, default=TemplateKind.JOB, db_default=TemplateKind.JOB
    )
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_team_template_name")]

    def __str__(self) -> str:
        return f"template {self.name}"


class WorkloadTemplateVersion(models.Model):
    """One saved spec of a template; versions are numbered from 1 and never change."""

    template = models.ForeignKey(WorkloadTemplate, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    #: The spec as the create API of the template's kind takes it (POST /api/v1/jobs/, /notebooks/ or /services/),
    #: the team left out: the template's team is the workload's.
    spec = models.JSONField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    #: The job it was saved from, if any ("save as template" on a job's page; a notebook's or a service's source is in
    #: the audit record).
    source_job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["template_id", "-number"]
        constraints = [models.UniqueConstraint(fields=["template", "number"], name="unique_template_version")]

    def __str__(self) -> str:
        return f"{self.template.name} v{self.number}"

"""Team volumes and published datasets: the inventory of claims per team namespace, and the datasets an admin
publishes read-only to chosen teams.

Both are level-triggered and idempotent (``reconcile_volumes`` runs from beat and after every publish): the
desired state is in the database (Dataset.teams), the observed state is what the cluster lists, and one pass makes
the cluster's dataset volumes and claims match the first and the TeamVolume rows match the second. Re-running it
after a crash at any line converges to the same place.

Each cluster is reconciled on its own (``cluster``; the registered ones from their presence pass,
jobs.storage.presence): a volume is a claim in one cluster, and a dataset is published on the clusters an admin chose
(those that reach its storage), to its teams' namespaces there.

Publishing follows Kubernetes' static provisioning: a claim binds only to a volume, and a pod mounts claims of
its own namespace only, so a dataset reaches team T as a PersistentVolume ``ds-<dataset>-<team>`` (the admin's
NFS export or CSI volume, ``readOnly``, ReadOnlyMany, reclaim policy Retain so the data is never deleted)
pre-bound through ``claimRef`` to a claim ``dataset-<dataset>`` in T's namespace, which names the volume in turn
(``volumeName``, ``storageClassName: ""`` so no provisioner steps in). Unpublishing deletes that pair.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from datetime import datetime

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import Team
from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, ClusterBackend, ClusterError
from core import audit
from gpus.models import Cluster, settings_cluster_pk
from jobs.choices import ACTIVE_STATES, JobAuditAction, NotebookState
from jobs.kick import kick_volume_reconcile
from jobs.models import Dataset, Job, Notebook, TeamVolume
from jobs.render import TEAM_LABEL
from vocab.quantity import parse_quantity

log = logging.getLogger(__name__)

DATASET_LABEL = "gpu-portal.io/dataset"
DATASET_NAME_HELP = (
    "1 to 40 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit."
)
AUDIT_FIELDS = ["name", "description", "source", "server", "path", "capacity_gib"]


# -- reconcile ------------------------------------------------------------------------------------------------


def _when(text) -> datetime | None:
    return parse_datetime(text) if isinstance(text, str) else None


def _bytes(text) -> int | None:
    try:
        return int(parse_quantity(text))
    except (TypeError, ValueError):
        return None


def dataset_volume(dataset: Dataset, team: Team) -> dict:
    """The read-only PersistentVolume that gives ``team`` the dataset, pre-bound to the team's claim."""
    source = (
        {"nfs": {"server": dataset.server, "path": dataset.path, "readOnly": True}}
        if dataset.source == Dataset.Source.NFS
        else {"csi": {"driver": dataset.server, "volumeHandle": dataset.path, "readOnly": True}}
    )
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": dataset.volume_name(team),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, DATASET_LABEL: dataset.name, TEAM_LABEL: team.slug},
        },
        "spec": {
            "capacity": {"storage": f"{dataset.capacity_gib}Gi"},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": team.namespace, "name": dataset.claim_name},
            **source,
        },
    }


def dataset_claim(dataset: Dataset, team: Team) -> dict:
    """The team's claim on its dataset volume (bound by name, never provisioned)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": dataset.claim_name,
            "namespace": team.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, DATASET_LABEL: dataset.name, TEAM_LABEL: team.slug},
        },
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": dataset.volume_name(team),
            "resources": {"requests": {"storage": f"{dataset.capacity_gib}Gi"}},
        },
    }


def _cluster(cluster: Cluster | None) -> Cluster:
    return cluster if cluster is not None else Cluster.objects.get(pk=settings_cluster_pk())


def sync_datasets(backend: ClusterBackend, cluster: Cluster | None = None) -> dict[str, int]:
    """Make ``cluster``'s dataset volumes and claims (None: the cluster configured in settings) match the datasets
    published there (Dataset.clusters) and their teams: create what is missing, delete the pairs of teams a dataset
    is no longer published to (and of datasets deleted or no longer published on this cluster)."""
    cluster = _cluster(cluster)
    counts = {"published": 0, "removed": 0}
    wanted: dict[str, tuple[Dataset, Team]] = {}
    for dataset in Dataset.objects.filter(clusters=cluster).prefetch_related("teams"):
        for team in dataset.teams.all():
            wanted[dataset.volume_name(team)] = (dataset, team)
    existing = {
        v["metadata"]["name"]: v for v in backend.list_pvs(f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE},{DATASET_LABEL}")
    }
    for name, (dataset, team) in sorted(wanted.items()):
        backend.ensure_namespace(team.namespace)
        if name not in existing:
            backend.ensure_pv(dataset_volume(dataset, team))
            counts["published"] += 1
        backend.ensure_pvc(dataset_claim(dataset, team))
    for name, volume in sorted(existing.items()):
        if name in wanted:
            continue
        ref = volume["spec"].get("claimRef") or {}
        if ref.get("namespace") and ref.get("name"):
            backend.delete_pvc(ref["namespace"], ref["name"])
        backend.delete_pv(name)
        counts["removed"] += 1
    return counts


def reconcile_volumes(backend: ClusterBackend, cluster: Cluster | None = None) -> dict[str, int]:
    """Publish datasets on ``cluster`` (None: the cluster configured in settings), then make each team's TeamVolume
    rows of that cluster equal to the claims in its namespace there."""
    cluster = _cluster(cluster)
    counts = {"claims": 0, "created": 0, "gone": 0}
    try:
        counts |= sync_datasets(backend, cluster)
    except ClusterError as error:  # the inventory is still worth refreshing
        log.warning("publishing datasets failed: %s", error)
        counts["dataset_error"] = 1
    teams = {team.namespace: team for team in Team.objects.exclude(namespace="")}
    by_team: dict[int, list[dict]] = defaultdict(list)
    for claim in backend.list_pvcs():
        team = teams.get(claim["metadata"].get("namespace"))
        if team is not None:
            by_team[team.pk].append(claim)
    notebooks = {
        nb.volume_name: nb.pk for nb in Notebook.objects.filter(team__in=teams.values()).select_related("team")
    }
    datasets = {d.claim_name: d.pk for d in Dataset.objects.all()}
    now = timezone.now()
    with transaction.atomic():
        for team in teams.values():
            rows = {v.name: v for v in TeamVolume.objects.select_for_update().filter(team=team, cluster=cluster)}
            seen: set[str] = set()
            for claim in by_team.get(team.pk, []):
                meta, spec, status = claim["metadata"], claim.get("spec") or {}, claim.get("status") or {}
                name = meta["name"]
                seen.add(name)
                capacity = (status.get("capacity") or {}).get("storage") or (
                    (spec.get("resources") or {}).get("requests") or {}
                ).get("storage")
                values = {
                    "phase": status.get("phase") or "Pending",
                    "capacity": str(capacity or ""),
                    "capacity_bytes": _bytes(capacity),
                    "access_modes": list(status.get("accessModes") or spec.get("accessModes") or []),
                    "storage_class": spec.get("storageClassName") or "",
                    "volume_name": spec.get("volumeName") or "",
                    "notebook_id": notebooks.get(name),
                    "dataset_id": datasets.get(name)
                    if (meta.get("labels") or {}).get(DATASET_LABEL) or name in datasets
                    else None,
                    "created_at": _when(meta.get("creationTimestamp")),
                }
                row = rows.get(name)
                if row is None:
                    TeamVolume.objects.create(team=team, cluster=cluster, name=name, seen_at=now, **values)
                    counts["created"] += 1
                elif any(getattr(row, field) != value for field, value in values.items()):
                    for field, value in values.items():
                        setattr(row, field, value)
                    row.seen_at = now
                    row.save()
                counts["claims"] += 1
            gone = [name for name in rows if name not in seen]
            if gone:
                TeamVolume.objects.filter(team=team, cluster=cluster, name__in=gone).delete()
                counts["gone"] += len(gone)
    return counts


# -- what uses a volume -----------------------------------------------------------------------------------------


def volume_users(team: Team) -> dict[str, list[dict]]:
    """Claim name → who mounts it now: active jobs and active notebooks (home volume or extra mounts)."""
    users: dict[str, list[dict]] = defaultdict(list)
    for job in Job.objects.filter(team=team, state__in=ACTIVE_STATES, notebook__isnull=True).only(
        "pk", "name", "volumes", "state"
    ):
        for mount in job.volumes or []:
            users[mount["claim"]].append(
                {
                    "kind": "job",
                    "id": job.pk,
                    "name": job.name,
                    "url": job.get_absolute_url(),
                    "path": mount["mount_path"],
                }
            )
    for notebook in Notebook.objects.filter(team=team).only("pk", "name", "volumes", "state"):
        active = notebook.state == NotebookState.ACTIVE
        entry = {"kind": "notebook", "id": notebook.pk, "name": notebook.name, "url": notebook.get_absolute_url()}
        users[notebook.volume_name].append({**entry, "path": "/home/jovyan", "active": active})
        if active:
            for mount in notebook.volumes or []:
                users[mount["claim"]].append({**entry, "path": mount["mount_path"], "active": True})
    return dict(users)


# -- datasets (admins) -----------------------------------------------------------------------------------------


def check_dataset(fields: dict, instance: Dataset | None = None) -> dict[str, list[str]]:
    """Field → messages for a dataset description (all problems at once)."""
    errors: dict[str, list[str]] = {}
    name = str(fields.get("name") or "")
    if not re.fullmatch(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$", name):
        errors["name"] = [DATASET_NAME_HELP]
    elif Dataset.objects.filter(name=name).exclude(pk=getattr(instance, "pk", None)).exists():
        errors["name"] = [f"There is already a dataset called {name}; pick another name."]
    source = fields.get("source") or Dataset.Source.NFS
    server, path = str(fields.get("server") or ""), str(fields.get("path") or "")
    if source not in Dataset.Source.values:
        errors["source"] = ["Choose nfs (an NFS export) or csi (a CSI driver's volume)."]
    elif source == Dataset.Source.NFS:
        if not re.fullmatch(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$", server):
            errors["server"] = ["Give the NFS server's host name or IP address, e.g. nfs.example.internal."]
        if not path.startswith("/") or ".." in path.split("/") or len(path) > 1024:
            errors["path"] = ["Give the exported directory as an absolute path, e.g. /exports/datasets/imagenet."]
    else:
        if not re.fullmatch(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$", server):
            errors["server"] = ["Give the CSI driver's name as it is registered, e.g. nfs.csi.k8s.io."]
        if not path or len(path) > 1024:
            errors["path"] = ["Give the CSI volume handle of the existing volume."]
    capacity = fields.get("capacity_gib")
    if not isinstance(capacity, int) or not 1 <= capacity <= 1_000_000:
        errors["capacity_gib"] = ["Give the dataset's size in GiB, from 1 to 1000000."]
    return errors


def _require_admin(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only admins can publish datasets.")


def _published(dataset: Dataset) -> dict:
    return {
        "teams": sorted(t.slug for t in dataset.teams.all()),
        "clusters": sorted(c.name for c in dataset.clusters.all()),
    }


def save_dataset(
    user, fields: dict, teams: list[Team], instance: Dataset | None = None, clusters: list[Cluster] | None = None
) -> Dataset:
    """Create or change a dataset, the teams it is published to and the clusters it is published on (admins;
    audited; ``clusters`` None: a new dataset goes on the cluster configured in settings, a changed one keeps its
    clusters). The clusters follow on their next volume reconcile, which is kicked after commit."""
    _require_admin(user)
    errors = check_dataset(fields, instance)
    if instance is not None and fields.get("name") != instance.name and instance.teams.exists():
        errors.setdefault("name", []).append("Unpublish the dataset from every team before renaming it.")
    if clusters is not None and not clusters:
        errors.setdefault("clusters", []).append(
            "Choose at least one cluster: those whose nodes can reach the dataset's storage."
        )
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        before = None
        if instance is not None:
            before = audit.snapshot(instance, AUDIT_FIELDS) | _published(instance)
        dataset = instance or Dataset(created_by=user)
        for field in AUDIT_FIELDS:
            if field in fields:
                setattr(dataset, field, fields[field])
        dataset.save()
        dataset.teams.set(teams)
        if clusters is not None:
            dataset.clusters.set(clusters)
        elif instance is None:
            dataset.clusters.set([settings_cluster_pk()])
        after = audit.snapshot(dataset, AUDIT_FIELDS) | _published(dataset)
        if before != after:
            verb = JobAuditAction.DATASET_PUBLISH if instance is None else JobAuditAction.DATASET_CHANGE
            audit.record(user, verb, dataset, before=before, after=after)
        transaction.on_commit(kick_volume_reconcile)
    return dataset


def delete_dataset(user, dataset: Dataset) -> None:
    """Unpublish from every team and forget the dataset (the data itself is never touched)."""
    _require_admin(user)
    with transaction.atomic():
        before = audit.snapshot(dataset, AUDIT_FIELDS) | _published(dataset)
        audit.record(user, JobAuditAction.DATASET_DELETE, dataset, before=before)
        dataset.delete()
        transaction.on_commit(kick_volume_reconcile)

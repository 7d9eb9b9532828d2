"""The jobs floor's answers to the inventory's questions (gpus.seams): which quotas and queued jobs refer to a
resource class, and which portal job a pod on a draining node belongs to. Registered in JobsConfig.ready."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Count, Q

from gpus.seams import NAMED_WORK, ClassClaims, PodWork, pod_key
from jobs.choices import ACTIVE_STATES, CANCELLABLE_STATES, JobState
from jobs.models import Job, Quota
from jobs.render import JOB_ID_LABEL


def claims(class_ids: Iterable[int]) -> dict[int, ClassClaims]:
    """Resource class id → the quotas on it (ids, team names), how many jobs are queued for it and how many ask for
    it and have not ended, the first NAMED_WORK of them by name."""
    ids = set(class_ids)
    quotas: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for quota_id, class_id, team in Quota.objects.filter(resource_class_id__in=ids).values_list(
        "pk", "resource_class_id", "team__name"
    ):
        quotas[class_id].append((quota_id, team))
    unfinished = Job.objects.filter(resource_class_id__in=ids, state__in=CANCELLABLE_STATES)
    counts = {
        row["resource_class_id"]: row
        for row in unfinished.values("resource_class_id").annotate(
            n=Count("pk"), queued=Count("pk", filter=Q(state=JobState.QUEUED))
        )
    }
    work: dict[int, list[str]] = defaultdict(list)
    for class_id in counts:  # the first few of each class by name: one query per class that has any
        for job in unfinished.filter(resource_class_id=class_id).select_related("owner").order_by("pk")[:NAMED_WORK]:
            work[class_id].append(
                f"#{job.pk} {job.name} ({job.get_kind_display().lower()}, {job.owner.get_username()})"
            )
    return {
        class_id: ClassClaims(
            quota_ids=tuple(q for q, _ in quotas.get(class_id, [])),
            quota_teams=tuple(t for _, t in quotas.get(class_id, [])),
            queued=counts.get(class_id, {}).get("queued", 0),
            unfinished=counts.get(class_id, {}).get("n", 0),
            work=tuple(work.get(class_id, [])),
        )
        for class_id in ids
    }


def describe_pods(pods: list[dict]) -> dict[str, str]:
    """ "namespace/pod" → "#<job id> <job name>" for the portal's pods (their job-id label says which job)."""
    ids = {}
    for pod in pods:
        value = (pod["metadata"].get("labels") or {}).get(JOB_ID_LABEL, "")
        if value.isdigit():
            ids[pod_key(pod)] = int(value)
    names = dict(Job.objects.filter(pk__in=set(ids.values())).values_list("pk", "name"))
    return {key: f"#{job_id} {names[job_id]}" for key, job_id in ids.items() if job_id in names}


def classify_pods(pods: list[dict]) -> dict[str, PodWork]:
    """ "namespace/pod" → the portal's job, notebook or service behind each pod: its owner, team, and whether a
    drain requeues it (preemptible jobs) or waits for it (everything else). One query for all the pods."""
    ids = {}
    for pod in pods:
        value = (pod["metadata"].get("labels") or {}).get(JOB_ID_LABEL, "")
        if value.isdigit():
            ids[pod_key(pod)] = int(value)
    jobs = Job.objects.filter(pk__in=set(ids.values())).select_related("owner", "team").in_bulk()
    out = {}
    for key, job_id in ids.items():
        job = jobs.get(job_id)
        if job is None:
            continue
        noun = job.get_kind_display().lower()
        out[key] = PodWork(
            label=f"#{job.pk} {job.name} ({noun})",
            url=job.get_absolute_url(),
            owner=job.owner.get_username(),
            team=job.team.name,
            requeued=job.preemptible and job.state in ACTIVE_STATES,
        )
    return out


def work_on_nodes(cluster_id: int, node_names: list[str]) -> list[str]:
    """The portal's active work on the named nodes of one cluster (a gang or service counts where any of its pods
    is), as "#12 train", for an admin about to remove the cluster."""
    names = set(node_names)
    active = Job.objects.filter(state__in=ACTIVE_STATES).order_by("pk")
    out = []
    for job_id, name, node, nodes in active.values_list("pk", "name", "node_name", "node_names"):
        if node in names or names.intersection(nodes or ()):
            out.append(f"#{job_id} {name}")
    return out

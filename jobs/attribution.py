"""The jobs floor's answer to telemetry's first question (telemetry.seams): which running job owns a pod or a
node's GPUs. The second, whether a user may see a job, is jobs.access.job_visible. Both registered in
JobsConfig.ready."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Q

from gpus.models import settings_cluster_pk
from jobs.choices import JobKind, JobState
from jobs.models import Job


def of_cluster(cluster_id: int) -> Q:
    """The jobs of one cluster; the cluster configured in settings also has those that name none (placed before the
    fleet)."""
    return (
        Q(cluster_id=cluster_id) | Q(cluster__isnull=True)
        if cluster_id == settings_cluster_pk()
        else Q(cluster_id=cluster_id)
    )


def owners_on(cluster_id: int, node_names: Iterable[str]) -> tuple[dict, dict]:
    """(namespace, pod) → (job id, team id), and node → (job id, team id) for nodes with one running job, among
    the jobs running in cluster ``cluster_id`` (a pod or node name of another cluster is another pod or node).

    A distributed job runs one pod per node (``Job.node_names``, ``Job.ranks``): every rank's pod and node is
    the job's, so each rank's GPUs are attributed to it (the job page's utilisation per rank reads them). An
    inference service's replica pods are noted in its job's ``ranks`` the same way (jobs.service.follow)."""
    nodes = set(node_names)
    running = (
        Job.objects.filter(state__in=(JobState.RUNNING, JobState.PREEMPTING))
        .filter(of_cluster(cluster_id))
        .filter(Q(node_name__in=nodes) | Q(workers__gt=1) | Q(kind__in=(JobKind.DISTRIBUTED, JobKind.SERVICE)))
        .values_list("id", "team_id", "node_name", "pod_name", "team__namespace", "node_names", "ranks")
    )
    by_pod: dict[tuple[str, str], tuple[int, int]] = {}
    per_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for job_id, team_id, node_name, pod_name, namespace, rank_nodes, ranks in running:
        owner = (job_id, team_id)
        pods = {pod_name} | {rank.get("pod") or "" for rank in ranks or []}
        for pod in pods - {""}:
            by_pod[(namespace, pod)] = owner
        for node in ({node_name} | set(rank_nodes or [])) & nodes:
            per_node[node].append(owner)
    only = {node: jobs[0] for node, jobs in per_node.items() if len(jobs) == 1}
    return by_pod, only

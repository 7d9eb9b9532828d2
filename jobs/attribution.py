"""The jobs floor's answer to telemetry's first question (telemetry.seams): which running job owns a pod or a
node's GPUs. The second, whether a user may see a job, is jobs.access.job_visible. Both registered in
JobsConfig.ready."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .choices import JobState
from .models import Job


def owners_on(node_names: Iterable[str]) -> tuple[dict, dict]:
    """(namespace, pod) → (job id, team id), and node → (job id, team id) for nodes with one running job."""
    running = Job.objects.filter(
        state__in=(JobState.RUNNING, JobState.PREEMPTING), node_name__in=set(node_names)
    ).values_list("id", "team_id", "node_name", "pod_name", "team__namespace")
    by_pod: dict[tuple[str, str], tuple[int, int]] = {}
    per_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for job_id, team_id, node_name, pod_name, namespace in running:
        if pod_name:
            by_pod[(namespace, pod_name)] = (job_id, team_id)
        per_node[node_name].append((job_id, team_id))
    only = {node: jobs[0] for node, jobs in per_node.items() if len(jobs) == 1}
    return by_pod, only

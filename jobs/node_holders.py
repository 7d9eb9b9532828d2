"""Who holds what on a node, for the node page (registered with gpus.pages in JobsConfig.ready).

Two sources, each exact about what it knows:
- the portal's own placement: every active job, notebook session, gang rank and service replica on the node, with
  its owner, team and what each of its pods holds there (``count × resource``);
- telemetry's attribution (DCGM's pod labels, jobs.attribution): which job's pod each physical GPU, MIG instance
  or time-sliced share served in the last minutes. It is drawn on the GPU rows and MIG slots; where a GPU has
  several instances of one profile, the holders are named for those slices together, since the driver's instance
  numbering does not say which memory slots an instance occupies.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from jobs.access import visible_teams
from jobs.attribution import of_cluster
from jobs.choices import JobState
from jobs.models import Job
from telemetry.models import GpuSample

#: How far back a telemetry reading still says who holds a GPU.
RECENT = timedelta(minutes=10)
HOLDING_STATES = (JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING)


def _pods_on(job: Job, node_name: str) -> int:
    if job.node_name == node_name and not job.ranks:
        return 1
    on = sum(1 for rank in job.ranks or [] if rank.get("node") == node_name)
    return on or (1 if job.node_name == node_name else 0)


def holders_on(node) -> list[dict]:
    """The portal's work on ``node``: one row per job, notebook session or service, with what it holds there (the
    jobs of the node's own cluster: a node of the same name in another cluster is another node)."""
    candidates = (
        Job.objects.filter(state__in=HOLDING_STATES)
        .filter(of_cluster(node.cluster_id))
        .filter(Q(node_name=node.name) | Q(workers__gt=1) | Q(kind="service"))
        .select_related("owner", "team", "resource_class")
        .order_by("pk")
    )
    rows = []
    for job in candidates:
        pods = _pods_on(job, node.name)
        if not pods and node.name not in (job.node_names or []):
            continue
        pods = pods or 1
        resource = job.resource_class.resource_name if job.resource_class_id else ""
        rows.append(
            {
                "job": job,
                "noun": job.get_kind_display().lower(),
                "pods": pods,
                "holds": f"{pods * job.count} × {resource}" if resource else "",
                "state": job.get_state_display(),
            }
        )
    return rows


def _recent_attribution(node, uuids: list[str]) -> dict[tuple[str, str], set[int]]:
    """(GPU UUID, MIG profile or "") → ids of the jobs telemetry saw lately on those GPUs of ``node``."""
    seen: dict[tuple[str, str], set[int]] = defaultdict(set)
    if not uuids:
        return seen
    rows = (
        GpuSample.objects.filter(
            gpu_uuid__in=uuids,
            cluster_id=node.cluster_id,
            node_name=node.name,
            ts__gte=timezone.now() - RECENT,
            job_id__isnull=False,
        )  # fmt: skip
        .values_list("gpu_uuid", "mig_profile", "job_id")
        .distinct()
    )
    for uuid, profile, job_id in rows:
        seen[(uuid, profile or "")].add(int(job_id))
    return seen


def node_detail_holders(request, node, gpus: list[dict]) -> dict:
    """Rows of holders for the page, and ``holders`` on each GPU row and MIG cell. People see their own teams'
    work by name; another team's is shown only as taken (admins see everything)."""
    teams = set(visible_teams(request.user).values_list("pk", flat=True))
    rows = holders_on(node)
    for row in rows:
        row["hidden"] = row["job"].team_id not in teams
    visible = {row["job"].pk: row["job"] for row in rows}
    seen = _recent_attribution(node, [g["gpu"].uuid for g in gpus if g["gpu"].uuid])
    # Jobs telemetry names that are not in the rows (finished a moment ago): fetch their names once.
    missing = {j for ids in seen.values() for j in ids} - set(visible)
    visible.update(Job.objects.filter(pk__in=missing).in_bulk())
    visible = {pk: job for pk, job in visible.items() if job.team_id in teams}
    others = "another team's work"
    for g in gpus:
        uuid = g["gpu"].uuid
        whole = sorted(seen.get((uuid, ""), set()))
        g["holders"] = [visible[j] for j in whole if j in visible]
        g["holders_hidden"] = others if any(j not in visible for j in whole) else ""
        per_profile: dict[str, int] = defaultdict(int)
        for cell in g.get("cells") or []:
            if cell["partition"] is not None:
                per_profile[cell["partition"].profile] += 1
        for cell in g.get("cells") or []:
            part = cell["partition"]
            if part is None:
                continue
            ids = sorted(seen.get((uuid, part.profile), set()))
            cell["holders"] = [visible[j] for j in ids if j in visible]
            cell["holders_hidden"] = others if any(j not in visible for j in ids) else ""
            cell["shared_profile"] = per_profile[part.profile] > 1
    return {"holders": rows}

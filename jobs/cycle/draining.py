"""Draining nodes for a reconfiguration, the jobs floor's half (gpus.nodeconfig publishes which nodes drain).

Level-triggered, run at the start of every job cycle: once a drain's grace period is over, every preemptible job
on the node gets a preemption notice due now and the cycle's reconcile deletes its workload and requeues it. Where
an admin forced the drain (gpus.nodeconfig_control), all the portal's work there is stopped that way, preemptible
or not and of every kind (a batch job, a distributed gang with a rank there, a notebook, a service with a replica
there), with the admin and their reason on the job's timeline, audit and webhooks, and the owner told
(jobs.notices). A service is requeued whole: its Deployment is deleted and made again once admission places its
minimum on nodes that are not being reconfigured.

What the owner reads is true of the new layout: where the reconfiguration takes the job's resource class out of
the fleet (gpus.nodeconfig.classes_leaving), the job cannot run again as it is, and its notice and timeline say so
instead of promising it a place "elsewhere or here". The requeue's timeline line names the drain as the cause
(``requeue_reason``), not the reclaim of borrowed capacity.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from gpus.models import settings_cluster_pk
from gpus.nodeconfig import classes_leaving, nodes_draining
from gpus.nodeconfig_control import nodes_forced
from jobs import kinds, lifecycle, notices
from jobs.choices import ACTIVE_STATES, EventKind, JobState
from jobs.models import Job

#: The preemption notice's data key naming the reconfiguration that stopped the job.
OPERATION_KEY = "node_config_operation"


def nodes_of(job: Job) -> list[str]:
    """Every node the job's pods hold: its node, a gang's ranks' nodes, and the nodes a service's replicas run on
    (the cluster's scheduler places those; jobs.service.follow notes them as the job's ranks)."""
    ranks = [rank.get("node") for rank in job.ranks or [] if rank.get("node")]
    return list(dict.fromkeys(n for n in [job.node_name, *job.node_names, *ranks] if n))


def _class_gone_sentence(node: str, class_name: str) -> str:
    return (
        f"The new layout of {node} has no {class_name} and no other node offers it, so it cannot run again as it "
        "is: submit it again with a class that exists (Resubmit with changes), or cancel it."
    )


def preempt_on_draining_nodes(now: datetime | None = None) -> int:
    """Level-triggered drain: every preemptible job on a node whose reconfiguration has drained past its grace
    period gets a preemption notice due now; the reconcile that follows deletes its workload and requeues it. The
    inventory only publishes which nodes are draining (gpus.nodeconfig.nodes_draining) and waits for their GPU
    pods to go. Where an admin forced the drain (gpus.nodeconfig_control.nodes_forced), every job of every kind
    on the node is stopped that way, preemptible or not, and its owner is told the admin's reason."""
    now = now or timezone.now()
    # Nodes are (cluster id, node name): a node of the same name in another cluster is another node.
    draining = nodes_draining(now)
    if not draining:
        return 0
    forced = nodes_forced()
    leaving = classes_leaving(draining)
    home = settings_cluster_pk()
    preempted = 0
    # A gang is on every node of ``node_names``, and a service's replicas go where the cluster's scheduler puts
    # them: gangs and services are few, so they are fetched whole and matched here (JSON containment is not
    # portable to SQLite).
    placed_by_cluster = [kind.name for kind in kinds.registered().values() if kind.followed_elsewhere]
    candidates = (
        Job.objects.filter(
            Q(node_name__in={name for _, name in draining}) | Q(workers__gt=1) | Q(kind__in=placed_by_cluster),
            state__in=ACTIVE_STATES,
        )
        .exclude(state=JobState.PREEMPTING)
        .select_related("owner", "resource_class")
    )
    for job in candidates.order_by("pk"):
        cluster_id = job.cluster_id or home
        key = next((k for n in nodes_of(job) if (k := (cluster_id, n)) in draining), None)
        if key is None or not (job.preemptible or key in forced):
            continue
        on, op = key[1], draining[key]
        noun = job.get_kind_display().lower()
        gone = leaving.get(key, {}).get(job.resource_class_id, "")
        after = _class_gone_sentence(on, gone) if gone else "it runs again elsewhere or here once the node is back."
        if key in forced:
            reason = forced[key].reason.rstrip(".")
            message = (
                f"An admin forced the drain of {on} (operation #{op}): {reason}. This {noun} is stopped now and "
                f"requeued; {after}"
            )
        else:
            message = (
                f"An admin is reconfiguring the GPUs of {on} (operation #{op}). This {noun} is preemptible, so it "
                f"is stopped now and requeued; {after}"
            )
        by, why = (forced[key].by, forced[key].reason) if key in forced else (None, "")
        data = {OPERATION_KEY: op, "node": on, "forced": key in forced, **({"class_gone": gone} if gone else {})}
        if lifecycle.preempt(job, now, now, message, data, actor=by, reason=why):
            preempted += 1
            if key in forced:
                words, url = job.owner_words()
                what = f"forced the drain of {on}: your {words} was stopped and requeued"
                if gone:
                    what += "; its class is gone"
                notices.tell_owner(
                    job.owner,
                    forced[key].by,
                    forced[key].reason,
                    what,
                    url=url,
                    then=_class_gone_sentence(on, gone) if gone else "",
                )
    return preempted


def requeue_reason(job: Job) -> str | None:
    """The requeue's timeline line for a job a reconfiguration's drain stopped (its latest preemption notice says
    which), or None when something else preempted it."""
    notice = job.events.filter(kind=EventKind.PREEMPT_NOTICE).order_by("-at", "-pk").first()
    data = notice.data if notice is not None else {}
    if OPERATION_KEY not in data:
        return None
    node = data.get("node") or "its node"
    how = "an admin forced the drain of" if data.get("forced") else "the drain of"
    text = f"Stopped because {how} {node} for a GPU reconfiguration (operation #{data[OPERATION_KEY]}); requeued."
    if data.get("class_gone"):
        text += " " + _class_gone_sentence(node, data["class_gone"])
    return text

"""Draining nodes for a reconfiguration, the jobs floor's half (gpus.nodeconfig publishes which nodes drain).

Level-triggered, run at the start of every job cycle: once a drain's grace period is over, every preemptible job
on the node gets a preemption notice due now and the cycle's reconcile deletes its workload and requeues it. Where
an admin forced the drain (gpus.nodeconfig_control), every job and notebook there is stopped that way, preemptible
or not, with the admin and their reason on the job's timeline, audit and webhooks, and the owner told
(jobs.notices). A service's replicas are its Deployment's to move (the kind says so: ``followed_elsewhere``).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from gpus.nodeconfig import nodes_draining
from gpus.nodeconfig_control import nodes_forced
from jobs import kinds, lifecycle, notices
from jobs.choices import ACTIVE_STATES, JobState
from jobs.models import Job


def preempt_on_draining_nodes(now: datetime | None = None) -> int:
    """Level-triggered drain: every preemptible job on a node whose reconfiguration has drained past its grace
    period gets a preemption notice due now; the reconcile that follows deletes its workload and requeues it. The
    inventory only publishes which nodes are draining (gpus.nodeconfig.nodes_draining) and waits for their GPU
    pods to go. Where an admin forced the drain (gpus.nodeconfig_control.nodes_forced), every job and notebook on
    the node is stopped that way, preemptible or not, and its owner is told the admin's reason."""
    now = now or timezone.now()
    draining = nodes_draining(now)
    if not draining:
        return 0
    forced = nodes_forced()
    preempted = 0
    # A gang is on every node of ``node_names``: any rank on a draining node preempts the whole gang. Gangs are
    # few, so they are fetched whole and matched here (JSON containment is not portable to SQLite).
    candidates = (
        Job.objects.filter(Q(node_name__in=draining) | Q(workers__gt=1), state__in=ACTIVE_STATES)
        .filter(Q(preemptible=True) | Q(node_name__in=forced) | Q(workers__gt=1))
        .exclude(state=JobState.PREEMPTING)
    )
    for job in candidates.order_by("pk"):
        on = next((n for n in [job.node_name, *job.node_names] if n in draining), None)
        if on is None or not (job.preemptible or on in forced):
            continue
        if kinds.for_job(job).followed_elsewhere:
            continue  # a service's replicas are its Deployment's to move; a forced drain lists them for the admin
        op = draining[on]
        if on in forced and not job.preemptible:
            message = (
                f"An admin forced the drain of {on} (operation #{op}): {forced[on].reason} This "
                f"{job.get_kind_display().lower()} is stopped now and requeued; it runs again elsewhere or here once "
                "the node is back."
            )
        else:
            message = (
                f"An admin is reconfiguring the GPUs of {on} (operation #{op}). This job is preemptible, so "
                "it is stopped now and requeued; it will run again elsewhere or here once the node is back."
            )
        by, why = (forced[on].by, forced[on].reason) if on in forced else (None, "")
        if lifecycle.preempt(job, now, now, message, {"node_config_operation": op}, actor=by, reason=why):
            preempted += 1
            if on in forced:
                words, url = job.owner_words()
                what = f"forced the drain of {on}: your {words} was stopped and requeued"
                notices.tell_owner(job.owner, forced[on].by, forced[on].reason, what, url=url)
    return preempted

"""The job cycle's service steps (issue 13): follow a service's objects and apply the quota rule (what is
launched, and how, is jobs.service.launch).

The quota rule. A service's minimum is its job, admitted like any job (``jobs.service.kind``). Every replica
above it is *granted* by the portal, one per cycle at most, under the admission lock and through
``jobs.scheduling.decide`` itself:

- each granted extra replica is an active one-pod view (a synthetic negative id, ``slot_id``) on the node the
  portal reserved for it, borrowed when it was granted above the team's guarantee, so it counts against the
  team's quota and the node's capacity like any job, and reclaim may choose a borrowed one;
- while the service's HPA wants more than it is granted (its desired count has reached the cap, the HPA shows
  ScalingLimited) and the service's maximum is not reached, one more replica is a queued preemptible one-pod view
  (``want_id``): decide admits it within the guarantee, or above it up to the limit as borrowed, on a node with
  room, or not at all;
- the HPA's maxReplicas is the number granted (``granted_replicas`` = the job's admitted minimum + the extra
  slots), so the autoscaler can never take more than quota and capacity allowed;
- when the HPA has wanted fewer than granted for PORTAL_SERVICE_SCALE_DOWN_SECONDS, grants above what it wants go
  back (borrowed first, newest first; never below the minimum);
- a borrowed replica chosen by reclaim gets a notice (a timeline line, an audit record, a notification to the
  owner) and the preemption grace; once the grace is over its slot is dropped and the lower maxReplicas makes
  the HPA scale the Deployment down.

The portal reserves capacity per node for the replicas; the pods themselves are placed by the Kubernetes scheduler
(the Deployment is not pinned), so the reservation is the quota's and capacity's bookkeeping, not a binding.

Following: the Deployment's, HPA's and pods' status go into ``InferenceService.observed``; the job becomes
running once ``min_replicas`` replicas are ready and stays running while the Deployment exists (readiness dips
show in ``observed``); until then the first waiting replica says why, as a batch job's pod would
(jobs.pod_states); a Deployment that vanished without the portal deleting it loses the job. A stopped service's,
or a service whose job is no longer admitted or running, objects are deleted (its Ingress too).

The external address: with PORTAL_SERVICE_URL_TEMPLATE and PORTAL_SERVICE_INGRESS_CLASS set, launch also applies
the service's Ingress (jobs.service.render.render_ingress); one the cluster refuses is a timeline line, not a
failed launch.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from cluster.base import ClusterBackend, ClusterError, NotFound
from core import audit
from core.notify import notify
from gpus.choices import ClusterConnection
from gpus.models import settings_cluster_pk
from jobs import lifecycle, pod_states, webhook_events
from jobs.choices import EventKind, JobAuditAction, JobState, RankState, ServiceState
from jobs.dra_claims import is_dra_class, shared_claim_name, template_name
from jobs.kinds.base import ElasticViews
from jobs.models import Job
from jobs.models.service import InferenceService
from jobs.pools import pool_in_use
from jobs.scheduling import dra
from jobs.scheduling.snapshot import Decisions, JobView
from jobs.service.launch import ACTIVE_JOB_STATES, REVISION_ANNOTATION, granted, render_objects
from jobs.service.render import (
    SERVICE_LABEL,
)
from vocab.pod_states import waiting_reason

log = logging.getLogger(__name__)

#: Synthetic ids of replica views: -(service id × SLOTS + slot), and slot WANT for the replica wanted.
SLOTS = 1000
WANT = SLOTS - 1


def slot_id(service_id: int, slot: int) -> int:
    return -(service_id * SLOTS + slot)


def want_id(service_id: int) -> int:
    return slot_id(service_id, WANT)


def _decode(view_id: int) -> tuple[int, int]:
    """(service id, slot index or WANT) of a synthetic view id."""
    return divmod(-view_id, SLOTS)


# -- the dedicated pool ---------------------------------------------------------------------------------------


def _wants_more(service: InferenceService, held: int) -> bool:
    if held >= service.max_replicas:
        return False
    if held < service.min_replicas:
        return True
    seen = service.observed or {}
    return bool(seen.get("scaling_limited")) and int(seen.get("desired") or 0) >= held


def replica_views(now: datetime, classes: dict, pool: bool) -> ElasticViews:
    """The granted extra replicas of every admitted service (active views) and one wanted replica of each service
    whose HPA wants more (a queued view): one query."""
    out = ElasticViews()
    services = InferenceService.objects.filter(job__state__in=ACTIVE_JOB_STATES).exclude(state=ServiceState.STOPPED)
    for service in services.select_related("job", "job__cluster"):
        job = service.job
        rc = classes.get(job.resource_class_id)
        # Every replica runs on the cluster of the service's minimum (its Deployment is there). Slots name nodes as
        # that cluster does; admission knows a registered cluster's nodes as "<cluster>/<node>" (FleetKeys).
        where = (job.cluster.name,) if job.cluster_id else ()
        registered = job.cluster_id is not None and job.cluster.connection != ClusterConnection.SETTINGS
        prefix = f"{job.cluster.name}/" if registered else ""
        common = dict(
            team=job.team_id, class_id=job.resource_class_id, count=job.count, cpu_m=job.cpu_millicores,
            memory_mb=job.memory_mb, priority=job.priority, preemptible=True, max_runtime_s=job.max_runtime_seconds,
            cuda=(), architecture=job.architecture, pool=pool, clusters=where,
        )  # fmt: skip
        for index, slot in enumerate(service.replica_slots):
            at = datetime.fromisoformat(slot["at"]).timestamp() if slot.get("at") else now.timestamp()
            node = prefix + slot["node"]
            out.active.append(JobView(
                id=slot_id(service.pk, index), submitted=at, node=node, borrowed=bool(slot.get("borrowed")),
                preempting=bool(slot.get("reclaim_at")), nodes=(node,), **common,
            ))  # fmt: skip
            if rc is not None:
                # A replica of a shared DRA class uses the service's one claim: its device is held already.
                units = 0 if dra.replicas_of(rc.resource_name) > 1 else job.count
                out.holds.append((node, rc.resource_name, units, job.cpu_millicores, job.memory_mb))
        if job.state == JobState.RUNNING and _wants_more(service, granted(service, job)):
            out.queued.append(JobView(id=want_id(service.pk), submitted=job.submitted_at.timestamp(),
                                      **common))  # fmt: skip
    return out


def take_decisions(decisions: Decisions, now: datetime) -> None:
    """Apply what admission decided about replica views, and remove them from ``decisions`` (the job cycle then
    applies the rest): a wanted replica admitted becomes a slot; a borrowed slot chosen for reclaim gets its
    notice; a job preempted to make room for a wanted replica is told it was for the service's job."""
    for victim, for_id in list(decisions.preempt.items()):
        if for_id < 0:
            service_id, _ = _decode(for_id)
            job_id = InferenceService.objects.filter(pk=service_id).values_list("job_id", flat=True).first()
            decisions.preempt[victim] = job_id or 0
    grants = {view_id: place for view_id, place in decisions.admit.items() if view_id < 0}
    reclaims = {view_id: for_job for view_id, for_job in decisions.preempt.items() if view_id < 0}
    for view_id in grants:
        del decisions.admit[view_id]
    for view_id in reclaims:
        del decisions.preempt[view_id]
    for view_id in [v for v in decisions.wait if v < 0]:
        del decisions.wait[view_id]
    wanted = {_decode(view_id)[0]: place for view_id, place in grants.items()}
    reclaimed: dict[int, list[tuple[int, int]]] = {}
    for view_id, for_job in reclaims.items():
        service_id, index = _decode(view_id)
        reclaimed.setdefault(service_id, []).append((index, for_job))
    for service in InferenceService.objects.filter(pk__in=set(wanted) | set(reclaimed)).select_related("job"):
        if service.pk in wanted:
            _grant(service, *wanted[service.pk], now)
        for index, for_job in reclaimed.get(service.pk, []):
            _reclaim(service, index, for_job, now)


def _sync_counts(service: InferenceService) -> None:
    service.granted_replicas = granted(service, service.job)
    service.borrowed_replicas = sum(1 for slot in service.replica_slots if slot.get("borrowed")) + (
        max(service.job.workers, 1) if service.job.borrowed and service.granted_replicas else 0
    )


def _grant(service: InferenceService, node: str, borrowed: bool, now: datetime) -> None:
    node = node.rpartition("/")[2]  # admission's "<cluster>/<node>": the slot names the node as its cluster does
    service.replica_slots = [*service.replica_slots, {"node": node, "borrowed": borrowed, "at": now.isoformat()}]
    _sync_counts(service)
    service.save(update_fields=["replica_slots", "granted_replicas", "borrowed_replicas"])
    note = " above the team's guarantee (borrowed: it may be reclaimed)" if borrowed else ""
    lifecycle.event(service.job_id, EventKind.SERVICE, f"Replica {service.granted_replicas} granted on {node}{note}; "
                    f"the autoscaler may now run up to {service.granted_replicas} replicas.", now,
                    action="grant", node=node, borrowed=borrowed, granted=service.granted_replicas)  # fmt: skip


def _reclaim(service: InferenceService, index: int, for_job: int, now: datetime) -> None:
    slots = list(service.replica_slots)
    if index >= len(slots) or slots[index].get("reclaim_at"):
        return
    grace = settings.PORTAL_PREEMPTION_GRACE
    deadline = now + timedelta(seconds=grace)
    slots[index] = slots[index] | {"reclaim_at": deadline.isoformat(), "for_job": for_job}
    service.replica_slots = slots
    service.save(update_fields=["replica_slots"])
    message = (
        f"Preemption notice: job #{for_job} of a team within its guarantee needs the GPUs of a borrowed replica of "
        f"service {service.name} on {slots[index]['node']}. The replica is given back in {grace} s: the autoscaler's "
        "maximum is lowered and the Deployment scales down by one."
    )
    lifecycle.event(service.job_id, EventKind.PREEMPT_NOTICE, message, now, for_job=for_job,
                    node=slots[index]["node"], deadline=deadline.isoformat())  # fmt: skip
    audit.record(None, JobAuditAction.SERVICE_RECLAIM, service, after={"for_job": for_job, "node": slots[index]["node"],
                 "deadline": deadline.isoformat()}, team=service.team)  # fmt: skip
    notify(service.owner, "service.reclaim", f"Service {service.name}: a borrowed replica is reclaimed", message,
           service.get_absolute_url())  # fmt: skip


# -- following the cluster ------------------------------------------------------------------------------------


def _newest_probe_failure(backend: ClusterBackend, namespace: str, pods: list[dict]) -> str:
    newest = ("", "")
    for pod in pods:
        if _ready(pod):
            continue
        for event in backend.pod_events(namespace, pod["metadata"]["name"]):
            text = event.get("message") or ""
            if text.startswith(("Readiness probe failed", "Liveness probe failed")):
                at = event.get("lastTimestamp") or event.get("eventTime") or ""
                if at >= newest[0]:
                    newest = (at, f"{pod['metadata']['name']}: {text}")
    return newest[1]


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _restarts(pod: dict) -> int:
    return sum(int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _observe(backend: ClusterBackend, service: InferenceService, deployment: dict, pods: list[dict]) -> dict:
    status = deployment.get("status") or {}
    try:
        hpa = backend.get_hpa(deployment["metadata"]["namespace"], service.name)
    except NotFound:
        hpa = {}
    hpa_status = hpa.get("status") or {}
    conditions = hpa_status.get("conditions") or []
    limited = next((c for c in conditions if c.get("type") == "ScalingLimited"), {})
    replica_pods = [
        {"pod": p["metadata"]["name"], "node": (p.get("spec") or {}).get("nodeName", ""), "ready": _ready(p),
         "restarts": _restarts(p)}
        for p in sorted(pods, key=lambda p: p["metadata"]["name"])
    ]  # fmt: skip
    return {
        "replicas": int(status.get("replicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "ready": int(status.get("readyReplicas") or 0),
        "available": int(status.get("availableReplicas") or 0),
        "desired": int(hpa_status.get("desiredReplicas") or 0),
        "scaling_limited": limited.get("status") == "True" and limited.get("reason") == "TooManyReplicas",
        "restarts": sum(p["restarts"] for p in replica_pods),
        "last_probe_failure": _newest_probe_failure(backend, deployment["metadata"]["namespace"], pods),
        "conditions": [
            {
                "type": c.get("type"),
                "status": c.get("status"),
                "reason": c.get("reason", ""),
                "message": c.get("message", ""),
            }
            for c in [*(status.get("conditions") or []), *conditions]
        ],  # fmt: skip
        "revision": int((deployment["metadata"].get("annotations") or {}).get(REVISION_ANNOTATION) or 0),
        "replica_pods": replica_pods,
    }


def _delete_objects(backend: ClusterBackend, namespace: str, name: str, dra: bool = False) -> bool:
    """Delete the service's objects; ``dra``: its class is a DRA class, so its GPU claim template goes too."""
    gone = backend.delete_deployment(namespace, name)
    backend.delete_hpa(namespace, name)
    backend.delete_service(namespace, name)
    backend.delete_ingress(namespace, name)  # whether or not one is configured now: it may have been at launch
    if dra:
        _delete_claims(backend, namespace, name)
    return gone


def _delete_claims(backend: ClusterBackend, namespace: str, name: str) -> None:
    """Delete the template the service's replicas claimed their GPUs from, or the claim they shared (a shared
    class). Their own claims go with their pods (kube-controller-manager's resourceclaim controller)."""
    backend.delete_resource_claim_template(namespace, template_name(name))
    backend.delete_resource_claim(namespace, shared_claim_name(name))


def reconcile_services(
    backend: ClusterBackend,
    result,
    now: datetime | None = None,
    cluster_id: int | None = None,
    home_id: int | None = None,
) -> None:
    """Follow, on ``backend`` (the cluster ``cluster_id``; None: the cluster configured in settings), every service
    placed there and every service with objects there: observe, run its job's state, give back replicas
    (scale-down window, reclaimed slots), keep the Deployment and HPA as the portal says, delete what a stopped,
    no-longer-admitted or since moved service left there."""
    now = now or timezone.now()
    home_id = home_id if home_id is not None else settings_cluster_pk()
    cluster_id = cluster_id if cluster_id is not None else home_id

    def placed_here(job: Job) -> bool:
        return job.cluster_id == cluster_id or (job.cluster_id is None and cluster_id == home_id)

    deployments = {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d
        for d in backend.list_deployments()
        if (d["metadata"].get("labels") or {}).get(SERVICE_LABEL)
    }
    pods_of: dict[tuple[str, str], list[dict]] = {}
    for pod in backend.list_pods():
        labels = pod["metadata"].get("labels") or {}
        if labels.get(SERVICE_LABEL):
            pods_of.setdefault((pod["metadata"]["namespace"], labels[SERVICE_LABEL]), []).append(pod)
    services = InferenceService.objects.select_related("job", "team", "job__team", "job__owner",
                                                       "job__resource_class")  # fmt: skip
    here = Q(job__cluster_id=cluster_id)
    if cluster_id == home_id:  # placed before the fleet, or not placed yet
        here |= Q(job__cluster__isnull=True)
    followed = list(services.filter(here).exclude(state=ServiceState.STOPPED))
    named = {n for _, n in deployments}
    followed += list(services.filter(name__in=named).exclude(pk__in=[s.pk for s in followed])) if named else []

    def holds(service: InferenceService) -> bool:
        return (
            service.state != ServiceState.STOPPED
            and service.job.state in (*ACTIVE_JOB_STATES, JobState.PREEMPTING)
            and placed_here(service.job)
        )

    live_keys = {(s.team.namespace, s.name) for s in followed if holds(s)}
    for service in followed:
        key = (service.team.namespace, service.name)
        job = service.job
        deployment = deployments.get(key)
        held = holds(service)
        try:
            if not held:
                if (
                    deployment is not None
                    and key not in live_keys
                    and _delete_objects(backend, *key, dra=is_dra_class(job.resource_class))
                ):
                    result.deleted += 1
                # Objects left here by a service that now runs on another cluster: that cluster's pass keeps its grants.
                if placed_here(job) and (service.granted_replicas or service.replica_slots):
                    service.replica_slots, service.granted_replicas, service.borrowed_replicas = [], 0, 0
                    service.save(update_fields=["replica_slots", "granted_replicas", "borrowed_replicas"])
                continue
            if job.workload_created_at is None:
                continue  # launch creates it
            if deployment is None:
                if lifecycle.lose(job, now):
                    result.lost += 1
                    # Nothing deletes its DRA claim later (the pass deletes a service's objects with its
                    # Deployment): it goes now, and a relaunch applies it anew.
                    if is_dra_class(job.resource_class):
                        _delete_claims(backend, *key)
                service.replica_slots, service.granted_replicas, service.borrowed_replicas = [], 0, 0
                service.save(update_fields=["replica_slots", "granted_replicas", "borrowed_replicas"])
                continue
            _follow(backend, service, job, deployment, pods_of.get(key, []), result, now)
        except ClusterError as error:
            result.errors.append(f"service {service.pk}: {error}")
            log.warning("following service %s failed (retried next cycle): %s", service.pk, error)


def _follow(backend, service: InferenceService, job: Job, deployment: dict, pods: list[dict], result, now) -> None:
    seen = _observe(backend, service, deployment, pods)
    previous = service.observed or {}
    lowered = _lower_minimum(service, job, now)
    held = granted(service, job)
    # Scale-down window: the HPA has wanted fewer than granted for long enough → give grants back.
    below_since = previous.get("below_since") if seen["desired"] and seen["desired"] < held else None
    if seen["desired"] and seen["desired"] < held and below_since is None:
        below_since = now.isoformat()
    slots = list(service.replica_slots)
    window = timedelta(seconds=settings.PORTAL_SERVICE_SCALE_DOWN_SECONDS)
    events = []
    if below_since and now - datetime.fromisoformat(below_since) >= window:
        keep = max(seen["desired"], service.min_replicas) - max(job.workers, 1)
        order = sorted(range(len(slots)), key=lambda i: (not slots[i].get("borrowed"), -i))
        drop = set(order[: max(0, len(slots) - max(keep, 0))])
        if drop:
            events.append(f"The autoscaler has wanted {seen['desired']} replicas for {window.seconds // 60} min; "
                          f"{len(drop)} granted replica(s) given back.")  # fmt: skip
            slots = [s for i, s in enumerate(slots) if i not in drop]
        below_since = None
    due = [s for s in slots if s.get("reclaim_at") and datetime.fromisoformat(s["reclaim_at"]) <= now]
    if due:
        slots = [s for s in slots if s not in due]
        events.append(f"{len(due)} borrowed replica(s) handed back after the preemption grace period.")
    seen["below_since"] = below_since
    slots, moved = _follow_pods(job, slots, seen["replica_pods"])
    service.replica_slots = slots
    service.observed, service.observed_at = seen, now
    _sync_counts(service)
    service.save(update_fields=["replica_slots", "granted_replicas", "borrowed_replicas", "observed", "observed_at"])
    webhook_events.service_health(service, previous, seen)
    for text in events:
        lifecycle.event(job, EventKind.SERVICE, text, now, action="give_back", granted=service.granted_replicas)
    for text in moved:
        lifecycle.event(job, EventKind.SERVICE, text, now, action="follow_pods")
    if lowered:
        lifecycle.event(job, EventKind.SERVICE, lowered, now, action="lower_minimum", workers=job.workers)
    _note_pods(job, seen["replica_pods"])
    # The job runs once the minimum serves.
    if job.state == JobState.ADMITTED and seen["ready"] >= service.min_replicas:
        first = seen["replica_pods"][0]["pod"] if seen["replica_pods"] else ""
        if lifecycle.start(job, now, now, first):
            result.started += 1
    elif job.state == JobState.ADMITTED:
        _explain_waiting(backend, job, pods, now)
    _sync_objects(backend, service, job, deployment, seen)


def _explain_waiting(backend: ClusterBackend, job: Job, pods: list[dict], now: datetime) -> None:
    """A service not serving its minimum yet: why its first waiting replica waits, said as a batch job's pod is
    (jobs.pod_states), after the replica ("Replica <pod>: ..."). The Deployment keeps trying whatever the verdict,
    so a service waits where a batch job would fail."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        reason, message = waiting_reason(pod)
        if reason and not _ready(pod):
            name = pod["metadata"]["name"]
            meaning = pod_states.why_waiting(job, reason, message, backend, name)
            lifecycle.explain_pending(job, now, meaning.reason, f"Replica {name}: {meaning.sentence}")
            return


def _lower_minimum(service: InferenceService, job: Job, now: datetime) -> str:
    """A minimum lowered below what the job was admitted with: the replicas above it stop being the job's (its
    ``workers`` and nodes shrink) and become granted slots on the same nodes, which go back as any grant does when
    the autoscaler has wanted fewer for the scale-down window. Returns what happened in words ("" for nothing)."""
    admitted = max(job.workers, 1)
    if service.min_replicas >= admitted or job.state not in ACTIVE_JOB_STATES:
        return ""
    keep = max(service.min_replicas, 1)
    nodes = list(job.node_names) or [job.node_name] * admitted
    freed = [{"node": node, "borrowed": bool(job.borrowed), "at": now.isoformat()} for node in nodes[keep:]]
    job.workers, job.node_name = keep, nodes[0]
    job.node_names = nodes[:keep] if keep > 1 else []
    Job.objects.filter(pk=job.pk).update(workers=job.workers, node_name=job.node_name, node_names=job.node_names)
    service.replica_slots = [*freed, *service.replica_slots]
    return (f"Minimum lowered from {admitted} to {keep} replicas: the {len(freed)} above it are held as granted "
            "replicas and go back once the autoscaler no longer wants them.")  # fmt: skip


def _follow_pods(job: Job, slots: list[dict], replica_pods: list[dict]) -> tuple[list[dict], list[str]]:
    """Move reservations to where the replicas run: the Deployment is not pinned, so the scheduler may put a
    replica on another node of the class than the one the portal reserved. Reservations on nodes that run a
    replica stay; each other one moves to a node running a replica no reservation covers (the minimum's first,
    in order), so admission's view of free capacity is the cluster's. Returns the slots and the moves in words."""
    minimum = list(job.node_names) or ([job.node_name] if job.node_name else [])
    booked = [*minimum, *(slot["node"] for slot in slots)]
    running = Counter(p["node"] for p in replica_pods if p.get("node"))
    stays = []
    for node in booked:
        stays.append(running[node] > 0)
        if stays[-1]:
            running[node] -= 1
    spare = iter(sorted(running.elements()))
    moved, words = list(booked), []
    for index, kept in enumerate(stays):
        if not kept and (node := next(spare, None)) is not None:
            words.append(f"{booked[index]} → {node}")
            moved[index] = node
    if not words:
        return slots, []
    if moved[: len(minimum)] != minimum:
        fields = {"node_names": moved[: len(minimum)]} if job.node_names else {"node_name": moved[0]}
        Job.objects.filter(pk=job.pk).update(**fields)
        for key, value in fields.items():
            setattr(job, key, value)
        if job.node_names:
            job.node_name = job.node_names[0]
            Job.objects.filter(pk=job.pk).update(node_name=job.node_name)
    slots = [slot | {"node": node} for slot, node in zip(slots, moved[len(minimum) :], strict=True)]
    text = (f"The scheduler placed replicas on other nodes of the class than the portal reserved; the reservations "
            f"follow them ({', '.join(words)}).")  # fmt: skip
    return slots, [text]


def _note_pods(job: Job, replica_pods: list[dict]) -> None:
    """The replica pods as the job's ranks: telemetry attribution and the job page see them."""
    ranks = [
        {"rank": i, "node": p["node"], "pod": p["pod"], "state": RankState.RUNNING if p["ready"] else RankState.PENDING,
         "exit_code": None, "reason": ""}
        for i, p in enumerate(replica_pods)
    ]  # fmt: skip
    if ranks != job.ranks:
        job.ranks = ranks
        Job.objects.filter(pk=job.pk).update(ranks=ranks)


def _sync_objects(backend, service: InferenceService, job: Job, deployment: dict, seen: dict) -> None:
    """Bring the Deployment (revision, pause) and the HPA (bounds, metric) to what the portal says."""
    namespace = deployment["metadata"]["namespace"]
    cap = service.granted_replicas
    _, wanted, hpa = render_objects(
        service, job, max_replicas=cap, api_version=backend.autoscaling_api(), dedicated_pool=pool_in_use(),
        replicas=(deployment.get("spec") or {}).get("replicas"),
    )  # fmt: skip
    if seen["revision"] != service.revision:
        backend.apply_deployment(wanted)
    elif bool((deployment.get("spec") or {}).get("paused")) != (service.state == ServiceState.PAUSED):
        backend.set_deployment_paused(namespace, service.name, service.state == ServiceState.PAUSED)
    try:
        current = backend.get_hpa(namespace, service.name).get("spec") or {}
    except NotFound:
        current = {}
    if {k: current.get(k) for k in ("minReplicas", "maxReplicas", "metrics")} != {
        k: hpa["spec"][k] for k in ("minReplicas", "maxReplicas", "metrics")
    }:
        backend.apply_hpa(hpa)

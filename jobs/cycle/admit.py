"""The admission step of the job cycle: snapshot, decide, write — in a number of queries that does not grow with
the queue, and with as few Python objects per job as the decision needs.

- ``build_snapshot`` reads the queued and active jobs as plain rows (one query, ``values_list``: no model
  instances), the nodes likewise, and the quotas, shares, classes, teams and array caps; what each job asks
  of quota and placement is still its kind's answer (``kinds.for_job(row).demand(row)``).
- ``admit`` takes the admission lock, runs ``jobs.scheduling.decide`` on the snapshot and writes the decisions.
- ``_apply`` writes them set-based through the bulk transitions of jobs.lifecycle (``write_admissions``,
  ``write_waits``, ``insert_events``, in jobs.lifecycle_bulk): every admission in one UPDATE, every changed wait
  in one UPDATE, every timeline event in one INSERT, safe without a per-row condition because queued jobs change
  state only under the admission lock (held here). A waiting job is written only
  when what users see of its wait changed (reason, sentence or queue position), so a cycle that only explains
  waits that did not change writes nothing for them. Preemptions go through ``lifecycle.preempt`` one by one
  (notice, webhook, audit), on model instances read for just those jobs.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from accounts.models import Team
from core.gcpause import paused_gc
from gpus.choices import ClusterConnection, ClusterHealth
from gpus.models import Cluster, Node, ResourceClass
from gpus.node_pools import PoolTaints
from gpus.nodeconfig import reconfiguring_nodes
from jobs import checkpoints, kinds, lifecycle, lifecycle_bulk
from jobs.choices import ACTIVE_STATES, JobState, PresenceState
from jobs.cycle.result import CycleResult
from jobs.devices import dra_devices, is_dra, resource_of
from jobs.kinds.base import ElasticViews
from jobs.models import (
    FairShare,
    Job,
    JobArray,
    MemberShare,
    Quota,
    QuotaClusterCap,
    RegistryCredential,
    TeamPreemption,
    TeamPresence,
    TeamVolume,
)
from jobs.pools import on_pool, pool_in_use, pool_toleration
from jobs.scheduling import decide, dra, node_trust, snapshot
from jobs.usage import month_gpu_hours
from jobs.validation import version_tuple
from vocab.names import CPU_RESOURCE, MEMORY_RESOURCE, NVIDIA_PREFIX
from vocab.quantity import mebibytes, millicores
from vocab.taints import Taint, tolerations_for
from vocab.waits import WaitReason

#: The columns of a job admission reads (queued and active jobs alike): rows are named tuples of these.
log = logging.getLogger(__name__)

JOB_COLUMNS = (
    "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
    "submitted_at", "max_runtime_seconds", "state", "attempts", "kind", "array_id", "architecture", "workers",
    "topology_key", "topology_mode", "image_cuda", "node_name", "node_names", "borrowed", "wait_reason",
    "wait_message", "queue_position", "cluster_id", "clusters", "secret_env", "secret_files", "volumes", "owner_id",
    "started_at", "last_checkpoint_at", "estimated_cluster",
)  # fmt: skip
NODE_COLUMNS = (
    "id", "name", "product_label", "team_id", "ready", "unschedulable", "blocked_reason", "allocatable",
    "external_requests", "cuda_version", "architecture", "labels", "pool", "taints", "cluster_id",
)  # fmt: skip


class FleetKeys:
    """Admission's names for the nodes of the fleet. Node names are unique within a cluster only, so a node of a
    registered cluster is known as "<cluster>/<node>" (a node name never holds a slash); the cluster configured in
    settings keeps plain node names, as a single-cluster install always had them. One query."""

    def __init__(self) -> None:
        rows = list(Cluster.objects.values_list("id", "name", "connection", "health"))
        self.home = next((name for _, name, connection, _ in rows if connection == ClusterConnection.SETTINGS), "")
        self.home_id = next((pk for pk, _, connection, _ in rows if connection == ClusterConnection.SETTINGS), None)
        self.names = {pk: name for pk, name, _, _ in rows}
        self.ids = {name: pk for pk, name, _, _ in rows}
        #: Clusters whose nodes take no new work: the inventory could not reach them (ClusterQuerySet.reachable).
        self.unreachable = {pk for pk, _, _, health in rows if health == ClusterHealth.UNREACHABLE}
        #: Queued job id → why some clusters are closed to it (its volumes, the team's presence), in words, and
        #: whether none is left: admission says it with the wait (``explain_held_back``).
        self.held_back: dict[int, tuple[str, bool]] = {}

    def key(self, cluster_id: int | None, node: str) -> str:
        if not node or cluster_id is None or cluster_id == self.home_id:
            return node
        return f"{self.names.get(cluster_id, cluster_id)}/{node}"

    def cluster_name(self, cluster_id: int | None) -> str:
        return self.home if cluster_id is None else self.names.get(cluster_id, "")

    def split(self, key: str) -> tuple[int | None, str]:
        """(cluster id, node name) of a key."""
        cluster, sep, node = key.partition("/")
        return (self.ids.get(cluster), node) if sep else (self.home_id, key)


#: The clusters of a job that may run nowhere now (no cluster holds all its volumes, or its secrets are in step on
#: none of the clusters it names): a name no cluster has, so no node is offered and it waits.
NOWHERE = ("(none)",)


class Reach:
    """Where each team's work may go beyond its own preference (jobs.cycle.admit's ``clusters_of``): the clusters
    where the team's secrets and registry credentials are in step (jobs.storage.presence), and where each of its
    volumes is. Three queries."""

    def __init__(self, presence: dict[int, set[str]], volumes: dict[tuple[int, str], set[str]], credentials: set[int]):
        self.presence, self.volumes, self.credentials = presence, volumes, credentials

    @classmethod
    def load(cls, fleet: FleetKeys) -> Reach:
        presence: dict[int, set[str]] = defaultdict(set)
        rows = TeamPresence.objects.filter(state=PresenceState.IN_STEP).values_list("team_id", "cluster_id")
        for team_id, cluster_id in rows:
            presence[team_id].add(fleet.cluster_name(cluster_id))
        volumes: dict[tuple[int, str], set[str]] = defaultdict(set)
        for team_id, name, cluster_id in TeamVolume.objects.exclude(phase="Lost").values_list(
            "team_id", "name", "cluster_id"
        ):
            volumes[(team_id, name)].add(fleet.cluster_name(cluster_id))
        credentials = set(RegistryCredential.objects.values_list("team_id", flat=True).distinct())
        return cls(dict(presence), dict(volumes), credentials)

    def volumes_of(self, team_id: int, mounts) -> set[str] | None:
        """The clusters that hold every volume of ``mounts`` (None: it mounts none)."""
        if not mounts:
            return None
        places = [self.volumes.get((team_id, mount.get("claim")), set()) for mount in mounts]
        return set.intersection(*places)

    def clusters_of(self, job, fleet: FleetKeys) -> tuple[tuple[str, ...], str]:
        """Where a job (a Job, or a row with its ``team_id``, ``clusters``, ``volumes``, ``secret_env`` and
        ``secret_files``) may run, most preferred first ((): anywhere), and, when some of the clusters it would
        otherwise go to are closed to it, why in words: where it asked (a notebook's sessions: where its home volume
        is, jobs.notebook.sessions), narrowed to the clusters that hold every volume it mounts and, when it uses the
        team's secrets or registry credentials, to those where the team's presence is in step (the settings cluster
        always is). Narrowed to nothing, it names no cluster there is (``NOWHERE``): it waits until presence comes
        in step or a volume appears. Admission and the planner's history both ask here."""
        holding = self.volumes_of(job.team_id, job.volumes)
        present = None
        if job.secret_env or job.secret_files or job.team_id in self.credentials:
            present = self.presence.get(job.team_id, set()) | {fleet.home}
        allowed = holding if present is None else present if holding is None else holding & present
        preference = tuple(job.clusters or ())
        if allowed is None:
            return preference, ""
        everywhere = {name for pk, name in fleet.names.items() if pk not in fleet.unreachable}
        if not preference and allowed >= everywhere:
            return (), ""  # every cluster will do: the placement score chooses, as for work that uses nothing
        wanted = preference or tuple(sorted(everywhere))
        chosen = tuple(name for name in wanted if name in allowed)
        why = _held_back_sentence(wanted, holding, present) if len(chosen) < len(wanted) else ""
        return chosen or NOWHERE, why


def _held_back_sentence(wanted: tuple[str, ...], holding: set[str] | None, present: set[str] | None) -> str:
    """Why a queued job may not use some of the clusters it would otherwise go to, in words."""
    parts = []
    if holding is not None and (away := [name for name in wanted if name not in holding]):
        where = " or ".join(sorted(holding)) or "no cluster the portal has seen"
        parts.append(f"its volumes are on {where}, so it cannot run on {', '.join(away)}")
    if present is not None and (behind := [name for name in wanted if name not in present]):
        parts.append(
            f"the team's secrets and registry credentials are not in step on {', '.join(behind)} yet (the team "
            "page's Clusters card says why; the portal copies them within a minute)"
        )
    return "Where it may run: " + "; ".join(parts) + "."


def _millicores(value) -> int:
    try:
        return millicores(value or 0)
    except ValueError:
        return 0


def _mebibytes(value) -> int:
    try:
        return mebibytes(value or 0)
    except ValueError:
        return 0


class _Memo(dict):
    """Parsed values by their text: thousands of nodes and jobs share a few quantities and versions."""

    def __init__(self, parse) -> None:
        super().__init__()
        self.parse = parse

    def __missing__(self, key):
        value = self[key] = self.parse(key)
        return value


def build_snapshot(now: datetime, fleet: FleetKeys | None = None) -> tuple[snapshot.Snapshot, dict]:
    """Everything admission needs, in a constant number of queries. Returns the snapshot and the job rows read
    (id → named tuple of ``JOB_COLUMNS``)."""
    classes = class_views()
    fleet = fleet or FleetKeys()
    rows = list(Job.objects.filter(state__in=(JobState.QUEUED, *ACTIVE_STATES)).values_list(*JOB_COLUMNS, named=True))
    queued = [row for row in rows if row.state == JobState.QUEUED]
    active = [row for row in rows if row.state != JobState.QUEUED]
    # What each job asks of quota and placement is its kind's answer, never a guess from its fields.
    demands = {row.id: kinds.for_job(row).demand(row) for row in rows}
    portal_on_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in active:
        rc = classes.get(job.resource_class_id)
        demand = demands[job.id]
        # A gang holds one pod's worth on each rank's node; a job without per-rank nodes holds it all on one. A shared
        # DRA class's units are held in whole devices per workload (jobs.scheduling.dra.held_units).
        if rc is not None and job.node_names:
            for name, pods in Counter(job.node_names).items():  # a node named twice: one workload's pods there
                held = portal_on_node[fleet.key(job.cluster_id, name)]
                held[rc.resource_name] += dra.held_units(rc.resource_name, demand.units * pods)
                held["cpu_m"] += demand.cpu_m * pods
                held["memory_mb"] += demand.memory_mb * pods
        elif rc is not None and job.node_name:
            held = portal_on_node[fleet.key(job.cluster_id, job.node_name)]
            held[rc.resource_name] += dra.held_units(rc.resource_name, demand.total_units)
            held["cpu_m"] += demand.total_cpu_m
            held["memory_mb"] += demand.total_memory_mb
    # What elastic kinds were granted above their jobs' minimum holds capacity too (an inference service's replicas).
    pool = pool_in_use()
    elastic = ElasticViews()
    for kind in kinds.registered().values():
        views = kind.elastic_views(now, classes, pool)
        if views is not None:
            elastic.active += views.active
            elastic.queued += views.queued
            elastic.holds += views.holds
    for name, resource, units, cpu_m, memory_mb in elastic.holds:
        held = portal_on_node[name]
        held[resource] += dra.held_units(resource, units)
        held["cpu_m"] += cpu_m
        held["memory_mb"] += memory_mb
    versions = _Memo(version_tuple)
    nodes = node_views(portal_on_node, versions, fleet)
    reach = Reach.load(fleet)

    def clusters_of(job) -> tuple[str, ...]:
        chosen, why = reach.clusters_of(job, fleet)
        if why and job.state == JobState.QUEUED:
            fleet.held_back[job.id] = (why, chosen == NOWHERE)
        return chosen

    quotas = quota_views(now)
    shares = {fs.team_id: fs for fs in FairShare.objects.all()}
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    on_pool = pool_kinds(pool)

    min_runtime = dict(
        TeamPreemption.objects.filter(min_runtime_seconds__gt=0).values_list("team_id", "min_runtime_seconds")
    )

    def at_risk(job, demand) -> tuple[float, bool]:
        """What stopping an active job now loses (normalised GPU-seconds since the later of its start and its last
        checkpoint), and whether it is younger than its team's minimum runtime."""
        if job.started_at is None:
            return 0.0, min_runtime.get(job.team_id, 0) > 0
        since = max(job.started_at, job.last_checkpoint_at or job.started_at)
        rc = classes.get(demand.resource_class_id)
        lost = demand.total_units * (rc.gpu_fraction if rc else 1.0) * max(0.0, (now - since).total_seconds())
        return lost, (now - job.started_at).total_seconds() < min_runtime.get(job.team_id, 0)

    def view(job) -> snapshot.JobView:
        demand = demands[job.id]
        active = job.state != JobState.QUEUED
        lost, protected = at_risk(job, demand) if active else (0.0, False)
        # Each pod is a worker on its own node; an active job admitted with several pods and no per-rank nodes
        # on record (before gangs were placed per rank) holds them all on its one node. Pods of a shared DRA class
        # share their workload's claims, so they go where its devices are: together, on one node.
        rc = classes.get(demand.resource_class_id)
        shared = rc is not None and dra.replicas_of(rc.resource_name) > 1
        together = demand.pods > 1 and (shared or (active and not job.node_names))
        return snapshot.JobView(
            id=job.id,
            team=job.team_id,
            class_id=demand.resource_class_id,
            count=demand.total_units if together else demand.units,
            cpu_m=demand.total_cpu_m if together else demand.cpu_m,
            memory_mb=demand.total_memory_mb if together else demand.memory_mb,
            priority=job.priority,
            preemptible=job.preemptible,
            submitted=job.submitted_at.timestamp(),
            max_runtime_s=job.max_runtime_seconds,
            node=fleet.key(job.cluster_id, job.node_name) if active else "",
            borrowed=job.borrowed if active else False,
            preempting=job.state == JobState.PREEMPTING,
            cuda=versions[job.image_cuda] if job.image_cuda else (),
            group=job.array_id,
            architecture=job.architecture,
            workers=1 if together else demand.pods,
            topology_key=job.topology_key,
            topology_mode=job.topology_mode,
            nodes=tuple(fleet.key(job.cluster_id, name) for name in job.node_names) if active else (),
            pool=on_pool.get(job.kind, False),
            clusters=clusters_of(job),
            cluster=fleet.cluster_name(job.cluster_id) if active else "",
            owner=job.owner_id,
            at_risk=lost,
            protected=protected,
            estimated_cluster="" if active else job.estimated_cluster,
            alternatives=demand.alternatives and not active,
        )

    recent = {}
    for team_id, fs in shares.items():
        age = max(0.0, (now - fs.updated).total_seconds())
        recent[team_id] = fs.average_units * 0.5 ** (age / half_life)
    member_average, member_weights = {}, {}
    for team_id, user_id, weight, average, updated in MemberShare.objects.values_list(
        "team_id", "user_id", "weight", "average_units", "updated"
    ):
        age = max(0.0, (now - updated).total_seconds())
        member_average[(team_id, user_id)] = average * 0.5 ** (age / half_life)
        if weight != 1.0:
            member_weights[(team_id, user_id)] = weight
    owners = {row.owner_id for row in rows} | {user for _, user in member_average}
    snap = snapshot.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        classes=classes,
        quotas=quotas,
        queued=[view(j) for j in queued] + elastic.queued,
        active=[view(j) for j in active] + elastic.active,
        recent_average=recent,
        team_names=dict(Team.objects.values_list("id", "name")),
        patience=settings.PORTAL_BACKFILL_PATIENCE,
        member_share=settings.PORTAL_MEMBER_FAIR_SHARE,
        member_average=member_average,
        member_weights=member_weights,
        user_names=dict(get_user_model().objects.filter(pk__in=owners).values_list("id", "username")),
        half_life=half_life,
        # A job array's parallelism is a cap on its group; admission knows only the number.
        group_caps=dict(
            JobArray.objects.filter(parallelism__isnull=False, tasks__state=JobState.QUEUED)
            .distinct()
            .values_list("id", "parallelism")
        ),
    )
    return snap, {row.id: row for row in rows}


def class_views() -> dict[int, snapshot.ClassView]:
    """Every resource class as admission sees it (one query). A class scoped to a cluster counts that cluster's
    nodes only, and the fleet-wide class of the same resource and product none of them."""
    rows = list(ResourceClass.objects.select_related("cluster"))
    scoped: dict[tuple[str, str], set[str]] = defaultdict(set)
    # Only a DRA class's alternatives count, and only DRA classes of its own scope among them (gpus.class_admin checks
    # when they are set; a class rescoped since then drops out here).
    dra_ids = {rc.id: rc.cluster_id for rc in rows if is_dra(rc)}
    for rc in rows:
        if rc.cluster is not None:
            # by the devices counted: a scoped class shared among users still takes its cluster's devices whole.
            scoped[(dra.base_of(resource_of(rc)), rc.product_label)].add(rc.cluster.name)
    return {
        rc.id: snapshot.ClassView(
            rc.id,
            resource_of(rc),
            rc.product_label,
            rc.gpu_fraction,
            rc.display_name,
            offered=rc.present,
            cluster=rc.cluster.name if rc.cluster is not None else "",
            not_on=frozenset(scoped[(dra.base_of(resource_of(rc)), rc.product_label)])
            if rc.cluster is None
            else frozenset(),
            alternatives=tuple(pk for pk in rc.alternatives or () if dra_ids.get(pk, -1) == rc.cluster_id)
            if rc.id in dra_ids
            else (),
        )
        for rc in rows
    }


def quota_views(now: datetime | None) -> dict[tuple[int, int], snapshot.QuotaView]:
    """Every quota as admission sees it, by (team, class). With ``now``, a monthly budget's ``used_hours`` is what
    the team used this calendar month (jobs.usage); without, 0 (the planner counts its replay's own use)."""
    used_hours: dict = {}
    if now is not None:
        budgeted = set(
            Quota.objects.filter(monthly_gpu_hours__isnull=False).values_list("team_id", "resource_class_id")
        )
        used_hours = month_gpu_hours({team for team, _ in budgeted}, now) if budgeted else {}
    caps: dict[int, dict[str, int]] = defaultdict(dict)
    for quota_id, cluster, limit in QuotaClusterCap.objects.values_list("quota_id", "cluster__name", "limit"):
        caps[quota_id][cluster] = limit
    return {
        (q.team_id, q.resource_class_id): snapshot.QuotaView(
            q.guaranteed,
            q.limit,
            float(q.monthly_gpu_hours) if q.monthly_gpu_hours is not None else None,
            used_hours.get((q.team_id, q.resource_class_id), 0.0),
            caps.get(q.pk, {}),
        )
        for q in Quota.objects.all()
    }


def pool_kinds(pool: bool) -> dict[str, bool]:
    """Kind name → whether its jobs go to the dedicated service pool (``pool``: whether one is in use)."""
    return {name: pool and kind.uses_service_pool for name, kind in kinds.registered().items()}


def node_views(
    portal_on_node: dict | None = None, versions: _Memo | None = None, fleet: FleetKeys | None = None
) -> dict[str, snapshot.NodeView]:
    """The present nodes with a product of the clusters that can be reached, as admission sees them (one query,
    plain rows), by their fleet keys (``FleetKeys``). ``portal_on_node``: what the portal's own active work holds on
    each node (none: every unit not held outside the portal is free)."""
    portal_on_node = portal_on_node or {}
    fleet = fleet or FleetKeys()
    versions = versions if versions is not None else _Memo(version_tuple)
    nodes = {}
    # A node whose GPUs are being reconfigured (MIG layout, time-slicing) takes no new work until it is done.
    reconfiguring = reconfiguring_nodes()
    topology_keys = settings.PORTAL_TOPOLOGY_KEYS
    cpus, memories = _Memo(_millicores), _Memo(_mebibytes)
    empty: dict = {}
    # What the pod rendered for each node tolerates (its pool's GPU-keeping taints; on the dedicated pool, the pool's
    # taint too): a node with any other NoSchedule/NoExecute taint takes no work (node_trust.untolerated).
    table = PoolTaints.load()
    on_pool_toleration = pool_toleration()
    devices = dra_devices()
    # A node NVIDIA's DRA driver publishes GPUs of counts even without GPU Feature Discovery's product label (the GPU
    # Operator's DRA stack runs no GFD): its devices name the product.
    present = (
        Node.objects.present()
        .filter(~Q(product_label="") | Q(pk__in=list(devices)))
        .exclude(cluster_id__in=fleet.unreachable)
    )
    for node in present.values_list(*NODE_COLUMNS, named=True):
        key = fleet.key(node.cluster_id, node.name)
        external = node.external_requests or empty
        held = portal_on_node.get(key, empty)
        labels = node.labels or empty
        allocatable = {
            r: int(v) for r, v in node.allocatable.items() if r.startswith(NVIDIA_PREFIX) and str(v).isdigit()
        }
        free = {r: n - int(external.get(r, 0)) - held.get(r, 0) for r, n in allocatable.items()}
        # DRA devices count as units too, less what the portal's work holds of them, placed as the allocator would.
        on_node = devices.get(node.id)
        if on_node is not None:
            allocatable.update(on_node.allocatable())
            on_node = on_node.holding({r: n for r, n in held.items() if r.startswith(dra.DRA_PREFIX)})
            free.update(on_node.free())
        on_service_pool = on_pool(node.labels)
        tolerations = tolerations_for(table.of_pool(node.cluster_id, node.pool)) + (
            [on_pool_toleration] if on_service_pool else []
        )
        untolerated = node_trust.untolerated((Taint.of(t) for t in node.taints or ()), tolerations)
        cpu = cpus[node.allocatable.get(CPU_RESOURCE)] - int(external.get("cpu_m", 0))
        memory = memories[node.allocatable.get(MEMORY_RESOURCE)] - int(external.get("memory_mb", 0))
        nodes[key] = snapshot.NodeView(
            name=key,
            cluster=fleet.cluster_name(node.cluster_id),
            product_label=node.product_label or (on_node.product_label if on_node is not None else ""),
            team=node.team_id,
            # ... nor does one whose GPU stack cannot run it (a driver upgrade, pressure, a switched-off plugin).
            schedulable=node.ready
            and not node.unschedulable
            and (node.cluster_id, node.name) not in reconfiguring
            and not node.blocked_reason
            and not untolerated,
            allocatable=allocatable,
            free=free,
            cpu_free_m=cpu - held.get("cpu_m", 0),
            memory_free_mb=memory - held.get("memory_mb", 0),
            cpu_capacity_m=cpu,
            memory_capacity_mb=memory,
            cuda=versions[node.cuda_version] if node.cuda_version else (),
            architecture=node.architecture,
            kept_off=node.blocked_reason or node_trust.taint_reason(untolerated, node.pool),
            topology={key: str(labels[key]) for key in topology_keys if key in labels},
            pool=on_service_pool,
            dra=on_node,
        )
    return nodes


def admit(result: CycleResult, now: datetime | None = None) -> snapshot.Decisions:
    return admitting(result, now)[1]


def admitting(result: CycleResult, now: datetime | None = None) -> tuple[snapshot.Snapshot, snapshot.Decisions]:
    """``admit``, and the snapshot it decided on (the cycle's start-time estimates replay it: jobs.cycle.run)."""
    now = now or timezone.now()
    # The lock serialises cycles with each other and with cancels and notebook stops.
    with paused_gc(), lifecycle.admission_lock(now):
        fleet = FleetKeys()
        snap, rows = build_snapshot(now, fleet)
        decisions = decide.decide(snap)
        explain_held_back(decisions, fleet)
        for kind in kinds.registered().values():
            kind.take_elastic(decisions, now)  # e.g. a service's replica views: granted, reclaimed
        _apply(decisions, rows, now, result, fleet)
        _update_fair_share(snap, now)
    return snap, decisions


def explain_held_back(decisions: snapshot.Decisions, fleet: FleetKeys) -> None:
    """A waiting job that some clusters are closed to says why: with none left, that is its wait (reason
    ``cluster``: what admission said of capacity elsewhere does not apply to it); else the sentence follows what
    keeps it from the clusters it may use."""
    for job_id, (sentence, nowhere) in fleet.held_back.items():
        wait = decisions.wait.get(job_id)
        if wait is None:
            continue
        if nowhere:
            decisions.wait[job_id] = snapshot.Wait(
                reason=WaitReason.CLUSTER, message=f"{sentence} It waits until that changes.",
                detail={"reason": "presence"}, position=wait.position,
            )  # fmt: skip
        else:
            decisions.wait[job_id] = snapshot.Wait(
                reason=wait.reason, message=f"{wait.message} {sentence}", detail=wait.detail, position=wait.position
            )


def _apply(decisions: snapshot.Decisions, rows: dict, now: datetime, result: CycleResult, fleet: FleetKeys) -> None:
    # Queued jobs change state only under the admission lock (held here): the set-based writes are safe.
    placements = []
    for job_id, (node, borrowed) in decisions.admit.items():
        keys = decisions.ranks.get(job_id, (node,))
        cluster_id, _ = fleet.split(keys[0])
        names = tuple(fleet.split(key)[1] for key in keys)
        shown = "" if cluster_id == fleet.home_id else fleet.cluster_name(cluster_id)
        placements.append((rows[job_id], names, borrowed, cluster_id, shown))
    served = _served_by(decisions, rows)
    events = lifecycle_bulk.write_admissions(placements, now, served)
    result.admitted += len(decisions.admit)
    victims = [job_id for job_id in decisions.preempt if rows[job_id].state != JobState.PREEMPTING]
    found = Job.objects.select_related("team", "resource_class", "owner").in_bulk(victims) if victims else {}
    for job in (found[job_id] for job_id in victims if job_id in found):
        job.state = rows[job.pk].state  # the move is conditional on the state the decision was made on
        for_job = decisions.preempt[job.pk]
        grace = checkpoints.grace_of(job)
        deadline = now + timedelta(seconds=grace)
        message = (
            f"Preemption notice: job #{for_job} of a team within its guarantee needs these GPUs back. This job "
            f"ran on borrowed capacity; it is stopped in {grace} s and requeued."
        )
        if job.checkpoint:
            message += f" It gets {job.checkpoint.get('signal', 'SIGTERM')} now to checkpoint."
        if lifecycle.preempt(job, now, deadline, message, {"for_job": for_job, "deadline": deadline.isoformat()}):
            result.preempted += 1
    result.waiting += len(decisions.wait)
    events += lifecycle_bulk.write_waits([(rows[job_id], wait) for job_id, wait in decisions.wait.items()])
    lifecycle_bulk.insert_events(events, now)


def _served_by(decisions: snapshot.Decisions, rows: dict) -> dict[int, lifecycle_bulk.ServedBy]:
    """The admitted jobs an alternative of their class serves: what their admission writes and says (one query,
    none when there are none)."""
    if not decisions.served_by:
        return {}
    wanted = {rows[job_id].resource_class_id for job_id in decisions.served_by} | set(decisions.served_by.values())
    classes = ResourceClass.objects.in_bulk(wanted)
    out = {}
    for job_id, class_id in decisions.served_by.items():
        asked = classes[rows[job_id].resource_class_id]
        got = classes[class_id]
        position = (asked.alternatives or []).index(class_id) + 2 if class_id in (asked.alternatives or []) else 0
        out[job_id] = lifecycle_bulk.ServedBy(asked.pk, asked.display_name, got.pk, got.display_name, position)
    return out


def _update_fair_share(snap: snapshot.Snapshot, now: datetime) -> None:
    """Fold what each team, and each member of a team, held into its decayed average (held is constant since the
    last update)."""
    held: dict[int, float] = defaultdict(float)
    member_held: dict[tuple[int, int], float] = defaultdict(float)
    for job in snap.active:
        rc = snap.classes.get(job.class_id)
        gpus = job.total * (rc.gpu_fraction if rc else 1.0)
        held[job.team] += gpus
        if job.owner:
            member_held[(job.team, job.owner)] += gpus
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    existing = {fs.team_id: fs for fs in FairShare.objects.all()}
    _fold(FairShare, existing, held, now, half_life, lambda team_id: {"team_id": team_id})
    members = {(ms.team_id, ms.user_id): ms for ms in MemberShare.objects.all()}
    _fold(MemberShare, members, member_held, now, half_life, lambda key: {"team_id": key[0], "user_id": key[1]})


def _fold(model, existing: dict, held: dict, now: datetime, half_life: float, fields) -> None:
    """Decay each row's average to ``now`` and fold in what was held since its update (set-based: one INSERT of the
    new rows, one UPDATE of the others)."""
    to_create, to_update = [], []
    for key in set(existing) | set(held):
        row = existing.get(key)
        if row is None:
            to_create.append(model(**fields(key), average_units=0.0, updated=now))
            continue
        if row.average_units < 1e-6 and not held.get(key):
            continue  # nothing to decay or fold in: the row stays as it is (a member's weight, say)
        age = max(0.0, (now - row.updated).total_seconds())
        keep = 0.5 ** (age / half_life)
        row.average_units = row.average_units * keep + held.get(key, 0.0) * (1 - keep)
        row.updated = now
        to_update.append(row)
    model.objects.bulk_create(to_create, ignore_conflicts=True)
    model.objects.bulk_update(to_update, ["average_units", "updated"])

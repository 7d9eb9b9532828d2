"""Team presence on the clusters of the fleet: each team's namespace, secrets and registry credentials exist on every
registered cluster as the portal records them, and ``TeamPresence`` says, per team and cluster, whether they do.

The rule. The cluster configured in settings is written directly (jobs.storage.secrets stores every value there
first, and it has no presence row: it is always in step). Every other registered cluster is brought in step by a
pass of its own (``sync``, one Celery task per cluster, jobs.tasks): the team's namespace is ensured, each of the
team's Secrets is copied from the settings cluster (``secret_values``: the values go from one API server to the
other and are never kept), and Secrets the portal labelled there that no row names any more are deleted. A change
to a team's secrets or credentials marks the team's rows pending (jobs.storage.secrets.presence_pending) and kicks
the passes; a pass that started before the change cannot mark a row in step (``wanted_at``), so a row reads in step
only once the cluster holds the values of the last change. Published datasets and the volume inventory of the
cluster follow in the same pass (jobs.storage.volumes).

Admission (jobs.cycle.admit) lets work that uses the team's secrets or registry credentials run on the settings
cluster and on the clusters where the team's row is in step. A cluster that cannot be reached fails its own pass
(its rows say why) and never holds up another's; the next pass retries it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from accounts.models import Team
from cluster import get_backend
from cluster.base import ClusterBackend, ClusterError, NotFound
from core import audit
from gpus.choices import ClusterConnection
from gpus.fleet import backend_of
from gpus.models import Cluster
from jobs.choices import JobAuditAction, PresenceState
from jobs.models import RegistryCredential, TeamPresence, TeamSecret
from jobs.render import TEAM_LABEL
from jobs.storage import volumes
from jobs.storage.secrets import REGISTRY_SECRET_KIND, SECRET_KIND_LABEL, TEAM_SECRET_KIND

log = logging.getLogger(__name__)


class HomeProblem(Exception):
    """The settings cluster could not give a Secret's values (missing there, or unreachable): this team waits."""


@dataclass
class PresenceResult:
    teams: int = 0
    copied: int = 0
    removed: int = 0
    in_step: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"teams": self.teams, "copied": self.copied, "removed": self.removed, "in_step": self.in_step,
                "errors": len(self.errors)}  # fmt: skip


def registered() -> list[Cluster]:
    """The clusters presence is kept on: every registered cluster but the one configured in settings."""
    return list(Cluster.objects.exclude(connection=ClusterConnection.SETTINGS).order_by("name"))


def wanted_secrets(team: Team) -> dict[str, str]:
    """Secret name → kind label of every Secret the portal keeps for ``team``."""
    wanted = {name: TEAM_SECRET_KIND for name in TeamSecret.objects.filter(team=team).values_list("name", flat=True)}
    for name in RegistryCredential.objects.filter(team=team).values_list("secret_name", flat=True):
        wanted[name] = REGISTRY_SECRET_KIND
    return wanted


def _copy(team: Team, name: str, kind: str, backend: ClusterBackend, home: ClusterBackend) -> None:
    try:
        secret_type, data = home.secret_values(team.namespace, name)
    except NotFound:
        raise HomeProblem(
            f"Secret {name} is missing from namespace {team.namespace} on the cluster configured in settings, so it "
            "cannot be copied; a lead can store it again with Rotate."
        ) from None
    except ClusterError as error:
        raise HomeProblem(f"The cluster configured in settings could not give Secret {name}: {error}") from None
    backend.apply_secret(team.namespace, name, data, secret_type, {TEAM_LABEL: team.slug, SECRET_KIND_LABEL: kind})


def _bring_in_step(team: Team, row: TeamPresence, backend: ClusterBackend, home: ClusterBackend, result) -> None:
    """Make the team's namespace and Secrets on ``backend`` match the portal's record. Raises HomeProblem or the
    target's ClusterError."""
    backend.ensure_namespace(team.namespace, {TEAM_LABEL: team.slug})
    wanted = wanted_secrets(team)
    present = {s["metadata"]["name"] for s in backend.list_secrets(team.namespace, SECRET_KIND_LABEL)}
    for name, kind in sorted(wanted.items()):
        # A row that is not in step may miss the last rotation: every Secret is copied again. One in step copies
        # only what went missing (deleted behind the portal's back).
        if row.state != PresenceState.IN_STEP or name not in present:
            _copy(team, name, kind, backend, home)
            result.copied += 1
    for name in sorted(present - set(wanted)):
        backend.delete_secret(team.namespace, name)
        result.removed += 1


def _record(row: TeamPresence, state: str, error: str, started: datetime) -> None:
    """Write the pass's outcome for one row; in step only if no change asked for a newer pass since it started."""
    now = timezone.now()
    rows = TeamPresence.objects.filter(pk=row.pk)
    if state == PresenceState.IN_STEP:
        rows = rows.filter(wanted_at__lte=started)
    changed = rows.exclude(Q(state=state) & Q(error=error)).exists()
    rows.update(state=state, error=error[:2000], synced_at=now if state == PresenceState.IN_STEP else row.synced_at)
    if changed and (state, error) != (row.state, row.error):
        verb = JobAuditAction.PRESENCE_IN_STEP if state == PresenceState.IN_STEP else JobAuditAction.PRESENCE_ERROR
        audit.record(
            None, verb, row, team=row.team,
            after={"cluster": row.cluster.name, "state": state, **({"error": error[:500]} if error else {})},
        )  # fmt: skip


def sync(cluster: Cluster, backend: ClusterBackend | None = None, home: ClusterBackend | None = None):
    """One presence pass of the registered ``cluster``: every team with a namespace is brought in step there, and
    the cluster's published datasets and volume inventory follow (jobs.storage.volumes). A team whose copy fails
    says why on its row and the others go on; a cluster that cannot be reached ends the pass (the next one
    retries it)."""
    result = PresenceResult()
    started = timezone.now()
    teams = list(Team.objects.exclude(namespace="").order_by("slug"))
    TeamPresence.objects.bulk_create(
        [TeamPresence(team=team, cluster=cluster, wanted_at=started) for team in teams], ignore_conflicts=True
    )
    rows = {row.team_id: row for row in TeamPresence.objects.filter(cluster=cluster).select_related("team")}
    try:
        backend = backend or backend_of(cluster)
        home = home or get_backend()
    except ClusterError as error:
        result.errors.append(f"{cluster.name}: {error}")
        return result
    for team in teams:
        row = rows[team.pk]
        row.cluster = cluster
        result.teams += 1
        try:
            _bring_in_step(team, row, backend, home, result)
        except HomeProblem as problem:
            _record(row, PresenceState.ERROR, str(problem), started)
            result.errors.append(f"{team.slug}: {problem}")
            continue
        except ClusterError as error:
            text = f"Cluster {cluster.name} did not take the team's namespace or Secrets: {error}"
            _record(row, PresenceState.ERROR, text, started)
            result.errors.append(f"{cluster.name}: {error}")
            log.warning("presence of team %s on cluster %s failed: %s", team.slug, cluster.name, error)
            if type(error) is ClusterError:
                return result  # the cluster itself cannot be reached: the other teams wait for the next pass
            continue
        _record(row, PresenceState.IN_STEP, "", started)
        result.in_step += 1
    try:
        volumes.reconcile_volumes(backend, cluster)
    except ClusterError as error:
        result.errors.append(f"{cluster.name} volumes: {error}")
    return result


def presence_of(team: Team) -> list[dict]:
    """What the team page shows: per cluster, whether the team's secrets and credentials are there (the settings
    cluster first, always in step; registered clusters without a row yet read pending)."""
    rows = {row.cluster_id: row for row in TeamPresence.objects.filter(team=team)}
    out = []
    for cluster in Cluster.objects.order_by("name"):
        if cluster.connection == ClusterConnection.SETTINGS:
            out.insert(0, {"cluster": cluster, "state": PresenceState.IN_STEP, "label": "In step", "error": "",
                           "synced_at": None, "direct": True})  # fmt: skip
            continue
        row = rows.get(cluster.pk)
        state = row.state if row else PresenceState.PENDING
        out.append({
            "cluster": cluster, "state": state, "label": PresenceState(state).label,
            "error": row.error if row else "", "synced_at": row.synced_at if row else None, "direct": False,
        })  # fmt: skip
    return out

"""Notebooks: launch, stop, start again, extend, and the culler that warns and stops them.

A notebook is a Notebook row (name, image, class, home volume, limits) plus one Job of kind "notebook" per
session; the session goes through admission like any job and counts against the same quota. Stopping cancels
the session's job (quota is free at once) and deletes its workload; the volume and Service stay, so "Start
again" makes a new session on the same home directory.

Every state change here is a conditional UPDATE on the state it was read in, so two culler runs at once (or a
culler and a person) stop a notebook once and send each warning once; a run that dies half-way is finished by
the next one (a stopped notebook whose session is still active gets it cancelled).
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.crypto import salted_hmac

from cluster.base import ClusterBackend, ClusterError
from core import audit, secret_keys
from core.notify import notify
from gpus.choices import ClusterConnection
from gpus.fleet import backend_of
from gpus.models import Cluster
from jobs import lifecycle, logkeeping, notices, webhook_events
from jobs.access import can_manage_notebook, can_submit
from jobs.choices import (
    ACTIVE_STATES,
    CANCELLABLE_STATES,
    EventKind,
    JobAuditAction,
    JobKind,
    JobState,
    NotebookState,
    StopReason,
    WorkspaceKind,
)
from jobs.models import Job, Notebook, NotebookPolicy
from jobs.notebook import culling
from jobs.notebook.workspace import portal_access
from jobs.notebook.workspaces import HEARTBEAT, KERNELS, REQUESTS, WORKSPACES, workspace_of, workspace_problems
from jobs.render import NOTEBOOK_HOME
from jobs.storage.mounts import check_volume_mounts
from jobs.validation import check_request, cluster_problems, image_cuda_version, volume_clusters
from telemetry.models import GpuSample
from vocab.durations import WORDS, duration_text

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
AUDIT_FIELDS = [
    "name", "workspace", "state", "image", "count", "ttl_seconds", "idle_timeout_seconds", "expires_at", "stop_reason",
]  # fmt: skip


def hash_token(token: str, salt: str | None = None) -> str:
    """Jupyter's salted password hash (``algorithm:salt:hexdigest``, as jupyter_server's passwd_check reads it)."""
    salt = salt or secrets.token_hex(6)
    return f"sha256:{salt}:{hashlib.sha256(token.encode() + salt.encode()).hexdigest()}"


def check_token(token_hash: str, token: str) -> bool:
    try:
        _algorithm, salt, _digest = token_hash.split(":", 2)
    except ValueError:
        return False
    return secrets.compare_digest(hash_token(token, salt), token_hash)


def _owner_token(notebook_pk: int, salt: str, key: str | None = None) -> str:
    """The token of a session someone else started: HMAC-SHA256 of the notebook and ``salt`` under SECRET_KEY (as a
    webhook's signing secret), so the portal can give it to the owner later without storing it."""
    return salted_hmac("jobs.notebook.token", f"{notebook_pk}:{salt}", secret=key, algorithm="sha256").hexdigest()[:48]


@dataclass
class Session:
    notebook: Notebook
    #: The access token, in clear this once; the portal keeps only its hash.
    token: str


def _audit(actor, action: str, notebook: Notebook, before=None, **extra) -> None:
    after = audit.snapshot(notebook, AUDIT_FIELDS) | extra
    audit.record(actor, action, notebook, before=before, after=after, team=notebook.team)


def session_clusters(notebook: Notebook) -> list[str]:
    """Where the next session may run: the cluster of its home volume once the first session made it there;
    before that, the notebook's preference narrowed to the clusters holding its extra volumes (any order the
    notebook gave; without one, those clusters; with neither, anywhere: admission chooses)."""
    if notebook.cluster_id is not None:
        return [notebook.cluster.name]
    holding = volume_clusters(notebook.team, notebook.volumes)
    if holding is None:
        return list(notebook.clusters)
    chosen = [name for name in notebook.clusters if name in holding]
    return chosen or sorted(holding)


def session_backend(job: Job | None, default: ClusterBackend | None) -> ClusterBackend | None:
    """The backend of the cluster a session runs on (``default``, the settings cluster's, when it runs there or was
    never placed). None when the cluster cannot be reached now: the job cycle tidies up its workload later."""
    if job is None or job.cluster_id is None:
        return default
    cluster = Cluster.objects.filter(pk=job.cluster_id).first()
    if cluster is None or cluster.connection == ClusterConnection.SETTINGS:
        return default
    try:
        return backend_of(cluster)
    except ClusterError:
        return None


def _new_session(actor, notebook: Notebook, now: datetime) -> Session:
    """Inside a transaction: a new Job for ``notebook`` and a new token; resets the limits' bookkeeping. The token
    goes to the caller when the caller is the owner; a session someone else starts keeps it for the owner to collect
    once (``collect_token``): the salt is stored, the token never."""
    if actor.pk == notebook.owner_id:
        token, notebook.owner_token_salt = secrets.token_urlsafe(24), ""
    else:
        notebook.owner_token_salt = secrets.token_hex(16)
        token = _owner_token(notebook.pk, notebook.owner_token_salt)
    notebook.token_hash = hash_token(token)
    policy = NotebookPolicy.for_team(notebook.team)
    # Audited as the notebook's launch or start by the caller, not as a job submission.
    job = lifecycle.submit(
        actor,
        f"Notebook session started by {actor.get_username()}: {notebook.count} × "
        f"{notebook.resource_class.display_name}, home volume {notebook.volume_name}.",
        at=now,
        team=notebook.team,
        owner=notebook.owner,
        kind=JobKind.NOTEBOOK,
        notebook=notebook,
        name=notebook.name,
        image=notebook.image,
        env=notebook.env,
        resource_class=notebook.resource_class,
        count=notebook.count,
        cpu_millicores=notebook.cpu_millicores,
        memory_mb=notebook.memory_mb,
        preemptible=notebook.preemptible,
        # A backstop only: the culler stops the session at its maximum age, long before Kubernetes would.
        max_runtime_seconds=policy.max_ttl_seconds + 3600,
        image_cuda=image_cuda_version(notebook.image) or "",
        clusters=session_clusters(notebook),
    )
    notebook.state, notebook.session = NotebookState.ACTIVE, job
    notebook.running_since = notebook.expires_at = notebook.extended_at = None
    notebook.last_activity_at = notebook.idle_deadline = notebook.ttl_warned_at = notebook.idle_warned_at = None
    notebook.last_request_at = None
    notebook.stop_reason, notebook.stopped_at, notebook.stopped_by = "", None, None
    notebook.save()
    webhook_events.notebook(notebook, "notebook.started", actor=actor, job=job.pk)
    return Session(notebook, token)


def _workspace(fields: dict) -> str:
    return str(fields.get("workspace") or WorkspaceKind.JUPYTER)


def _launch_settings(policy: NotebookPolicy, fields: dict) -> tuple[str, str, int, int, int]:
    """The name, image, home volume size, maximum age and idle timeout a launch asks for, defaults filled in (the
    image: its workspace kind's default)."""
    kind = _workspace(fields)
    default = workspace_of(kind if kind in WORKSPACES else WorkspaceKind.JUPYTER).default_image()
    return (
        str(fields.get("name") or ""),
        str(fields.get("image") or default),
        int(fields.get("volume_gib") or settings.PORTAL_NOTEBOOK_VOLUME_GIB),
        int(fields.get("ttl_seconds") or policy.ttl_seconds),
        int(fields.get("idle_timeout_seconds") or policy.idle_timeout_seconds),
    )


def launch_problems(user, team, resource_class, fields: dict) -> dict[str, list[str]]:
    """Field → messages for a launch (launch_notebook's ``fields``) by a member of ``team``: the name (and whether
    the team has one by it), the team's limits on age and idleness, the home volume, the spec as every kind's is
    checked, and the mounts. Empty when it may be launched; the API also asks it beside an unknown field."""
    policy = NotebookPolicy.for_team(team)
    name, image, volume, ttl, idle = _launch_settings(policy, fields)
    errors: dict[str, list[str]] = {}
    if not NAME_RE.fullmatch(name):
        errors["name"] = ["1 to 30 lower-case letters, digits and '-', starting with a letter (it is part of the URL)."]
    elif Notebook.objects.filter(team=team, name=name).exists():
        errors["name"] = [f"Team {team.name} already has a notebook called {name}; start that one, or pick a new name."]
    if not 0 < ttl <= policy.max_ttl_seconds:
        errors["ttl_seconds"] = [f"At most {duration_text(policy.max_ttl_seconds, WORDS)} for team {team.name}."]
    if not 0 < idle <= policy.max_idle_timeout_seconds:
        errors["idle_timeout_seconds"] = [
            f"At most {duration_text(policy.max_idle_timeout_seconds, WORDS)} for team {team.name}."
        ]
    if not 1 <= volume <= 1024:
        errors["volume_gib"] = ["From 1 to 1024 GiB."]
    if problems := workspace_problems(_workspace(fields), portal_access()):
        errors["workspace"] = problems
    errors.update(
        _spec_problems(
            user, team, resource_class, image, fields["count"], fields["cpu_millicores"], fields["memory_mb"],
            fields.get("env") or [],
        )
    )  # fmt: skip
    mounts = fields.get("volumes") or []
    problems = check_volume_mounts(team, mounts, reserved=(NOTEBOOK_HOME,))
    if problems:
        errors["volumes"] = problems
    if problems := cluster_problems(team, fields.get("clusters"), {"volumes": mounts}):
        errors["clusters"] = problems
    return errors


def launch_notebook(user, team, resource_class, fields: dict) -> Session:
    """A new notebook and its first session. ``fields``: name, image, count, cpu_millicores, memory_mb and
    optionally workspace (jupyter, code-server, rstudio; jobs.notebook.workspaces), volume_gib, ttl_seconds,
    idle_timeout_seconds, env, volumes (the team's claims to mount besides the home volume), clusters (where its
    sessions may run, most preferred first), preemptible. Raises PermissionDenied or ValidationError (field →
    messages)."""
    if not can_submit(user, team):
        raise PermissionDenied(f"You are not a member of team {team.name}.")
    if errors := launch_problems(user, team, resource_class, fields):
        raise ValidationError(errors)
    name, image, volume, ttl, idle = _launch_settings(NotebookPolicy.for_team(team), fields)
    now = timezone.now()
    try:
        with transaction.atomic():
            return _create(user, team, resource_class, fields, name, image, volume, ttl, idle, now)
    except IntegrityError:  # a concurrent launch took the name between the check and the insert
        if not Notebook.objects.filter(team=team, name=name).exists():
            raise  # some other constraint: never reported as the name being taken
        raise ValidationError(
            {"name": [f"Team {team.name} already has a notebook called {name}; start that one, or pick a new name."]}
        ) from None


def _spec_problems(user, team, resource_class, image, count, cpu_millicores, memory_mb, env) -> dict[str, list[str]]:
    """What a job's request is checked for (jobs.validation.check_request: image grammar and CUDA, CPU and memory
    bounds, environment names, quota and placement): one validation path for every kind (audit finding 6)."""
    return check_request(
        team=team,
        resource_class=resource_class,
        count=count,
        cpu_millicores=cpu_millicores,
        memory_mb=memory_mb,
        image=image,
        user=user,
        env=env,
    )


def _create(user, team, resource_class, fields, name, image, volume, ttl, idle, now) -> Session:
    notebook = Notebook.objects.create(
        team=team,
        owner=user,
        name=name,
        workspace=_workspace(fields),
        image=image,
        resource_class=resource_class,
        count=fields["count"],
        cpu_millicores=fields["cpu_millicores"],
        memory_mb=fields["memory_mb"],
        volume_gib=volume,
        env=list(fields.get("env") or []),
        volumes=list(fields.get("volumes") or []),
        clusters=list(fields.get("clusters") or []),
        preemptible=bool(fields.get("preemptible", False)),
        ttl_seconds=ttl,
        idle_timeout_seconds=idle,
        created=now,
    )
    session = _new_session(user, notebook, now)
    _audit(user, JobAuditAction.NOTEBOOK_LAUNCH, notebook, resource_class=resource_class.key)
    return session


def start_notebook(user, notebook: Notebook) -> Session:
    """Start a stopped notebook again: a new session (and token) on the same home volume."""
    if not can_manage_notebook(user, notebook):
        raise PermissionDenied("Only the notebook's owner, a lead of its team or an admin can start it.")
    now = timezone.now()
    with transaction.atomic():
        notebook = Notebook.objects.select_for_update().select_related("team", "resource_class").get(pk=notebook.pk)
        if notebook.state != NotebookState.STOPPED:
            raise ValidationError(f"Notebook {notebook.name} is already running (or starting); stop it first.")
        # Checked again as at launch: the class, the quota or the drivers may have changed since.
        errors = _spec_problems(
            user, notebook.team, notebook.resource_class, notebook.image, notebook.count, notebook.cpu_millicores,
            notebook.memory_mb, notebook.env,
        )  # fmt: skip
        if problems := workspace_problems(notebook.workspace, portal_access()):
            errors["workspace"] = problems  # the sign-in changed since it was launched
        if errors:
            raise ValidationError(errors)
        before = audit.snapshot(notebook, AUDIT_FIELDS)
        session = _new_session(user, notebook, now)
        _audit(user, JobAuditAction.NOTEBOOK_START, notebook, before=before, session=session.notebook.session_id)
    if notebook.owner_id != user.pk:
        notify(
            notebook.owner, "notebook.token", f"{user.get_username()} started your notebook {notebook.name} again",
            "Its new access token is waiting for you on the notebook's page (Show the new token); it is shown once.",
            notebook.get_absolute_url(),
        )  # fmt: skip
    return session


def collect_token(user, notebook: Notebook) -> str:
    """The access token of the session someone else started, for the notebook's owner, once. PermissionDenied for
    anyone else (a lead or admin never receives a member's token); ValidationError when none is waiting."""
    if user.pk != notebook.owner_id:
        raise PermissionDenied("Only the notebook's owner can collect its access token.")
    notebook.refresh_from_db(fields=["owner_token_salt", "token_hash"])
    salt = notebook.owner_token_salt
    # Once: the conditional UPDATE gives the salt to one caller; after it the token cannot be derived again.
    if not salt or not Notebook.objects.filter(pk=notebook.pk, owner_token_salt=salt).update(owner_token_salt=""):
        raise ValidationError(
            f"No new access token of notebook {notebook.name} is waiting for you: each token is shown once. Stop "
            "the notebook and start it again for a new one."
        )
    # Made under SECRET_KEY, or under a key since moved to SECRET_KEY_FALLBACKS by a rotation: the hash tells which.
    tokens = (_owner_token(notebook.pk, salt, key) for _, key in secret_keys.configured())
    token = next((token for token in tokens if check_token(notebook.token_hash, token)), None)
    if token is None:
        raise ValidationError(
            "The portal's secret key changed since this session started, so its token cannot be made again. Stop "
            f"notebook {notebook.name} and start it again for a new token."
        )
    return token


def stop_by_person(user, notebook: Notebook, why: str = "", backend: ClusterBackend | None = None) -> None:
    """A person stops a notebook (the page's Stop, the API's stop): its owner, a lead of its team or an admin.
    Stopping someone else's notebook takes ``why``: it goes into the timeline and the audit record, and the owner
    is told (jobs.notices). PermissionDenied or ValidationError (``reason``) saying what to do otherwise."""
    if not can_manage_notebook(user, notebook):
        raise PermissionDenied("Only the notebook's owner, a lead of its team or an admin can stop it.")
    why = (why or "").strip()
    problem = notices.reason_problem(user, notebook.owner_id, why, "notebook")
    if problem:
        raise ValidationError({"reason": [problem]})
    reason = StopReason.USER if notebook.owner_id == user.pk else StopReason.ADMIN
    if not stop_notebook(user, notebook, reason, backend, why=why):
        raise ValidationError(f"Notebook {notebook.name} is already stopped.")
    notices.tell_owner(notebook.owner, user, why, f"stopped your notebook {notebook.name}",
                       url=notebook.get_absolute_url())  # fmt: skip


def stop_notebook(
    actor,
    notebook: Notebook,
    reason: str,
    backend: ClusterBackend | None = None,
    now: datetime | None = None,
    expected: dict | None = None,
    why: str = "",
) -> bool:
    """Stop the current session: the notebook becomes Stopped with ``reason``, its job is cancelled (quota is
    free at once) and its workload deleted; the volume stays. False if it was not active (or another stop won).
    ``expected``: field values the stop is conditional on (the culler passes the deadline it judged, so an
    Extend that lands in between wins). ``why``: the words of the person who stopped it (timeline, audit)."""
    now = now or timezone.now()
    # The admission cycle admits queued sessions under this lock: it never admits one being stopped.
    with lifecycle.admission_lock(now):
        before = audit.snapshot(notebook, AUDIT_FIELDS)
        won = Notebook.objects.filter(
            pk=notebook.pk, state=NotebookState.ACTIVE, session=notebook.session_id, **(expected or {})
        ).update(
            state=NotebookState.STOPPED, stop_reason=reason, stopped_at=now, stopped_by=actor, idle_deadline=None,
            owner_token_salt="",  # a stopped session's token opens nothing: none waits for the owner
        )  # fmt: skip
        if not won:
            return False
        notebook.refresh_from_db()
        label = StopReason(reason).label
        who = f" ({actor.get_username()})" if actor is not None else ""
        job = _end_session(notebook, now, f"Notebook stopped: {label.lower()}{who}" + (f": {why}" if why else "."),
                           why=why)  # fmt: skip
        _audit(actor, JobAuditAction.NOTEBOOK_STOP, notebook, before=before, **({"reason": why} if why else {}))
        webhook_events.notebook_stopped(notebook, reason, actor=actor, why=why)
    backend = session_backend(job, backend)
    if job is not None and backend is not None:
        _delete_session_workload(backend, notebook, job, now)
    return True


def _delete_session_workload(backend: ClusterBackend, notebook: Notebook, job: Job, now: datetime) -> None:
    """Keep the session's log, then delete its workload (the volume and Service stay)."""
    try:
        logkeeping.keep(backend, job, job.pod_name, last_chance=True, now=now)
        backend.delete_workload(notebook.team.namespace, job.workload_name)
    except ClusterError as error:  # the job cycle keeps logs and deletes workloads of cancelled jobs anyway
        log.warning("deleting the workload of notebook %s failed: %s", notebook.pk, error)


def _end_session(notebook: Notebook, now: datetime, message: str, why: str = "") -> Job | None:
    """Cancel the session's job if it still holds (or waits for) quota; returns it."""
    if notebook.session_id is None:
        return None
    job = Job.objects.select_for_update().get(pk=notebook.session_id)
    if job.state in CANCELLABLE_STATES:
        # The notebook's stop is audited (by the caller), not the session's cancel.
        lifecycle.cancel(job, now, message, kind=EventKind.STOPPED, data={"previous": job.state}, audited=False,
                         reason=why)  # fmt: skip
    return job


def start_clocks(started: dict[int, datetime]) -> int:
    """The limits start counting when a session runs: every active notebook whose session is among ``started``
    (job id → when it started running) and has no clock yet gets ``running_since`` and ``expires_at`` (its
    maximum age after that). The session's start calls it (jobs.notebook.kind, in the transition's transaction),
    so a notebook that reads Running can be extended at once; the culler calls it too, for a session started
    before it was called on start. Returns how many notebooks it started."""
    rows = Notebook.objects.filter(
        session_id__in=list(started), state=NotebookState.ACTIVE, running_since__isnull=True
    ).values_list("pk", "session_id", "ttl_seconds")
    done = 0
    for pk, session_id, ttl in rows:
        at = started[session_id]
        if at is not None:
            done += Notebook.objects.filter(pk=pk, session=session_id, running_since__isnull=True).update(
                running_since=at, expires_at=at + timedelta(seconds=ttl)
            )
    return done


def extend_refusal(notebook: Notebook, policy: NotebookPolicy | None = None) -> str:
    """Why Extend cannot move the notebook's maximum age now, in a sentence ("" when it can): not running yet,
    stopped, or already at the team's maximum counted from the session's start. The one rule for
    ``extend_notebook`` (its error) and the page (a disabled Extend with this sentence beside it)."""
    if notebook.state != NotebookState.ACTIVE:
        return f"Notebook {notebook.name} is stopped; start it again instead."
    if notebook.expires_at is None or notebook.running_since is None:
        return f"Notebook {notebook.name} is not running; its limits start counting when it runs."
    policy = policy or NotebookPolicy.for_team(notebook.team)
    ceiling = notebook.running_since + timedelta(seconds=policy.max_ttl_seconds)
    if notebook.expires_at >= ceiling:
        return (
            f"Notebook {notebook.name} already runs until the team's maximum age of "
            f"{duration_text(policy.max_ttl_seconds, WORDS)} ({ceiling:%Y-%m-%d %H:%M} UTC); save your work "
            "before then."
        )
    return ""


def extend_notebook(user, notebook: Notebook, seconds: int | None = None, now: datetime | None = None) -> Notebook:
    """Push the maximum age back by ``seconds`` (default PORTAL_NOTEBOOK_EXTEND_SECONDS), up to the team's maximum
    counted from the session's start. Also counts as activity for the idle limit. ValidationError with
    ``extend_refusal``'s sentence when it cannot."""
    if not can_manage_notebook(user, notebook):
        raise PermissionDenied("Only the notebook's owner, a lead of its team or an admin can extend it.")
    now = now or timezone.now()
    seconds = int(seconds or settings.PORTAL_NOTEBOOK_EXTEND_SECONDS)
    if seconds <= 0:
        raise ValidationError({"seconds": ["Extend by a positive number of seconds."]})
    with transaction.atomic():
        notebook = Notebook.objects.select_for_update().select_related("team").get(pk=notebook.pk)
        policy = NotebookPolicy.for_team(notebook.team)
        refusal = extend_refusal(notebook, policy)
        if refusal:
            raise ValidationError(refusal)
        ceiling = notebook.running_since + timedelta(seconds=policy.max_ttl_seconds)
        new = min(notebook.expires_at + timedelta(seconds=seconds), ceiling)
        before = audit.snapshot(notebook, AUDIT_FIELDS)
        old = notebook.expires_at
        notebook.expires_at, notebook.extended_at, notebook.ttl_warned_at, notebook.idle_warned_at = (
            new,
            now,
            None,
            None,
        )
        notebook.idle_deadline = now + timedelta(seconds=notebook.idle_timeout_seconds)
        notebook.last_activity_at = now
        notebook.save(
            update_fields=["expires_at", "extended_at", "ttl_warned_at", "idle_warned_at", "idle_deadline",
                           "last_activity_at"]
        )  # fmt: skip
        lifecycle.event(
            notebook.session_id,
            EventKind.EXTENDED,
            f"Extended by {user.get_username()} until {new:%Y-%m-%d %H:%M} UTC.",
            now,
            **{"from": old.isoformat(), "to": new.isoformat()},
        )
        _audit(user, JobAuditAction.NOTEBOOK_EXTEND, notebook, before=before)
    return notebook


# -- the culler -----------------------------------------------------------------------------------------------


def cull_notebooks(backend: ClusterBackend, now: datetime | None = None) -> dict[str, int]:
    """One culling run (beat, every PORTAL_NOTEBOOK_CULL_INTERVAL seconds). Returns counts of what it did."""
    now = now or timezone.now()
    counts = {"checked": 0, "warned": 0, "stopped": 0, "ended": 0, "repaired": 0}
    _repair_stopped(backend, now, counts)
    notebooks = list(
        Notebook.objects.filter(state=NotebookState.ACTIVE)
        .select_related("team", "owner", "session", "resource_class")
        .order_by("pk")
    )
    running = []
    for notebook in notebooks:
        job = notebook.session
        if job is None or job.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST):
            if stop_notebook(None, notebook, StopReason.ENDED, backend, now):
                counts["ended"] += 1
                state = job.get_state_display().lower() if job is not None else "gone"
                why = "See the session's timeline on the notebook's page for why; its home volume is kept."
                _tell(notebook, f"Notebook {notebook.name} stopped: its session {state}", why)
            continue
        if job.state == JobState.PREEMPTING:
            if stop_notebook(None, notebook, StopReason.RECLAIM, backend, now):
                counts["stopped"] += 1
            continue
        if job.state == JobState.RUNNING and job.started_at is not None:
            # A session whose start did not start its clock (started before the start did): start it now.
            if notebook.running_since is None and start_clocks({job.pk: job.started_at}):
                notebook.refresh_from_db()
            running.append(notebook)
    evidence = _gpu_evidence([n.session_id for n in running])
    lead = timedelta(seconds=settings.PORTAL_NOTEBOOK_WARNING_SECONDS)
    slack = timedelta(seconds=max(2 * settings.PORTAL_DCGM_SCRAPE_INTERVAL, 60))
    for notebook in running:
        counts["checked"] += 1
        try:
            _judge(notebook, evidence.get(notebook.session_id, (None, None, None)), backend, now, lead, slack, counts)
        except Exception:  # one notebook's trouble must not keep the others past their limits
            log.exception("culling notebook %s failed; the next run tries again", notebook.pk)
    return counts


def _judge(notebook: Notebook, gpu: tuple, backend, now: datetime, lead: timedelta, slack: timedelta, counts) -> None:
    """Apply the rule (jobs.notebook.culling) to one running notebook: record what it saw, warn, stop."""
    oldest, newest, busy = gpu
    kernels, activity = None, None
    signal = workspace_of(notebook.workspace).idle_signal
    there = session_backend(notebook.session, backend)
    if signal == REQUESTS:
        activity = notebook.last_request_at
    elif notebook.session.pod_name and there is not None:
        where = (notebook.team.namespace, notebook.resource_name, notebook.session.pod_name)
        try:
            if signal == KERNELS:
                kernels = there.notebook_kernels(*where)
            elif signal == HEARTBEAT:
                activity = heartbeat_time(there.workspace_health(*where))
        except Exception:  # a server that cannot be asked counts as unknown: the GPU rule alone, limits still apply
            log.warning("activity of notebook %s unavailable", notebook.pk, exc_info=True)
    ev = culling.Evidence(
        running_since=notebook.running_since,
        extended_at=notebook.extended_at,
        idle_timeout=timedelta(seconds=notebook.idle_timeout_seconds),
        gpu_oldest=oldest,
        gpu_newest=newest,
        gpu_last_busy=busy,
        kernels=kernels,
        activity=activity,
    )
    last = culling.last_activity(ev, now, slack)
    deadline = last + ev.idle_timeout if last is not None else None
    Notebook.objects.filter(pk=notebook.pk, state=NotebookState.ACTIVE).update(
        last_activity_at=last, idle_deadline=deadline
    )
    notebook.last_activity_at, notebook.idle_deadline = last, deadline
    decision = culling.decide(now, lead, notebook.expires_at, deadline, notebook.ttl_warned_at, notebook.idle_warned_at)
    if decision.withdraw_idle_warning:
        Notebook.objects.filter(pk=notebook.pk, idle_warned_at=notebook.idle_warned_at).update(idle_warned_at=None)
    for limit in decision.warn:
        if _warn(notebook, limit, now, notebook.expires_at if limit == culling.TTL else deadline):
            counts["warned"] += 1
    if decision.stop is not None:
        reason = StopReason.TTL if decision.stop == culling.TTL else StopReason.IDLE
        judged = {"expires_at": notebook.expires_at, "extended_at": notebook.extended_at}
        if stop_notebook(None, notebook, reason, backend, now, expected=judged):
            counts["stopped"] += 1
            _tell(notebook, f"Notebook {notebook.name} was stopped: {StopReason(reason).label.lower()}",
                  "Its home volume is kept; start it again from its page when you need it.")  # fmt: skip


def heartbeat_time(health: dict | None) -> datetime | None:
    """code-server's /healthz ``lastHeartbeat`` (milliseconds since the epoch; 0 before its first beat) as a time."""
    try:
        millis = int((health or {}).get("lastHeartbeat") or 0)
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(millis / 1000, tz=UTC) if millis > 0 else None


def _gpu_evidence(job_ids: list[int]) -> dict[int, tuple]:
    if not job_ids:
        return {}
    threshold = settings.PORTAL_IDLE_THRESHOLD_PCT
    spans = {
        row["job_id"]: (row["oldest"], row["newest"])
        for row in GpuSample.objects.filter(job_id__in=job_ids)
        .values("job_id")
        .annotate(oldest=Min("ts"), newest=Max("ts"))
        .order_by()
    }
    busy = dict(
        GpuSample.objects.filter(job_id__in=job_ids, util_pct__gte=threshold)
        .values("job_id")
        .annotate(at=Max("ts"))
        .order_by()
        .values_list("job_id", "at")
    )
    return {job_id: (*spans[job_id], busy.get(job_id)) for job_id in spans}


def _warn(notebook: Notebook, limit: str, now: datetime, deadline: datetime) -> bool:
    """Record and send one warning; False if it was already recorded (by a concurrent run)."""
    field = "ttl_warned_at" if limit == culling.TTL else "idle_warned_at"
    with transaction.atomic():
        won = Notebook.objects.filter(
            pk=notebook.pk,
            state=NotebookState.ACTIVE,
            session=notebook.session_id,
            # The deadline this run judged: an Extend in between makes this warning moot.
            expires_at=notebook.expires_at,
            extended_at=notebook.extended_at,
            **{f"{field}__isnull": True},
        ).update(**{field: now})
        if not won:
            return False
        setattr(notebook, field, now)
        minutes = max(0, round((deadline - now).total_seconds() / 60))
        if limit == culling.TTL:
            title = f"Notebook {notebook.name} stops in {minutes} minutes: maximum age"
            body = (
                f"It reaches its maximum age at {deadline:%Y-%m-%d %H:%M} UTC and is stopped then. Save your work, or "
                "extend it from its page (up to your team's maximum)."
            )
        else:
            title = f"Notebook {notebook.name} stops in {minutes} minutes: idle"
            body = (
                f"Its GPUs stayed under {settings.PORTAL_IDLE_THRESHOLD_PCT:g}% and it was not used since "
                f"{notebook.last_activity_at or notebook.running_since:%H:%M} UTC. It is stopped at "
                f"{deadline:%Y-%m-%d %H:%M} UTC unless it does some work or you extend it."
            )
        lifecycle.event(notebook.session_id, EventKind.LIMIT_WARNING, title, now, limit=limit)
        audit.record(
            None, JobAuditAction.NOTEBOOK_WARN, notebook, after={"limit": limit, "deadline": deadline.isoformat()},
            team=notebook.team,
        )  # fmt: skip
        webhook_events.notebook(notebook, "notebook.warning", title=title, limit=limit, deadline=deadline.isoformat())
        _tell(notebook, title, body)
    return True


def _tell(notebook: Notebook, title: str, body: str) -> None:
    """In-app notification and e-mail to the owner (mail failures are logged, never fatal)."""
    url = notebook.get_absolute_url()
    notify(notebook.owner, "notebook.limit", title, body, url)
    if notebook.owner.email:
        try:
            send_mail(title, f"{body}\n\n{settings.PORTAL_BASE_URL.rstrip('/')}{url}", None, [notebook.owner.email])
        except Exception:  # SMTP down must not stop the culler
            log.warning("could not e-mail %s about notebook %s", notebook.owner.email, notebook.pk, exc_info=True)


def _repair_stopped(backend: ClusterBackend, now: datetime, counts: dict) -> None:
    """A stop that died between marking the notebook and cancelling its job: finish it."""
    leftover = Notebook.objects.filter(
        state=NotebookState.STOPPED, session__state__in=(JobState.QUEUED, *ACTIVE_STATES)
    ).select_related("team")
    for notebook in leftover:
        with lifecycle.admission_lock(now):
            job = _end_session(notebook, now, "Notebook stopped: its session is ended.")
        if job is not None:
            counts["repaired"] += 1
            there = session_backend(job, backend)
            if there is not None:
                _delete_session_workload(there, notebook, job, now)

"""Browser pages for jobs and job arrays, the submit form, and the quota usage that the submit form and the team
pages (jobs.teams.views) show."""

from __future__ import annotations

import shlex
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_POST

from cluster.base import ClusterError, NotFound
from core.api.bounds import is_id
from gpus.fleet import backend_of_id
from gpus.models import Cluster, Node, ResourceClass
from jobs import access, actions, guarantees, livelog, logkeeping, workload_templates
from jobs.api.serializers import JobSerializer
from jobs.choices import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    EventKind,
    JobKind,
    JobState,
    Priority,
    RankState,
    TemplateKind,
    WaitReason,
)
from jobs.distributed import ranks
from jobs.filtersets import JobFilterSet
from jobs.forms import JobSubmitForm, form_volume_choices
from jobs.lifecycle_bulk import served_words
from jobs.models import Job, JobArray, Quota, QuotaClusterCap
from jobs.render import shm_mebibytes
from jobs.scheduling import clusters
from jobs.usage import energy_figures, held_units, month_gpu_hours, month_start
from telemetry import samples
from vocab.durations import duration_text

LOG_TAIL_LINES = 200

#: How the numbers in Job.wait_detail (written by the admission cycle) are labelled on the job page.
WAIT_DETAIL_LABELS = {
    "requested": "This job asks for",
    "in_use": "Team holds now",
    "guaranteed": "Team's guarantee",
    "limit": "Team's limit",
    "budget_hours": "Monthly budget (GPU-hours)",
    "used_hours": "Used this month (GPU-hours)",
    "charge": "This job may use (GPU-hours)",
    "image_cuda": "CUDA the image needs",
    "node_cuda": "Newest CUDA on the nodes",
    "largest_node": "Largest node offers",
    "largest_free_on_a_node": "Most free on one node",
    "free_total": "Free in total",
    "held_for": "Capacity held for job",
    "preempting": "Jobs being stopped",
    "waited_seconds": "Waited",
    "reason": "Cluster says",
    "array_cap": "Array runs at most (tasks)",
    "array_active": "Array tasks admitted or running",
}


# -- quota usage ----------------------------------------------------------------------------------------------


def _percent(part: float, whole: float) -> str:
    return f"{100 * max(0.0, part) / whole:.2f}" if whole else "0"


@dataclass
class QuotaUsage:
    """One quota with what the team holds of it, and the widths of its bar's segments (percent of the track).

    The track is the limit (or what is held, if a lowered limit is now below it). Segments, in order: held
    within the guarantee, held above it (borrowed), the rest of the guarantee (always available), and the rest
    up to the limit (borrowable by preemptible jobs when capacity is idle)."""

    quota: Quota
    used: int
    used_hours: float | None = None
    #: The most units the team could start now (jobs.guarantees.startable_on_guarantee); None: not computed.
    reachable: int | None = None
    #: Every team's guarantees of the class against its schedulable capacity (jobs.guarantees.ClassGuarantee).
    class_total: object = None

    @property
    def resource_class(self):
        return self.quota.resource_class

    @property
    def caps(self) -> list[tuple[str, int]]:
        """The quota's per-cluster caps, (cluster name, units), by cluster name."""
        return sorted((cap.cluster.name, cap.limit) for cap in self.quota.cluster_caps.all())

    @property
    def track(self) -> int:
        return max(self.quota.limit, self.used)

    @property
    def within(self) -> int:
        return min(self.used, self.quota.guaranteed)

    @property
    def borrowed(self) -> int:
        return max(0, self.used - self.quota.guaranteed)

    @property
    def guaranteed_free(self) -> int:
        return max(0, self.quota.guaranteed - self.used)

    @property
    def guarantee_startable(self) -> int:
        """What of the unused guarantee can start now: never more than the cluster can hold for the team."""
        if self.reachable is None:
            return self.guaranteed_free
        return min(self.guaranteed_free, self.reachable)

    @property
    def guarantee_waiting(self) -> int:
        """The part of the unused guarantee that cannot start now (other guarantees hold the capacity)."""
        return self.guaranteed_free - self.guarantee_startable

    @property
    def borrowable(self) -> int:
        return max(0, self.quota.limit - max(self.used, self.quota.guaranteed))

    @property
    def available(self) -> int:
        return max(0, self.quota.limit - self.used)

    @property
    def widths(self) -> dict[str, str]:
        track = self.track
        return {
            "within": _percent(self.within, track),
            "borrowed": _percent(self.borrowed, track),
            "guaranteed_free": _percent(self.guaranteed_free, track),
            "borrowable": _percent(self.borrowable, track),
            "guarantee_mark": _percent(self.quota.guaranteed, track),
        }

    @property
    def budget(self):
        return self.quota.monthly_gpu_hours

    @property
    def budget_percent(self) -> str:
        if self.budget is None or self.used_hours is None:
            return "0"
        return _percent(min(self.used_hours, float(self.budget)), float(self.budget))

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.used_hours is not None and self.used_hours >= float(self.budget)


def quota_usages(teams, *, include_hidden: bool = True, now: datetime | None = None) -> dict[int, list[QuotaUsage]]:
    """Team id → its quotas with the units the team holds (jobs.usage.held_units: what admission counts, a service's
    granted replicas included) and GPU-hours used this month."""
    now = now or timezone.now()
    quotas = (
        Quota.objects.filter(team__in=teams)
        .select_related("team", "resource_class", "updated_by")
        .prefetch_related(Prefetch("cluster_caps", queryset=QuotaClusterCap.objects.select_related("cluster")))
    )
    if not include_hidden:
        quotas = quotas.filter(resource_class__hidden=False)
    quotas = list(quotas)
    hours = month_gpu_hours({q.team_id for q in quotas if q.monthly_gpu_hours is not None}, now)
    held = held_units(team_ids={q.team_id for q in quotas}, now=now) if quotas else {}
    by_team: dict[int, list[QuotaUsage]] = defaultdict(list)
    for quota in quotas:
        used_hours = None
        if quota.monthly_gpu_hours is not None:
            used_hours = hours.get((quota.team_id, quota.resource_class_id), 0.0)
        used = held.get((quota.team_id, quota.resource_class_id), 0)
        by_team[quota.team_id].append(QuotaUsage(quota, used, used_hours))
    usages = [u for team_usages in by_team.values() for u in team_usages]
    guarantees.startable_on_guarantee(usages, now)
    totals = guarantees.class_guarantees({u.quota.resource_class_id for u in usages})
    for usage in usages:
        usage.class_total = totals.get(usage.quota.resource_class_id)
    return by_team


# -- jobs -----------------------------------------------------------------------------------------------------


@login_required
def job_list(request):
    jobs = access.visible_jobs(request.user).select_related("team", "owner", "resource_class", "cluster")
    filterset = JobFilterSet(request.GET, queryset=jobs, request=request)
    page = Paginator(filterset.qs.select_related("array"), 50).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    teams = access.visible_teams(request.user)
    return render(
        request,
        "jobs/job_list.html",
        {
            "filterset": filterset,
            "page": page,
            "rows": _grouped_rows(page.object_list),
            "label_text": ", ".join(request.GET.getlist("label")),
            "teams": teams,
            "state_choices": JobState.choices,
            "kind_choices": JobKind.choices,
            "selected_states": request.GET.getlist("state"),
            "clusters": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
            "querystring": query.urlencode(),
            "can_submit": teams.exists(),
            # Refresh while any job on this page can still change.
            "live_every": settings.PORTAL_LIVE_POLL_SECONDS
            if any(not job.is_terminal for job in page.object_list)
            else 0,
        },
    )


@dataclass
class ArrayGroup:
    """A job array's header row on the job list: the array and its tasks' summary."""

    array: JobArray
    summary: str


def _grouped_rows(jobs) -> list:
    """The list's rows with each array's tasks grouped under one header that summarises the whole array
    ("3 running, 10 queued, 1 failed"): a task row follows its array's header (arrays stay where their newest
    task falls in the order)."""
    jobs = list(jobs)
    arrays = {job.array_id: job.array for job in jobs if job.array_id}
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for array_id, state, n in (
        Job.objects.filter(array_id__in=arrays).values_list("array_id", "state").annotate(n=Count("id")).order_by()
    ):
        counts[array_id][state] = n
    tasks: dict[int, list[Job]] = defaultdict(list)
    for job in jobs:
        if job.array_id:
            tasks[job.array_id].append(job)
    rows, shown = [], set()
    for job in jobs:
        if not job.array_id:
            rows.append(job)
        elif job.array_id not in shown:
            shown.add(job.array_id)
            array = arrays[job.array_id]
            rows.append(ArrayGroup(array, JobArray.summary_text(counts[array.pk])))
            rows.extend(sorted(tasks[job.array_id], key=lambda j: j.array_index or 0))
    return rows


def _submit_context(request, form: JobSubmitForm, teams) -> dict:
    usages = quota_usages(teams, include_hidden=request.user.is_staff)
    return {
        "form": form,
        "team_quotas": [(team, usages.get(team.pk, [])) for team in teams],
        "single_team": len(teams) == 1,
        "month": month_start(timezone.now()),
        "volume_choices": form.volume_choices(),
        # Classes of GKE MPS pools: GKE's MPS needs hostIPC, which portal jobs never get.
        "gke_mps_keys": Node.objects.gke_mps_class_keys(),
        "gke_mps_note": ResourceClass.GKE_MPS_NOTE,
    }


@login_required
def job_new(request):
    teams = access.visible_teams(request.user)
    team_list = list(teams)
    if not team_list:
        messages.error(request, "You are not in a team, so you cannot submit jobs. Ask an admin to add you to one.")
        return redirect("jobs:job-list")
    if request.method != "POST":
        source = _resubmit_source(request, request.GET.get("from"))
        initial = JobSubmitForm.initial_from_job(source, actions.SUBMIT_FIELDS) if source else {}
        if not source and request.GET.get("template"):
            initial = _template_initial(request, request.GET["template"])
        if source and request.GET.get("preemptible") == "1":
            initial["preemptible"] = True  # "resubmit it as preemptible", from the waiting job's page
        form = JobSubmitForm(user=request.user, teams=teams, initial=initial)
        return render(request, "jobs/job_form.html", _submit_context(request, form, team_list) | {"source": source})

    form = JobSubmitForm(request.POST, user=request.user, teams=teams)
    source = _resubmit_source(request, request.POST.get("resubmit_of"))
    if form.is_valid():
        data = form.cleaned_data
        key = data["idempotency_key"]
        try:
            if data.get("array_size"):
                array = actions.submit_array(
                    request.user, data["team"], data["resource_class"], form.submit_fields(), data["array_size"],
                    data.get("array_parallelism"), idempotency_key=key,
                ).array  # fmt: skip
                messages.success(request, f"Job array #{array.pk} {array.name}: {array.size} tasks are queued.")
                return redirect(array)
            submission = actions.submit_job(
                request.user, data["team"], data["resource_class"], form.submit_fields(), idempotency_key=key,
                resubmitted_from=source,
            )  # fmt: skip
        except ValidationError as error:
            form.add_service_errors(error)
        except PermissionDenied as error:
            form.add_error("team", str(error))
        except actions.IdempotencyConflict:
            earlier = Job.objects.filter(owner=request.user, idempotency_key=key).first()
            form.data = form.data.copy()
            form.data["idempotency_key"] = uuid.uuid4().hex
            form.add_error(
                None,
                f"This form was already used to submit job #{earlier.pk if earlier else '?'} with other values. "
                "Check the values and press Submit again to queue them as a new job.",
            )
        else:
            job = submission.job
            if submission.created:
                messages.success(request, f"Job #{job.pk} {job.name} was queued for team {job.team.name}.")
            else:
                messages.info(request, f"This form was already submitted: it queued job #{job.pk}; no second job.")
            return redirect(job)
    return render(request, "jobs/job_form.html", _submit_context(request, form, team_list) | {"source": source})


def template_version(request, ref: str, kind: str):
    """The version of the template ``ref`` names ("TEAM/NAME" or "TEAM/NAME@VERSION", a team of the user's) when it
    is of ``kind``, for a form's ``?template=``; else None, with a message saying why."""
    slug, _, name = ref.partition("/")
    team = access.visible_teams(request.user).filter(slug=slug).first()
    try:
        if team is None:
            raise ValidationError({"template": [f"No team {slug!r} that you belong to."]})
        return workload_templates.find(request.user, team, name, kind)
    except ValidationError as error:
        messages.error(request, " ".join(m for ms in error.message_dict.values() for m in ms))
        return None


def read_template(request, ref: str, kind: str, serializer_class):
    """(the version, its spec read by ``serializer_class`` as the create API of ``kind`` reads it) for a form's
    ``?template=ref``; None, with a message saying why, when there is no such template of ``kind`` or its spec no
    longer reads (its class removed, say: a lead saves it again)."""
    version = template_version(request, ref, kind)
    if version is None:
        return None
    team, name = version.template.team, version.template.name
    body = serializer_class(data={**version.spec, "team": team.slug}, context={"request": request})
    if not body.is_valid():
        problems = "; ".join(f"{field}: {' '.join(map(str, ms))}" for field, ms in body.errors.items())
        noun = TemplateKind(kind).label.lower()
        messages.error(
            request, f"Template {name} no longer reads as a {noun} ({problems}); ask a lead to save it again."
        )
        return None
    return version, body


def _template_initial(request, ref: str) -> dict:
    """The form's initial values from the job template ``ref`` ("TEAM/NAME" or "TEAM/NAME@VERSION", a team of the
    user's): its spec read as the jobs API reads it. A template that no longer reads (its class removed, say) says
    why, and the form starts empty."""
    if (read := read_template(request, ref, TemplateKind.JOB, JobSerializer)) is None:
        return {}
    version, body = read
    team, name = version.template.team, version.template.name
    fields = actions.spec_defaults() | body.submit_fields()
    job = Job(team=team, resource_class=body.validated_data["resource_class"], **fields)
    initial = JobSubmitForm.initial_from_job(job, actions.SUBMIT_FIELDS)
    initial.pop("resubmit_of", None)
    messages.info(request, f"Filled in from template {name} (version {version.number}) of team {team.name}.")
    return initial


@login_required
def volume_choices(request):
    """What the volume rows of a job, service or notebook form suggest for the choices it holds now (team, clusters,
    claims, ``secrets=1`` when it names a secret): jobs/_volume_choices.html alone, which the page script puts in
    place when one of them changes. Teams the user may not submit for count as no team chosen."""
    query = request.GET
    choices = form_volume_choices(
        access.visible_teams(request.user), query.get("team"), query.get("clusters", ""),
        query.getlist("volume_claim")[:64], query.get("secrets") == "1",
    )  # fmt: skip
    return render(request, "jobs/_volume_choices.html", {"volume_choices": choices})


def _resubmit_source(request, pk) -> Job | None:
    """The job a "Resubmit with changes" form copies: one the user sees and may manage, and not a notebook
    session; None otherwise (the form is then an ordinary new job)."""
    if not is_id(str(pk or "")):  # ASCII digits only: "²" passes str.isdigit() but not int()
        return None
    job = access.visible_jobs(request.user).filter(pk=int(pk), notebook__isnull=True).first()
    return job if job is not None and access.can_manage_job(request.user, job) else None


def _wait_clusters(job: Job) -> dict:
    """A wait that says why per cluster (jobs.scheduling.clusters): its headline sentence without the per-cluster
    part, and that part as rows (cluster, the reason's label, sentence) the page lists."""
    rows = (job.wait_detail or {}).get("clusters")
    if not isinstance(rows, list) or not rows:
        return {}
    labels = {reason.value: reason.label for reason in WaitReason}
    return {
        "wait_headline": job.wait_message.partition(clusters.LEAD)[0],
        "wait_clusters": [
            {
                "cluster": row.get("cluster", ""),
                "label": labels.get(row.get("reason"), ""),
                "message": row.get("message", ""),
            }
            for row in rows
            if isinstance(row, dict)
        ],
    }


def _member_share_items(share: dict) -> list[tuple[str, str]]:
    """A passed-over job's fair-share numbers (jobs.scheduling.members), labelled."""
    items = [
        (f"{share.get('user', 'Owner')}'s use ÷ share", f"{share.get('ratio', 0):.1f}×"),
        ("Weight", f"{share.get('weight', 1):g}"),
        ("Goes first", f"#{share.get('ahead_job')} ({share.get('ahead_user')}, {share.get('ahead_ratio', 0):.1f}×)"),
    ]
    if share.get("half_life_seconds"):
        items.append(("Use counts half after", duration_text(share["half_life_seconds"])))
    return items


def _wait_detail_items(detail: dict) -> list[tuple[str, str]]:
    """The numbers behind a wait, labelled, in a fixed order: known keys as WAIT_DETAIL_LABELS lists them, then
    any others by name (PostgreSQL's jsonb does not keep the order the keys were written in)."""
    known = list(WAIT_DETAIL_LABELS)
    ordered = sorted(
        (detail or {}).items(), key=lambda kv: (known.index(kv[0]) if kv[0] in known else len(known), kv[0])
    )
    items = []
    for key, value in ordered:
        if key == "clusters":  # listed per cluster on its own (_wait_clusters)
            continue
        if key == "member_share" and isinstance(value, dict):  # fair share among the team's members
            items += _member_share_items(value)
            continue
        if key == "alternatives" and isinstance(value, list):  # why each alternative of its class cannot serve it
            items += [
                (f"Alternative: {entry.get('name', '?')}", str(entry.get("reason", "")))
                for entry in value
                if isinstance(entry, dict)
            ]
            continue
        if key == "passed_by":
            items.append(("Else it would wait for", WaitReason(value).label if value in WaitReason.values else value))
            continue
        label = WAIT_DETAIL_LABELS.get(key, key.replace("_", " ").capitalize())
        if key == "waited_seconds":
            text = duration_text(value)
        elif key == "held_for":
            text = f"#{value}"
        elif isinstance(value, list):
            text = ", ".join(f"#{v}" if key == "preempting" else str(v) for v in value) or "—"
        elif isinstance(value, float):
            text = f"{value:.2f}".rstrip("0").rstrip(".")
        else:
            text = str(value)
        items.append((label, text))
    return items


#: The header the live-page script sends on a poll while it follows the job's log stream (portal.js).
FOLLOWING_HEADER = "X-Live-Log"
#: Sent by portal.js on every poll of a live page. Only the page's [data-live] parts are taken from a poll, so
#: parts outside them (the utilisation chart: a query over the samples) are not worked out for it.
LIVE_POLL_HEADER = "X-Live"


def is_live_poll(request) -> bool:
    return request.headers.get(LIVE_POLL_HEADER) == "1"


def _job_logs(job: Job, *, following: bool = False, rank: ranks.RankRow | None = None) -> dict:
    """The log section: the live pod's tail (followed while it runs), a kept log, or a sentence saying why there
    is none, and the kept logs of every attempt (for download).

    ``following``: the request is a poll from a page that already follows this pod's log stream. The tail is then
    not read from the cluster (the page has it, line by line): the section is rendered empty with the same
    ``log_version`` the page holds, and the script keeps its own.

    ``rank``: a distributed job's rank whose log is shown instead (``?rank=`` on the page)."""
    kept = list(job.logs.all())
    view = logkeeping.log_view(job, kept) if rank is None else _rank_log_view(job, rank, kept)
    pod_name = view.kept.pod_name if view.kept is not None else (rank.pod if rank is not None else job.pod_name)
    logs, note, skipped, cut_lines = None, view.note, False, False
    if view.kept is not None:
        lines = view.kept.text.splitlines()
        logs, cut_lines = "\n".join(lines[-LOG_TAIL_LINES:]), len(lines) > LOG_TAIL_LINES
    elif view.live and view.follow and following:
        logs, skipped = "", True
    elif view.live:
        try:
            logs = backend_of_id(job.cluster_id).pod_logs(job.team.namespace, pod_name, tail_lines=LOG_TAIL_LINES)
            cut_lines = logs.count("\n") >= LOG_TAIL_LINES  # a full tail: the log may well be longer
        except NotFound:
            gone = rank is None and job.is_terminal
            note = logkeeping.no_pod_text(job) if gone else f"The pod {pod_name} is gone."
        except ClusterError as error:
            note = f"No log from pod {pod_name} yet: {error}"
    log_follow = view.follow and logs is not None
    return {
        "log_pod": pod_name,
        "log_rank": rank,
        "logs": logs,
        "logs_note": note,
        "log_kept": view.kept,
        "log_follow": log_follow,
        "log_skipped": skipped,
        "log_cut_lines": cut_lines,
        "kept_logs": kept,
        # Set only while the log is followed: a poll answering the same version leaves the page's stream alone
        # (other log sections are swapped when their content changed, like every live region).
        "log_version": f"follow|{pod_name}" if log_follow else "",
    }


def _rank_log_view(job: Job, rank: ranks.RankRow, kept: list) -> logkeeping.LogView:
    """Which log of one rank the page shows: its kept log, else its pod's while the pod is there (followed while
    it runs), else a sentence saying why there is none."""
    entry = next((e for e in kept if rank.pod and e.pod_name == rank.pod), None)
    if entry is not None:
        return logkeeping.LogView(kept=entry, note=entry.note)
    if rank.pod and rank.state in ranks.LIVE_RANK_STATES:
        return logkeeping.LogView(live=True, follow=rank.state == RankState.RUNNING)
    if not rank.pod:
        return logkeeping.LogView(note=f"Rank {rank.rank} has no pod yet, so there is no log.")
    return logkeeping.LogView(note=f"The pod {rank.pod} of rank {rank.rank} is gone and its log was not kept.")


@login_required
def job_detail(request, pk: int):
    job = get_object_or_404(
        access.visible_jobs(request.user).select_related(
            "team", "owner", "resource_class", "resubmitted_from", "cluster"
        ),
        pk=pk,
    )
    node_visible = bool(job.node_name) and Node.objects.visible_to(request.user).filter(name=job.node_name).exists()
    waiting = job.state == JobState.QUEUED or job.state == JobState.ADMITTED
    rank_rows, log_rank = _rank_context(request, job)
    can_manage = access.can_manage_job(request.user, job)
    events = list(job.events.all())
    # An alternative of its class serves this attempt (jobs.scheduling.decide rule 6): its last admission says which.
    admitted = next((e for e in reversed(events) if e.kind == EventKind.ADMITTED), None)
    active = job.state not in (JobState.QUEUED, *TERMINAL_STATES)
    response = render(
        request,
        "jobs/job_detail.html",
        {
            "job": job,
            "events": events,
            "served_by": served_words(admitted.data or {}, job.resource_class.display_name)
            if admitted is not None and active
            else "",
            "waiting": waiting,
            "wait_items": _wait_detail_items(job.wait_detail) if waiting else [],
            **(_wait_clusters(job) if waiting else {}),
            **_job_logs(job, following=request.headers.get(FOLLOWING_HEADER) == "following", rank=log_rank),
            "rank_rows": rank_rows,
            "failed_rank_row": next((r for r in rank_rows if r.rank == job.failed_rank), None),
            "log_tail": LOG_TAIL_LINES,
            "live_every": 0 if job.is_terminal else settings.PORTAL_LIVE_POLL_SECONDS,
            "node_visible": node_visible,
            "can_manage": can_manage,
            "can_save_template": workload_templates.can_manage(request.user, job.team),
            "suggest_preemptible": waiting
            and job.wait_reason == WaitReason.QUOTA
            and not job.preemptible
            and "preemptible" in job.wait_message,
            "priority_choices": [
                (value, label)
                for value, label in Priority.choices
                if value <= access.max_priority(request.user, job.team) or value == job.priority
            ],
            "command_text": shlex.join(job.command or []),
            "args_text": shlex.join(job.args or []),
            "cpu_cores": f"{job.cpu_millicores / 1000:g}",
            "shm_mb": shm_mebibytes(job),
            "max_runtime": duration_text(job.max_runtime_seconds),
            "lost_gpu_hours": job.preemption_lost_gpu_seconds / 3600,
            "gpu_hours": job.gpu_seconds() / 3600,
            "energy": energy_figures(samples.job_energy(job.pk), job.gpu_seconds() / 3600),
            "resubmitted_as": access.visible_jobs(request.user).filter(resubmitted_from=job).order_by("pk"),
            "idle_window_minutes": settings.PORTAL_IDLE_WINDOW_SECONDS // 60,
            **({} if is_live_poll(request) else _job_chart(request, job)),
        },
    )
    patch_vary_headers(
        response, (FOLLOWING_HEADER, LIVE_POLL_HEADER)
    )  # a poll that skips the log is not the page itself
    return response


def _job_chart(request, job: Job) -> dict:
    """The job's utilisation chart: a run up to an hour long over its own start to end (telemetry's ``run``
    range), a longer one over the shortest range that reaches its start; an ended run without a single reading
    says so, with how long it ran."""
    context = samples.chart_context(
        request,
        {"job_id": job.pk},
        default_range=samples.covering_range(job.started_at),
        threshold=settings.PORTAL_IDLE_THRESHOLD_PCT,
        run=(job.started_at, job.finished_at or timezone.now()) if job.started_at else None,
    )
    if job.started_at and job.finished_at and context["util_range"] == samples.RUN_RANGE:
        ran = duration_text((job.finished_at - job.started_at).total_seconds())
        context["util_empty"] = (
            f"No utilisation reading was taken during this job's run ({ran}): the portal reads the GPUs every "
            f"{settings.PORTAL_DCGM_SCRAPE_INTERVAL:g} seconds or so, and a run this short may fall between readings."
        )
    return context


def _rank_context(request, job: Job) -> tuple[list, ranks.RankRow | None]:
    """A distributed job's rank rows (with utilisation, and whether the user may open each node's page), and the
    rank whose log the page shows: ``?rank=``, else rank 0 once it has a pod while the job has no pod of its own.
    An unknown rank answers 404 in words."""
    rows = ranks.rank_rows(job)
    if not rows:
        return [], None
    ranks.with_utilisation(job, rows)
    nodes = Node.objects.visible_to(request.user).filter(name__in={r.node for r in rows})
    visible = set(nodes.values_list("name", flat=True))
    for row in rows:
        row.node_visible = row.node in visible
    asked = request.GET.get("rank")
    if asked not in (None, ""):
        chosen = next((r for r in rows if str(r.rank) == asked.strip()), None)
        if chosen is None:
            raise Http404(f"Job #{job.pk} has no rank '{asked}'; its ranks are 0 to {job.workers - 1}.")
        return rows, chosen
    if not job.pod_name and rows[0].pod:
        return rows, rows[0]
    return rows, None


@login_required
def job_log_download(request, pk: int):
    """The job's whole log as a file (``?pod=`` picks an earlier attempt's kept log or a rank's, ``?rank=`` a
    rank's)."""
    job = get_object_or_404(access.visible_jobs(request.user).select_related("team"), pk=pk)
    return livelog.download(job, livelog.requested_pod(job, request.GET))


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = get_object_or_404(access.visible_jobs(request.user), pk=pk)
    try:
        job = actions.cancel_job(request.user, job, request.POST.get("reason", ""))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Job #{job.pk} {job.name} is cancelled; its GPUs are free for other work.")
    return redirect(job)


@login_required
@require_POST
def job_resubmit(request, pk: int):
    job = get_object_or_404(access.visible_jobs(request.user), pk=pk)
    try:
        new = actions.resubmit_job(request.user, job)
    except ValidationError as error:
        messages.error(request, "Could not resubmit: " + " ".join(error.messages))
        return redirect(job)
    messages.success(request, f"Job #{job.pk} was resubmitted as job #{new.pk}.")
    return redirect(new)


@login_required
@require_POST
def job_priority(request, pk: int):
    job = get_object_or_404(access.visible_jobs(request.user), pk=pk)
    try:
        priority = int(request.POST.get("priority", ""))
        Priority(priority)
    except ValueError:
        messages.error(request, "Pick Low, Normal or High.")
        return redirect(job)
    try:
        job = actions.change_priority(request.user, job, priority)
    except ValidationError as error:
        messages.error(request, "Could not change the priority: " + " ".join(error.messages))
    else:
        messages.success(request, f"Job #{job.pk} now has {job.get_priority_display().lower()} priority; the next "
                         "admission cycle orders the queue by it.")  # fmt: skip
    return redirect(job)


@login_required
def array_detail(request, pk: int):
    array = get_object_or_404(access.visible_arrays(request.user).select_related("team", "owner").distinct(), pk=pk)
    counts = array.state_counts()
    tasks = array.tasks.select_related("resource_class").order_by("array_index")
    return render(
        request,
        "jobs/array_detail.html",
        {
            "array": array,
            "counts": [(JobState(state).label, state, n) for state, n in counts.items()],
            "summary": array.summary_text(counts),
            "tasks": tasks,
            "first": tasks.first(),
            "can_manage": access.can_manage_array(request.user, array),
            "cancellable": any(state in (JobState.QUEUED, *ACTIVE_STATES) for state in counts),
            # The page refreshes its summary, tasks and actions by itself until every task has ended.
            "live_every": settings.PORTAL_LIVE_POLL_SECONDS
            if any(state not in TERMINAL_STATES for state in counts)
            else 0,
        },
    )


@login_required
@require_POST
def array_cancel(request, pk: int):
    array = get_object_or_404(access.visible_arrays(request.user).distinct(), pk=pk)
    try:
        cancelled = actions.cancel_array(request.user, array)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Job array #{array.pk}: {len(cancelled)} task(s) cancelled; their GPUs are free.")
    return redirect(array)

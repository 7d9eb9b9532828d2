"""What a team holds and the GPU time it used, each counted one way: the units held now (``held_units``) for the
quota bars, the quotas API and the metrics, as admission counts them for its wait reasons; GPU-hours for the budget
check (jobs.cycle.run) and the pages that show them (jobs.views)."""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from accounts import roles
from accounts.models import Membership
from jobs import access, kinds
from jobs.choices import ACTIVE_STATES, EventKind
from jobs.models import Job, JobEvent
from jobs.scheduling import tallies
from jobs.scheduling.snapshot import JobView
from telemetry.samples import energy_by_day, job_days, used_gpu_hours_by_day

#: What ``held_units`` reads of an active job: what its kind's ``demand`` reads, and what a view needs besides.
HELD_COLUMNS = (
    "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "workers", "kind", "priority",
    "preemptible", "submitted_at",
)  # fmt: skip


def held_units(
    team_ids: Iterable[int] | None = None, class_ids: Iterable[int] | None = None, now: datetime | None = None
) -> dict[tuple[int, int], int]:
    """(team id, class id) → units of the class the team holds now, for the given teams and classes (all when
    None): the one answer, which the quota bars, the quotas API and the metrics show and admission's wait reasons
    say ("Team … holds N × …"). Counted as admission counts it (jobs.cycle.admit.build_snapshot), by the same
    function (jobs.scheduling.tallies.held_units) over the same views: every admitted, running or preempting job
    with its kind's ``demand`` (W × G for a distributed job, a service's admitted minimum) and what the kinds
    granted above that (``elastic_views``: a service's extra replicas). Two queries."""
    now = now or timezone.now()
    teams = None if team_ids is None else set(team_ids)
    classes = None if class_ids is None else set(class_ids)
    jobs = Job.objects.filter(state__in=ACTIVE_STATES)
    if teams is not None:
        jobs = jobs.filter(team_id__in=teams)
    if classes is not None:
        jobs = jobs.filter(resource_class_id__in=classes)
    views = []
    for row in jobs.values_list(*HELD_COLUMNS, named=True):
        demand = kinds.for_job(row).demand(row)
        views.append(JobView(
            id=row.id, team=row.team_id, class_id=demand.resource_class_id, count=demand.units, cpu_m=demand.cpu_m,
            memory_mb=demand.memory_mb, priority=row.priority, preemptible=row.preemptible,
            submitted=row.submitted_at.timestamp(), workers=demand.pods,
        ))  # fmt: skip
    for kind in kinds.registered().values():
        # Only the granted views' units are read here: no class views (they place holds on nodes) and no pool.
        elastic = kind.elastic_views(now, {}, False)
        if elastic is not None:
            views += [
                view for view in elastic.active
                if (teams is None or view.team in teams) and (classes is None or view.class_id in classes)
            ]  # fmt: skip
    return tallies.held_units(views)


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_gpu_hours(team_ids, now: datetime) -> dict[tuple[int, int], float]:
    """Normalised GPU-hours each (team, resource class) used this calendar month (UTC), counted the way the
    admission cycle counts them against a budget: earlier preempted attempts plus the part of the current run
    that falls in this month. A distributed job counts all its workers' units (Job.gpu_units)."""
    month = month_start(now)
    jobs = (
        Job.objects.filter(team_id__in=team_ids)
        .filter(Q(started_at__isnull=False) | Q(charged_gpu_seconds__gt=0))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=month))
        .select_related("resource_class")
        .only(
            "team_id",
            "resource_class__gpu_fraction",
            "count",
            "workers",
            "started_at",
            "finished_at",
            "charged_gpu_seconds",
        )  # fmt: skip
    )
    seconds: dict[tuple[int, int], float] = defaultdict(float)
    for job in jobs:
        key = (job.team_id, job.resource_class_id)
        seconds[key] += job.charged_gpu_seconds
        if job.started_at:
            run = (job.finished_at or now) - max(job.started_at, month)
            seconds[key] += max(0.0, run.total_seconds()) * job.gpu_units  # W × G × the class's share
    return {key: value / 3600 for key, value in seconds.items()}


def _held_spans(team_ids, start: datetime, end: datetime, now: datetime, jobs: Q | None = None):
    """(job, from, to, weight) for each run of the teams' jobs (``jobs``: a Q instead) that overlaps [start, end),
    clipped to it (and to now): what allocated GPU-hours count, a run's time times its units (workers × count) and
    its class's share."""
    jobs = (
        Job.objects.filter(Q(team_id__in=team_ids) if jobs is None else jobs)
        .filter(started_at__isnull=False, started_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .select_related("resource_class")
        .only("team_id", "owner_id", "resource_class__gpu_fraction", "count", "workers", "started_at", "finished_at")
    )
    for job in jobs:
        lo, hi = max(job.started_at, start), min(job.finished_at or now, end, now)
        if lo < hi:
            yield job, lo, hi, job.gpu_units


def allocated_gpu_hours_by_day(team_ids, start: datetime, end: datetime, now: datetime) -> dict[tuple[int, str], float]:
    """Normalised GPU-hours the teams' jobs held per UTC day in [start, end): each run from start to finish
    (or now), times its units (workers × count for a distributed job) and its class's share of a GPU, split at
    midnight."""
    out: dict[tuple[int, str], float] = defaultdict(float)
    for job, lo, hi, weight in _held_spans(team_ids, start, end, now):
        while lo < hi:
            midnight = lo.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
            upto = min(hi, midnight)
            out[(job.team_id, lo.astimezone(UTC).date().isoformat())] += (upto - lo).total_seconds() * weight / 3600
            lo = upto
    return dict(out)


def _day_bounds(start_day, end_day) -> tuple[datetime, datetime]:
    start = datetime(start_day.year, start_day.month, start_day.day, tzinfo=UTC)
    return start, datetime(end_day.year, end_day.month, end_day.day, tzinfo=UTC) + timedelta(days=1)


def _efficiency(allocated: float, used: float) -> float | None:
    return round(100 * used / allocated, 1) if allocated else None


def team_usage_rows(team, start_day, end_day, now: datetime) -> list[dict]:
    """Per UTC day from start_day to end_day inclusive: allocated and actually used GPU-hours of one team
    (used = Σ utilisation × share of a GPU × time, from telemetry; see gpus.telemetry)."""
    return teams_usage_rows([team], start_day, end_day, now)


def teams_usage_rows(teams, start_day, end_day, now: datetime) -> list[dict]:
    """team_usage_rows for several teams: each team's days in turn, the teams in the order given."""
    start, end = _day_bounds(start_day, end_day)
    team_ids = [team.pk for team in teams]
    allocated = allocated_gpu_hours_by_day(team_ids, start, end, now)
    used = used_gpu_hours_by_day(team_ids, start, end)
    lost = preemption_lost_by_day(team_ids, start, end)
    joules = energy_by_day(team_ids, start, end)
    rows = []
    for team in teams:
        day = start_day
        while day <= end_day:
            key = (team.pk, day.isoformat())
            a, u = allocated.get(key, 0.0), used.get(key, 0.0)
            rows.append(
                {
                    "day": day.isoformat(),
                    "team": team.slug,
                    "allocated": round(a, 3),
                    "used": round(u, 3),
                    "efficiency": _efficiency(a, u),
                    "lost": round(lost.get(key, 0.0), 3),
                    "joules": joules.get(key),
                    **energy_figures(joules.get(key), a),
                }
            )
            day += timedelta(days=1)
    return rows


def preemption_lost_by_day(team_ids, start: datetime, end: datetime) -> dict[tuple[int, str], float]:
    """Normalised GPU-hours the teams' jobs lost to preemption per UTC day in [start, end): at each requeue after a
    preemption, the hours since the later of the attempt's start and its last checkpoint (the REQUEUED timeline line
    records them, jobs.lifecycle.requeue)."""
    out: dict[tuple[int, str], float] = defaultdict(float)
    lines = JobEvent.objects.filter(
        job__team_id__in=team_ids, kind=EventKind.REQUEUED, at__gte=start, at__lt=end, data__has_key="lost_gpu_hours"
    ).values_list("job__team_id", "at", "data")
    for team_id, at, data in lines:
        out[(team_id, at.astimezone(UTC).date().isoformat())] += float(data.get("lost_gpu_hours") or 0.0)
    return out


def usage_totals(allocated: float, used: float) -> dict:
    """Allocated and used GPU-hours as the rows say them (rounded), with the efficiency in percent (None: none held)."""
    return {"allocated": round(allocated, 3), "used": round(used, 3), "efficiency": _efficiency(allocated, used)}


def team_totals(rows: list[dict]) -> list[dict]:
    """Per team of ``teams_usage_rows``' rows, in their order: the range's allocated and used GPU-hours."""
    sums: dict[str, list] = {}
    for row in rows:
        pair = sums.setdefault(row["team"], [0.0, 0.0, 0.0, None])
        pair[0] += row["allocated"]
        pair[1] += row["used"]
        pair[2] += row.get("lost", 0.0)
        if row.get("joules") is not None:
            pair[3] = (pair[3] or 0.0) + row["joules"]
    return [
        {"team": slug, **usage_totals(a, u), "lost": round(lost, 3), "joules": j, **energy_figures(j, a)}
        for slug, (a, u, lost, j) in sums.items()
    ]


def member_usage_rows(teams, start_day, end_day, now: datetime, *, only_user=None) -> list[dict]:
    """Per team and member, the GPU-hours their jobs held and used from start_day to end_day inclusive (UTC),
    counted as the team's rows count them: every current member (none held: zeros) and anyone else whose jobs ran
    then. ``only_user``: that person's rows only (what a researcher may see of a team's showback)."""
    start, end = _day_bounds(start_day, end_day)
    team_ids = [team.pk for team in teams]
    slugs = {team.pk: team.slug for team in teams}
    allocated: dict[tuple[int, int], float] = defaultdict(float)
    for job, lo, hi, weight in _held_spans(team_ids, start, end, now):
        allocated[(job.team_id, job.owner_id)] += (hi - lo).total_seconds() * weight / 3600
    by_job: dict[int, list] = {}
    for day in job_days(start, end, Q(team_id__in=team_ids)):
        pair = by_job.setdefault(day.job_id, [0.0, None])
        pair[0] += day.used_gpu_hours
        if day.joules is not None:
            pair[1] = (pair[1] or 0.0) + day.joules
    used: dict[tuple[int, int], float] = defaultdict(float)
    joules: dict[tuple[int, int], float] = {}
    for job_id, team_id, owner_id in Job.objects.filter(pk__in=by_job).values_list("id", "team_id", "owner_id"):
        used[(team_id, owner_id)] += by_job[job_id][0]
        if by_job[job_id][1] is not None:
            joules[(team_id, owner_id)] = joules.get((team_id, owner_id), 0.0) + by_job[job_id][1]
    keys = set(allocated) | set(used)
    keys |= set(Membership.objects.filter(team_id__in=team_ids).values_list("team_id", "user_id"))
    if only_user is not None:
        keys = {key for key in keys if key[1] == only_user.pk}
    names = dict(get_user_model().objects.filter(pk__in={user for _, user in keys}).values_list("pk", "username"))
    rows = [
        {
            "team": slugs[team],
            "user": names.get(user, ""),
            **usage_totals(allocated[team, user], used[team, user]),
            **energy_figures(joules.get((team, user)), allocated[team, user]),
        }
        for team, user in keys
    ]
    return sorted(rows, key=lambda r: (r["team"], -r["allocated"], r["user"]))


USAGE_CSV_COLUMNS = [
    "date", "team", "allocated_gpu_hours", "used_gpu_hours", "efficiency_percent", "preemption_lost_gpu_hours",
    "energy_kwh", "joules_per_gpu_hour",
]  # fmt: skip


def write_usage_csv(out, rows: list[dict]) -> None:
    """The team showback's days as CSV; energy cells are empty where no reading knew it, and a co2e_kg column
    follows where a carbon factor is set (PORTAL_CARBON_G_PER_KWH)."""
    carbon = settings.PORTAL_CARBON_G_PER_KWH is not None
    writer = csv.writer(out)
    writer.writerow(USAGE_CSV_COLUMNS + (["co2e_kg"] if carbon else []))
    for r in rows:
        energy = [r.get("energy_kwh"), r.get("joules_per_gpu_hour")] + ([r.get("co2e_kg")] if carbon else [])
        writer.writerow(
            [
                r["day"],
                r["team"],
                f"{r['allocated']:.3f}",
                f"{r['used']:.3f}",
                "" if r["efficiency"] is None else r["efficiency"],
                f"{r.get('lost', 0.0):.3f}",
                *("" if value is None else value for value in energy),
            ]
        )


# -- per person, class and month (the usage page, GET /api/v1/usage/people/, `gpuportal usage`) ---------------------
#: Joules in a kilowatt-hour.
JOULES_PER_KWH = 3.6e6


def months_back(last: datetime, count: int) -> list[datetime]:
    """The ``count`` calendar months (UTC) ending with the one ``last`` falls in, oldest first, each as its start."""
    first = month_start(last)
    out = [first]
    for _ in range(count - 1):
        out.insert(0, month_start(out[0] - timedelta(days=1)))
    return out


def _next_month(when: datetime) -> datetime:
    """The start of the calendar month (UTC) after the one ``when`` falls in."""
    return month_start(month_start(when) + timedelta(days=32))


def energy_figures(joules: float | None, gpu_hours: float) -> dict:
    """kWh, joules per (allocated) GPU-hour and, where PORTAL_CARBON_G_PER_KWH is set, kg CO2e, of ``joules``
    (None: no reading knew the energy; every figure is then None)."""
    kwh = None if joules is None else joules / JOULES_PER_KWH
    out = {
        "energy_kwh": None if kwh is None else round(kwh, 3),
        "joules_per_gpu_hour": None if joules is None or not gpu_hours else round(joules / gpu_hours),
    }
    factor = settings.PORTAL_CARBON_G_PER_KWH
    if factor is not None:
        out["co2e_kg"] = None if kwh is None else round(kwh * factor / 1000, 3)
    return out


@dataclass
class _Tally:
    gpu_hours: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    preempted: float = 0.0
    joules: float | None = None
    #: GPU-hours of the job-months with energy readings: what joules per GPU-hour divides by.
    measured: float = 0.0
    jobs: set = field(default_factory=set)

    def add_joules(self, joules: float | None) -> None:
        if joules is not None:
            self.joules = (self.joules or 0.0) + joules

    def merge(self, other: _Tally) -> None:
        self.gpu_hours += other.gpu_hours
        self.used += other.used
        self.idle += other.idle
        self.preempted += other.preempted
        self.add_joules(other.joules)
        self.measured += other.measured
        self.jobs |= other.jobs

    def as_row(self) -> dict:
        return {
            "gpu_hours": round(self.gpu_hours, 3),
            "jobs": len(self.jobs),
            "used_gpu_hours": round(self.used, 3),
            "idle_gpu_hours": round(self.idle, 3),
            "preempted_gpu_hours": round(self.preempted, 3),
            **energy_figures(self.joules, self.measured),
        }


#: ?team= of the usage reports that asks for every team (admins only).
ALL_TEAMS = "all"


def people_scope(user, slug: str) -> tuple[str, Q]:
    """What the per-person report of ``?team=`` covers, as (its name, a Q over Job): your own jobs in every team
    (no team), a team's (a lead or an admin: every member's; another member: their own there), or every team's
    (``all``: admins). Refused as the team showback refuses: PermissionDenied (403) for ``all`` to anyone but an
    admin, Http404 for a team that is not the caller's, so no member learns of another team's usage."""
    if not slug:
        return "me", Q(owner=user)
    if slug == ALL_TEAMS:
        if not user.is_staff:
            mine = ", ".join(access.visible_teams(user).order_by("slug").values_list("slug", flat=True))
            raise PermissionDenied(
                "Only admins read every team's usage (team=all); ask for one team"
                + (f": yours are {mine}." if mine else ", once you belong to one.")
            )
        return ALL_TEAMS, Q()
    team = access.visible_teams(user).filter(slug=slug).first()
    if team is None:
        hint = ". Give a team's slug, or all." if user.is_staff else " that you belong to."
        raise Http404(f"No team {slug!r}{hint}")
    if roles.is_lead_or_admin(user, team):
        return team.slug, Q(team=team)
    return team.slug, Q(team=team, owner=user)


def people_usage(months: list[datetime], jobs: Q, now: datetime) -> dict:
    """Per month, team, person and resource class, the jobs matched by ``jobs`` (a Q over Job: a team's, one
    owner's): GPU-hours held (each run as the team showback counts it, split at month ends), jobs that ran, GPU-hours
    kept busy, idle (telemetry.samples.job_days) and lost to preemption (the REQUEUED lines), and the energy their
    GPUs drew (joules per GPU-hour over the GPU-hours of the job-months that have energy readings, so a job without
    them does not dilute it), with per-person and overall totals. Four queries, however many jobs and months."""
    start, end = months[0], _next_month(months[-1])
    tallies: dict[tuple[str, int], _Tally] = defaultdict(_Tally)

    def month_of(when: datetime) -> str:
        return when.astimezone(UTC).strftime("%Y-%m")

    for job, lo, hi, weight in _held_spans(None, start, end, now, jobs=jobs):
        while lo < hi:
            upto = min(hi, _next_month(lo))
            tally = tallies[(month_of(lo), job.pk)]
            tally.gpu_hours += (upto - lo).total_seconds() * weight / 3600
            tally.jobs.add(job.pk)
            lo = upto
    matched = Job.objects.filter(jobs).values("id")
    for day in job_days(start, end, Q(job_id__in=matched)):
        tally = tallies[(day.day[:7], day.job_id)]
        tally.used += day.used_gpu_hours
        tally.idle += day.idle_gpu_hours
        tally.add_joules(day.joules)
    lost = JobEvent.objects.filter(
        job__in=matched, kind=EventKind.REQUEUED, at__gte=start, at__lt=end, data__has_key="lost_gpu_hours"
    ).values_list("job_id", "at", "data")
    for job_id, at, data in lost:
        tallies[(month_of(at), job_id)].preempted += float(data.get("lost_gpu_hours") or 0.0)
    meta = {
        row[0]: row[1:]
        for row in Job.objects.filter(pk__in={job_id for _, job_id in tallies}).values_list(
            "id", "team__slug", "owner__username", "resource_class__key", "resource_class__product"
        )
    }
    rows: dict[tuple, _Tally] = defaultdict(_Tally)
    people: dict[tuple, _Tally] = defaultdict(_Tally)
    total = _Tally()
    for (month, job_id), tally in tallies.items():
        team, user, key, product = meta[job_id]
        tally.measured = tally.gpu_hours if tally.joules is not None else 0.0
        rows[(month, team, user, key, product)].merge(tally)
        people[(team, user)].merge(tally)
        total.merge(tally)
    return {
        "months": [m.strftime("%Y-%m") for m in months],
        "rows": [
            {"month": month, "team": team, "user": user, "class": key, "product": product, **tally.as_row()}
            for (month, team, user, key, product), tally in sorted(rows.items())
        ],
        "people": [
            {"team": team, "user": user, **tally.as_row()}
            for (team, user), tally in sorted(people.items(), key=lambda item: (item[0][0], -item[1].gpu_hours))
        ],
        "total": total.as_row(),
        "carbon_g_per_kwh": settings.PORTAL_CARBON_G_PER_KWH,
    }


PEOPLE_CSV_COLUMNS = [
    "month", "team", "user", "class", "gpu_hours", "jobs", "used_gpu_hours", "idle_gpu_hours", "preempted_gpu_hours",
    "energy_kwh", "joules_per_gpu_hour",
]  # fmt: skip


def write_people_csv(out, report: dict) -> None:
    """``people_usage``'s rows as CSV, with a co2e_kg column where a carbon factor is set."""
    columns = PEOPLE_CSV_COLUMNS + (["co2e_kg"] if report["carbon_g_per_kwh"] is not None else [])
    writer = csv.writer(out)
    writer.writerow(columns)
    for row in report["rows"]:
        writer.writerow(["" if row[c] is None else row[c] for c in columns])

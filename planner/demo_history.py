"""The demo's month of history: when the demo starts on a portal with no history yet, about 30 days of finished
work for the demo teams on the demo cluster's classes, so the planner has a past to replay.

The work is synthesised by ``planner.demo_synth`` over today's default cluster and quotas as admission sees them
(``planner.history.current_cluster``, narrowed to the default cluster: the demo's month ran there, before its
second cluster joined the fleet; its rows name no cluster, which the history reads as the default one) and
written as real rows: finished Job rows (batch jobs, array tasks with their JobArray, distributed gangs, notebook
sessions of a stopped "sandbox" notebook per team) with their timelines (submitted, waiting when they waited,
admitted, started, and how they ended), in a few bulk INSERTs.

Seeded and idempotent: the same ``seed`` and ``now`` give the same rows, and a portal that already has work
submitted before the window's end (its own past, or this history) gets nothing. Only finished rows are written,
all ending before the window's end (ten minutes before the seed runs), so the live demo's jobs, quotas and the job
cycle are untouched: nothing here is queued or holds capacity, and a budgeted class's use stays under
``demo_synth.BUDGET_SHARE`` of its budget in the current month. Every row carries the label
``source=demo-history``.

Each job that ran also has utilisation readings, so the showback's "used" and the long-range charts have a past
too: 5-minute and hourly rollups over its run, as the rollup task (telemetry.samples.roll_up) writes them from a
GPU's readings, one row per job and period with the job's normalised GPUs as its weight (the history has no GPU
ids). How busy a job kept its GPUs depends on its kind: distributed training 70-95 %, batch jobs 45-90 % (a
failed one 15-55 %), array tasks 40-85 %, notebooks 5-35 %; each period varies around that, and a job's first
period is lower (it loads its data).
"""

from __future__ import annotations

import random
import string
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import CharField, F, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from accounts.models import Membership, Team
from gpus.models import ResourceClass, settings_cluster_pk
from jobs.choices import EventKind, JobKind, JobState, NotebookState, RankState, StopReason
from jobs.models import Job, JobArray, JobEvent, Notebook, NotebookPolicy
from jobs.validation import image_cuda_version
from telemetry.choices import RollupPeriod
from telemetry.models import GpuRollup

from . import demo_synth, engine, history, model

SEED = 15
DAYS = 30
#: A pod name's last part, from the job's id (the cluster's own is random; these only need to look like one).
POD_PRIME, POD_MODULUS = 7919, 99991
#: The label every row of the history carries (the job list filters by it: ?label=source=demo-history).
LABEL = {"source": "demo-history"}
NOTEBOOK_NAME = "sandbox"
#: Job names by team slug (none of them a name the live demo's seeding looks for).
NAMES = {
    "vision": ["detr-finetune", "vit-b16-pretrain", "segformer-train", "clip-eval", "mask-rcnn", "dino-distill",
               "yolo-train", "augment-bench"],
    "nlp": ["bert-pretrain", "t5-finetune", "tokenizer-build", "llama-sft", "rag-eval", "mistral-lora", "ppl-eval"],
    "platform": ["nccl-bench", "smoke-test", "driver-canary", "image-check"],
}  # fmt: skip
OTHER_NAMES = ["train", "eval", "finetune", "benchmark"]
GANG_NAMES = ["fsdp-pretrain", "ddp-scaling", "megatron-run"]
ARRAY_NAMES = ["hp-sweep", "ablation", "seed-sweep"]
#: Images and the CUDA version each needs; a class gets those its nodes' drivers run.
IMAGES = [
    "nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:23.08-py3", "nvcr.io/nvidia/tensorflow:23.08-tf2-py3",
    "nvidia/cuda:12.1.1-runtime-ubuntu22.04",
]  # fmt: skip
STATE = {"succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED, "deadline": JobState.FAILED,
         "cancelled": JobState.CANCELLED, "idle": JobState.CANCELLED, "user": JobState.CANCELLED,
         "ttl": JobState.CANCELLED}  # fmt: skip


def window(now: datetime, days: int = DAYS) -> tuple[datetime, datetime]:
    """The history's [start, end): ``days`` days ending ten minutes before ``now`` (whole minutes)."""
    end = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    return end - timedelta(days=days), end


def seed_history(now: datetime | None = None, *, days: int = DAYS, seed: int = SEED) -> int:
    """Write the demo's history unless the portal has work submitted before its window's end. Returns the jobs
    written (0 when there was history already, or no quota to have one on)."""
    start, end = window(now or timezone.now(), days)
    if Job.objects.filter(submitted_at__lt=end).exists():
        return 0
    fleet = history.current_cluster()
    _, cluster = engine.scope(model.History(start.timestamp(), end.timestamp(), []), fleet, fleet.home)
    teams = {t.pk: t for t in Team.objects.filter(pk__in={team for team, _ in cluster.quotas})}
    members: dict[int, list] = defaultdict(list)
    for m in Membership.objects.filter(team__in=teams).select_related("user").order_by("role", "user__username"):
        members[m.team_id].append(m.user)
    admin = get_user_model().objects.filter(is_staff=True).order_by("pk").first()
    for team_id in teams:
        if not members[team_id] and admin is not None:
            members[team_id].append(admin)
    cluster.quotas = {key: q for key, q in cluster.quotas.items() if members.get(key[0])}
    taken = set(Notebook.objects.filter(team__in=teams, name=NOTEBOOK_NAME).values_list("team_id", flat=True))
    policies = {}
    for team in teams.values():
        if team.pk not in taken:
            policy = NotebookPolicy.for_team(team)
            policies[team.pk] = policy
    notebooks = {team: (p.ttl_seconds, p.max_ttl_seconds + 3600) for team, p in policies.items()}
    month = demo_synth.synthesise(cluster, start.timestamp(), end.timestamp(), seed, notebooks)
    if not month.jobs:
        return 0
    with transaction.atomic():
        rows = _write(month, end, cluster, teams, members, policies, random.Random(seed + 1))
        _readings(month.jobs, rows, random.Random(seed + 2))
    return len(month.jobs)


def _images(cluster) -> dict[int, list[tuple[str, str]]]:
    """Class → the (image, CUDA version) pairs every node of the class can run."""
    needs = {image: image_cuda_version(image) or "" for image in IMAGES}
    out = {}
    for class_id, cls in cluster.classes.items():
        drivers = [n.cuda for n in cluster.nodes.values() if n.product_label == cls.product_label and n.cuda]
        oldest = min(drivers) if drivers else ()
        fits = [(image, cuda) for image, cuda in needs.items() if not oldest or not cuda or _tuple(cuda) <= oldest]
        out[class_id] = fits or [(IMAGES[-1], needs[IMAGES[-1]])]
    return out


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _write(
    month: demo_synth.Month, end: datetime, cluster, teams: dict, members: dict, policies: dict, rng: random.Random
) -> list[Job]:
    images = _images(cluster)
    pick = rng.choice

    def suffix() -> str:
        return "".join(pick(string.ascii_lowercase + string.digits) for _ in range(5))

    # The teams' sandbox notebooks (stopped; their last session is set once the jobs exist).
    sessions = defaultdict(list)
    for job in month.jobs:
        if job.kind == JobKind.NOTEBOOK:
            sessions[job.team].append(job)
    notebooks = {}
    for team_id, team_sessions in sessions.items():
        first, last = team_sessions[0], team_sessions[-1]
        policy = policies[team_id]
        notebooks[team_id] = Notebook(
            team_id=team_id, owner=members[team_id][0], name=NOTEBOOK_NAME, image=settings.PORTAL_NOTEBOOK_IMAGES[0],
            resource_class_id=first.class_id, count=1, cpu_millicores=first.cpu_m, memory_mb=first.memory_mb,
            ttl_seconds=policy.ttl_seconds, idle_timeout_seconds=policy.idle_timeout_seconds,
            state=NotebookState.STOPPED, created=_at(first.submitted), stop_reason=last.outcome,
            stopped_at=_at(last.finished),
        )  # fmt: skip
    Notebook.objects.bulk_create(notebooks.values())
    arrays = {}
    for number, (team_id, _class_id, size, cap, submitted) in month.arrays.items():
        arrays[number] = JobArray(
            team_id=team_id, owner=pick(members[team_id]), name=f"{pick(ARRAY_NAMES)}-{number + 1}", size=size,
            parallelism=cap, created=_at(submitted),
        )  # fmt: skip
    JobArray.objects.bulk_create(arrays.values())

    rows, owners = [], []
    for job in month.jobs:
        team = teams[job.team]
        notebook = notebooks.get(job.team) if job.kind == JobKind.NOTEBOOK else None
        array = arrays[job.array[0]] if job.array else None
        owner = notebook.owner if notebook else array.owner if array else pick(members[job.team])
        if notebook:
            name, image = notebook.name, notebook.image
        elif array:
            name, image = array.name, images[job.class_id][0][0]
        else:
            name = pick(GANG_NAMES if job.kind == JobKind.DISTRIBUTED else NAMES.get(team.slug, OTHER_NAMES))
            image = pick(images[job.class_id])[0]
        script = "sweep.py --trial $PORTAL_ARRAY_INDEX" if array else f"train.py --config {name}.yaml"
        state = STATE[job.outcome]
        exit_code = {"succeeded": 0, "failed": 1}.get(job.outcome)
        rows.append(
            Job(
                team_id=job.team, owner=owner, kind=job.kind, name=name, image=image,
                command=[] if notebook else ["bash", "-c", f"python {script}"], resource_class_id=job.class_id,
                count=job.count, workers=job.workers, cpu_millicores=job.cpu_m, memory_mb=job.memory_mb,
                priority=job.priority, preemptible=job.preemptible, max_runtime_seconds=job.max_runtime_s,
                image_cuda=image_cuda_version(image) or "", state=state, state_changed_at=_at(job.finished),
                node_name=job.nodes[0], node_names=job.nodes if job.workers > 1 else [], borrowed=job.borrowed,
                attempts=1, submitted_at=_at(job.submitted), admitted_at=_at(job.admitted),
                started_at=_at(job.started), finished_at=_at(job.finished), exit_code=exit_code,
                failure_reason={"failed": "Error", "deadline": "DeadlineExceeded"}.get(job.outcome, ""),
                notebook=notebook, array=array, array_index=job.array[1] if job.array else None, labels=LABEL,
            )
        )  # fmt: skip
        owners.append(owner)
    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    _insert(Job, [f.name for f in fields], [[getattr(row, f.attname) for f in fields] for row in rows])
    # Every job before the window's end is the history's (none was there before), in the order it went in.
    ids = Job.objects.filter(submitted_at__lt=end).order_by("id").values_list("id", flat=True)
    for row, pk in zip(rows, ids, strict=True):
        row.pk = pk
        row._state.adding, row._state.db = False, "default"
    # Names made from the ids the rows just got, in one UPDATE (the history is all there is before its window's
    # end): gpj-<id>-<name> as Job.default_workload_name makes it, and a pod name after it.
    workload = Concat(Value("gpj-"), Cast("id", CharField()), Value("-"), "name")
    pod = Concat(workload, Value("-p"), Cast(F("id") * POD_PRIME % POD_MODULUS, CharField()))
    Job.objects.filter(submitted_at__lt=end).update(workload_name=workload, pod_name=pod)
    gangs = []
    for row in rows:
        row.workload_name = row.default_workload_name()
        row.pod_name = f"{row.workload_name}-p{row.pk * POD_PRIME % POD_MODULUS}"
        if row.workers > 1:
            rank_state = {JobState.SUCCEEDED: RankState.SUCCEEDED, JobState.FAILED: RankState.FAILED}.get(
                row.state, RankState.SUCCEEDED
            )
            row.ranks = [
                {"rank": i, "node": node, "pod": f"{row.workload_name}-{i}-{suffix()}", "state": rank_state,
                 "exit_code": row.exit_code if i == 0 else 0 if rank_state == RankState.SUCCEEDED else None,
                 "reason": row.failure_reason if i == 0 else ""}
                for i, node in enumerate(row.node_names)
            ]  # fmt: skip
            row.failed_rank = 0 if row.state == JobState.FAILED else None
            gangs.append(row)
    Job.objects.bulk_update(gangs, ["ranks", "failed_rank"])
    for team_id, notebook in notebooks.items():
        notebook.session = rows[sessions[team_id][-1].seq]
        notebook.save(update_fields=["session"])
    events = []
    for job, row, owner in zip(month.jobs, rows, owners, strict=True):
        events.extend(_timeline(job, row, owner, cluster, teams, rng))
    _insert(JobEvent, ["job", "at", "kind", "message", "data"], events)
    return rows


#: How busy a job keeps its GPUs, in percent (low, high), by kind; a failed batch job less.
BUSY = {JobKind.DISTRIBUTED: (70, 95), JobKind.BATCH: (45, 90), JobKind.NOTEBOOK: (5, 35)}
BUSY_ARRAY_TASK, BUSY_FAILED = (40, 85), (15, 55)
#: Seconds between two readings of a GPU (a rollup counts the readings it averages).
READING_SECONDS = 15


def _readings(jobs: list[demo_synth.Planned], rows: list[Job], rng: random.Random) -> None:
    """5-minute and hourly utilisation rollups over each job's run (module docstring)."""
    fraction = dict(ResourceClass.objects.values_list("pk", "gpu_fraction"))
    home = settings_cluster_pk()  # the month ran on the demo cluster (planner.demo_synth over its nodes)
    names = ["period", "start", "cluster", "node_name", "gpu_uuid", "mig_profile", "weight", "job_id", "team",
             "samples", "util_avg", "util_max"]  # fmt: skip
    rollups = []
    for job, row in zip(jobs, rows, strict=True):
        if job.finished <= job.started:
            continue
        low, high = (
            BUSY_FAILED if row.state == JobState.FAILED and job.kind == JobKind.BATCH
            else BUSY_ARRAY_TASK if job.array else BUSY[job.kind]
        )  # fmt: skip
        level = rng.uniform(low, high)
        weight = job.workers * job.count * fraction.get(job.class_id, 1.0)
        hours: dict[int, list[tuple[float, int]]] = defaultdict(list)
        slot = int(job.started // 300 * 300)
        while slot < job.finished:
            covered = min(slot + 300, job.finished) - max(slot, job.started)
            util = level * (0.5 if slot <= job.started else 1.0) + rng.gauss(0, 6)
            util = round(min(100.0, max(0.0, util)), 1)
            samples = max(1, round(covered / READING_SECONDS))
            rollups.append((RollupPeriod.FIVE_MINUTES, _at(slot), home, job.nodes[0], "", "", weight, row.pk,
                            job.team, samples, util, min(100.0, round(util + rng.uniform(2, 12), 1))))  # fmt: skip
            hours[slot // 3600 * 3600].append((util, samples))
            slot += 300
        for hour, parts in hours.items():
            samples = sum(n for _, n in parts)
            util = round(sum(u * n for u, n in parts) / samples, 1)
            peak = max(u for u, _ in parts)
            rollups.append((RollupPeriod.HOUR, _at(hour), home, job.nodes[0], "", "", weight, row.pk, job.team,
                            samples, util, min(100.0, round(peak + rng.uniform(2, 12), 1))))  # fmt: skip
    _insert(GpuRollup, names, rollups)


def _insert(model, names: list[str], rows: list) -> None:
    """Rows of ``model`` (each its values of the fields ``names``, in order) in one prepared INSERT run for each
    (``executemany``): what bulk_create does without building instances or preparing each value through the
    expression machinery, several times faster for the month's ~3,000 jobs and ~13,000 timeline lines. A value a
    field has had before is prepared once (the ~80,000 utilisation rollups share their periods' starts, nodes,
    weights and jobs)."""
    db = connections[DEFAULT_DB_ALIAS]
    fields = [model._meta.get_field(name) for name in names]
    columns = ", ".join(db.ops.quote_name(f.column) for f in fields)
    table = db.ops.quote_name(model._meta.db_table)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"  # noqa: S608
    prepare = [f.get_db_prep_save for f in fields]
    prepared: dict = {}

    def value(i: int, v):
        try:
            return prepared[i, v]
        except KeyError:
            prepared[i, v] = ready = prepare[i](v, db)
            return ready
        except TypeError:  # unhashable (a list, a dict): prepared each time
            return prepare[i](v, db)

    with db.cursor() as cursor:
        cursor.executemany(sql, [[value(i, v) for i, v in enumerate(row)] for row in rows])


def _timeline(job: demo_synth.Planned, row: Job, owner, cluster, teams: dict, rng: random.Random) -> list[tuple]:
    """The job's timeline lines, worded as the portal words them."""
    cls = cluster.classes[job.class_id]
    quota = cluster.quotas[(job.team, job.class_id)]
    who = owner.get_username()
    team_name = teams[job.team].name
    total = job.count * job.workers
    if job.kind == JobKind.NOTEBOOK:
        said = f"Notebook session started by {who}: 1 × {cls.name}, home volume {row.notebook.volume_name}."
    elif job.workers > 1:
        said = f"Submitted by {who}: {job.workers} workers × {job.count} × {cls.name}."
    else:
        said = f"Submitted by {who}: {job.count} × {cls.name}."
    out = [(row.pk, _at(job.submitted), EventKind.SUBMITTED, said, {})]
    if job.waited:
        ceiling = quota.limit if job.preemptible else quota.guaranteed
        text = {
            "quota": (
                f"Team {team_name} holds {job.in_use} × {cls.name} and its earlier work keeps it there; this job's "
                f"{total} would take it past its {'limit' if job.preemptible else 'guarantee'} of {ceiling}. It "
                "starts when the team's running jobs free enough."
            ),
            "array": "Its array runs as many tasks at once as it may; it starts when one of them ends.",
            "capacity": f"No {cls.name} node has {job.count} units free; it starts when running jobs free enough.",
        }[job.waited]
        at = _at(min(job.submitted + rng.uniform(2, 10), job.admitted - 1))
        out.append((row.pk, at, EventKind.WAITING, text, {"reason": job.waited}))
    if job.workers > 1:
        placed = f"Admitted: {job.workers} workers on {', '.join(job.nodes)}."
        running = f"All {job.workers} workers running on {', '.join(job.nodes)} (first: pod {row.ranks[0]['pod']})."
    else:
        note = " on borrowed capacity (above the team's guarantee)" if job.borrowed else ""
        placed = f"Admitted and placed on {job.nodes[0]}{note}."
        running = f"Started on {job.nodes[0]} (pod {row.pod_name})."
    where = {"node": job.nodes[0], "borrowed": job.borrowed}
    out.append((row.pk, _at(job.admitted), EventKind.ADMITTED, placed, where))
    out.append((row.pk, _at(job.started), EventKind.STARTED, running, {"pod": row.pod_name}))
    minutes = job.max_runtime_s // 60
    kind, text = {
        "succeeded": (EventKind.SUCCEEDED, f"Succeeded on {job.nodes[0]}."),
        "failed": (EventKind.FAILED, "Failed with exit code 1."),
        "deadline": (EventKind.FAILED, f"Stopped by Kubernetes after its maximum runtime of {minutes} minutes "
                                       "(activeDeadlineSeconds)."),
        "cancelled": (EventKind.CANCELLED, f"Cancelled by {who}."),
        "idle": (EventKind.STOPPED, f"Notebook stopped: {StopReason.IDLE.label.lower()}."),
        "ttl": (EventKind.STOPPED, f"Notebook stopped: {StopReason.TTL.label.lower()}."),
        "user": (EventKind.STOPPED, f"Notebook stopped: {StopReason.USER.label.lower()} ({who})."),
    }[job.outcome]  # fmt: skip
    data = {"exit_code": row.exit_code, "reason": row.failure_reason} if kind != EventKind.CANCELLED else {}
    out.append((row.pk, _at(job.finished), kind, text, data))
    return out

"""Utilisation telemetry: storing readings, rolling them up, and reading series back for charts.

Readings arrive two ways and end up the same (``Reading``):

- the node agent (``python -m agent``, NVML) posts batches to ``/api/v1/telemetry/samples/``
  (telemetry.api.views validates them);
- the dcgm scrape (telemetry.scrape) reads NVIDIA's dcgm-exporter (vocab.dcgm parses the text); on the simulated cluster
  the exporter text comes from the simulation (cluster.sim.dcgm_exporter).

Every batch comes from one cluster of the fleet (the agent's token is bound to its node's cluster; the scrape runs
per cluster, telemetry.scrape), and each sample keeps it: node names are unique per cluster only, so a node is
always (cluster, node name) here. Each reading is attributed to the portal job on that GPU where that can be
known: from the exporter's pod labels (the pod's namespace and name), or, for agent readings without pod labels,
when exactly one running portal job is on that node. Raw samples are kept ``PORTAL_TELEMETRY_RAW_DAYS``; 5-minute
and hourly rollups (``rollup``) ``PORTAL_TELEMETRY_ROLLUP_DAYS``. Chart series (``series``) read raw samples for
short ranges and rollups for long ones, bucketed in the database.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Avg, Case, Count, F, Max, Min, Q, Sum, When
from django.utils import timezone

from core.metrics import TELEMETRY_SAMPLES
from gpus.models import GPU, Node, settings_cluster_pk
from vocab.mig import product_geometry

from . import seams
from .choices import RollupPeriod, TelemetrySource
from .models import GpuRollup, GpuSample, RollupWatermark

PERIOD_SECONDS = {RollupPeriod.FIVE_MINUTES: 300, RollupPeriod.HOUR: 3600}
_PROFILE_SLICES = re.compile(r"^(\d+)g\.")


@dataclass
class Reading:
    """One GPU (``gpu_instance_id`` None) or one MIG instance at one moment, whatever the source."""

    ts: datetime
    node_name: str
    gpu_uuid: str
    gpu_index: int | None = None
    gpu_instance_id: int | None = None
    mig_profile: str = ""
    util_pct: float | None = None
    mem_used_mb: int | None = None
    mem_total_mb: int | None = None
    power_w: float | None = None
    #: The GPU's energy counter, millijoules since the driver loaded (whole GPUs; None where not read).
    energy_mj: int | None = None
    temp_c: float | None = None
    pod: str = ""
    namespace: str = ""


def mig_weight(profile: str, product: str = "") -> float:
    """The share of a physical GPU a MIG instance is: its compute slices over the GPU's, from the MIG catalogue
    for the node's product (7; 4 on an A30 or an RTX PRO 6000 Blackwell), 7 for a product it does not know."""
    match = _PROFILE_SLICES.match(profile or "")
    if not match:
        return 1.0
    geometry = product_geometry(product or "")
    total = geometry.compute_slices if geometry else (4 if "A30" in (product or "").upper() else 7)
    return min(1.0, int(match.group(1)) / total)


def readings_from_dcgm(readings, ts: datetime, node_name: str = "") -> list[Reading]:
    """dcgm-exporter readings (vocab.dcgm.DcgmReading) as Readings; the exporter's host label names the node
    unless ``node_name`` (the exporter pod's node) is given."""
    out = []
    mig_parents = {r.gpu_uuid for r in readings if r.gpu_instance_id is not None}
    for r in readings:
        util = r.utilisation
        if r.gpu_instance_id is None and r.gpu_uuid in mig_parents:
            # GPU_UTIL reads 0 on a MIG-enabled GPU; its engine activity is what it did.
            util = None if r._engine_active is None else r._engine_active * 100
        used = None if r.memory_used_mib is None else int(r.memory_used_mib)
        total = None
        if r.memory_used_mib is not None and r.memory_free_mib is not None:
            total = int(r.memory_used_mib + r.memory_free_mib)
        out.append(
            Reading(
                ts=ts,
                node_name=node_name or r.hostname,
                gpu_uuid=r.gpu_uuid,
                gpu_index=r.gpu_index,
                gpu_instance_id=r.gpu_instance_id,
                mig_profile=r.mig_profile,
                util_pct=None if util is None else max(0.0, min(100.0, util)),
                mem_used_mb=used,
                mem_total_mb=total,
                power_w=r.power_w,
                energy_mj=None if r.energy_mj is None or r.gpu_instance_id is not None else int(r.energy_mj),
                temp_c=r.temperature_c,
                pod=r.pod,
                namespace=r.namespace,
            )
        )
    return out


def store(readings: list[Reading], source: str, cluster_id: int | None = None) -> int:
    """Insert readings of nodes of cluster ``cluster_id`` (None: the cluster configured in settings) in bulk,
    attributed to jobs and teams; fill in GPU UUIDs the inventory lacks."""
    if not readings:
        return 0
    cluster_id = cluster_id or settings_cluster_pk()
    names = {r.node_name for r in readings}
    by_pod, only = seams.owners_on(cluster_id, names)
    products = dict(Node.objects.filter(cluster_id=cluster_id, name__in=names).values_list("name", "product"))
    rows = []
    for r in readings:
        owner = by_pod.get((r.namespace, r.pod)) if r.pod else None
        if owner is None and not r.pod and source == TelemetrySource.AGENT:
            owner = only.get(r.node_name)
        rows.append(
            GpuSample(
                ts=r.ts,
                cluster_id=cluster_id,
                node_name=r.node_name,
                gpu_uuid=r.gpu_uuid,
                gpu_index=r.gpu_index,
                gpu_instance_id=r.gpu_instance_id,
                mig_profile=r.mig_profile or "",
                weight=mig_weight(r.mig_profile, products.get(r.node_name, ""))
                if r.gpu_instance_id is not None
                else 1.0,
                job_id=owner[0] if owner else None,
                team_id=owner[1] if owner else None,
                util_pct=r.util_pct,
                mem_used_mb=r.mem_used_mb,
                mem_total_mb=r.mem_total_mb,
                power_w=r.power_w,
                energy_mj=r.energy_mj if r.gpu_instance_id is None else None,
                temp_c=r.temp_c,
                source=source,
            )
        )
    fill_energy(rows, cluster_id)
    if connection.vendor == "postgresql":
        _copy_samples(rows)
    else:
        GpuSample.objects.bulk_create(rows, batch_size=1000)
    _learn_uuids(cluster_id, readings)
    TELEMETRY_SAMPLES.labels(source=str(source)).inc(len(rows))
    return len(rows)


#: The longest gap between two readings of a GPU over which its energy is still counted: a longer silence (the
#: exporter or agent was down, the node rebooted) is not attributed to whichever job the next reading finds.
ENERGY_MAX_GAP = timedelta(minutes=10)


def _joules(prev, cur: GpuSample) -> float | None:
    """Energy one GPU drew between two of its readings: the energy counter's rise (DCGM or NVML, millijoules), or
    where a counter is missing or went back (the driver reloaded) the power readings integrated over the interval
    (the trapezoid; the later reading alone when the earlier has none)."""
    seconds = (cur.ts - prev.ts).total_seconds()
    if seconds <= 0 or seconds > ENERGY_MAX_GAP.total_seconds():
        return None
    if prev.energy_mj is not None and cur.energy_mj is not None and cur.energy_mj >= prev.energy_mj:
        return (cur.energy_mj - prev.energy_mj) / 1000.0
    if cur.power_w is None:
        return None
    before = cur.power_w if prev.power_w is None else prev.power_w
    return (before + cur.power_w) / 2 * seconds


def fill_energy(rows: list[GpuSample], cluster_id: int) -> None:
    """Set ``energy_j`` on a batch of samples of one cluster before they are stored: for each whole GPU, the energy
    since its previous reading (in the batch, or the latest stored one within ENERGY_MAX_GAP before the batch: two
    queries over the (GPU, time) index). A MIG instance's row takes its share (``weight``) of its GPU's energy at the
    same moment and the GPU's own row keeps the rest (its unpartitioned or idle slices), so the rows of a GPU add up
    to what it drew, each counted once."""
    whole = sorted((r for r in rows if r.gpu_instance_id is None), key=lambda r: r.ts)
    if not whole:
        return
    first = whole[0].ts
    # Each GPU's latest reading in the ENERGY_MAX_GAP before the batch: when it was (the database finds it on the
    # (GPU, time) index), then those rows' counters.
    window = GpuSample.objects.filter(
        cluster_id=cluster_id, gpu_uuid__in={r.gpu_uuid for r in whole}, gpu_instance_id__isnull=True,
        ts__gte=first - ENERGY_MAX_GAP, ts__lt=first,
    )  # fmt: skip
    last = dict(window.values("gpu_uuid").annotate(at=Max("ts")).order_by().values_list("gpu_uuid", "at"))
    previous = {
        p.gpu_uuid: p
        for p in window.filter(ts__in=set(last.values())).values_list(
            "gpu_uuid", "ts", "energy_mj", "power_w", named=True
        )
        if last.get(p.gpu_uuid) == p.ts
    }
    for row in whole:
        prev = previous.get(row.gpu_uuid)
        row.energy_j = None if prev is None else _joules(prev, row)
        previous[row.gpu_uuid] = row
    parents = {(r.gpu_uuid, r.ts): r for r in whole if r.energy_j is not None}
    shares: dict[tuple[str, datetime], float] = defaultdict(float)
    for row in rows:
        parent = parents.get((row.gpu_uuid, row.ts)) if row.gpu_instance_id is not None else None
        if parent is not None:
            row.energy_j = parent.energy_j * row.weight
            shares[(row.gpu_uuid, row.ts)] += row.weight
    for key, taken in shares.items():
        parents[key].energy_j *= max(0.0, 1.0 - taken)


_COPY_FIELDS = [f.column for f in GpuSample._meta.concrete_fields if not f.primary_key]


def _copy_samples(rows: list[GpuSample]) -> None:
    """PostgreSQL's COPY: several times faster than INSERT for a batch of samples (bench/telemetry_scale.py)."""
    table = GpuSample._meta.db_table
    attnames = [f.attname for f in GpuSample._meta.concrete_fields if not f.primary_key]
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f"COPY {table} ({', '.join(_COPY_FIELDS)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([getattr(row, name) for name in attnames])


def _learn_uuids(cluster_id: int, readings: list[Reading]) -> None:
    """Labels do not carry GPU UUIDs; telemetry does. Record them on the inventory's GPU rows: only on a GPU of the
    reading's own node whose UUID is not known yet, and never a UUID the inventory already knows on another GPU
    (audit finding 3: an agent relabelled its GPUs with another node's UUIDs)."""
    wanted = {(r.node_name, r.gpu_index): r.gpu_uuid for r in readings if r.gpu_index is not None and r.gpu_uuid}
    if not wanted:
        return
    known = set(GPU.objects.filter(uuid__in=set(wanted.values())).values_list("uuid", flat=True))
    blank = GPU.objects.filter(node__cluster_id=cluster_id, node__name__in={n for n, _ in wanted}, uuid="")
    for gpu in blank.select_related("node").only("id", "index", "uuid", "node__name"):
        uuid = wanted.get((gpu.node.name, gpu.index))
        if uuid and uuid not in known:
            GPU.objects.filter(pk=gpu.pk, uuid="").update(uuid=uuid)
            known.add(uuid)


def foreign_samples(cluster_id: int, node_name: str, samples: list[dict]) -> dict[str, list[str]]:
    """Why each of an agent's samples does not belong to its node ``node_name`` of cluster ``cluster_id``
    ({"samples[i].field": [...]}): a GPU UUID the inventory knows on another node (of any cluster) or at another
    index of this one, an index this node does not have, or an index whose GPU is known under another UUID. One
    query for the node's GPUs, one for the UUIDs."""
    own = dict(GPU.objects.filter(node__cluster_id=cluster_id, node__name=node_name).values_list("index", "uuid"))
    uuids = {s["gpu_uuid"] for s in samples}
    elsewhere = {
        uuid: (node if cluster == cluster_id else f"{node} of cluster {cluster_name}", index)
        for uuid, cluster, cluster_name, node, index in GPU.objects.filter(uuid__in=uuids).values_list(
            "uuid", "node__cluster_id", "node__cluster__name", "node__name", "index"
        )
    }
    errors: dict[str, list[str]] = {}
    claimed: dict[str, int] = {}
    for i, sample in enumerate(samples):
        uuid, index = sample["gpu_uuid"], sample.get("gpu_index")
        where = f"samples[{i}]"
        node, at = elsewhere.get(uuid, (None, None))
        if node is not None and node != node_name:
            errors[f"{where}.gpu_uuid"] = [f"{uuid} is a GPU of node {node}, not of {node_name} (this token's node)."]
        elif index is not None and index not in own:
            have = ", ".join(str(n) for n in sorted(own)) or "none"
            errors[f"{where}.gpu_index"] = [f"Node {node_name} has no GPU with index {index} (it has: {have})."]
        elif index is not None and own[index] and own[index] != uuid:
            errors[f"{where}.gpu_uuid"] = [
                f"GPU {index} of node {node_name} is {own[index]}, not {uuid}. If the GPU was replaced, an admin "
                "removes the node's inventory entry so that it is learnt again."
            ]
        elif index is not None and at is not None and at != index:
            errors[f"{where}.gpu_uuid"] = [f"{uuid} is GPU {at} of node {node_name}, not GPU {index}."]
        elif index is not None and claimed.setdefault(uuid, index) != index:
            errors[f"{where}.gpu_uuid"] = [f"{uuid} appears as GPU {claimed[uuid]} and GPU {index} in this batch."]
    return errors


# ---------------------------------------------------------------------------------------------------------------
# Rollups and retention
# ---------------------------------------------------------------------------------------------------------------
def _floor(when: datetime, seconds: int) -> datetime:
    epoch = int(when.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


_GROUP = ("cluster_id", "node_name", "gpu_uuid", "gpu_instance_id", "mig_profile", "weight", "job_id", "team_id")


def rollup(now: datetime | None = None, max_buckets: int = 288) -> dict[str, int]:
    """Roll raw samples up into every finished 5-minute and hourly period not yet rolled up.

    Safe to run twice at once: each period's watermark row is locked while its buckets are written, and a
    bucket is written in the same transaction that moves the watermark past it. At most ``max_buckets`` per
    period per call (a long outage catches up over several runs)."""
    now = now or timezone.now()
    lag = timedelta(seconds=settings.PORTAL_TELEMETRY_ROLLUP_LAG)
    written: dict[str, int] = {}
    for period, seconds in PERIOD_SECONDS.items():
        step = timedelta(seconds=seconds)
        limit = _floor(now - lag, seconds)
        count = 0
        with transaction.atomic():
            mark = RollupWatermark.objects.select_for_update().filter(period=period).first()
            if mark is None:
                first = GpuSample.objects.aggregate(first=Min("ts"))["first"]
                if first is None:
                    written[str(period.value)] = 0
                    continue
                RollupWatermark.objects.get_or_create(period=period, defaults={"done_until": _floor(first, seconds)})
                mark = RollupWatermark.objects.select_for_update().get(period=period)
            start = mark.done_until
            buckets = 0
            while start + step <= limit and buckets < max_buckets:
                end = start + step
                groups = (
                    GpuSample.objects.filter(ts__gte=start, ts__lt=end)
                    .values(*_GROUP)
                    .annotate(
                        n=Count("id"),
                        util_avg=Avg("util_pct"),
                        util_max=Max("util_pct"),
                        mem=Avg("mem_used_mb"),
                        power=Avg("power_w"),
                        energy=Sum("energy_j"),
                    )
                    .order_by()
                )
                rows = [
                    GpuRollup(
                        period=period,
                        start=start,
                        samples=g["n"],
                        util_avg=g["util_avg"],
                        util_max=g["util_max"],
                        mem_used_avg_mb=g["mem"],
                        power_avg_w=g["power"],
                        energy_j=g["energy"],
                        **{k: g[k] for k in _GROUP},
                    )
                    for g in groups
                ]
                GpuRollup.objects.bulk_create(rows, batch_size=1000)
                count += len(rows)
                start = end
                buckets += 1
            if start != mark.done_until:
                RollupWatermark.objects.filter(pk=mark.pk).update(done_until=start)
        written[str(period.value)] = count
    return written


def prune(now: datetime | None = None) -> dict[str, int]:
    """Delete raw samples and rollups past their retention."""
    now = now or timezone.now()
    raw_cut = now - timedelta(days=settings.PORTAL_TELEMETRY_RAW_DAYS)
    rollup_cut = now - timedelta(days=settings.PORTAL_TELEMETRY_ROLLUP_DAYS)
    raw, _ = GpuSample.objects.filter(ts__lt=raw_cut).delete()
    rolled, _ = GpuRollup.objects.filter(start__lt=rollup_cut).delete()
    return {"samples": raw, "rollups": rolled}


# ---------------------------------------------------------------------------------------------------------------
# Series for charts
# ---------------------------------------------------------------------------------------------------------------
class EpochBucket(models.Func):
    """The start of the ``seconds``-long bucket a timestamp falls in, as Unix seconds (an integer)."""

    output_field = models.BigIntegerField()

    def __init__(self, expression, seconds: int, **extra):
        self.seconds = int(seconds)
        super().__init__(expression, **extra)

    def as_sql(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        s = self.seconds
        return f"(CAST(FLOOR(EXTRACT(EPOCH FROM {sql}) / {s}) AS BIGINT) * {s})", params

    def as_sqlite(self, compiler, connection, **extra_context):
        sql, params = compiler.compile(self.source_expressions[0])
        s = self.seconds
        return f"((CAST(strftime('%%s', {sql}) AS INTEGER) / {s}) * {s})", params


_NICE_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def choose_step(span: timedelta, points: int = 240) -> int:
    wanted = span.total_seconds() / points
    for step in _NICE_STEPS:
        if step >= wanted:
            return step
    return 86400 * math.ceil(wanted / 86400)


@dataclass
class Point:
    t: datetime
    util: float | None
    mem_used_mb: float | None = None
    power_w: float | None = None


def series(
    filters: dict, start: datetime, end: datetime, step: int | None = None, where: Q | None = None
) -> tuple[int, list[Point]]:
    """Utilisation over [start, end) for the samples matching ``filters`` (field lookups shared by samples and
    rollups: cluster_id, gpu_uuid, gpu_instance_id, node_name, job_id, team_id; ``where``: a Q over the same, such as
    ``visible_nodes``). Each point is the weighted mean over
    every GPU or MIG instance in scope (a 1g slice weighs 1/7 of a GPU). Short ranges read raw samples; long
    ones 5-minute or hourly rollups, plus raw samples for the stretch not rolled up yet."""
    span = end - start
    step = step or choose_step(span)
    if span <= timedelta(hours=6):
        parts = [(GpuSample.objects, "ts", start, end, False)]
    else:
        period = RollupPeriod.FIVE_MINUTES if span <= timedelta(days=8) else RollupPeriod.HOUR
        mark = RollupWatermark.objects.filter(period=period).values_list("done_until", flat=True).first()
        rolled_until = min(max(mark, start), end) if mark else start
        parts = [
            (GpuRollup.objects.filter(period=period), "start", start, rolled_until, True),
            (GpuSample.objects, "ts", rolled_until, end, False),
        ]
    buckets: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for manager, field, lo, hi, rolled in parts:
        if lo >= hi:
            continue
        qs = manager.filter(**filters, **{f"{field}__gte": lo, f"{field}__lt": hi})
        if where is not None:
            qs = qs.filter(where)
        if rolled:
            weight_n = F("weight") * F("samples")
            util, mem, power = F("util_avg"), F("mem_used_avg_mb"), F("power_avg_w")
            n = F("samples")
        else:
            weight_n = F("weight")
            util, mem, power = F("util_pct"), F("mem_used_mb"), F("power_w")
            n = models.Value(1)
        rows = (
            qs.annotate(bucket=EpochBucket(field, step))
            .values("bucket")
            .annotate(
                wu=Sum(util * weight_n, output_field=models.FloatField()),
                w=Sum(weight_n, output_field=models.FloatField()),
                mem=Sum(mem * n, output_field=models.FloatField()),
                pw=Sum(power * n, output_field=models.FloatField()),
                n=Sum(n, output_field=models.FloatField()),
            )
            .order_by("bucket")
        )
        for row in rows:
            b = buckets[row["bucket"]]
            b["wu"] += row["wu"] or 0.0
            b["w"] += row["w"] or 0.0
            b["mem"] += row["mem"] or 0.0
            b["pw"] += row["pw"] or 0.0
            b["n"] += row["n"] or 0.0
    points = []
    for bucket in sorted(buckets):
        b = buckets[bucket]
        per_tick = b["n"] or 1.0
        points.append(
            Point(
                t=datetime.fromtimestamp(bucket, tz=UTC),
                util=round(b["wu"] / b["w"], 1) if b["w"] else None,
                mem_used_mb=round(b["mem"] / per_tick) if b["n"] else None,
                power_w=round(b["pw"] / per_tick, 1) if b["n"] else None,
            )
        )
    return step, points


def used_gpu_hours_by_day(team_ids, start: datetime, end: datetime) -> dict[tuple[int, str], float]:
    """GPU-hours the teams' jobs actually kept busy per UTC day: Σ utilisation × share of a GPU × time, from the
    5-minute rollups (each covers 5 minutes of its GPU)."""
    rows = (
        GpuRollup.objects.filter(
            period=RollupPeriod.FIVE_MINUTES, team_id__in=team_ids, start__gte=start, start__lt=end
        )
        .annotate(day=EpochBucket("start", 86400))
        .values("team_id", "day")
        .annotate(busy=Sum(F("util_avg") * F("weight"), output_field=models.FloatField()))
        .order_by()
    )
    out: dict[tuple[int, str], float] = {}
    for row in rows:
        day = datetime.fromtimestamp(row["day"], tz=UTC).date().isoformat()
        out[(row["team_id"], day)] = (row["busy"] or 0.0) / 100 * 300 / 3600
    return out


def energy_by_day(team_ids, start: datetime, end: datetime) -> dict[tuple[int, str], float]:
    """Joules the teams' jobs drew per UTC day in [start, end), from the 5-minute rollups (as used_gpu_hours_by_day
    counts GPU-hours: a job's readings not rolled up yet are not in it)."""
    rows = (
        GpuRollup.objects.filter(
            period=RollupPeriod.FIVE_MINUTES, team_id__in=team_ids, start__gte=start, start__lt=end,
            energy_j__isnull=False,
        )
        .annotate(day=EpochBucket("start", 86400))
        .values("team_id", "day")
        .annotate(joules=Sum("energy_j"))
        .order_by()
    )  # fmt: skip
    return {
        (row["team_id"], datetime.fromtimestamp(row["day"], tz=UTC).date().isoformat()): row["joules"] or 0.0
        for row in rows
    }


@dataclass
class JobDay:
    """What telemetry knows of one job on one UTC day: GPU-hours kept busy, GPU-hours idle (5-minute periods in
    which no reading of the GPU reached ``PORTAL_IDLE_THRESHOLD_PCT``, the idle flag's threshold) and joules."""

    job_id: int
    day: str
    used_gpu_hours: float
    idle_gpu_hours: float
    joules: float | None


def job_days(start: datetime, end: datetime, jobs: Q) -> list[JobDay]:
    """JobDay per job and UTC day in [start, end) of the rollups whose job matches ``jobs`` (a Q over ``job_id``
    and ``team_id``, e.g. the jobs of one owner as a subquery), from the 5-minute rollups, in one query."""
    period_hours = PERIOD_SECONDS[RollupPeriod.FIVE_MINUTES] / 3600
    idle = Case(
        When(util_max__lt=settings.PORTAL_IDLE_THRESHOLD_PCT, then=F("weight")),
        default=models.Value(0.0),
        output_field=models.FloatField(),
    )
    rows = (
        GpuRollup.objects.filter(
            period=RollupPeriod.FIVE_MINUTES, job_id__isnull=False, start__gte=start, start__lt=end
        )
        .filter(jobs)
        .annotate(day=EpochBucket("start", 86400))
        .values("job_id", "day")
        .annotate(
            busy=Sum(F("util_avg") * F("weight"), output_field=models.FloatField()),
            idle=Sum(idle),
            joules=Sum("energy_j"),
        )
        .order_by()
    )
    return [
        JobDay(
            job_id=row["job_id"],
            day=datetime.fromtimestamp(row["day"], tz=UTC).date().isoformat(),
            used_gpu_hours=(row["busy"] or 0.0) / 100 * period_hours,
            idle_gpu_hours=(row["idle"] or 0.0) * period_hours,
            joules=row["joules"],
        )
        for row in rows
    ]


def job_energy(job_id: int) -> float | None:
    """Joules one job's GPUs drew over its life: its 5-minute rollups, plus its raw samples past the rollups'
    watermark (a running job's last minutes). None where no reading knew its energy."""
    period = RollupPeriod.FIVE_MINUTES
    mark = RollupWatermark.objects.filter(period=period).values_list("done_until", flat=True).first()
    rolled = GpuRollup.objects.filter(period=period, job_id=job_id, energy_j__isnull=False)
    raw = GpuSample.objects.filter(job_id=job_id, energy_j__isnull=False)
    if mark is not None:
        rolled, raw = rolled.filter(start__lt=mark), raw.filter(ts__gte=mark)
    else:
        rolled = rolled.none()
    a = rolled.aggregate(j=Sum("energy_j"))["j"]
    b = raw.aggregate(j=Sum("energy_j"))["j"]
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


RANGES = {"1h": timedelta(hours=1), "6h": timedelta(hours=6), "24h": timedelta(hours=24), "7d": timedelta(days=7),
          "30d": timedelta(days=30)}  # fmt: skip


def covering_range(start: datetime | None) -> str:
    """The shortest chart range that reaches back to ``start`` (a job's start), at most the longest one."""
    if start is None:
        return "1h"
    age = timezone.now() - start
    return next((key for key, span in RANGES.items() if span >= age), list(RANGES)[-1])


def parse_range(value: str | None, default: str = "6h") -> tuple[str, timedelta]:
    """A chart range from ?range= (one of RANGES); anything else falls back to the default."""
    key = value if value in RANGES else default
    return key, RANGES[key]


def sparklines(
    field: str,
    keys,
    since: timedelta = timedelta(hours=1),
    step: int = 120,
    whole_gpus: bool = True,
    now=None,
    node: tuple[int, str] | None = None,
    cluster_id: int | None = None,
) -> dict:
    """Recent utilisation per key of ``field`` ("node_name" or "gpu_uuid"), as equal-length lists of bucket
    means (None where nothing reported), in one query; only the samples of ``node`` (cluster id, node name) when it
    is given (a GPU's samples are those its own node reported), or of cluster ``cluster_id``."""
    now = now or timezone.now()
    start = _floor(now - since, step)
    qs = GpuSample.objects.filter(**{f"{field}__in": list(keys)}, ts__gte=start, ts__lte=now)
    if node is not None:
        qs = qs.filter(cluster_id=node[0], node_name=node[1])
    elif cluster_id is not None:
        qs = qs.filter(cluster_id=cluster_id)
    if whole_gpus:
        qs = qs.filter(gpu_instance_id__isnull=True)
    rows = qs.annotate(bucket=EpochBucket("ts", step)).values(field, "bucket").annotate(u=Avg("util_pct")).order_by()
    first = int(start.timestamp())
    n = int((now - start).total_seconds() // step) + 1
    out = {key: [None] * n for key in keys}
    for row in rows:
        i = (row["bucket"] - first) // step
        if row[field] in out and 0 <= i < n:
            out[row[field]][i] = row["u"]
    return out


def node_sparklines(
    nodes: list[tuple[int, str]], since: timedelta = timedelta(hours=1), step: int = 120, now=None
) -> dict[tuple[int, str], list]:
    """Like sparklines() per node of a list of (cluster id, node name), whole GPUs only, in one query: a node is
    known by its cluster and name, since names are unique per cluster only."""
    now = now or timezone.now()
    start = _floor(now - since, step)
    qs = GpuSample.objects.filter(ts__gte=start, ts__lte=now, gpu_instance_id__isnull=True).filter(
        nodes_q(nodes) if nodes else Q(pk__in=[])
    )
    rows = (
        qs.annotate(bucket=EpochBucket("ts", step))
        .values("cluster_id", "node_name", "bucket")
        .annotate(u=Avg("util_pct"))
        .order_by()
    )
    first = int(start.timestamp())
    n = int((now - start).total_seconds() // step) + 1
    out: dict[tuple[int, str], list] = {key: [None] * n for key in nodes}
    for row in rows:
        i = (row["bucket"] - first) // step
        key = (row["cluster_id"], row["node_name"])
        if key in out and 0 <= i < n:
            out[key][i] = row["u"]
    return out


def nodes_q(nodes) -> Q:
    """The samples of the given (cluster id, node name) pairs: one ``node_name IN`` per cluster."""
    by_cluster: dict[int, set[str]] = defaultdict(set)
    for cluster_id, name in nodes:
        by_cluster[cluster_id].add(name)
    where = Q(pk__in=[])
    for cluster_id, names in by_cluster.items():
        where |= Q(cluster_id=cluster_id, node_name__in=sorted(names))
    return where


def instance_sparklines(
    gpu_uuids, since: timedelta = timedelta(hours=1), step: int = 120, now=None, node: tuple[int, str] | None = None
) -> dict:
    """Like sparklines() for the MIG instances of the given GPUs, keyed (GPU UUID, GPU instance id); only the
    samples of ``node`` (cluster id, node name) when it is given."""
    now = now or timezone.now()
    start = _floor(now - since, step)
    qs = GpuSample.objects.filter(gpu_uuid__in=list(gpu_uuids), gpu_instance_id__isnull=False, ts__gte=start)
    if node is not None:
        qs = qs.filter(cluster_id=node[0], node_name=node[1])
    rows = (
        qs.annotate(bucket=EpochBucket("ts", step))
        .values("gpu_uuid", "gpu_instance_id", "mig_profile", "bucket")
        .annotate(u=Avg("util_pct"))
        .order_by()
    )
    first = int(start.timestamp())
    n = int((now - start).total_seconds() // step) + 1
    out: dict = {}
    for row in rows:
        key = (row["gpu_uuid"], row["gpu_instance_id"], row["mig_profile"])
        values = out.setdefault(key, [None] * n)
        i = (row["bucket"] - first) // step
        if 0 <= i < n:
            values[i] = row["u"]
    return out


#: The chart range that shows a run (``chart_context``'s ``run``): its own start to its end.
RUN_RANGE = "run"
#: The longest run charted over its own window, and the step it is drawn at: one point per reading of the
#: default 30-second exporter scrape (a node agent reports more often; its readings are averaged in).
RUN_WINDOW_MAX, RUN_STEP = timedelta(hours=1), 30


def chart_context(
    request,
    filters: dict,
    default_range: str = "6h",
    threshold: float | None = None,
    run: tuple[datetime, datetime] | None = None,
    where: Q | None = None,
) -> dict:
    """Template context for templates/telemetry/_utilisation.html: the series for ?range= over ``filters`` (and
    ``where``, as for ``series``).

    ``run``: the (start, end) of a run up to an hour long (a short job): offered as the range ``run`` and shown by
    default, so its few readings fill the chart instead of a sliver at the edge of an hour."""
    now = timezone.now()
    asked = request.GET.get("range")
    ranges = list(RANGES)
    if run is not None and run[1] - run[0] <= RUN_WINDOW_MAX:
        ranges.insert(0, RUN_RANGE)
        if asked == RUN_RANGE or asked not in RANGES:
            margin = timedelta(seconds=RUN_STEP)
            start, end = run[0] - margin, min(run[1] + margin, now)
            step, points = series(filters, start, end, step=RUN_STEP, where=where)
            return _chart(ranges, RUN_RANGE, points, step, start, end, threshold)
    key, span = parse_range(asked, default_range)
    step, points = series(filters, now - span, now, where=where)
    return _chart(ranges, key, points, step, now - span, now, threshold)


def _chart(ranges: list[str], key: str, points, step: int, start, end, threshold) -> dict:
    minutes = step // 60
    if step < 60:
        label = f"{step} seconds"
    else:
        label = f"{minutes} minute{'s' if minutes != 1 else ''}" if minutes < 60 else f"{minutes // 60} h"
    return {
        "util_ranges": ranges,
        "util_range": key,
        "util_points": points,
        "util_step": step,
        "util_start": start,
        "util_end": end,
        "util_step_label": label,
        "util_threshold": threshold,
    }

"""Telemetry at scale: ingest throughput and chart query time over a year of data.

1. Ingest: batches of 2,000 samples (what one agent POST carries) through telemetry.samples.store — attribution
   lookups and bulk insert — timed end to end; prints samples per second.
2. History: a year of 5-minute and hourly rollups plus 7 days of raw samples (every 30 s) for ``--gpus`` GPUs
   on 8-GPU nodes, spread over 20 teams, inserted in bulk; then the chart queries people run are timed
   (median of 5): one GPU over 7 days, one team over 7 days, one node over 24 hours, one team over 30 days,
   the cluster over 6 hours.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench .venv/bin/python bench/telemetry_scale.py
    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/telemetry_scale.py --gpus 16     # SQLite, smaller

The database named in DATABASE_URL is migrated and its telemetry tables emptied: point it at a scratch database.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import Team  # noqa: E402
from telemetry import samples as telemetry_samples  # noqa: E402
from telemetry.models import GpuRollup, GpuSample, RollupWatermark  # noqa: E402


def uuid_of(i: int) -> str:
    return f"GPU-{i:08x}-0000-4000-8000-000000000000"


def ingest(batches: int, gpus: int) -> float:
    now = timezone.now()
    total = 0
    started = time.perf_counter()
    for b in range(batches):
        readings = [
            telemetry_samples.Reading(
                ts=now - timedelta(seconds=10 * (b * 2000 + i) // gpus), node_name=f"node-{(i % gpus) // 8:04d}",
                gpu_uuid=uuid_of(i % gpus), gpu_index=(i % gpus) % 8, util_pct=float(i % 100), mem_used_mb=1000,
                mem_total_mb=81559, power_w=300.0, temp_c=55.0,
            )
            for i in range(2000)
        ]  # fmt: skip
        total += telemetry_samples.store(readings, "agent")
    elapsed = time.perf_counter() - started
    return total / elapsed


def build_history(gpus: int, teams: list[Team], now: datetime) -> dict[str, int]:
    """Bulk-insert a year of rollups and a week of raw samples (server-side generate_series on PostgreSQL)."""
    GpuSample.objects.all().delete()
    GpuRollup.objects.all().delete()
    RollupWatermark.objects.all().delete()
    year_ago = now - timedelta(days=365)
    week_ago = now - timedelta(days=7)
    five = telemetry_samples._floor(now, 300)
    hour = telemetry_samples._floor(now, 3600)
    team_ids = [t.pk for t in teams]
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("CREATE TEMP TABLE bench_gpu AS SELECT g, %s::int[] AS teams FROM generate_series(0, %s) g",
                        [team_ids, gpus - 1])  # fmt: skip
            for period, step, start, end in (("5m", "5 minutes", year_ago, five), ("1h", "1 hour", year_ago, hour)):
                cur.execute(
                    f"""INSERT INTO gpus_gpurollup (period, start, node_name, gpu_uuid, gpu_instance_id, mig_profile,
                           weight, team_id, samples, util_avg, util_max, mem_used_avg_mb, power_avg_w)
                        SELECT %s, t, 'node-' || lpad((g / 8)::text, 4, '0'),
                               'GPU-' || lpad(to_hex(g), 8, '0') || '-0000-4000-8000-000000000000', NULL, '', 1.0,
                               teams[1 + g %% array_length(teams, 1)], 10, (g * 7 + extract(hour from t)) %% 100,
                               100, 1000, 300
                        FROM bench_gpu, generate_series(%s::timestamptz, %s::timestamptz - interval '{step}',
                                                        interval '{step}') t""",
                    [period, start, end],
                )
            cur.execute(
                """INSERT INTO gpus_gpusample (ts, node_name, gpu_uuid, gpu_index, gpu_instance_id, mig_profile, weight,
                       team_id, util_pct, mem_used_mb, mem_total_mb, power_w, temp_c, source)
                   SELECT t, 'node-' || lpad((g / 8)::text, 4, '0'),
                          'GPU-' || lpad(to_hex(g), 8, '0') || '-0000-4000-8000-000000000000', g %% 8, NULL, '', 1.0,
                          teams[1 + g %% array_length(teams, 1)], (g + extract(minute from t)) %% 100, 1000, 81559,
                          300, 55, 'agent'
                   FROM bench_gpu, generate_series(%s::timestamptz, %s::timestamptz, interval '30 seconds') t""",
                [week_ago, now],
            )
            cur.execute("ANALYZE gpus_gpurollup; ANALYZE gpus_gpusample")
    else:
        rows = []
        for g in range(gpus):
            t = year_ago
            while t < hour:
                rows.append(GpuRollup(period="1h", start=t, node_name=f"node-{g // 8:04d}", gpu_uuid=uuid_of(g),
                                      team_id=team_ids[g % len(team_ids)], samples=120, util_avg=50.0))  # fmt: skip
                t += timedelta(hours=1)
            t = year_ago
            while t < five:
                rows.append(GpuRollup(period="5m", start=t, node_name=f"node-{g // 8:04d}", gpu_uuid=uuid_of(g),
                                      team_id=team_ids[g % len(team_ids)], samples=10, util_avg=50.0))  # fmt: skip
                t += timedelta(minutes=5)
                if len(rows) >= 50_000:
                    GpuRollup.objects.bulk_create(rows, batch_size=5000)
                    rows = []
        GpuRollup.objects.bulk_create(rows, batch_size=5000)
        samples = [
            GpuSample(ts=week_ago + timedelta(seconds=30 * i), node_name=f"node-{g // 8:04d}", gpu_uuid=uuid_of(g),
                      gpu_index=g % 8, team_id=team_ids[g % len(team_ids)], util_pct=50.0, source="agent")
            for g in range(gpus) for i in range(7 * 24 * 120)
        ]  # fmt: skip
        GpuSample.objects.bulk_create(samples, batch_size=5000)
    RollupWatermark.objects.create(period="5m", done_until=five)
    RollupWatermark.objects.create(period="1h", done_until=hour)
    return {"rollups": GpuRollup.objects.count(), "samples": GpuSample.objects.count()}


def timed(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=32, help="GPUs with a year of history (default 32)")
    parser.add_argument("--batches", type=int, default=50, help="2,000-sample batches to ingest (default 50)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    teams = []
    for i in range(20):
        slug = f"bench-{i:02d}"
        team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": f"Bench {i}", "namespace": slug})
        teams.append(team)
    db = f"{connection.vendor} {connection.pg_version if connection.vendor == 'postgresql' else ''}".strip()
    print(f"database: {db}; python {sys.version.split()[0]}; cores: {os.cpu_count()}")
    GpuSample.objects.all().delete()
    rate = ingest(args.batches, gpus=args.gpus)
    print(f"ingest: {args.batches * 2000:,} samples in batches of 2,000: {rate:,.0f} samples/s")
    now = datetime.now(UTC)
    started = time.perf_counter()
    sizes = build_history(args.gpus, teams, now)
    print(f"history: {sizes['rollups']:,} rollups (a year) + {sizes['samples']:,} raw samples (7 days) for "
          f"{args.gpus} GPUs, built in {time.perf_counter() - started:.1f} s")  # fmt: skip
    queries = {
        "one GPU, 7 days (5-min rollups)": ({"gpu_uuid": uuid_of(5)}, timedelta(days=7)),
        "one team, 7 days": ({"team_id": teams[3].pk}, timedelta(days=7)),
        "one node, 24 h (5-min rollups)": (
            {"node_name": "node-0000", "gpu_instance_id__isnull": True},
            timedelta(hours=24),
        ),
        "one team, 30 days (hourly rollups)": ({"team_id": teams[3].pk}, timedelta(days=30)),
        "cluster, 6 h (raw)": ({"gpu_instance_id__isnull": True}, timedelta(hours=6)),
    }
    for label, (filters, span) in queries.items():
        points = len(telemetry_samples.series(filters, now - span, now)[1])
        ms = timed(lambda filters=filters, span=span: telemetry_samples.series(filters, now - span, now))
        print(f"chart query, {label}: {ms:,.1f} ms median of 5 ({points} points)")


if __name__ == "__main__":
    main()

"""The portal's event metrics for Prometheus: what happens (a cycle ran, a job was admitted after waiting, a task
failed), counted where it happens.

They live on the plumbing floor (core), the lowest Django one, so every app above (accounts, gpus, telemetry, jobs,
portal) increments the same objects without importing upwards. Level facts read from the database (queue depth,
quota held, node health) are not here: ``portal.metrics`` computes them at scrape time. ``cluster`` counts its own
API retries (``cluster.kubernetes``): it sits below this floor and imports none of it.

Multiprocess-safe: with ``PROMETHEUS_MULTIPROC_DIR`` set (gunicorn, Celery) prometheus_client keeps each value in a
per-process file that ``portal.metrics`` sums at scrape time, so these objects are used exactly like ordinary ones.
Names and labels are documented in docs/operator-guide.md (Metrics); keep both in step.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

#: Wait times from seconds to days: a job may start at once or wait behind a long-running team.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
#: A cycle or reconcile takes milliseconds on a small cluster, seconds on a big one, minutes when the API is slow.
CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

ADMISSION_CYCLE_SECONDS = Histogram(
    "gpuportal_admission_cycle_duration_seconds",
    "Duration of one job cycle (reconcile, admission, launch).",
    buckets=CYCLE_BUCKETS,
)
ADMISSION_DECISIONS = Counter(
    "gpuportal_admission_decisions_total",
    "Decisions of the job cycle, by decision (admitted, waiting, preempted, launched, requeued).",
    ["decision"],
)
ADMISSION_CYCLE_ERRORS = Counter(
    "gpuportal_admission_cycle_errors_total",
    "Steps of a job cycle that failed (the cluster did not answer, a workload could not be created).",
)
JOB_WAIT_SECONDS = Histogram(
    "gpuportal_job_wait_seconds",
    "Time from submission to admission of each admitted job, by team and resource class.",
    ["team", "resource_class"],
    buckets=WAIT_BUCKETS,
)
RECONCILE_SECONDS = Histogram(
    "gpuportal_inventory_reconcile_duration_seconds",
    "Duration of one inventory reconcile (nodes, GPUs, MIG partitions, classes read from the cluster).",
    buckets=CYCLE_BUCKETS,
)
TELEMETRY_SAMPLES = Counter(
    "gpuportal_telemetry_samples_ingested_total",
    "GPU utilisation samples stored, by source (agent, dcgm).",
    ["source"],
)
#: Incremented by core.webhooks._record each time a delivery attempt fails (timeout, refused, non-2xx).
WEBHOOK_DELIVERY_FAILURES = Counter(
    "gpuportal_webhook_delivery_failures_total",
    "Webhook delivery attempts that failed (timeout, connection refused, an answer other than 2xx).",
)
WEBHOOK_DELIVERIES_DROPPED = Counter(
    "gpuportal_webhook_deliveries_dropped_total",
    "Webhook deliveries not queued because their webhook already had PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES waiting.",
)
TASK_FAILURES = Counter(
    "gpuportal_celery_task_failures_total",
    "Celery tasks that raised, by task name.",
    ["task"],
)

for _decision in ("admitted", "waiting", "preempted", "launched", "requeued"):
    ADMISSION_DECISIONS.labels(decision=_decision)  # every series exists from the start, at 0


def observe_cycle(result, seconds: float, waits: list[tuple[str, str, float]]) -> None:
    """Record one job cycle: its duration, its decisions (a ``jobs.cycle.run.CycleResult``) and the wait of every
    job it admitted, as (team slug, resource class key, seconds)."""
    ADMISSION_CYCLE_SECONDS.observe(seconds)
    for decision, count in (
        ("admitted", result.admitted),
        ("waiting", result.waiting),
        ("preempted", result.preempted),
        ("launched", result.launched),
        ("requeued", result.requeued),
    ):
        if count:
            ADMISSION_DECISIONS.labels(decision=decision).inc(count)
    if result.errors:
        ADMISSION_CYCLE_ERRORS.inc(len(result.errors))
    for team, resource_class, wait in waits:
        JOB_WAIT_SECONDS.labels(team=team, resource_class=resource_class).observe(max(wait, 0.0))

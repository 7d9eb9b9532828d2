"""The figures of a replay and of the observed history, in the shape planner.engine returns. Pure Python.

Everything is measured inside the window [start, end): a wait runs from the later of the submission and the
window's start to the first start (or to the window's end for work that never started, which counts as waiting
until then); work admission says could never run (never_ran) is counted apart and left out of the waits.
GPU-hours are the runs' overlap with the window × units × the class's share of a GPU, the allocation is those
GPU-hours over capacity × the window's length. Percentiles interpolate between ranks.

Per cluster of the fleet (``clusters``): a run's GPU-hours count where it ran, a job's wait where it first started,
and the capacity is the cluster's own; work that never started belongs to no cluster and counts in the totals only.
"""

from __future__ import annotations

import math
from collections import defaultdict

from vocab.durations import ROUGH, duration_text
from vocab.waits import WaitReason

from . import model

#: How many never-ran jobs a scenario lists (the count is always whole).
NEVER_RAN_LISTED = 500


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    pos = (len(values) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(values) - 1)
    return float(values[low] + (values[high] - values[low]) * (pos - low))


class Series:
    """Time-averaged levels in buckets of ``width`` seconds over the window: add (from, to, level) intervals."""

    def __init__(self, start: float, end: float, width: float) -> None:
        self.start, self.end, self.width = start, end, width
        self.n = max(1, math.ceil((end - start) / width))
        self.sums = [0.0] * self.n
        self._diff = [0.0] * (self.n + 1)  # whole buckets covered: level × width each, as a difference array

    def add(self, a: float, b: float, level: float) -> None:
        a, b = max(a, self.start), min(b, self.end)
        if b <= a or not level:
            return
        i, j = int((a - self.start) // self.width), int((b - self.start) // self.width)
        i, j = min(i, self.n - 1), min(j, self.n - 1)
        if i == j:
            self.sums[i] += level * (b - a)
            return
        self.sums[i] += level * (self.start + (i + 1) * self.width - a)
        self.sums[j] += level * (b - (self.start + j * self.width))
        if j > i + 1:
            self._diff[i + 1] += level
            self._diff[j] -= level

    def averages(self) -> list[float]:
        out, running = [], 0.0
        for i in range(self.n):
            running += self._diff[i]
            lo = self.start + i * self.width
            span = min(self.width, self.end - lo)
            out.append(round((self.sums[i] + running * self.width) / span, 4) if span > 0 else 0.0)
        return out

    def times(self) -> list[float]:
        return [self.start + i * self.width for i in range(self.n)]


def _overlap(a: float, b: float, start: float, end: float) -> float:
    return max(0.0, min(b, end) - max(a, start))


def _block(waits: list[float], gpu_seconds: float, capacity: float, duration: float, **extra) -> dict:
    out = {
        **extra,
        "wait_p50_s": round(percentile(waits, 0.5), 1),
        "wait_p95_s": round(percentile(waits, 0.95), 1),
        "gpu_hours": round(gpu_seconds / 3600, 3),
        "allocation_mean": round(gpu_seconds / (capacity * duration), 4) if capacity and duration else 0.0,
    }
    return out


def scenario(replay, name: str, origin: str, changes: list[dict], sample_s: float) -> dict:
    """The scenario's figures from a finished ``engine_replay.Replay``."""
    start, end = replay.start, replay.end
    duration = end - start
    classes = replay.classes
    fraction = {cid: cls.gpu_fraction for cid, cls in classes.items()}
    capacity_class = {cid: replay.capacity_units[cid] * fraction[cid] for cid in classes}
    capacity = sum(capacity_class.values())
    allocated = Series(start, end, sample_s)
    waiting = Series(start, end, sample_s)
    per_team: dict[int, dict] = defaultdict(lambda: {"jobs": 0, "ran": 0, "never_ran": 0, "waits": [], "gpu_s": 0.0})
    per_class: dict[int, dict] = defaultdict(lambda: {"jobs": 0, "ran": 0, "never_ran": 0, "waits": [], "gpu_s": 0.0})
    per_cluster: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "waits": [], "gpu_s": 0.0})
    home = replay.cluster.home
    nodes = replay.nodes

    def cluster_of(placed) -> str:
        node = nodes.get(placed[0]) if placed else None
        return (node.cluster or home) if node is not None else home

    never: list[dict] = []
    waits_all: list[float] = []
    gpu_s_all = 0.0
    for rec in replay.records.values():
        view = rec.view
        groups = (per_team[view.team], per_class[view.class_id])
        level = view.total * fraction.get(view.class_id, 1.0)
        since = max(view.submitted, start)
        wait = (rec.first_start if rec.first_start is not None else end) - since
        never_ran = rec.state == "queued" and rec.wait is not None and never_runs(rec.wait)
        if not never_ran:  # work that could never have run is counted apart, not as the longest waits
            waits_all.append(wait)
        gpu_s = 0.0
        for a, b, placed in rec.runs:
            run_s = _overlap(a, b, start, end) * level
            gpu_s += run_s
            per_cluster[cluster_of(placed)]["gpu_s"] += run_s
            allocated.add(a, b, level)
        if rec.runs:
            first = per_cluster[cluster_of(rec.runs[0][2])]
            first["jobs"] += 1
            first["waits"].append(wait)
        for a, b in rec.waits:
            waiting.add(a, b, 1.0)
        gpu_s_all += gpu_s
        for g in groups:
            g["jobs"] += 1
            g["ran"] += rec.first_start is not None
            g["never_ran"] += never_ran
            if not never_ran:
                g["waits"].append(wait)
            g["gpu_s"] += gpu_s
        if never_ran:
            never.append(
                {"job": view.id, "team": view.team, "class": view.class_id, "reason": rec.wait.reason,
                 "message": rec.wait.message}
            )  # fmt: skip
    stranded_class = {cid: s * fraction.get(cid, 1.0) / 3600 for cid, s in replay.stranded_class.items()}
    stranded_team: dict[int, float] = defaultdict(float)
    for (team, cid), s in replay.stranded.items():
        stranded_team[team] += s * fraction.get(cid, 1.0) / 3600
    totals = _block(
        waits_all, gpu_s_all, capacity, duration,
        jobs=len(replay.records), ran=sum(1 for r in replay.records.values() if r.first_start is not None),
        never_ran=len(never),
    )  # fmt: skip
    totals["capacity_gpus"] = round(capacity, 3)
    totals["stranded_gpu_hours"] = round(sum(stranded_class.values()), 3)
    names = replay.cluster.team_names
    teams = []
    for team in sorted(per_team):
        g = per_team[team]
        block = _block(g["waits"], g["gpu_s"], capacity, duration, team=team, name=names.get(team, str(team)),
                       jobs=g["jobs"], ran=g["ran"], never_ran=g["never_ran"])  # fmt: skip
        block["stranded_gpu_hours"] = round(stranded_team.get(team, 0.0), 3)
        teams.append(block)
    class_rows = []
    for cid in sorted(set(per_class) | {c for c, units in replay.capacity_units.items() if units}):
        g = per_class[cid]
        cls = classes.get(cid)
        block = _block(g["waits"], g["gpu_s"], capacity_class.get(cid, 0.0), duration, **{"class": cid},
                       name=cls.name if cls else f"class {cid}", jobs=g["jobs"], ran=g["ran"],
                       never_ran=g["never_ran"])  # fmt: skip
        block["capacity_gpus"] = round(capacity_class.get(cid, 0.0), 3)
        block["stranded_gpu_hours"] = round(stranded_class.get(cid, 0.0), 3)
        class_rows.append(block)
    cluster_rows = []
    for where in sorted(set(per_cluster) | set(replay.capacity_clusters), key=lambda c: (c != home, c)):
        g = per_cluster[where]
        cap = replay.capacity_clusters.get(where, 0.0)
        block = _block(g["waits"], g["gpu_s"], cap, duration, cluster=where, ran=g["jobs"])
        block["capacity_gpus"] = round(cap, 3)
        cluster_rows.append(block)
    n = allocated.n
    return {
        "name": name,
        "origin": origin,
        "changes": changes,
        "totals": totals,
        "teams": teams,
        "classes": class_rows,
        "clusters": cluster_rows,
        "series": {
            "t": allocated.times(),
            "allocated_gpus": allocated.averages(),
            "capacity_gpus": [round(capacity, 3)] * n,
            "waiting_jobs": waiting.averages(),
        },
        "never_ran": sorted(never, key=lambda j: j["job"])[:NEVER_RAN_LISTED],
    }


def never_runs(wait) -> bool:
    """A wait that no amount of waiting ends: no node of the class can ever hold the job, or its team has no quota
    for the class (jobs.scheduling.gates says so with these reasons)."""
    return wait.reason in (WaitReason.NEVER_FITS, WaitReason.CLASS_GONE) or (
        wait.reason == WaitReason.QUOTA and wait.detail.get("limit") == 0
    )


# -- the observed side ---------------------------------------------------------------------------------------------


def observed(history: model.History, fractions: dict[int, float], capacity: float, sample_s: float, ids: set[int]):
    """Waits, GPU-hours, allocation and its series as the history recorded them, for the jobs the replay had."""
    start, end = history.start, history.end
    series = Series(start, end, sample_s)
    waits, gpu_s = [], 0.0
    for job in history.jobs:
        if job.id not in ids:
            continue
        since = max(job.submitted, start)
        level = job.count * job.workers * fractions.get(job.class_id, 1.0)
        if job.started is None:
            waits.append(end - since)
            continue
        waits.append(max(0.0, min(max(job.started, start), end) - since))
        finish = job.started + job.run_s
        gpu_s += _overlap(job.started, finish, start, end) * level
        series.add(job.started, finish, level)
    duration = end - start
    figures = {
        "wait_p50_s": round(percentile(waits, 0.5), 1),
        "wait_p95_s": round(percentile(waits, 0.95), 1),
        "allocation_mean": round(gpu_s / (capacity * duration), 4) if capacity and duration else 0.0,
        "gpu_hours": round(gpu_s / 3600, 3),
    }
    return figures, series.averages(), len(waits)


def fidelity(history: model.History, baseline_replay, baseline: dict, sample_s: float) -> dict:
    """How far the baseline replay is from what was observed: the error bar of every comparison."""
    fractions = {cid: cls.gpu_fraction for cid, cls in baseline_replay.classes.items()}
    capacity = baseline["totals"]["capacity_gpus"]
    seen, seen_series, compared = observed(history, fractions, capacity, sample_s, set(baseline_replay.records))
    totals = baseline["totals"]
    replayed = {k: totals[k] for k in ("wait_p50_s", "wait_p95_s", "allocation_mean", "gpu_hours")}
    series = baseline["series"]["allocated_gpus"]
    mae = sum(abs(a - b) for a, b in zip(series, seen_series, strict=True)) / len(series) if series else 0.0
    p50 = replayed["wait_p50_s"] - seen["wait_p50_s"]
    p95 = replayed["wait_p95_s"] - seen["wait_p95_s"]
    allocation = replayed["allocation_mean"] - seen["allocation_mean"]

    def longer(diff: float) -> str:
        if abs(diff) < 1:
            return "the same as observed"
        return f"{duration_text(abs(diff), ROUGH)} {'longer' if diff > 0 else 'shorter'} than observed"

    sentence = (
        f"The baseline replay's median wait is {longer(p50)} and its 95th-percentile wait {longer(p95)}; its mean "
        f"allocation is {abs(allocation) * 100:.1f} points {'above' if allocation >= 0 else 'below'} observed, and "
        f"its allocation differs from the observed by {mae:.1f} GPUs on average per "
        f"{duration_text(abs(sample_s), ROUGH)} over {compared} jobs. Trust differences between scenarios larger "
        "than these."
    )
    return {
        "observed": seen,
        "baseline": replayed,
        "wait_p50_diff_s": round(p50, 1),
        "wait_p95_diff_s": round(p95, 1),
        "allocation_mean_diff": round(allocation, 4),
        "allocation_series_mae_gpus": round(mae, 3),
        "jobs_compared": compared,
        "sentence": sentence,
    }

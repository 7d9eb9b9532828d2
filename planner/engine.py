"""The capacity planner's replay engine (issue 15): the window's job history replayed on the cluster as it is
(the baseline) and on each proposed change, through the job cycle's own admission and placement
(jobs.scheduling.decide), side by side, with a fidelity check of the baseline against what was observed.
Pure Python, no Django: planner.tasks runs it in the background with progress and cancelling.

How one replay goes is planner.engine_replay's docstring; what it measures, planner.engine_metrics'; how
MIG layouts are proposed from demand, planner.layouts'. docs/design.md ("The planner's replay") says what the
replay does not model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import engine_metrics, layouts, model
from . import proposals as rules
from .engine_replay import Replay, Settings
from .proposals import Invalid

__all__ = ["Cancelled", "Invalid", "Options", "run_plan", "scope"]


#: Suggestions searched beyond those asked for, in case some leave work unable to run (run_plan).
SPARE_SUGGESTIONS = 2


@dataclass
class Options:
    preemption: bool = True  # reclaiming borrowed capacity as the cycle does
    borrowing: bool = True  # preemptible jobs above guarantee up to the limit
    cycle_s: float = 10.0  # the cycle's interval (settings.PORTAL_JOB_CYCLE_INTERVAL)
    sample_s: float = 3600.0  # width of a bucket of the series
    suggest: int = 0  # how many MIG layouts from demand to search for, replay and add
    grace_s: float = 60.0  # a preempted job's grace before it stops (settings.PORTAL_PREEMPTION_GRACE)
    half_life_s: float = 3600.0  # the fair share's half-life (settings.PORTAL_FAIR_SHARE_HALF_LIFE)


class Cancelled(Exception):
    """The caller's ``cancelled()`` said stop."""


#: At most this often the progress callback is called (seconds).
PROGRESS_EVERY_S = 0.5


class _Progress:
    """Throttled progress and cancel checks, called from the replay's event loop."""

    def __init__(self, progress, cancelled, scenarios: int) -> None:
        self.progress, self.cancelled = progress, cancelled
        self.scenarios = max(1, scenarios)
        self.last = 0.0
        self.calls = 0
        self.index, self.name, self.start, self.end = 0, "", 0.0, 1.0

    def begin(self, index: int, name: str, start: float, end: float) -> None:
        self.index, self.name, self.start, self.end = index, name, start, end
        self.check(start, force=True)

    def check(self, t: float, force: bool = False) -> None:
        self.calls += 1
        if not force and self.calls & 1023:
            return
        if self.cancelled is not None and self.cancelled():
            raise Cancelled()
        now = time.monotonic()
        if self.progress is not None and (force or now - self.last >= PROGRESS_EVERY_S):
            self.last = now
            part = (t - self.start) / (self.end - self.start) if self.end > self.start else 1.0
            fraction = (self.index + min(1.0, max(0.0, part))) / self.scenarios
            day, days = (t - self.start) / 86400, (self.end - self.start) / 86400
            self.progress(
                round(fraction, 4), f"Replaying {self.name} ({self.index + 1} of {self.scenarios}): day {day:.1f} of "
                f"{days:.1f}"
            )  # fmt: skip


def scope(history: model.History, cluster: model.Cluster, name: str) -> tuple[model.History, model.Cluster]:
    """The history and the fleet narrowed to one cluster: its nodes, and the work that ran on it (or, never having
    run, belongs to it: PastJob.cluster). Quotas stay fleet-wide, as admission counts them: a team's quota covers
    its work on every cluster, so a replay of one cluster's work alone can hold it less than the fleet did."""
    home = cluster.home
    nodes = {key: n for key, n in cluster.nodes.items() if (n.cluster or home) == name}
    narrowed = model.Cluster(
        nodes=nodes,
        shapes={key: s for key, s in cluster.shapes.items() if key in nodes},
        classes=cluster.classes,
        quotas=cluster.quotas,
        team_names=cluster.team_names,
        patience=cluster.patience,
        home=home,
        clusters=(name,),
    )
    jobs = [job for job in history.jobs if (job.cluster or home) == name]
    kept = {job.group for job in jobs if job.group is not None}
    caps = {group: cap for group, cap in history.group_caps.items() if group in kept}
    return model.History(history.start, history.end, jobs, group_caps=caps), narrowed


def replay(history: model.History, cluster: model.Cluster, options: Options, tick=None) -> Replay:
    """One replay of the history on the cluster, run to the window's end."""
    settings = Settings(
        cycle_s=options.cycle_s,
        grace_s=options.grace_s,
        half_life_s=options.half_life_s,
        preemption=options.preemption,
        borrowing=options.borrowing,
    )
    run = Replay(cluster, history, settings, tick=tick)
    run.run()
    return run


def run_plan(
    history: model.History,
    cluster: model.Cluster,
    proposals: list[model.Proposal],
    options: Options | None = None,
    *,
    progress: Callable[[float, str], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    where: str = "",
) -> dict:
    """Replay the history on the cluster (baseline), on each proposal, and on ``options.suggest`` MIG layouts
    proposed from the window's demand; return the figures (the contract in docs/design.md). ``where``: replay only
    that cluster of the fleet (``scope``); "" for the whole fleet. Raises Invalid with every problem of every
    proposal before replaying anything, and Cancelled when ``cancelled()`` says so."""
    started = time.perf_counter()
    options = options or Options()
    if where:
        history, cluster = scope(history, cluster, where)
    problems = []
    for i, proposal in enumerate(proposals):
        label = proposal.name or f"Proposal {i + 1}"
        problems += [f"{label}: {p}" for p in rules.validate(cluster, proposal)]
    if problems:
        raise Invalid(problems)
    home = cluster.home
    scenarios: list[tuple[str, str, list, model.Cluster, str]] = [("baseline", "baseline", [], cluster, where)]
    for proposal in proposals:
        scenarios.append(
            (proposal.name, "proposal", proposal.changes, rules.apply(cluster, proposal), proposal.cluster or home)
        )
    if options.suggest > 0:
        if progress is not None:
            progress(0.0, "Searching MIG layouts that fit the window's demand")
        # A few more than asked for: a suggestion that leaves more work unable to run than the cluster as it is
        # (a profile the window asked for carved away) is replayed but not offered.
        for proposal in layouts.suggest(history, cluster, options.suggest + SPARE_SUGGESTIONS):
            scenarios.append(
                (proposal.name, "suggested", proposal.changes, rules.apply(cluster, proposal), proposal.cluster or home)
            )
    meter = _Progress(progress, cancelled, len(scenarios))
    results, baseline_run, offered, not_offered = [], None, 0, []
    for index, (name, origin, changes, scenario_cluster, changed) in enumerate(scenarios):
        if origin == "suggested" and offered >= options.suggest:
            break
        meter.begin(index, name, history.start, history.end)
        run = replay(history, scenario_cluster, options, tick=meter.check)
        meter.check(history.end, force=True)
        if baseline_run is None:
            baseline_run = run
        changes_json = [rules.change_to_json(c) for c in changes]
        figures = engine_metrics.scenario(run, name, origin, changes_json, options.sample_s)
        figures["cluster"] = changed  # the cluster the changes are made to ("" for the baseline of the fleet)
        if origin == "suggested":
            if figures["totals"]["never_ran"] > results[0]["totals"]["never_ran"]:
                not_offered.append({"name": name.split(": ", 1)[1], "never_ran": figures["totals"]["never_ran"]})
                continue
            offered += 1
            figures["name"] = f"Suggested {offered}: {name.split(': ', 1)[1]}"
        results.append(figures)
    fidelity = engine_metrics.fidelity(history, baseline_run, results[0], options.sample_s)
    if progress is not None:
        progress(1.0, "Done")
    return {
        "window": {"start": history.start, "end": history.end, "jobs": len(baseline_run.records)},
        # What was replayed: one cluster's name, or "" for the whole fleet; and the clusters it held.
        "cluster": where,
        "clusters": list(cluster.clusters) or sorted({n.cluster or cluster.home for n in cluster.nodes.values()}),
        "scenarios": results,
        "fidelity": fidelity,
        # MIG layouts from demand: how many were asked for, offered, and searched but left out because they leave
        # more work unable to run than the cluster as it is.
        "suggestions": {"asked": options.suggest, "offered": offered, "not_offered": not_offered},
        "seconds": round(time.perf_counter() - started, 3),
    }

"""``gpuportal plan …``: start a capacity-planner run from proposal files, follow it, show its results side by
side, list runs, cancel one, and export its results as CSV."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .cli_common import EXIT_CANCELLED, EXIT_FAILED, client_from, emit, fail, handled, table
from .errors import SpecError
from .spec import load_spec


def _proposals(paths: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each file holds one proposal ({name, cluster, changes}) or several ({proposals: [...]})."""
    out: list[dict[str, Any]] = []
    for path in paths:
        data = load_spec(path)
        if "proposals" in data:
            if not isinstance(data["proposals"], list) or set(data) != {"proposals"}:
                raise SpecError(path, ['"proposals" must be the file\'s only field, a list of {name, changes}'])
            out.extend(data["proposals"])
        else:
            out.append(data)
    return out


def _hours(seconds: Any) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    return f"{seconds:.0f}s" if seconds < 90 else f"{seconds / 60:.0f}m" if seconds < 5400 else f"{seconds / 3600:.1f}h"


def _summary(run: Mapping[str, Any]) -> str:
    line = f"Plan run #{run.get('id')}: {run.get('state')}"
    if run.get("state") in ("queued", "running"):
        line += f", {round(100 * float(run.get('progress') or 0))}% ({run.get('message') or '…'})"
    if run.get("error"):
        line += f": {run['error']}"
    return line


def _results(run: Mapping[str, Any]) -> str:
    results = run.get("results") or {}
    lines = []
    fidelity = results.get("fidelity") or {}
    if fidelity.get("sentence"):
        lines += [f"Fidelity: {fidelity['sentence']}", ""]
    rows = []
    for s in results.get("scenarios", []):
        t = s.get("totals", {})
        rows.append(
            [
                s.get("name", ""),
                s.get("origin", ""),
                _hours(t.get("wait_p50_s")),
                _hours(t.get("wait_p95_s")),
                f"{t.get('gpu_hours', 0):.1f}",
                f"{100 * t.get('allocation_mean', 0):.0f}%",
                f"{t.get('stranded_gpu_hours', 0):.1f}",
                str(t.get("never_ran", 0)),
            ]
        )
    if rows:
        head = ["SCENARIO", "ORIGIN", "WAIT P50", "WAIT P95", "GPU-H", "ALLOC", "STRANDED GPU-H", "NEVER RAN"]
        lines.append(table(rows, head))
    per_cluster = [
        [
            s.get("name", ""),
            c.get("cluster", ""),
            f"{c.get('capacity_gpus', 0):.1f}",
            str(c.get("ran", 0)),
            _hours(c.get("wait_p50_s")),
            f"{c.get('gpu_hours', 0):.1f}",
            f"{100 * c.get('allocation_mean', 0):.0f}%",
        ]
        for s in results.get("scenarios", [])
        for c in s.get("clusters", [])
    ]
    if len({row[1] for row in per_cluster}) > 1:  # a fleet: each cluster's share of each scenario
        head = ["SCENARIO", "CLUSTER", "GPUS", "STARTED", "WAIT P50", "GPU-H", "ALLOC"]
        lines += ["", table(per_cluster, head)]
    return "\n".join(lines)


def _scope(run: Mapping[str, Any]) -> str:
    return f"cluster {run['cluster']}" if run.get("cluster") else "the whole fleet"


@click.group()
def plan() -> None:
    """Capacity planner: replay the fleet's history, or one cluster's, against proposed changes (admins; leads
    read)."""


@plan.command("create")
@click.option("--days", type=click.IntRange(1, 90), help="The window: the last N days.")
@click.option("--start", help="Window start (a date or ISO date-time, UTC), instead of --days.")
@click.option("--end", help="Window end (default now).")
@click.option(
    "--cluster",
    help="Replay this cluster of the fleet only (default: the whole fleet); proposals without a cluster are for it.",
)
@click.option(
    "--proposal",
    "proposal_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A JSON or YAML file with a proposal {name, cluster, changes} or {proposals: [...]}; repeatable.",
)
@click.option("--suggest", type=click.IntRange(0, 5), default=0, help="MIG layouts to propose from demand.")
@click.option("--no-preemption", is_flag=True, help="Replay without reclaiming borrowed capacity.")
@click.option("--no-borrowing", is_flag=True, help="Replay without borrowing above guarantees.")
@click.option("--wait", is_flag=True, help="Wait for the run to end and show its results.")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds.")
@click.pass_context
@handled
def plan_create(
    ctx: click.Context,
    days: int | None,
    start: str | None,
    end: str | None,
    cluster: str | None,
    proposal_files: tuple[str, ...],
    suggest: int,
    no_preemption: bool,
    no_borrowing: bool,
    wait: bool,
    timeout: float | None,
) -> None:
    """Start a plan run; the portal checks everything and names each problem."""
    request: dict[str, Any] = {
        "proposals": _proposals(proposal_files),
        "options": {"preemption": not no_preemption, "borrowing": not no_borrowing, "suggest": suggest},
    }
    for key, value in (("days", days), ("start", start), ("end", end), ("cluster", cluster)):
        if value is not None:
            request[key] = value
    client = client_from(ctx)
    run = client.create_plan(request)
    click.echo(_summary(run))
    if not wait:
        return
    run = client.wait_plan(run["id"], timeout)
    click.echo(_summary(run))
    if run["state"] == "succeeded":
        click.echo(_results(run))
    elif run["state"] == "cancelled":
        fail("The run was cancelled.", EXIT_CANCELLED)
    else:
        fail("The run failed.", EXIT_FAILED)


@plan.command("show")
@click.argument("run_id", type=int)
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def plan_show(ctx: click.Context, run_id: int, output: str) -> None:
    """A run's state, and its results side by side once it has succeeded."""
    run = client_from(ctx).get_plan(run_id)
    if output == "json":
        emit(run)
        return
    click.echo(_summary(run))
    click.echo(f"Window: {run.get('window_start')} to {run.get('window_end')}, over {_scope(run)}")
    if run.get("results"):
        click.echo(_results(run))


@plan.command("list")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def plan_list(ctx: click.Context, output: str) -> None:
    """Plan runs, newest first."""
    runs = client_from(ctx).list_plans(limit=None)
    if output == "json":
        emit(runs)
        return
    rows = [
        [
            str(r["id"]),
            r["state"],
            f"{round(100 * float(r.get('progress') or 0))}%",
            str(r.get("window_start", ""))[:10],
            str(r.get("window_end", ""))[:10],
            r.get("cluster") or "(fleet)",
            ", ".join(p.get("name", "") for p in r.get("proposals", [])) or "-",
            r.get("created_by") or "-",
        ]
        for r in runs
    ]
    head = ["ID", "STATE", "PROGRESS", "FROM", "TO", "CLUSTER", "PROPOSALS", "BY"]
    click.echo(table(rows, head) if rows else "No plan runs.")


@plan.command("cancel")
@click.argument("run_id", type=int)
@click.pass_context
@handled
def plan_cancel(ctx: click.Context, run_id: int) -> None:
    """Stop a queued or running run (admins)."""
    click.echo(_summary(client_from(ctx).cancel_plan(run_id)))


@plan.command("csv")
@click.argument("run_id", type=int)
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True), help="Write here, not stdout.")
@click.pass_context
@handled
def plan_csv(ctx: click.Context, run_id: int, output_file: str | None) -> None:
    """A succeeded run's results as CSV (scenario × total/team/class/cluster rows)."""
    text = client_from(ctx).plan_csv(run_id)
    if output_file:
        with open(output_file, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        click.echo(f"Wrote {output_file}.")
    else:
        click.echo(text, nl=False)

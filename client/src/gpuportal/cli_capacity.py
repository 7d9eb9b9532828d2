"""``gpuportal classes``, ``free``, ``nodes``, ``gpus``, ``quota``, ``usage`` and ``members``: what can be asked for
(each class's key, as a spec's ``resource_class`` names it), what is free now, per class, per cluster and per node,
the GPUs themselves, the team's quota, the GPU-hours used (per person, class and month, or per team and member per
day) with the energy drawn, and the fair share among a team's members."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

import click

from .cli_common import client_from, cluster_column, emit, fail, handled, table

#: The usage command's window when neither --days nor --start is given.
DEFAULT_USAGE_DAYS = 30


@click.command()
@click.option("--available", is_flag=True, help="Only classes with units free now.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def classes(ctx: click.Context, available: bool, output: str) -> None:
    """Resource classes you may request: the KEY a spec's resource_class takes, and free of total units."""
    found = client_from(ctx).list_classes(available=True if available else None)
    if output == "json":
        emit(found)
        return
    rows = [
        [c["key"], c.get("display_name") or c.get("product", ""), c.get("kind", ""),
         f"{c.get('free', 0)}/{c.get('total', 0)}", str(c.get("node_count", 0))]
        for c in found
    ]  # fmt: skip
    click.echo(table(rows, ["KEY", "PRODUCT", "KIND", "FREE/TOTAL", "NODES"]) if rows else "No resource classes.")


def _node_state(node: Mapping[str, Any]) -> str:
    if node.get("unschedulable"):
        return "cordoned"
    if not node.get("ready"):
        return "not ready"
    health = str(node.get("health") or "")
    return "ready" if health in ("", "healthy") else f"ready, {health}"


def _node_free(node: Mapping[str, Any]) -> str:
    """Free of allocatable per GPU resource the node advertises, e.g. "5/8 nvidia.com/gpu"."""
    in_use = node.get("gpu_in_use") or {}
    parts = []
    for name, quantity in sorted((node.get("allocatable") or {}).items()):
        if not name.startswith("nvidia.com/") or not str(quantity).isdigit():
            continue
        allocatable = int(quantity)
        parts.append(f"{max(0, allocatable - int(in_use.get(name, 0)))}/{allocatable} {name}")
    return ", ".join(parts) or "-"


def _with_clusters(head: list[str], rows: list[list[str]], found: list) -> list[str]:
    """A CLUSTER column after the first when the rows are in several clusters; the head to print."""
    if not cluster_column(found):
        return head
    for row, item in zip(rows, found, strict=True):
        row.insert(1, item.get("cluster") or "-")
    return [head[0], "CLUSTER", *head[1:]]


@click.command()
@click.option("--cluster", help="Only this cluster's nodes (its name; `gpuportal clusters` lists them).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def nodes(ctx: click.Context, cluster: str | None, output: str) -> None:
    """Nodes you may use (admins: all) and the GPU units free on each, per resource; a CLUSTER column shows where
    they are in several clusters."""
    found = client_from(ctx).list_nodes(cluster=cluster)
    if output == "json":
        emit(found)
        return
    rows = [[n["name"], n.get("product") or "-", _node_state(n), _node_free(n), n.get("team") or "shared"]
            for n in found]  # fmt: skip
    head = _with_clusters(["NODE", "PRODUCT", "STATE", "FREE", "TEAM"], rows, found)
    click.echo(table(rows, head) if rows else "No nodes.")


def _gpu_use(gpu: Mapping[str, Any]) -> str:
    """How the GPU is offered: whole, shared by N (time-slicing or MPS), or its MIG partitions' profiles."""
    if gpu.get("mig_enabled"):
        profiles = [p.get("profile", "?") for p in gpu.get("mig_partitions") or []]
        return "MIG " + (", ".join(profiles) if profiles else "(no partitions)")
    if gpu.get("sharing") and gpu["sharing"] != "exclusive":
        return f"{gpu['sharing']} × {gpu.get('replicas', 1)}"
    return "whole"


@click.command()
@click.option("--node", help="Only this node's GPUs.")
@click.option("--cluster", help="Only this cluster's GPUs (its name).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def gpus(ctx: click.Context, node: str | None, cluster: str | None, output: str) -> None:
    """The GPUs of the nodes you may use: product, memory and how each is offered (whole, shared, MIG)."""
    found = client_from(ctx).list_gpus(node=node, cluster=cluster)
    if output == "json":
        emit(found)
        return
    rows = [[g["node"], str(g["index"]), g.get("product") or "-",
             f"{g['memory_mb'] // 1024} GiB" if g.get("memory_mb") else "-", _gpu_use(g)]
            for g in found]  # fmt: skip
    head = _with_clusters(["NODE", "GPU", "PRODUCT", "MEMORY", "OFFERED AS"], rows, found)
    click.echo(table(rows, head) if rows else "No GPUs.")


@click.command()
@click.option("--team", help="A team's slug (default: every team of yours; admins: every team).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def quota(ctx: click.Context, team: str | None, output: str) -> None:
    """Your teams' quotas: units guaranteed, the limit (over the whole fleet) and units in use now, per class (by
    key), and the per-cluster caps ("cloud=4": at most 4 of those units on cluster cloud)."""
    found = client_from(ctx).list_quotas(team=team)
    if output == "json":
        emit(found)
        return
    rows = [
        [q["team"], q.get("resource_class_key") or q.get("resource_class_name", ""), str(q["guaranteed"]),
         str(q["limit"]), str(q.get("used", 0)), str(q.get("monthly_gpu_hours") or "-"), _caps(q)]
        for q in found
    ]  # fmt: skip
    head = ["TEAM", "CLASS", "GUARANTEED", "LIMIT", "IN USE", "MONTHLY GPU-HOURS", "CLUSTER CAPS"]
    click.echo(table(rows, head) if rows else "No quotas: your teams' jobs cannot be admitted; ask an admin for one.")


def _caps(quota: Mapping[str, Any]) -> str:
    """A quota's per-cluster caps as "cloud=4, onprem=8" ("-" for none)."""
    caps = quota.get("cluster_caps") or {}
    return ", ".join(f"{cluster}={units}" for cluster, units in sorted(caps.items())) or "-"


def _window(days: int | None, start: str | None, end: str | None) -> tuple[str, str]:
    """The usage window as dates: --start (and --end, default today), or the last --days days up to today (UTC)."""
    if days is not None and start is not None:
        raise click.UsageError("Give --days or --start (with --end), not both.")
    today = datetime.now(UTC).date()
    if start is not None:
        return start, end or today.isoformat()
    first = today - timedelta(days=(days or DEFAULT_USAGE_DAYS) - 1)
    return first.isoformat(), (end or today.isoformat())


def _hours(row: Mapping[str, Any]) -> list[str]:
    efficiency = row.get("efficiency_percent")
    return [
        f"{float(row.get('allocated_gpu_hours') or 0):.1f}",
        f"{float(row.get('used_gpu_hours') or 0):.1f}",
        "-" if efficiency is None else f"{float(efficiency):.0f}%",
    ]


def _energy(row: Mapping[str, Any], carbon: bool) -> list[str]:
    kwh, per_hour = row.get("energy_kwh"), row.get("joules_per_gpu_hour")
    cells = ["-" if kwh is None else f"{float(kwh):.2f}", "-" if per_hour is None else f"{float(per_hour):.0f}"]
    if carbon:
        co2 = row.get("co2e_kg")
        cells.append("-" if co2 is None else f"{float(co2):.2f}")
    return cells


def _person_hours(row: Mapping[str, Any]) -> list[str]:
    return [
        f"{float(row.get('gpu_hours') or 0):.1f}", str(row.get("jobs", 0)),
        f"{float(row.get('used_gpu_hours') or 0):.1f}", f"{float(row.get('idle_gpu_hours') or 0):.1f}",
        f"{float(row.get('preempted_gpu_hours') or 0):.1f}",
    ]  # fmt: skip


def _people_report(answer: Mapping[str, Any]) -> str:
    """The per-person report as tables: per month, team, person and class, then per person where it has several."""
    carbon = answer.get("carbon_g_per_kwh") is not None
    energy_head = ["KWH", "J/GPU-H"] + (["KG CO2E"] if carbon else [])
    months = answer["months"]
    span = months[0] if len(months) == 1 else f"{months[0]} to {months[-1]}"
    scope = answer["scope"]
    whose = "your jobs" if scope == "me" else "every team" if scope == "all" else f"team {scope}"
    lines = [f"Usage {span} (UTC), {whose}:", ""]
    head = ["MONTH", "TEAM", "USER", "CLASS", "GPU-HOURS", "JOBS", "BUSY", "IDLE", "PREEMPTED", *energy_head]
    rows = [[r["month"], r["team"], r["user"], r["class"], *_person_hours(r), *_energy(r, carbon)]
            for r in answer.get("rows", [])]  # fmt: skip
    lines.append(table(rows, head) if rows else "No GPU time in these months.")
    people = answer.get("people", [])
    if len(people) > 1:
        per = [[p["team"], p["user"], *_person_hours(p), *_energy(p, carbon)] for p in people]
        head = ["TEAM", "USER", "GPU-HOURS", "JOBS", "BUSY", "IDLE", "PREEMPTED", *energy_head]
        lines += ["", table(per, head)]
    total = answer.get("total") or {}
    if rows:
        kwh = total.get("energy_kwh")
        lines += ["", f"In all: {float(total.get('gpu_hours') or 0):.1f} GPU-hours, {total.get('jobs', 0)} jobs"
                  + ("" if kwh is None else f", {float(kwh):.2f} kWh")
                  + (f", {float(total['co2e_kg']):.2f} kg CO2e" if carbon and total.get("co2e_kg") is not None else "")
                  + "."]  # fmt: skip
    return "\n".join(lines)


@click.command()
@click.option("--team", help="A team's slug: its members' usage (leads and admins; others: their own there). "
              "With --days or --start: the team's daily showback ('all': every team, admins).")  # fmt: skip
@click.option("--all", "every_team", is_flag=True, help="Every team's usage (admins).")
@click.option("--month", type=click.DateTime(["%Y-%m"]), help="The last month shown, YYYY-MM (UTC; default this one).")
@click.option("--months", type=click.IntRange(1, 12), help="How many months back from --month (default 1).")
@click.option("--days", type=click.IntRange(1, 366), help="The daily showback: the last N days, today included.")
@click.option("--start", type=click.DateTime(["%Y-%m-%d"]), help="The daily showback from this day (UTC).")
@click.option("--end", type=click.DateTime(["%Y-%m-%d"]), help="Its last day (UTC), inclusive (default today).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def usage(ctx: click.Context, team: str | None, every_team: bool, month: datetime | None, months: int | None,
          days: int | None, start: datetime | None, end: datetime | None, output: str) -> None:  # fmt: skip
    """Your GPU-hours by resource class and month, like sreport: jobs, GPU-hours busy, idle and lost to preemption,
    and the energy drawn (kWh, J per GPU-hour). --team: each member of a team you lead; --all: every team (admins).
    --days or --start: the daily showback (allocated and used GPU-hours per team and member) instead."""
    client = client_from(ctx)
    if every_team and team is not None:
        raise click.UsageError("Give --team or --all, not both.")
    daily = days is not None or start is not None or end is not None
    if daily and (month is not None or months is not None):
        raise click.UsageError("--month and --months are for the monthly report; --days, --start and --end for the "
                               "daily showback. Give one or the other.")  # fmt: skip
    if every_team:
        team = "all"
    if not daily:
        answer_people = client.people_usage(team, month=None if month is None else month.strftime("%Y-%m"),
                                            months=months)  # fmt: skip
        if output == "json":
            emit(answer_people)
        else:
            click.echo(_people_report(answer_people))
        return
    first, last = _window(days, _day(start), _day(end))
    if team is None:
        mine = [t["team"] for t in client.me().get("teams", [])]
        if len(mine) != 1:
            fail(f"Say which team: --team {' or --team '.join(mine) if mine else 'SLUG'} (admins: --all).")
        team = mine[0]
    answer = client.usage(team, first, last)
    if output == "json":
        emit(answer)
        return
    lines = [f"GPU-hours from {answer['start']} to {answer['end']} (UTC), " + (
        "every team:" if answer["team"] == "all" else f"team {answer['team']}:"
    )]  # fmt: skip
    teams = [[t["team"], *_hours(t), f"{float(t.get('preemption_lost_gpu_hours') or 0):.1f}",
              *_energy(t, False)[:1]] for t in answer.get("teams", [])]  # fmt: skip
    lines += ["", table(teams, ["TEAM", "ALLOCATED", "USED", "EFFICIENCY", "LOST TO PREEMPTION", "KWH"])]
    members = [[m["team"], m["user"], *_hours(m), *_energy(m, False)[:1]] for m in answer.get("members", [])]
    head = ["TEAM", "MEMBER", "ALLOCATED", "USED", "EFFICIENCY", "KWH"]
    lines += ["", table(members, head) if members else "No members."]
    click.echo("\n".join(lines))


@click.command()
@click.option("--class", "class_key", help="Only this class (its key).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def free(ctx: click.Context, class_key: str | None, output: str) -> None:
    """GPU units free now, per resource class and cluster (classes with none free are left out)."""
    found = client_from(ctx).list_classes()
    rows = [
        {"class": c["key"], "product": c.get("product_label") or c.get("product") or "", "cluster": share["cluster"],
         "free": int(share.get("free") or 0), "total": int(share.get("total") or 0)}
        for c in found if class_key in (None, c["key"])
        for share in c.get("clusters") or []
        if share.get("free")
    ]  # fmt: skip
    if output == "json":
        emit(rows)
        return
    if not rows:
        which = f" of {class_key}" if class_key else ""
        click.echo(f"No free units{which}. `gpuportal classes` lists every class.")
        return
    cells = [[r["class"], r["product"], r["cluster"], str(r["free"]), str(r["total"])] for r in rows]
    click.echo(table(cells, ["CLASS", "PRODUCT", "CLUSTER", "FREE", "TOTAL"]))


def _day(value: datetime | date | None) -> str | None:
    return None if value is None else value.date().isoformat() if isinstance(value, datetime) else value.isoformat()


def _weight(text: str) -> tuple[str, float]:
    user, sep, value = text.partition("=")
    try:
        if not sep or not user:
            raise ValueError
        return user, float(value)
    except ValueError:
        raise click.BadParameter(f"{text!r}: give USER=WEIGHT, e.g. alice=2 (1 is an equal share).") from None


@click.command()
@click.option("--team", help="A team's slug. Default: your team, if one.")
@click.option("--weight", "weights", multiple=True, metavar="USER=WEIGHT",
              help="Set a member's fair-share weight (the team's leads): 1 is an equal share, 2 twice one. Repeatable; "
              "all are saved or none.")  # fmt: skip
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def members(ctx: click.Context, team: str | None, weights: tuple[str, ...], output: str) -> None:
    """Fair share among a team's members: within the team's quota, the member who used least of its GPUs lately for
    their weight goes first. Shows each member's weight, recent GPUs and use against their share (1.0× is exactly
    it); --weight sets weights."""
    client = client_from(ctx)
    if team is None:
        mine = [t["team"] for t in client.me().get("teams", [])]
        if len(mine) != 1:
            fail(f"Say which team: --team {' or --team '.join(mine) if mine else 'SLUG'}.")
        team = mine[0]
    parsed = dict(_weight(w) for w in weights)
    answer = client.set_member_weights(team, parsed) if parsed else client.member_shares(team)
    if output == "json":
        emit(answer)
        return
    half_life = float(answer.get("half_life_seconds") or 0) / 3600
    state = "on" if answer.get("member_share") else "off (the team's jobs go oldest first)"
    rows = [
        [m["user"], m.get("role", ""), f"{float(m['weight']):g}", f"{float(m['recent_gpus']):.2f}",
         f"{100 * float(m['use_share']):.0f}%", f"{float(m['ratio']):.1f}×"]
        for m in answer.get("members", [])
    ]  # fmt: skip
    lines = [f"Fair share among the members of team {answer['team']}: {state}; use counts half after {half_life:g} h."]
    head = ["MEMBER", "ROLE", "WEIGHT", "RECENT GPUS", "SHARE OF USE", "USE ÷ SHARE"]
    lines += ["", table(rows, head) if rows else "No members."]
    click.echo("\n".join(lines))


@click.command("min-runtime")
@click.option("--team", help="A team's slug. Default: your team, if one.")
@click.option("--set", "seconds", type=click.IntRange(0), help="Set it, in seconds (the team's leads; 0: none).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def min_runtime(ctx: click.Context, team: str | None, seconds: int | None, output: str) -> None:
    """A team's minimum runtime before preemption: none of its jobs is stopped to return borrowed GPUs before it
    ran this long."""
    client = client_from(ctx)
    if team is None:
        mine = [t["team"] for t in client.me().get("teams", [])]
        if len(mine) != 1:
            fail(f"Say which team: --team {' or --team '.join(mine) if mine else 'SLUG'}.")
        team = mine[0]
    answer = client.set_min_runtime(team, seconds) if seconds is not None else client.min_runtime(team)
    if output == "json":
        emit(answer)
        return
    value = int(answer["min_runtime_seconds"])
    words = f"{value} s ({value / 60:g} min)" if value else "none (any borrowed job may be preempted at once)"
    click.echo(f"Team {answer['team']}: minimum runtime before preemption {words}; at most {answer['max_seconds']} s.")

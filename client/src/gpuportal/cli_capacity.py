"""``gpuportal classes``, ``nodes``, ``gpus``, ``quota``, ``usage`` and ``members``: what can be asked for (each class's
key, as a spec's ``resource_class`` names it), what is free now, per class and per node, the GPUs themselves, the
team's quota, the GPU-hours it used, per team and per member, and the fair share among its members."""

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


@click.command()
@click.option("--team", help="A team's slug, or 'all' for every team (admins). Default: your team, if one.")
@click.option(
    "--days", type=click.IntRange(1, 366), help=f"The last N days, today included (default {DEFAULT_USAGE_DAYS})."
)
@click.option("--start", type=click.DateTime(["%Y-%m-%d"]), help="First day (UTC), instead of --days.")
@click.option("--end", type=click.DateTime(["%Y-%m-%d"]), help="Last day (UTC), inclusive (default today).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def usage(ctx: click.Context, team: str | None, days: int | None, start: datetime | None, end: datetime | None,
          output: str) -> None:  # fmt: skip
    """GPU-hours allocated and used, per team and per member (leads and admins: every member; others: their own)."""
    client = client_from(ctx)
    first, last = _window(days, _day(start), _day(end))
    if team is None:
        mine = [t["team"] for t in client.me().get("teams", [])]
        if len(mine) != 1:
            fail(f"Say which team: --team {' or --team '.join(mine) if mine else 'SLUG'} (admins: --team all).")
        team = mine[0]
    answer = client.usage(team, first, last)
    if output == "json":
        emit(answer)
        return
    lines = [f"GPU-hours from {answer['start']} to {answer['end']} (UTC), " + (
        "every team:" if answer["team"] == "all" else f"team {answer['team']}:"
    )]  # fmt: skip
    teams = [[t["team"], *_hours(t), f"{float(t.get('preemption_lost_gpu_hours') or 0):.1f}"]
             for t in answer.get("teams", [])]  # fmt: skip
    lines += ["", table(teams, ["TEAM", "ALLOCATED", "USED", "EFFICIENCY", "LOST TO PREEMPTION"])]
    members = [[m["team"], m["user"], *_hours(m)] for m in answer.get("members", [])]
    lines += ["", table(members, ["TEAM", "MEMBER", "ALLOCATED", "USED", "EFFICIENCY"]) if members else "No members."]
    click.echo("\n".join(lines))


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

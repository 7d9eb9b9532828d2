"""``gpuportal clusters``: the clusters of the fleet, where a job's ``clusters`` list may send it."""

from __future__ import annotations

import click

from .cli_common import client_from, emit, handled, table


@click.command()
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def clusters(ctx: click.Context, output: str) -> None:
    """The clusters of the fleet with their health, Kubernetes version and GPUs."""
    found = client_from(ctx).list_clusters()
    if output == "json":
        emit(found)
        return
    rows = []
    for c in found:
        health = c["health"]
        if health == "unreachable" and c.get("unreachable_since"):
            health = f"unreachable since {c['unreachable_since']}"
        rows.append([c["name"], c.get("region") or "-", health, str(c.get("nodes") or 0), str(c.get("gpus") or 0),
                     c.get("server_version") or "-"])  # fmt: skip
    click.echo(table(rows, ["NAME", "REGION", "HEALTH", "NODES", "GPUS", "KUBERNETES"]) if rows else "No clusters.")

"""``gpuportal webhooks …``: your teams' webhooks (as a lead) and their delivery logs; ping and redeliver."""

from __future__ import annotations

import click

from .cli_common import client_from, emit, handled, table


@click.group()
def webhooks() -> None:
    """Team webhooks (leads and admins): list, delivery log, ping, redeliver."""


@webhooks.command("list")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def webhooks_list(ctx: click.Context, output: str) -> None:
    """Webhooks of the teams you lead."""
    found = client_from(ctx).list_webhooks(limit=None)
    if output == "json":
        emit(found)
        return
    rows = [[str(w["id"]), w["name"], w["team"], w["masked_url"], ",".join(w["events"]), w["format"],
             "active" if w["active"] else "disabled"] for w in found]  # fmt: skip
    click.echo(table(rows, ["ID", "NAME", "TEAM", "URL", "EVENTS", "FORMAT", "STATUS"]) if rows else "No webhooks.")


@webhooks.command("deliveries")
@click.argument("webhook_id", type=int)
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def webhooks_deliveries(ctx: click.Context, webhook_id: int, limit: int, output: str) -> None:
    """The webhook's latest deliveries with their response codes."""
    found = client_from(ctx).webhook_deliveries(webhook_id, limit=limit)
    if output == "json":
        emit(found)
        return
    rows = [[str(d["id"]), d["event_type"], d["status"], str(d["attempt"]),
             ",".join(str(a.get("code") or "-") for a in d["attempts_log"]) or "-", d["created"]]
            for d in found]  # fmt: skip
    head = ["ID", "EVENT", "STATUS", "ATTEMPTS", "CODES", "CREATED"]
    click.echo(table(rows, head) if rows else "No deliveries yet.")


@webhooks.command("ping")
@click.argument("webhook_id", type=int)
@click.pass_context
@handled
def webhooks_ping(ctx: click.Context, webhook_id: int) -> None:
    """Send a test ping event."""
    delivery = client_from(ctx).ping_webhook(webhook_id)
    click.echo(f"Ping queued as delivery #{delivery['id']}.")


@webhooks.command("redeliver")
@click.argument("webhook_id", type=int)
@click.argument("delivery_id", type=int)
@click.pass_context
@handled
def webhooks_redeliver(ctx: click.Context, webhook_id: int, delivery_id: int) -> None:
    """Send one delivery's body again."""
    delivery = client_from(ctx).redeliver(webhook_id, delivery_id)
    click.echo(f"Delivery #{delivery_id} queued again as #{delivery['id']}.")

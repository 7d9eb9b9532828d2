"""``gpuportal jobs events ID`` and ``gpuportal events --team T``: follow a job's or a team's timeline as it
happens (the portal's event streams; reconnects by themselves)."""

from __future__ import annotations

import json
from collections.abc import Iterable

import click

from .cli_common import client_from, handled
from .types import JobEvent


def _line(event: JobEvent) -> str:
    return f"{event.get('at', '')}  #{event.get('job')} {event.get('job_name', '')}  {event.get('kind')}: " + str(
        event.get("message", "")
    )


def _print(events: Iterable[JobEvent], output: str, count: int | None) -> None:
    shown = 0
    for event in events:
        click.echo(json.dumps(event, sort_keys=True) if output == "json" else _line(event))
        shown += 1
        if count is not None and shown >= count:
            return


OUTPUT = click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
                      help="json: one JSON object a line.")  # fmt: skip
AFTER = click.option("--after", type=click.IntRange(0), help="Start after this event id (as a reconnect would).")
COUNT = click.option("--count", type=click.IntRange(1), help="Stop after this many events.")


@click.command("events")
@click.argument("job_id", type=int)
@AFTER
@COUNT
@OUTPUT
@click.pass_context
@handled
def job_events(ctx: click.Context, job_id: int, after: int | None, count: int | None, output: str) -> None:
    """Print a job's timeline, then each new event, until the job has ended."""
    _print(client_from(ctx).events(job_id, after=after), output, count)


@click.command("events")
@click.option("--team", required=True, help="The team's slug (you must be a member).")
@AFTER
@COUNT
@OUTPUT
@click.pass_context
@handled
def team_events(ctx: click.Context, team: str, after: int | None, count: int | None, output: str) -> None:
    """Print each new event of a team's jobs as it happens (until interrupted, or --count)."""
    _print(client_from(ctx).team_events(team, after=after), output, count)

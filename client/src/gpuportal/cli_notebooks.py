"""``gpuportal notebooks …``: list, launch, start again, stop and extend notebooks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .cli_common import client_from, emit, handled, table
from .spec import load_spec


def line(notebook: Mapping[str, Any]) -> str:
    words = f"Notebook #{notebook.get('id')} {notebook.get('name')} ({notebook.get('team')}"
    if notebook.get("workspace") and notebook["workspace"] != "jupyter":
        words += f", {notebook['workspace']}"
    words += f"): {notebook.get('status')}"
    if notebook.get("ttl_seconds_left") is not None:
        words += f", stops in {int(notebook['ttl_seconds_left']) // 60} min unless extended"
    return words


def show_token(notebook: Mapping[str, Any]) -> None:
    if notebook.get("token"):
        click.echo(f"Address: {notebook.get('notebook_url')}")
        click.echo(f"Notebook login token (shown this once): {notebook['token']}")


@click.group()
def notebooks() -> None:
    """List, launch, start, stop and extend notebooks."""


@notebooks.command("list")
@click.option("--state", type=click.Choice(["active", "stopped"]))
@click.option("--team")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def notebooks_list(ctx: click.Context, state: str | None, team: str | None, output: str) -> None:
    """Notebooks you can see."""
    found = client_from(ctx).list_notebooks(state=state, team=team, limit=None)
    if output == "json":
        emit(found)
        return
    rows = [[str(n["id"]), n["name"], n["team"], n["owner"], n["status"], n.get("notebook_url") or ""] for n in found]
    click.echo(table(rows, ["ID", "NAME", "TEAM", "OWNER", "STATUS", "ADDRESS"]) if rows else "No notebooks.")


@notebooks.command("launch")
@click.argument("spec_file", required=False, type=click.Path(dir_okay=False))
@click.option("--name", help="The notebook's name (lower-case letters, digits, '-').")
@click.option("--workspace", help="What it runs: jupyter (default), code-server (VS Code) or rstudio; the portal "
              "says which it offers.")  # fmt: skip
@click.option("--resource-class", help="A resource class id or key, e.g. nvidia.com/gpu@NVIDIA-H100-80GB-HBM3.")
@click.option("--team")
@click.option("--count", type=int)
@click.option("--cluster", "clusters", multiple=True,
              help="A cluster its sessions may run on; repeat for an ordered list, most preferred first.")  # fmt: skip
@click.pass_context
@handled
def notebooks_launch(ctx: click.Context, spec_file: str | None, name: str | None, workspace: str | None,
                     resource_class: str | None, team: str | None, count: int | None,
                     clusters: tuple[str, ...]) -> None:  # fmt: skip
    """Launch a new notebook from SPEC_FILE and/or the options (the options win)."""
    spec: dict[str, Any] = load_spec(spec_file) if spec_file else {}
    given = {"name": name, "workspace": workspace, "resource_class": resource_class, "team": team, "count": count,
             "clusters": list(clusters) or None}  # fmt: skip
    spec.update({k: v for k, v in given.items() if v is not None})
    made = client_from(ctx).launch_notebook(spec)
    click.echo(line(made))
    show_token(made)


@notebooks.command("start")
@click.argument("notebook_id", type=int)
@click.pass_context
@handled
def notebooks_start(ctx: click.Context, notebook_id: int) -> None:
    """Start a stopped notebook again (same home volume, new login token)."""
    made = client_from(ctx).start_notebook(notebook_id)
    click.echo(line(made))
    show_token(made)


@notebooks.command("stop")
@click.argument("notebook_id", type=int)
@click.option("--reason", help="Why (required for someone else's notebook; the owner is told).")
@click.pass_context
@handled
def notebooks_stop(ctx: click.Context, notebook_id: int, reason: str | None) -> None:
    """Stop a notebook: its GPUs are freed, its home volume kept."""
    click.echo(line(client_from(ctx).stop_notebook(notebook_id, reason)))


@notebooks.command("extend")
@click.argument("notebook_id", type=int)
@click.option("--seconds", type=click.IntRange(60), help="How much longer (default: the portal's extension).")
@click.pass_context
@handled
def notebooks_extend(ctx: click.Context, notebook_id: int, seconds: int | None) -> None:
    """Give a running notebook more time before it is stopped."""
    click.echo(line(client_from(ctx).extend_notebook(notebook_id, seconds)))

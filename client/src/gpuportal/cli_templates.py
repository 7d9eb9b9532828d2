"""``gpuportal templates …``: a team's workload templates of jobs, notebooks and services: list and show them (any
member), save a job, a notebook, a service or a spec file as a new version and remove one (the team's leads and
admins). ``gpuportal submit --template NAME`` starts from one, whatever its kind (start_from)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
import yaml

from . import cli_notebooks, cli_services
from .cli_common import client_from, emit, fail, handled, table
from .client import Client
from .spec import load_spec
from .types import WorkloadTemplate

#: The kinds of template, and the spec file's ``kind`` that names one (a job spec's kind is batch or distributed).
KINDS = ("job", "notebook", "service")


def team_of(ctx: click.Context, team: str | None) -> str:
    """``team``, or the caller's only team."""
    if team:
        return team
    mine = [t["team"] for t in client_from(ctx).me().get("teams", [])]
    if len(mine) != 1:
        fail(f"Say which team: --team {' or --team '.join(mine) if mine else 'SLUG'}.")
    return mine[0]


@click.group()
def templates() -> None:
    """A team's workload templates: named specs of jobs, notebooks or services, versioned; start from one with
    `submit --template NAME`."""


@templates.command("list")
@click.option("--team", help="The team's slug (default: your only team).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def templates_list(ctx: click.Context, team: str | None, output: str) -> None:
    """The team's templates with their kind and latest version."""
    found = client_from(ctx).list_templates(team_of(ctx, team))
    if output == "json":
        emit(found)
        return
    rows = [[t["name"], t["kind"], str(t["latest"]), (t["updated_at"] or "")[:16], t["description"]] for t in found]
    click.echo(table(rows, ["NAME", "KIND", "VERSION", "SAVED", "DESCRIPTION"]) if rows else "No templates.")


@templates.command("show")
@click.argument("name")
@click.option("--team", help="The team's slug (default: your only team).")
@click.option("--version", "number", type=int, help="This version (default: the latest).")
@click.pass_context
@handled
def templates_show(ctx: click.Context, name: str, team: str | None, number: int | None) -> None:
    """The spec of a template's version, as YAML a spec file can hold."""
    found = client_from(ctx).get_template(team_of(ctx, team), name)
    versions = {v["number"]: v for v in found["versions"]}
    version = versions.get(number if number is not None else found["latest"])
    if version is None:
        fail(f"Template {name} has versions {', '.join(map(str, sorted(versions)))}; not {number}.")
    click.echo(f"# {found['team']}/{name} ({found['kind']}) version {version['number']}, saved by "
               f"{version['created_by'] or '?'}")  # fmt: skip
    click.echo(yaml.safe_dump(version["spec"], sort_keys=False).rstrip())


@templates.command("save")
@click.argument("name")
@click.option("--team", help="The team's slug (default: your only team).")
@click.option("--from-job", type=int, help="Save the spec of this job.")
@click.option("--from-notebook", type=int, help="Save the spec of this notebook.")
@click.option("--from-service", type=int, help="Save the spec of this service.")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False, exists=True), help="Save this spec file.")
@click.option(
    "--kind",
    type=click.Choice(KINDS),
    help="With --spec: what it makes (default: the file's `kind: notebook` or `kind: service`, else job).",
)
@click.option("--description", default="", help="One line saying what it is for.")
@click.pass_context
@handled
def templates_save(ctx: click.Context, name: str, team: str | None, from_job: int | None, from_notebook: int | None,
                   from_service: int | None, spec_file: str | None, kind: str | None,
                   description: str) -> None:  # fmt: skip
    """Save a job, a notebook, a service or a spec file as the next version of template NAME (the team's leads and
    admins)."""
    sources = [value for value in (from_job, from_notebook, from_service, spec_file) if value is not None]
    if len(sources) != 1:
        fail("Give either --from-job ID or --spec FILE (or --from-notebook ID, --from-service ID): one of them.")
    if kind and spec_file is None:
        fail("--kind goes with --spec; --from-notebook and --from-service say the kind.")
    spec = load_spec(spec_file) if spec_file else None
    if spec is not None and spec.get("kind") in ("notebook", "service"):
        kind = kind or spec["kind"]
        spec = {key: value for key, value in spec.items() if key != "kind"}
    saved = client_from(ctx).save_template(
        team_of(ctx, team), name, spec=spec, kind=kind, from_job=from_job, from_notebook=from_notebook,
        from_service=from_service, description=description,
    )  # fmt: skip
    click.echo(f"Saved {saved['kind']} template {saved['team']}/{saved['name']} version {saved['latest']}.")


@templates.command("remove")
@click.argument("name")
@click.option("--team", help="The team's slug (default: your only team).")
@click.pass_context
@handled
def templates_remove(ctx: click.Context, name: str, team: str | None) -> None:
    """Remove template NAME with all its versions (the team's leads and admins)."""
    slug = team_of(ctx, team)
    client_from(ctx).delete_template(slug, name)
    click.echo(f"Removed template {slug}/{name}.")


def start_from(client: Client, found: WorkloadTemplate, ref: str, changes: Mapping[str, Any], output: str) -> None:
    """Start a notebook or a service from ``found``, the template ``ref`` names (NAME or NAME@VERSION; Client.
    find_template), with ``changes`` on top, and say so."""
    body = {**changes, "template": ref, "team": changes.get("team") or found["team"]}
    if found["kind"] == "notebook":
        notebook = client.launch_notebook(body)
        if output == "json":
            emit(notebook)
            return
        click.echo(cli_notebooks.line(notebook))
        cli_notebooks.show_token(notebook)
        return
    service = client.create_service(body)
    if output == "json":
        emit(service)
        return
    click.echo(cli_services.line(service))

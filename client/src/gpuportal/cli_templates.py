"""``gpuportal templates …``: a team's workload templates: list and show them (any member), save a job or a spec
file as a new version and remove one (the team's leads and admins). ``gpuportal submit --template NAME`` submits
from one."""

from __future__ import annotations

import click
import yaml

from .cli_common import client_from, emit, fail, handled, table
from .spec import load_spec


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
    """A team's workload templates: named job specs, versioned; submit from one with `submit --template NAME`."""


@templates.command("list")
@click.option("--team", help="The team's slug (default: your only team).")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def templates_list(ctx: click.Context, team: str | None, output: str) -> None:
    """The team's templates with their latest version."""
    found = client_from(ctx).list_templates(team_of(ctx, team))
    if output == "json":
        emit(found)
        return
    rows = [[t["name"], str(t["latest"]), (t["updated_at"] or "")[:16], t["description"]] for t in found]
    click.echo(table(rows, ["NAME", "VERSION", "SAVED", "DESCRIPTION"]) if rows else "No templates.")


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
    click.echo(f"# {found['team']}/{name} version {version['number']}, saved by {version['created_by'] or '?'}")
    click.echo(yaml.safe_dump(version["spec"], sort_keys=False).rstrip())


@templates.command("save")
@click.argument("name")
@click.option("--team", help="The team's slug (default: your only team).")
@click.option("--from-job", type=int, help="Save the spec of this job.")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False, exists=True), help="Save this spec file.")
@click.option("--description", default="", help="One line saying what it is for.")
@click.pass_context
@handled
def templates_save(ctx: click.Context, name: str, team: str | None, from_job: int | None, spec_file: str | None,
                   description: str) -> None:  # fmt: skip
    """Save a job or a spec file as the next version of template NAME (the team's leads and admins)."""
    if (from_job is None) == (spec_file is None):
        fail("Give either --from-job ID or --spec FILE.")
    spec = load_spec(spec_file) if spec_file else None
    saved = client_from(ctx).save_template(team_of(ctx, team), name, spec=spec, from_job=from_job,
                                           description=description)  # fmt: skip
    click.echo(f"Saved template {saved['team']}/{saved['name']} version {saved['latest']}.")


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

"""The ``gpuportal`` command line. Exit codes (for CI systems):

0  done; with --wait/--follow: the job succeeded
1  the job failed
2  the job was cancelled or lost
3  --wait gave up (--timeout) before the job ended
4  the portal refused the request, a spec file is wrong, or the portal could not be reached
64 the command line itself is wrong (unknown option, missing argument)
"""

from __future__ import annotations

import getpass
import sys
import webbrowser
from collections.abc import Mapping
from typing import Any, NoReturn

import click
import yaml

from .cli_capacity import classes, free, gpus, members, min_runtime, nodes, quota, usage
from .cli_clusters import clusters
from .cli_common import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    OUTCOME_EXIT,
    client_from,
    cluster_column,
    emit,
    fail,
    handled,
    table,
)
from .cli_events import job_events, team_events
from .cli_notebooks import notebooks
from .cli_plan import plan
from .cli_services import services
from .cli_templates import start_from, templates
from .cli_webhooks import webhooks
from .client import Client, report_checkpoint_from_job
from .config import write_config
from .errors import WaitTimeout
from .login import DeviceCode, browser_login
from .spec import load_spec, parse_spec


def _gpus(job: Mapping[str, Any]) -> str:
    workers = job.get("workers") or 1
    what = f"{job.get('count')} × {job.get('resource_class_name') or job.get('resource_class')}"
    return f"{workers} × {what}" if workers > 1 else what


def _state(job: Mapping[str, Any]) -> str:
    """The state in words, as the portal's pages show it (the raw state from a portal that does not send them)."""
    return str(job.get("state_label") or job.get("state"))


def _where(job: Mapping[str, Any]) -> str:
    """The cluster a job was placed on; before that, the clusters it may go to, most preferred first."""
    if job.get("cluster"):
        return f", cluster {job['cluster']}"
    if job.get("clusters"):
        return f", clusters {' then '.join(job['clusters'])}"
    return ""


def _summary(job: Mapping[str, Any]) -> str:
    words = f"Job #{job.get('id')} {job.get('name')} ({job.get('team')}, {_gpus(job)}{_where(job)}): {_state(job)}"
    if job.get("state") == "queued" and job.get("wait_message"):
        words += f" - {job['wait_message']}"
    if job.get("state") == "queued" and job.get("estimated_start"):
        words += f" Estimated start: {job['estimated_start']['text']}."
    if job.get("state") == "failed":
        words += f", exit code {job.get('exit_code')}"
        if job.get("failure_reason"):
            words += f" - {job['failure_reason']}"
    return words


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", help="The portal's address (default: GPUPORTAL_URL, then the stored login).")
@click.option("--token", help="An API token (default: GPUPORTAL_TOKEN, then the stored login).")
@click.version_option(package_name="gpu-portal-client")
@click.pass_context
def cli(ctx: click.Context, url: str | None, token: str | None) -> None:
    """The GPU portal from the command line: submit and follow jobs, manage notebooks and services, and see what
    can be asked for and what is free (classes, free, nodes), your quota and GPU-hours used (usage)."""
    ctx.obj = {"url": url, "token": token}


@cli.command()
@click.option("--url", "login_url", required=True, help="The portal's address, e.g. https://gpus.example.org")
@click.option(
    "--token",
    "login_token",
    help="Store this API token instead of signing in through the browser ('-': read it from standard input).",
)
@click.option(
    "--scope",
    type=click.Choice(["read", "submit", "manage"]),
    default="submit",
    show_default=True,
    help="What the new token may do: read only; also submit and manage your own work; everything you may do.",
)
@click.option("--days", type=click.IntRange(min=1), help="The new token's lifetime (default: the portal's).")
@click.option("--name", "token_name", help="The new token's name (default: 'gpuportal on <this host>').")
@click.option("--no-browser", is_flag=True, help="Only print the address to open; do not start a browser.")
@handled
def login(login_url: str, login_token: str | None, scope: str, days: int | None, token_name: str | None,
          no_browser: bool) -> None:  # fmt: skip
    """Sign in and store the address and a token (file mode 0600).

    Without --token: prints a code and opens the portal's approval page; approve it there (signed in as usual,
    SSO included) and the command line receives a token of --scope. With --token: checks and stores that token."""
    if login_token is None:
        token = _browser_login(login_url, scope, days, token_name, not no_browser)
    else:
        token = login_token
        if token == "-":
            if sys.stdin.isatty():
                token = getpass.getpass("API token (from the portal's API tokens page): ")
            else:
                token = sys.stdin.readline()
    token = (token or "").strip()
    if not token:
        fail("No token given: pass --token TOKEN, --token - to read it from standard input, or leave --token out "
             "to sign in through the browser.")  # fmt: skip
    me = Client(login_url, token).me()
    path = write_config(login_url, token)
    teams = ", ".join(t["team"] for t in me.get("teams", [])) or "none"
    click.echo(f"Signed in to {login_url} as {me['username']} (teams: {teams}). Stored in {path}.")


def _browser_login(url: str, scope: str, days: int | None, name: str | None, open_browser: bool) -> str:
    def show(code: DeviceCode) -> None:
        click.echo(f"To sign in, open {code.verification_uri_complete}")
        click.echo(f"and check that it shows the code {code.user_code}; approve it there. Waiting…")
        if open_browser:
            webbrowser.open(code.verification_uri_complete)

    issued = browser_login(url, scope=scope, days=days, name=name, show=show)
    click.echo(f"Approved: token '{issued['name']}' (scope {issued['scope']}, expires {issued['expires_at'][:10]}).")
    return str(issued["token"])


class _EstimateTeller:
    """While a job is queued: when it is likely to start (standard error), once the portal has estimated it and
    again whenever the estimate's words change; the portal's cycle refreshes it, so a job just submitted gets its
    first within a minute or two."""

    def __init__(self) -> None:
        self.said: str | None = None

    def __call__(self, job: Mapping[str, Any]) -> None:
        estimate = job.get("estimated_start") if job.get("state") == "queued" else None
        if estimate and estimate["text"] != self.said:
            self.said = estimate["text"]
            click.echo(f"Job #{job.get('id')} is queued; it starts {self.said}.", err=True)


def _wait_exit(client: Client, jobs: list[int], timeout: float | None) -> NoReturn:
    """Wait for every job, print each outcome, exit with the worst code (failed over cancelled over success)."""
    code = EXIT_OK
    for job_id in jobs:
        teller = _EstimateTeller() if len(jobs) == 1 else None
        if teller is not None:
            teller(client.get_job(job_id))
        try:
            job = client.wait(job_id, timeout, seen=teller)
        except WaitTimeout as error:
            click.echo(f"Gave up waiting: {error}", err=True)
            sys.exit(EXIT_TIMEOUT)
        click.echo(_summary(job))
        outcome = OUTCOME_EXIT.get(str(job.get("state")), EXIT_ERROR)
        code = outcome if code == EXIT_OK or outcome == EXIT_FAILED else code
    sys.exit(code)


def _follow(client: Client, job_id: int, tail: int, rank: int | None = None) -> None:
    for event in client.follow_logs(job_id, tail=tail, rank=rank):
        if event.kind == "line":
            click.echo(event.text)
        else:
            click.echo(f"-- {event.text}", err=True)


@cli.command()
@click.argument("spec_file", type=click.Path(dir_okay=False, allow_dash=True), required=False)
@click.option("--wait", is_flag=True, help="Wait for the job to end; the exit code says how it ended.")
@click.option("--follow", is_flag=True, help="Print the job's log as it is written (implies --wait).")
@click.option("--timeout", type=float, help="With --wait: give up after this many seconds (exit code 3).")
@click.option("--idempotency-key", help="The same key again returns the job it made instead of a second one.")
@click.option("--cluster", "clusters", multiple=True, metavar="NAME[,NAME…]",
              help="The clusters of the fleet it may run on, most preferred first (it spills to the next when the "
              "earlier ones are full); replaces the spec's clusters. `gpuportal clusters` lists them.")  # fmt: skip
@click.option("--template", metavar="NAME[@VERSION]",
              help="Start from the team's template (`gpuportal templates list`), a job's, a notebook's or a "
              "service's; SPEC_FILE, if given, changes fields of it.")  # fmt: skip
@click.option("--name", help="The name (a notebook's or a service's must be new in its team).")
@click.option("--output", type=click.Choice(["text", "json"]), default="text")
@click.pass_context
@handled
def submit(ctx: click.Context, spec_file: str | None, wait: bool, follow: bool, timeout: float | None,
           idempotency_key: str | None, clusters: tuple[str, ...], template: str | None, name: str | None,
           output: str) -> None:  # fmt: skip
    """Submit the job in SPEC_FILE (YAML or JSON; - reads standard input), or start from a template (--template): a
    job, a notebook or a service, as the template makes. A spec with `size` is a job array."""
    if spec_file is None and template is None:
        fail("Give a SPEC_FILE, or --template NAME.", EXIT_USAGE)
    spec: dict[str, Any] = {}
    if spec_file is not None:
        spec = parse_spec(sys.stdin.read(), "<stdin>") if spec_file == "-" else load_spec(spec_file)
    if name:
        spec["name"] = name
    if clusters:
        spec["clusters"] = _names(clusters)
    client = client_from(ctx)
    if template:
        # A notebook's or a service's template starts one; a job's (or a name the portal must explain: none, or in
        # several teams) is submitted as a job.
        found = client.find_template(template, spec.get("team"))
        if found and found["kind"] != "job":
            if wait or follow or idempotency_key:
                fail(f"--wait, --follow and --idempotency-key are for jobs; template {template} makes a "
                     f"{found['kind']}.", EXIT_USAGE)  # fmt: skip
            start_from(client, found, template, spec, output)
            return
        spec["template"] = template
    made = client.submit(spec, idempotency_key=idempotency_key)
    tasks: list[int] = list(made.get("tasks") or []) if "tasks" in made else [int(made["id"])]
    if output == "json":
        emit(made)
    elif "tasks" in made:
        click.echo(f"Submitted job array #{made['id']} {made.get('name')}: {made.get('summary')} (jobs {tasks}).")
    else:
        click.echo(f"Submitted {_summary(made)}")
    if follow:
        for job_id in tasks:
            _follow(client, job_id, tail=200)
    if wait or follow:
        _wait_exit(client, tasks, timeout)


def _names(given: tuple[str, ...]) -> list[str]:
    """Repeated and comma-separated names (--cluster a,b --cluster c), in order, each once."""
    names = [name.strip() for item in given for name in item.split(",") if name.strip()]
    return list(dict.fromkeys(names))


@cli.group()
def jobs() -> None:
    """List, show, cancel, resubmit and wait for jobs."""


@jobs.command("list")
@click.option("--state", multiple=True, help="queued, admitted, running, preempting, succeeded, failed, …")
@click.option("--kind", help="batch, notebook or distributed.")
@click.option("--team", help="A team's slug.")
@click.option("--label", multiple=True, help="key=value or key; repeat for AND.")
@click.option("--cluster", help="Only jobs placed on this cluster of the fleet (its name).")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True)
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def jobs_list(ctx: click.Context, state: tuple[str, ...], kind: str | None, team: str | None,
              label: tuple[str, ...], cluster: str | None, limit: int, output: str) -> None:  # fmt: skip
    """Jobs you can see, newest first. A CLUSTER column shows where the jobs listed are in several clusters."""
    found = client_from(ctx).list_jobs(state=list(state) or None, kind=kind, team=team, label=list(label) or None,
                                   cluster=cluster, limit=limit)  # fmt: skip
    if output == "json":
        emit(found)
        return
    head = ["ID", "STATE", "KIND", "TEAM", "NAME", "GPUS", "SUBMITTED"]
    rows = [[str(j["id"]), _state(j), j["kind"], j["team"], j["name"], _gpus(j), j["submitted_at"][:19]]
            for j in found]  # fmt: skip
    if cluster_column(found):
        head.append("CLUSTER")
        for row, job in zip(rows, found, strict=True):
            row.append(job.get("cluster") or "-")
    click.echo(table(rows, head) if rows else "No jobs.")


@jobs.command("get")
@click.argument("job_id", type=int)
@click.option("--output", type=click.Choice(["json", "text"]), default="json")
@click.pass_context
@handled
def jobs_get(ctx: click.Context, job_id: int, output: str) -> None:
    """One job, with why it waits."""
    job = client_from(ctx).get_job(job_id)
    emit(job) if output == "json" else click.echo(_summary(job))


@jobs.command("cancel")
@click.argument("job_id", type=int)
@click.option("--reason", help="Why (required for someone else's job; the owner is told).")
@click.pass_context
@handled
def jobs_cancel(ctx: click.Context, job_id: int, reason: str | None) -> None:
    """Cancel a queued or running job."""
    click.echo(_summary(client_from(ctx).cancel_job(job_id, reason)))


@jobs.command("checkpoint")
@click.argument("job_id", type=int)
@click.option("--at", help="When the checkpoint was written (ISO 8601, UTC); default now.")
@click.pass_context
@handled
def jobs_checkpoint(ctx: click.Context, job_id: int, at: str | None) -> None:
    """Report that a running job has just written a checkpoint (with your own token; inside a job that declared
    "report": "token", `gpuportal checkpoint` needs no token): preemption stops first whoever loses least since their
    last checkpoint, and the next attempt reads it."""
    job = client_from(ctx).report_checkpoint(job_id, at)
    click.echo(f"Job #{job['id']}: last checkpoint {job.get('last_checkpoint_at')}.")


@cli.command("checkpoint")
@click.option("--at", help="When the checkpoint was written (ISO 8601, UTC); default now.")
@handled
def checkpoint(at: str | None) -> None:
    """Inside a job that declared "report": "token": report that it has just written a checkpoint, with the token
    and address the portal put in its environment (PORTAL_CHECKPOINT_TOKEN, PORTAL_CHECKPOINT_URL; no login).
    Preemption stops first whoever loses least since their last checkpoint, and the next attempt reads it in
    PORTAL_LAST_CHECKPOINT."""
    job = report_checkpoint_from_job(at)
    click.echo(f"Job #{job['id']}: last checkpoint {job.get('last_checkpoint_at')}.")


def _changes(pairs: tuple[str, ...]) -> dict[str, Any]:
    """--set name=value pairs; each value read as YAML (2 is a number, true a boolean, [a, b] a list)."""
    changes: dict[str, Any] = {}
    problems = []
    for pair in pairs:
        name, has_value, text = pair.partition("=")
        if not has_value or not name.strip():
            problems.append(f"--set {pair}: write field=value, e.g. --set count=2")
            continue
        try:
            changes[name.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            changes[name.strip()] = text
    if problems:
        raise click.UsageError("\n".join(problems))
    return changes


@jobs.command("resubmit")
@click.argument("job_id", type=int)
@click.option("--set", "pairs", multiple=True, metavar="FIELD=VALUE", help="A field to change; repeatable.")
@click.option("--wait", is_flag=True, help="Wait for the new job to end; the exit code says how.")
@click.option("--timeout", type=float)
@click.pass_context
@handled
def jobs_resubmit(ctx: click.Context, job_id: int, pairs: tuple[str, ...], wait: bool, timeout: float | None) -> None:
    """Submit an ended job again as a new job, with changes."""
    client = client_from(ctx)
    new = client.resubmit(job_id, _changes(pairs))
    click.echo(f"Resubmitted as {_summary(new)}")
    if wait:
        _wait_exit(client, [int(new["id"])], timeout)


@jobs.command("wait")
@click.argument("job_id", type=int)
@click.option("--timeout", type=float)
@click.pass_context
@handled
def jobs_wait(ctx: click.Context, job_id: int, timeout: float | None) -> None:
    """Wait for a job to end; the exit code says how it ended."""
    _wait_exit(client_from(ctx), [job_id], timeout)


@cli.command()
@click.argument("job_id", type=int)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the container ends.")
@click.option("--tail", type=click.IntRange(1, 5000), default=200, show_default=True)
@click.option("--rank", type=click.IntRange(0), default=None, help="A distributed job's rank (default: rank 0).")
@click.pass_context
@handled
def logs(ctx: click.Context, job_id: int, follow: bool, tail: int, rank: int | None) -> None:
    """A job's log: its last lines, or followed live."""
    client = client_from(ctx)
    if follow:
        _follow(client, job_id, tail, rank=rank)
        return
    answer = client.logs(job_id, tail=tail, rank=rank)
    click.echo(answer["log"], nl=False)
    if answer.get("cut_bytes"):
        click.echo(f"-- the first {answer['cut_bytes']} bytes were cut (size cap)", err=True)
    if answer.get("note"):
        click.echo(f"-- {answer['note']}", err=True)


jobs.add_command(job_events)
cli.add_command(team_events)
cli.add_command(notebooks)
cli.add_command(services)
cli.add_command(plan)
cli.add_command(webhooks)
cli.add_command(templates)
cli.add_command(clusters)
cli.add_command(classes)
cli.add_command(nodes)
cli.add_command(gpus)
cli.add_command(quota)
cli.add_command(usage)
cli.add_command(free)
cli.add_command(members)
cli.add_command(min_runtime)


def main() -> None:
    """The console script: click's usage errors exit 64 so they differ from a job's outcome codes."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        fail("Aborted.", EXIT_ERROR)
    except click.UsageError as error:
        error.show()
        sys.exit(EXIT_USAGE)
    except click.ClickException as error:
        error.show()
        sys.exit(EXIT_ERROR)

"""``gpuportal services …``: list, show, create (from a spec file with ``kind: service``), scale, change the
image, pause, resume, roll back and delete inference services."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from .cli_common import client_from, emit, handled, table
from .errors import SpecError
from .spec import load_spec
from .types import SERVICE_KIND


def line(service: Mapping[str, Any]) -> str:
    health = service.get("health") or {}
    words = (
        f"Service #{service.get('id')} {service.get('name')} ({service.get('team')}): {service.get('state')}, "
        f"{health.get('ready', 0)} of {health.get('desired', 0)} ready, revision {service.get('revision')}"
    )
    if service.get("job_state") == "queued" and service.get("wait_message"):
        words += f"; waiting: {service['wait_message']}"
    return words


@click.group()
def services() -> None:
    """Inference services: list, create, scale, change image, pause/resume, roll back, delete."""


@services.command("list")
@click.option("--stopped", is_flag=True, help="List stopped services instead of live ones.")
@click.option("--output", type=click.Choice(["table", "json"]), default="table")
@click.pass_context
@handled
def services_list(ctx: click.Context, stopped: bool, output: str) -> None:
    """Services you can see."""
    found = client_from(ctx).list_services(stopped=stopped, limit=None)
    if output == "json":
        emit(found)
        return
    rows = [
        [str(s["id"]), s["name"], s["team"], s["size"], f"{s['health']['ready']}/{s['health']['desired']}",
         s["state"], s["address"]["dns"]]
        for s in found
    ]  # fmt: skip
    headers = ["ID", "NAME", "TEAM", "SIZE", "READY", "STATE", "ADDRESS"]
    click.echo(table(rows, headers) if rows else "No services.")


@services.command("get")
@click.argument("service_id", type=int)
@click.pass_context
@handled
def services_get(ctx: click.Context, service_id: int) -> None:
    """One service as JSON (spec, address, health, rollout, replicas)."""
    emit(client_from(ctx).get_service(service_id))


@services.command("create")
@click.argument("spec_file", type=click.Path(dir_okay=False))
@click.option("--cluster", "clusters", multiple=True,
              help="A cluster its replicas may run on (all on one); repeat for an ordered list, most preferred "
              "first. Replaces the spec's clusters.")  # fmt: skip
@click.pass_context
@handled
def services_create(ctx: click.Context, spec_file: str, clusters: tuple[str, ...]) -> None:
    """Start a service from SPEC_FILE (YAML or JSON with ``kind: service``)."""
    spec = load_spec(spec_file)
    if spec.get("kind", SERVICE_KIND) != SERVICE_KIND:
        raise SpecError(spec_file, [f"kind is {spec['kind']!r}; a service's spec says kind: service"])
    if clusters:
        spec["clusters"] = list(clusters)
    made = client_from(ctx).create_service(spec)
    click.echo(line(made))
    click.echo(f"Address: {made['address']['dns']}" + (f" and {made['address']['url']}" if made["address"]["url"]
                                                         else ""))  # fmt: skip


@services.command("scale")
@click.argument("service_id", type=int)
@click.option("--min", "min_replicas", type=click.IntRange(1), required=True)
@click.option("--max", "max_replicas", type=click.IntRange(1), required=True)
@click.pass_context
@handled
def services_scale(ctx: click.Context, service_id: int, min_replicas: int, max_replicas: int) -> None:
    """Set the replica bounds (above the minimum, replicas come only as quota allows)."""
    click.echo(line(client_from(ctx).scale_service(service_id, min_replicas, max_replicas)))


@services.command("set-image")
@click.argument("service_id", type=int)
@click.argument("image")
@click.pass_context
@handled
def services_set_image(ctx: click.Context, service_id: int, image: str) -> None:
    """Roll out a new image, replica by replica."""
    click.echo(line(client_from(ctx).update_service(service_id, {"image": image})))


@services.command("pause")
@click.argument("service_id", type=int)
@click.pass_context
@handled
def services_pause(ctx: click.Context, service_id: int) -> None:
    """Hold rollouts (replicas keep serving)."""
    click.echo(line(client_from(ctx).pause_service(service_id)))


@services.command("resume")
@click.argument("service_id", type=int)
@click.pass_context
@handled
def services_resume(ctx: click.Context, service_id: int) -> None:
    click.echo(line(client_from(ctx).resume_service(service_id)))


@services.command("rollback")
@click.argument("service_id", type=int)
@click.pass_context
@handled
def services_rollback(ctx: click.Context, service_id: int) -> None:
    """Go back to the previous image and settings."""
    click.echo(line(client_from(ctx).rollback_service(service_id)))


@services.command("delete")
@click.argument("service_id", type=int)
@click.option("--reason", help="Why (required for someone else's service; the owner is told).")
@click.pass_context
@handled
def services_delete(ctx: click.Context, service_id: int, reason: str | None) -> None:
    """Stop the service: its Deployment, Service and autoscaler are removed."""
    client_from(ctx).delete_service(service_id, reason)
    click.echo(f"Service #{service_id} is stopped.")

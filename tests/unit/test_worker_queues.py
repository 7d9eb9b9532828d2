"""Celery's queues and the processes that consume them. The control loop (the job cycle and what it reads and acts
on) has a queue of its own, and every way of running the portal (the demo's Procfile, docker-compose.yml, deploy/)
gives it a worker that consumes that queue and nothing else; webhooks and background work (planner runs, log expiry,
telemetry rollups) go to other queues, consumed by other workers. A team's webhooks, however many and however dead
their receivers, then never take a thread the job cycle needs.

tests/integration/test_webhooks_flood.py runs the demo's workers and beat under a flood of deliveries to a dead
receiver and watches the cycle keep its cadence."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.conf import settings

from portal.celery import app
from tests.procfile import PROCFILE, demo_processes

REPO = Path(__file__).resolve().parents[2]
CONTROL, WEBHOOKS, BACKGROUND = "control", "webhooks", "background"

#: What the control loop's worker runs, and nothing more.
CONTROL_LOOP = {
    "jobs.tasks.run_cycle",
    "jobs.tasks.cycle_cluster",
    "jobs.tasks.reconcile_volumes",
    "jobs.tasks.sync_presence",
    "jobs.tasks.cull_notebooks",
    "jobs.tasks.detect_idle",
    "gpus.tasks.reconcile_inventory",
    "gpus.tasks.advance_node_config_operations",
    "telemetry.tasks.scrape_dcgm",
}


def queue_of(task_name: str) -> str:
    """The queue a message for ``task_name`` goes to when sent without one (send_task, beat, .delay())."""
    return app.amqp.router.route({}, task_name)["queue"].name


def test_the_queue_names_are_the_settings():
    assert (settings.PORTAL_CONTROL_QUEUE, settings.PORTAL_WEBHOOK_QUEUE, settings.PORTAL_BACKGROUND_QUEUE) == (
        CONTROL,
        WEBHOOKS,
        BACKGROUND,
    )


def test_only_the_control_loop_is_routed_to_its_queue():
    app.loader.import_default_modules()  # what a worker does at start: every app's tasks module
    tasks = {name for name in app.tasks if not name.startswith("celery.")}
    assert {name for name in tasks if queue_of(name) == CONTROL} == CONTROL_LOOP
    assert queue_of("accounts.tasks.deliver_webhook") == queue_of("accounts.tasks.sweep_webhooks") == WEBHOOKS
    for name in ("planner.tasks.run_plan", "planner.tasks.fail_stale_runs", "jobs.tasks.expire_logs",
                 "telemetry.tasks.maintain_telemetry"):  # fmt: skip
        assert queue_of(name) == BACKGROUND, name
    assert queue_of("app.tasks.added_later_and_routed_nowhere") == BACKGROUND, "never the control loop by default"
    assert {queue_of(entry["task"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()} == {
        CONTROL,
        WEBHOOKS,
        BACKGROUND,
    }


def test_a_webhook_kick_goes_to_the_webhook_queue(monkeypatch):
    from core import webhooks

    sent = []
    monkeypatch.setattr(webhooks.current_app, "send_task", lambda name, **options: sent.append((name, options)))
    webhooks.kick(7)
    ((name, options),) = sent
    assert name == webhooks.DELIVER_TASK and options["args"] == (7,)
    assert options.get("queue", queue_of(name)) == WEBHOOKS


# -- the processes ----------------------------------------------------------------------------------------------


def queues_of(argv: list[str]) -> tuple[str, ...]:
    """The queues `celery worker` consumes: its -Q list, or the default queue without one."""
    for flag in ("-Q", "--queues"):
        if flag in argv:
            return tuple(argv[argv.index(flag) + 1].split(","))
    return (app.conf.task_default_queue,)


def is_worker(argv: list[str]) -> bool:
    return any(Path(part).name == "celery" for part in argv[:1]) and "worker" in argv


def demo_workers() -> dict[str, tuple[str, ...]]:
    return {name: queues_of(argv) for name, argv in demo_processes().items() if is_worker(argv)}


def compose_workers() -> dict[str, tuple[str, ...]]:
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    return {name: queues_of(s["command"]) for name, s in services.items() if is_worker(s.get("command") or [])}


def deploy_workers() -> dict[str, tuple[str, ...]]:
    workers = {}
    for path in sorted((REPO / "deploy").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Deployment":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    if is_worker(container.get("command") or []):
                        workers[f"{doc['metadata']['name']}/{container['name']}"] = queues_of(container["command"])
    return workers


WAYS = {"demo": demo_workers, "compose": compose_workers, "deploy": deploy_workers}


@pytest.mark.parametrize("way", WAYS)
def test_every_queue_has_a_worker_and_the_control_loop_one_of_its_own(way):
    workers = WAYS[way]()
    assert {queue for queues in workers.values() for queue in queues} == {CONTROL, WEBHOOKS, BACKGROUND}, workers
    control = [name for name, queues in workers.items() if CONTROL in queues]
    assert control and all(workers[name] == (CONTROL,) for name in control), f"{way}: {workers}"


@pytest.mark.parametrize("way", ["compose", "deploy"])
def test_in_production_webhooks_and_background_work_have_workers_apart_too(way):
    """A flood of deliveries must not hold up planner runs either; the demo, on one machine, shares one worker
    between them."""
    assert sorted(WAYS[way]().values()) == [(BACKGROUND,), (CONTROL,), (WEBHOOKS,)]


def test_the_demo_stays_on_the_embedded_default_with_two_workers():
    assert demo_workers() == {"worker": (CONTROL,), "worker-side": (WEBHOOKS, BACKGROUND)}
    assert "DATABASE_URL" not in PROCFILE.read_text() and "CELERY_BROKER_URL" not in PROCFILE.read_text()
    names = [argv[argv.index("-n") + 1] for argv in demo_processes().values() if is_worker(argv)]
    assert len(set(names)) == len(names) == 2, "two workers on one host need node names of their own"

"""The client and CLI against a live portal: pytest-django's live_server serves the real API over HTTP (a thread),
the simulated cluster runs with a hand-moved clock, and the job cycle runs in the test thread whenever the client
would sleep (waiting, or between log streams) — so jobs move along exactly while the client waits, and no test
depends on how fast anything is."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from accounts.models import APIToken, Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions, eventstream
from jobs.cycle.run import run_cycle
from jobs.notebook.sessions import cull_notebooks
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
#: Sim-clock seconds one client pause stands for (a cycle runs after each step).
STEP = 6.0


@dataclass
class Portal:
    url: str
    token: str
    cluster: SimulatedCluster
    clock: SimClock
    cycles: int = 0

    def cycle(self, seconds: float = STEP) -> None:
        self.clock.advance(seconds)
        run_cycle(self.cluster, now=self.clock.now)
        cull_notebooks(self.cluster, now=self.clock.now)  # beat runs it beside the cycle: notebooks' clocks start
        self.cycles += 1


@pytest.fixture
def portal(live_server, people, tmp_path, monkeypatch, settings) -> Iterator[Portal]:
    """A live portal on the simulated demo cluster; alice (lead of vision) holds an API token."""
    settings.PORTAL_LOG_FOLLOW_SECONDS = 0.3
    # Waiting without polling: streams and long-polls read the database every 0.05 s and a stream lasts 0.3 s.
    settings.PORTAL_WAIT_POLL_SECONDS = 0.05
    settings.PORTAL_EVENT_STREAM_SECONDS = 0.3
    clock = SimClock()
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=clock)
    sim.watch_poll_interval = 0.05
    for where in ("gpus.fleet.get_backend",):
        monkeypatch.setattr(where, lambda: sim)
    sync_inventory(sim)
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], Team.objects.get(slug=slug), rc, 8, 16)
    _, token = APIToken.issue(people["alice"], "client tests")
    # Nothing of the machine's own login may leak in, and the tests' login goes to a temporary file.
    for name in ("GPUPORTAL_URL", "GPUPORTAL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUPORTAL_CONFIG", str(tmp_path / "gpuportal" / "config"))
    yield Portal(url=live_server.url, token=token, cluster=sim, clock=clock)
    # An event stream the client stopped reading still runs in the live server's thread until its end (at most
    # PORTAL_EVENT_STREAM_SECONDS, a job cycle per pause under `driven`): the database is emptied for the next
    # test only once every stream has ended, or the flush and that cycle lock each other (PostgreSQL: deadlock).
    deadline = time.monotonic() + 30
    while eventstream.open_streams() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not eventstream.open_streams(), "an event stream of the live server never ended"


@pytest.fixture
def driven(portal, monkeypatch) -> Portal:
    """The client's pauses run one job cycle each instead of sleeping (and move the client's clock as far), and
    so do the portal's own pauses while a long-poll or an event stream waits (in the live server's thread, while
    the client waits for the answer): jobs move along exactly while someone waits. One long-poll lasts 0.2 s."""
    seen = {"t": 0.0}

    def pause(seconds: float) -> None:
        seen["t"] += max(seconds, STEP)
        portal.cycle()

    monkeypatch.setattr("gpuportal.waiting.sleep", pause)
    monkeypatch.setattr("gpuportal.waiting.monotonic", lambda: seen["t"])
    monkeypatch.setattr("gpuportal.waiting.LONG_POLL_SECONDS", 0.2)
    monkeypatch.setattr("jobs.eventstream.sleep", lambda seconds: portal.cycle())
    return portal


@pytest.fixture
def gp(portal):
    """Run the real `gpuportal` command (its click group) against the live portal; returns the click Result."""
    from gpuportal.cli import cli

    runner = CliRunner()

    def run(*args: str, input: str | None = None, login: bool = True):
        head = ["--url", portal.url, "--token", portal.token] if login else []
        return runner.invoke(cli, [*head, *args], input=input, catch_exceptions=False)

    return run

"""The embedded demo's notebooks, run through the real loop (job cycle, dcgm-exporter scrape of the simulated
cluster, culler) with time moved by time-machine: alice's bursty notebook keeps running with its maximum age
counting down, bob's idle one is warned and then stopped for idleness, and its volume stays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from cluster.sim import SimulatedCluster
from core.models import Notification
from gpus.reconcile import sync_inventory
from jobs.choices import NotebookState, StopReason
from jobs.cycle.run import run_cycle
from jobs.demo import seed_quotas_and_jobs
from jobs.models import Notebook
from jobs.notebook.sessions import cull_notebooks
from telemetry import tasks as telemetry_tasks
from tests.sim_objects import DEMO_SCENARIO


@pytest.mark.django_db
def test_the_demo_shows_a_countdown_and_an_idle_stop(tmp_path, people, settings, monkeypatch):
    settings.PORTAL_NOTEBOOK_WARNING_SECONDS = 300
    with time_machine.travel(datetime(2026, 3, 2, 9, 0, tzinfo=UTC), tick=False) as travel:
        sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
        monkeypatch.setattr(telemetry_tasks, "get_backend", lambda: sim)
        sync_inventory(sim)
        seed_quotas_and_jobs()
        explore, forgotten = Notebook.objects.get(name="explore"), Notebook.objects.get(name="forgotten")
        left = []
        for step in range(2 * 17):  # 17 minutes in 30-second steps, like beat
            run_cycle(sim)
            telemetry_tasks.scrape_dcgm()
            if step % 2:
                cull_notebooks(sim)
                explore.refresh_from_db()
                if explore.expires_at:
                    left.append((explore.expires_at - datetime.now(UTC)).total_seconds())
            travel.shift(30)
        explore.refresh_from_db()
        forgotten.refresh_from_db()
    assert explore.state == NotebookState.ACTIVE and explore.session.state == "running"
    assert left and left == sorted(left, reverse=True) and left[0] - left[-1] >= 14 * 60  # the countdown moves
    assert (forgotten.state, forgotten.stop_reason) == (NotebookState.STOPPED, StopReason.IDLE)
    assert forgotten.idle_warned_at is not None
    assert forgotten.stopped_at >= forgotten.idle_warned_at + timedelta(seconds=300)
    assert sim.get_pvc("team-nlp", forgotten.volume_name)["status"]["phase"] == "Bound"
    bob_titles = list(Notification.objects.filter(user=people["bob"]).values_list("title", flat=True))
    assert any("forgotten stops in" in t for t in bob_titles) and any("forgotten was stopped" in t for t in bob_titles)
    assert not any("explore" in m.subject for m in mail.outbox)

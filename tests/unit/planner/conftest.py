"""Fixtures of the planner's app tests: runs as rows (with a results document in the engine's shape, run_results.py,
for the pages, the API's reads and the CSV), and a small real history (finished jobs in the demo inventory) for the
task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions
from planner.choices import PlanState
from planner.models import PlanRun
from tests.factories import finished_job
from tests.sim_objects import H100

from .run_results import results_for_teams


@pytest.fixture
def make_run(people):
    def make(state=PlanState.SUCCEEDED, results=None, **fields):
        now = timezone.now()
        if state == PlanState.SUCCEEDED and results is None:
            results = results_for_teams(people["vision"].pk, people["nlp"].pk)
        return PlanRun.objects.create(
            created_by=people["admin"],
            window_start=now - timedelta(days=7),
            window_end=now,
            state=state,
            proposals=[
                {
                    "name": "3g everywhere",
                    "changes": [{"type": "mig", "nodes": ["gpu-a100-mig-01"], "preset": "all-3g.40gb", "per_gpu": []}],
                }
            ],
            options={"preemption": True, "borrowing": True, "suggest": 1},
            results=results,
            **fields,
        )

    return make


@pytest.fixture
def history_jobs(inventory, people):
    """A small real history: eight finished H100 jobs of vision and nlp over the last six hours, and quotas."""
    rc = ResourceClass.objects.get(key=H100)
    for team in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[team], rc, 8, 16)
    now = timezone.now().replace(microsecond=0)
    made = []
    for i in range(8):
        team = "vision" if i % 2 == 0 else "nlp"
        submitted = now - timedelta(hours=6) + timedelta(minutes=30 * i)
        owner = people["alice" if team == "vision" else "bob"]
        started_after = timedelta(minutes=2 + i)
        made.append(
            finished_job(
                people[team],
                owner,
                rc,
                submitted,
                started_after,
                timedelta(minutes=50) - started_after,
                name=f"train-{i}",
                count=2 + (i % 3) * 2,
            )  # fmt: skip
        )
    return made


def aware(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)

"""The admission step's round trips (jobs.cycle.admit): a cycle that admits and explains makes the same queries
whatever the size of the queue, with and without gangs in it, writing every admission in one UPDATE, every
changed wait in one UPDATE and the timeline in one INSERT; and a cycle that only explains waits that did not
change writes nothing for those jobs (what users see of them stays as it was)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.choices import EventKind, JobState
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.models import Job, JobEvent
from tests.factories import submit_job
from tests.sim_objects import H100
from tests.unit.jobs.gang_kit import GangKind
from vocab.names import ZONE_LABEL

# The demo cluster (tests/conftest.py) with vision's H100 quota 16 guaranteed and at most, nlp's 8.
pytestmark = pytest.mark.cluster(quotas={"vision": (16, 16), "nlp": (8, 8)})


def submit(people, team="vision", count=1, workers=1, **fields) -> Job:
    job = submit_job(people["alice" if team == "vision" else "bob"], team, H100, count=count)
    if workers > 1:
        Job.objects.filter(pk=job.pk).update(kind=GangKind.name, workers=workers, **fields)
    return job


def fill_queue(people, n: int, gangs: bool) -> None:
    """``n`` one-GPU jobs of vision (16 fit its quota, the rest wait for it) and, with gangs, ``n`` gangs of nlp
    of 2 workers × 2 GPUs within one zone (2 fit its quota of 8, the rest wait for it)."""
    Job.objects.all().delete()
    for _ in range(n):
        submit(people)
        if gangs:
            submit(people, team="nlp", count=2, workers=2, topology_key=ZONE_LABEL, topology_mode="require")


def writes(queries) -> dict[str, int]:
    # An executemany is one round trip, logged as "<n> times: <sql>".
    sqls = [re.sub(r"^\d+ times: ", "", q["sql"]) for q in queries]
    return {
        "job updates": sum(sql.startswith(f'UPDATE "{Job._meta.db_table}"') for sql in sqls),
        "event inserts": sum(sql.startswith(f'INSERT INTO "{JobEvent._meta.db_table}"') for sql in sqls),
    }


@pytest.mark.parametrize("gangs", [False, True], ids=["no gangs", "with gangs"])
def test_an_admitting_cycle_makes_the_same_queries_for_any_queue(cluster, clock, people, gang_kind, gangs):
    def first_cycle(n: int):
        fill_queue(people, n, gangs)
        result = CycleResult()
        with CaptureQueriesContext(connection) as queries:
            admit(result, clock.now)
        assert result.admitted == (18 if gangs else 16) and result.waiting == (2 * n if gangs else n) - result.admitted
        return queries

    first_cycle(20)  # the first cycle ever also creates the lock's row and the teams' fair-share rows
    small, large = first_cycle(20), first_cycle(60)
    assert len(small) == len(large)
    # Admissions in one UPDATE, the changed waits in another, every timeline line in one INSERT.
    assert writes(small) == writes(large) == {"job updates": 2, "event inserts": 1}
    assert JobEvent.objects.filter(kind=EventKind.ADMITTED).count() == (18 if gangs else 16)
    assert JobEvent.objects.filter(kind=EventKind.WAITING).count() == (120 if gangs else 60) - (18 if gangs else 16)


@pytest.mark.parametrize("gangs", [False, True], ids=["no gangs", "with gangs"])
def test_an_explain_only_cycle_writes_nothing_for_waits_that_did_not_change(cluster, clock, people, gang_kind, gangs):
    fill_queue(people, 30, gangs)
    admit(CycleResult(), clock.now)  # admits what fits; the rest wait (positions still counted the admitted)
    admit(CycleResult(), clock.now)  # the waiting move up the queue: their positions are written once
    shown = list(Job.objects.filter(state=JobState.QUEUED).order_by("pk").values_list(
        "pk", "wait_reason", "wait_message", "wait_detail", "queue_position"))  # fmt: skip
    events = JobEvent.objects.count()
    assert shown and all(reason == "quota" for _, reason, *_ in shown)

    result = CycleResult()
    with CaptureQueriesContext(connection) as queries:
        admit(result, clock.now)
    assert result.waiting == len(shown) and result.admitted == 0
    assert writes(queries) == {"job updates": 0, "event inserts": 0}
    assert JobEvent.objects.count() == events
    assert shown == list(Job.objects.filter(state=JobState.QUEUED).order_by("pk").values_list(
        "pk", "wait_reason", "wait_message", "wait_detail", "queue_position"))  # fmt: skip

    # A cancel frees quota for vision's oldest waiting job: it is admitted (one UPDATE, one timeline line), and
    # vision's jobs behind it keep their reason, sentence and position (it counted before them and still does),
    # so nothing else of vision is written. With gangs, vision now holds less than nlp and goes first more
    # often: nlp's gangs move down the queue, and their positions are written in one more UPDATE (no timeline
    # line: their reason and sentence did not change).
    admitted = Job.objects.filter(team__slug="vision", state=JobState.ADMITTED).order_by("pk").first()
    Job.objects.filter(pk=admitted.pk).update(state=JobState.CANCELLED)
    result = CycleResult()
    with CaptureQueriesContext(connection) as queries:
        admit(result, clock.now)
    assert result.admitted == 1
    assert writes(queries) == {"job updates": 2 if gangs else 1, "event inserts": 1}
    assert JobEvent.objects.count() == events + 1
    (started,) = [row for row in shown if Job.objects.get(pk=row[0]).state == JobState.ADMITTED]
    now_shown = list(Job.objects.filter(state=JobState.QUEUED).order_by("pk").values_list(
        "pk", "wait_reason", "wait_message", "wait_detail", "queue_position"))  # fmt: skip
    gang_ids = set(Job.objects.filter(workers__gt=1).values_list("pk", flat=True))
    assert [row for row in shown if row != started and row[0] not in gang_ids] == [
        row for row in now_shown if row[0] not in gang_ids
    ]
    assert [row[:3] for row in now_shown if row[0] in gang_ids] == [row[:3] for row in shown if row[0] in gang_ids]

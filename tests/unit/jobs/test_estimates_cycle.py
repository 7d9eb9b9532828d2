"""Start-time estimates refreshed by the job cycle (jobs.cycle.run → jobs.cycle.estimates): the jobs left waiting
get a range from the queue replayed forward, learned from similar finished work; a replay begins at most every
PORTAL_ESTIMATE_EVERY seconds, on the cycle's own snapshot, after admission and the launches (never inside
``admit``), and each cycle advances the one in progress; shown in the API only while queued, on the job page and
the job list."""

from __future__ import annotations

import gc
from datetime import timedelta

import pytest
from django.urls import reverse

from jobs.choices import JobState
from jobs.cycle import admit as admit_module
from jobs.cycle import estimates
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.models import Job
from tests.factories import cycle, submit_job
from tests.sim_objects import H100

# vision may hold 2 H100s: two one-GPU jobs run, the third waits for one of them to end.
pytestmark = pytest.mark.cluster(quotas={"vision": (2, 2)})


@pytest.fixture(autouse=True)
def fresh_refresher(monkeypatch):
    """Each test's own process state (what a worker keeps between refreshes)."""
    monkeypatch.setattr(estimates, "REFRESHER", estimates.Refresher())


def queue_three(people, **fields) -> list[Job]:
    return [submit_job(people["alice"], "vision", H100, count=1, **fields) for _ in range(3)]


def finished_like(people, clock, seconds: float, n: int = 8, **fields) -> None:
    """``n`` jobs of alice's that ran ``seconds`` each and finished within the last day."""
    for i in range(n):
        job = submit_job(people["alice"], "vision", H100, count=1, **fields)
        end = clock.now - timedelta(hours=1 + i)
        Job.objects.filter(pk=job.pk).update(
            state=JobState.SUCCEEDED, started_at=end - timedelta(seconds=seconds + 60 * i), finished_at=end
        )


def test_the_cycle_itself_estimates_nothing(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    *_, third = queue_three(people)
    admit(CycleResult(), clock.now)
    third.refresh_from_db()
    assert third.estimated_at is None


def test_the_waiting_job_is_estimated_from_similar_finished_work(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    finished_like(people, clock, 1800)
    first, second, third = queue_three(people)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    assert third.state == JobState.QUEUED and third.estimated_at is not None
    # The two admitted jobs have run nothing yet: the third starts when the first of them ends, after about the
    # 30 to 37 minutes alice's jobs ran (on the estimate's grid: 5 minutes of the 6-hour horizon); calibrated
    # (estimates.WIDEN), the range's end is pushed out to twice that wait, its start never before that first end.
    low = (third.estimated_start_low - clock.now).total_seconds()
    high = (third.estimated_start_high - clock.now).total_seconds()
    assert estimates.WIDEN == (0.5, 2.0, 0.0)
    assert 1800 <= low <= 1800 + 7 * 60 + 300
    assert 2 * 1800 <= high <= 2 * (1800 + 7 * 60 + 300)
    assert third.estimated_start.startswith("likely ")
    # Admitted jobs show none.
    first.refresh_from_db()
    assert first.state == JobState.ADMITTED and first.estimated_start == ""


def test_nothing_learned_means_the_maximum_runtime_and_beyond_the_horizon_says_so(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    settings.PORTAL_ESTIMATE_HORIZON = 2 * 3600
    *_, third = queue_three(people, max_runtime_seconds=3 * 3600)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    assert third.estimated_at is not None and third.estimated_start_low is None
    assert third.estimated_start == "not within the next 2 hours"


def test_the_refresh_runs_at_most_every_interval(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 600
    *_, third = queue_three(people)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    stamped = third.estimated_at
    assert stamped is not None
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    assert third.estimated_at == stamped


def test_off_writes_nothing(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 0
    *_, third = queue_three(people)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    assert third.estimated_at is None and third.estimated_start == ""


def test_the_api_page_and_list_show_the_estimate_while_queued(cluster, clock, people, settings, client, api_client):
    settings.PORTAL_ESTIMATE_EVERY = 60
    finished_like(people, clock, 1800)
    first, _, third = queue_three(people)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    api_client.force_login(people["alice"])
    body = api_client.get(f"/api/v1/jobs/{third.pk}/").json()
    assert body["estimated_start"]["text"] == third.estimated_start
    assert body["estimated_start"]["low"] == third.estimated_start_low.isoformat()
    assert api_client.get(f"/api/v1/jobs/{first.pk}/").json()["estimated_start"] is None
    client.force_login(people["alice"])
    page = client.get(third.get_absolute_url()).content.decode()
    assert "Estimated start:" in page and third.estimated_start in page
    listing = client.get(reverse("jobs:job-list")).content.decode()
    assert f"Starts {third.estimated_start}" in listing


def test_an_estimate_that_fails_is_logged_and_admission_goes_on(cluster, clock, people, settings, monkeypatch, caplog):
    settings.PORTAL_ESTIMATE_EVERY = 60

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(estimates, "models", broken)
    first, _, third = queue_three(people)
    result = CycleResult()
    admit(result, clock.now)
    assert estimates.refresh_now(clock.now, budget_s=None) == 0
    assert result.admitted == 2
    first.refresh_from_db()
    third.refresh_from_db()
    assert first.state == JobState.ADMITTED and third.estimated_at is None
    assert "start-time estimates were not refreshed" in caplog.text


def test_a_replay_spread_over_refreshes_gives_the_answer_of_one_in_a_go(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    finished_like(people, clock, 1800)
    *_, third = queue_three(people)
    admit(CycleResult(), clock.now)
    estimates.refresh_now(clock.now, budget_s=None)
    third.refresh_from_db()
    whole = (third.estimated_start_low, third.estimated_start_high)
    Job.objects.filter(pk=third.pk).update(estimated_start_low=None, estimated_start_high=None, estimated_at=None)
    sliced = estimates.Refresher()
    turns, written = 0, 0
    while not written:
        turns += 1
        assert turns < 100
        written = sliced.turn(lambda: estimates.build_snapshot(clock.now)[0], clock.now, budget_s=0)
        # While the replay is in progress the collector leaves what the process holds alone; its end lets it go.
        assert (gc.get_freeze_count() > 0) == (sliced.replay is not None)
    assert gc.get_freeze_count() == 0
    third.refresh_from_db()
    # A step a turn: learning, the jobs' work, the two passes' steps, the writes.
    assert turns > 3 and sliced.took == turns
    assert (third.estimated_start_low, third.estimated_start_high) == whole


def test_a_refresh_that_finds_nothing_changed_does_nothing(cluster, clock, people, settings, django_assert_num_queries):
    settings.PORTAL_ESTIMATE_EVERY = 60
    *_, third = queue_three(people)
    admit(CycleResult(), clock.now)
    snap = estimates.build_snapshot(clock.now)[0]
    refresher = estimates.Refresher()
    assert refresher.turn(lambda: snap, clock.now, budget_s=None) == 1
    with django_assert_num_queries(0):
        assert refresher.turn(lambda: snap, clock.now, budget_s=None) == 0
    # A new job in the queue: the next refresh replays again.
    fourth = submit_job(people["alice"], "vision", H100, count=1)
    assert refresher.turn(lambda: estimates.build_snapshot(clock.now)[0], clock.now, budget_s=None) == 2
    fourth.refresh_from_db()
    assert fourth.estimated_at is not None


def test_work_finished_since_the_last_replay_is_learned_by_the_next(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    *_, third = queue_three(people, max_runtime_seconds=4 * 3600)
    admit(CycleResult(), clock.now)
    refresher = estimates.Refresher()
    assert refresher.turn(lambda: estimates.build_snapshot(clock.now)[0], clock.now, budget_s=None) == 1
    third.refresh_from_db()
    # Nothing learned: the running jobs run their 4 hours.
    assert (third.estimated_start_low - clock.now).total_seconds() >= 4 * 3600
    finished_like(people, clock, 1800, max_runtime_seconds=4 * 3600)
    clock.advance(600)
    assert refresher.turn(lambda: estimates.build_snapshot(clock.now)[0], clock.now, budget_s=None) == 1
    third.refresh_from_db()
    low = (third.estimated_start_low - clock.now).total_seconds()
    assert low <= 1800 + 7 * 60 + 300


def counted_snapshots(monkeypatch) -> list[float]:
    """Every snapshot admission's code builds (the cycle's, or a replay's own), by its time."""
    built: list[float] = []
    real = admit_module.build_snapshot

    def counting(now, fleet=None):
        built.append(now.timestamp())
        return real(now, fleet)

    monkeypatch.setattr(admit_module, "build_snapshot", counting)
    monkeypatch.setattr(estimates, "build_snapshot", counting)
    return built


def test_the_cycle_refreshes_on_the_snapshot_it_admitted_on(cluster, clock, people, settings, monkeypatch):
    settings.PORTAL_ESTIMATE_EVERY = 60
    finished_like(people, clock, 1800)
    first, _, third = queue_three(people)
    built = counted_snapshots(monkeypatch)
    cycle(cluster, clock)
    # One snapshot, the cycle's: the replay that began on it (a small one: whole within the cycle's turn) built none.
    assert built == [clock.now.timestamp()]
    assert estimates.REFRESHER.replay is None and estimates.REFRESHER.took == 1
    third.refresh_from_db()
    assert third.state == JobState.QUEUED and third.estimated_at is not None
    assert 1800 <= (third.estimated_start_low - clock.now).total_seconds() <= 1800 + 7 * 60 + 300
    first.refresh_from_db()
    assert first.state == JobState.ADMITTED and first.estimated_at is None  # admitted by that cycle: not written


def test_each_cycle_advances_the_replay_in_progress(cluster, clock, people, settings, monkeypatch):
    """A replay cut as finely as it goes (a piece a cycle) takes a turn in every cycle, though a replay may begin
    only once an interval, and no turn builds a snapshot: the first takes the cycle's, the others go on with it."""
    settings.PORTAL_ESTIMATE_EVERY = 600
    monkeypatch.setattr(estimates, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(estimates, "SHARE", 0.0)
    finished_like(people, clock, 1800)
    *_, third = queue_three(people)
    built = counted_snapshots(monkeypatch)
    cycles = 0
    while True:
        cycles += 1
        assert cycles < 100
        cycle(cluster, clock, 1)
        if estimates.REFRESHER.replay is None:
            break
        assert estimates.REFRESHER.calls == cycles
    assert cycles > 3 and estimates.REFRESHER.took == cycles
    assert len(built) == cycles  # the cycles' own
    third.refresh_from_db()
    assert third.estimated_at is not None and third.estimated_start_low is not None
    # The interval holds for the next replay: the cycle that follows begins none.
    cycle(cluster, clock, 1)
    assert estimates.REFRESHER.replay is None and estimates.REFRESHER.calls == cycles and len(built) == cycles + 1


def test_a_turn_stops_at_its_wall_time_budget_too(cluster, clock, people, settings):
    settings.PORTAL_ESTIMATE_EVERY = 60
    queue_three(people)
    admit(CycleResult(), clock.now)
    snap = estimates.build_snapshot(clock.now)[0]
    refresher = estimates.Refresher()
    # No CPU budget, no wall time: a piece, and the replay goes on in the next turn.
    assert refresher.turn(lambda: snap, clock.now, None, wall_s=0) == 0
    assert refresher.replay is not None and refresher.calls == 1
    assert refresher.turn(lambda: snap, clock.now, None) == 1
    assert refresher.replay is None and refresher.took == 2

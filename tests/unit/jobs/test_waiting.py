"""Waiting without polling (issue 18): the long-poll GET /api/v1/jobs/{id}/wait/ answers when the job changes
during the wait or at its timeout, reading the database in short pauses and giving the connection back before
each; a wrong timeout/state/after_event is a 400 naming each. The server-sent event streams of a job and of a
team: ids, kinds, JSON data, resuming after Last-Event-ID, keep-alive comments, the ``end`` of an ended job, and
team streams only for the team's members.

The module's clock (jobs.eventstream.sleep / monotonic) is replaced by a fake one whose pauses can act: a cancel
or a new job happens exactly while a request waits."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions, eventstream
from jobs.choices import JobState
from jobs.models import Job, JobEvent
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people, settings):
    settings.PORTAL_WAIT_POLL_SECONDS = 1.0
    settings.PORTAL_EVENT_STREAM_SECONDS = 5.0
    settings.PORTAL_EVENT_HEARTBEAT_SECONDS = 2.0
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    carol = member(people["vision"])
    return {**people, "carol": carol, "rc": rc}


def fields(**overrides) -> dict:
    return {
        "name": "train", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04", "command": ["sleep", "60"], "args": [],
        "env": [], "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "priority": 50, "preemptible": False,
        "max_runtime_seconds": 3600,
    } | overrides  # fmt: skip


def queued(setup, owner="carol", team="vision", **overrides) -> Job:
    return actions.submit_job(setup[owner], setup[team], setup["rc"], fields(**overrides)).job


class FakeClock:
    """jobs.eventstream's clock: each pause moves it on and runs the next of ``actions`` (if any is left)."""

    def __init__(self, monkeypatch, *actions):
        self.now, self.pauses, self.actions, self.closes = 1000.0, [], list(actions), 0
        monkeypatch.setattr(eventstream, "monotonic", lambda: self.now)
        monkeypatch.setattr(eventstream, "sleep", self.sleep)

        class Connection:  # counts closes; the test's transaction stays open (it is the real in_atomic_block)
            in_atomic_block = False

            def close(inner):
                self.closes += 1

        monkeypatch.setattr(eventstream, "connection", Connection())

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        if self.actions:
            self.actions.pop(0)()


def parse(response) -> list[dict]:
    """The stream's events as {"event", "id", "data"} (comments as {"comment": text})."""
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event: dict = {}
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "":
                event["comment"] = value
            elif name == "data":
                event["data"] = json.loads(value)
            else:
                event[name] = value
        events.append(event)
    return events


# -- the long-poll --------------------------------------------------------------------------------------------


def test_the_long_poll_answers_when_the_job_is_cancelled_during_the_wait(api_client, setup, monkeypatch):
    job = queued(setup)
    clock = FakeClock(monkeypatch, lambda: None, lambda: actions.cancel_job(setup["carol"], job))
    api_client.force_authenticate(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?state=queued&timeout=30")
    assert response.status_code == 200, response.json()
    data = response.json()
    assert (data["id"], data["state"], data["timed_out"]) == (job.pk, "cancelled", False)
    # It read the database again after each short pause (and gave its connection back before each one).
    assert clock.pauses == [1.0, 1.0] and clock.closes == 2


def test_the_long_poll_answers_at_a_new_timeline_event_while_the_state_stays(api_client, setup, monkeypatch):
    job = queued(setup)
    newest = JobEvent.objects.filter(job=job).latest("pk").pk
    FakeClock(monkeypatch, lambda: actions.change_priority(setup["alice"], job, 90))
    api_client.force_authenticate(setup["carol"])
    data = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?after_event={newest}&timeout=10").json()
    assert (data["state"], data["timed_out"]) == ("queued", False)
    assert data["priority"] == api_client.get(f"/api/v1/jobs/{job.pk}/").json()["priority"] == "90"


def test_the_long_poll_times_out_with_the_job_unchanged(api_client, setup, monkeypatch):
    job = queued(setup)
    clock = FakeClock(monkeypatch)
    api_client.force_authenticate(setup["carol"])
    data = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?state=queued&timeout=2.5").json()
    assert (data["state"], data["timed_out"]) == ("queued", True)
    assert clock.pauses == [1.0, 1.0, 0.5]  # never past the timeout


def test_without_state_it_waits_for_the_end_and_an_ended_job_answers_at_once(api_client, setup, monkeypatch):
    job = queued(setup)
    clock = FakeClock(monkeypatch)
    api_client.force_authenticate(setup["carol"])
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=3").json()["timed_out"] is True
    assert len(clock.pauses) == 3
    actions.cancel_job(setup["carol"], job)
    data = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?state=cancelled&timeout=60").json()
    assert (data["state"], data["timed_out"]) == ("cancelled", False) and len(clock.pauses) == 3


def test_the_operators_cap_shortens_a_wait_without_refusing_it(api_client, setup, monkeypatch, settings):
    settings.PORTAL_WAIT_MAX_SECONDS = 2
    job = queued(setup)
    clock = FakeClock(monkeypatch)
    api_client.force_authenticate(setup["carol"])
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=60").json()["timed_out"] is True
    assert sum(clock.pauses) == 2


def test_a_wrong_long_poll_names_every_parameter(api_client, setup):
    job = queued(setup)
    api_client.force_authenticate(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=61&state=finished&after_event=-1")
    assert response.status_code == 400
    problems = response.json()
    assert set(problems) == {"timeout", "state", "after_event"}
    assert "0 to 60" in problems["timeout"][0] and "queued" in problems["state"][0]
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=soon").json()["timeout"]


def test_the_long_poll_of_another_teams_job_is_404(api_client, setup):
    job = queued(setup)
    api_client.force_authenticate(setup["bob"])
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=1").status_code == 404


# -- event streams --------------------------------------------------------------------------------------------


def test_a_job_stream_sends_the_timeline_then_new_events_then_end(api_client, setup, monkeypatch):
    job = queued(setup)
    FakeClock(monkeypatch, lambda: actions.cancel_job(setup["carol"], job))
    api_client.force_authenticate(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    events = [e for e in parse(response) if "data" in e]
    timeline = list(JobEvent.objects.filter(job=job).order_by("pk"))
    assert [(e["event"], int(e["id"])) for e in events[:-1]] == [(t.kind, t.pk) for t in timeline]
    assert [t.kind for t in timeline] == ["submitted", "cancelled"]
    cancelled = events[1]["data"]
    assert (cancelled["job"], cancelled["job_name"], cancelled["state"], cancelled["kind"]) == (
        job.pk, "train", "cancelled", "cancelled",
    )  # fmt: skip
    assert cancelled["message"] == "Cancelled by carol." and cancelled["at"] and cancelled["id"] == timeline[1].pk
    assert events[-1]["event"] == "end" and "id" not in events[-1]


def test_a_queued_jobs_stream_events_carry_its_start_time_estimate(api_client, setup, monkeypatch):
    job = queued(setup)
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        estimated_start_low=now + timedelta(minutes=20), estimated_start_high=now + timedelta(minutes=65),
        estimated_at=now,
    )  # fmt: skip
    job.refresh_from_db()
    FakeClock(monkeypatch, lambda: actions.cancel_job(setup["carol"], job))
    api_client.force_authenticate(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/", HTTP_ACCEPT="text/event-stream")
    submitted, cancelled = [e["data"] for e in parse(response) if "data" in e][:2]
    assert submitted["estimated_start"] == job.estimated_start and job.estimated_start.startswith("likely between")
    assert cancelled["estimated_start"] is None  # read once the job had left the queue


def test_a_job_stream_resumes_after_last_event_id(api_client, setup, monkeypatch):
    job = queued(setup)
    actions.cancel_job(setup["carol"], job)
    first, second = JobEvent.objects.filter(job=job).order_by("pk")
    FakeClock(monkeypatch)
    api_client.force_authenticate(setup["carol"])
    url = f"/api/v1/jobs/{job.pk}/events/stream/"
    resumed = parse(api_client.get(url, HTTP_LAST_EVENT_ID=str(first.pk)))
    assert [int(e["id"]) for e in resumed if "id" in e] == [second.pk]
    assert [int(e["id"]) for e in parse(api_client.get(f"{url}?after={second.pk}")) if "id" in e] == []
    bad = api_client.get(url, HTTP_LAST_EVENT_ID="yesterday")
    assert bad.status_code == 400 and "Last-Event-ID" in bad.json()


def test_a_quiet_stream_sends_keep_alives_and_ends_after_its_time(api_client, setup, monkeypatch):
    job = queued(setup)
    clock = FakeClock(monkeypatch)
    api_client.force_authenticate(setup["carol"])
    events = parse(api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/"))
    assert [e["event"] for e in events if "event" in e] == ["submitted"]  # no end: the job goes on
    assert sum(1 for e in events if e.get("comment") == "keep-alive") == 2  # every 2 s of 5
    assert sum(clock.pauses) == 5


def test_a_team_stream_sends_only_its_teams_new_events(api_client, setup, monkeypatch):
    old = queued(setup)
    newest = JobEvent.objects.latest("pk").pk
    made = {}

    def submit_two():
        made["nlp"] = queued(setup, owner="bob", team="nlp")
        made["vision"] = queued(setup, name="eval")

    FakeClock(monkeypatch, submit_two)
    api_client.force_authenticate(setup["carol"])
    events = parse(api_client.get("/api/v1/teams/vision/events/stream/"))
    ready = next(e for e in events if e.get("event") == "ready")
    assert int(ready["id"]) == newest  # a reconnect from here misses nothing
    sent = [e["data"] for e in events if e.get("event") not in (None, "ready")]
    assert [(d["job"], d["kind"]) for d in sent] == [(made["vision"].pk, "submitted")]
    assert old.pk not in {d["job"] for d in sent}
    # Resuming from before the old job's events sends them (and still nothing of nlp).
    resumed = parse(api_client.get("/api/v1/teams/vision/events/stream/", HTTP_LAST_EVENT_ID="0"))
    jobs = {e["data"]["job"] for e in resumed if e.get("event") not in (None, "ready", "end")}
    assert jobs == {old.pk, made["vision"].pk}
    assert not any(e.get("event") == "ready" for e in resumed)


@pytest.mark.parametrize(("who", "code"), [("carol", 200), ("alice", 200), ("admin", 200), ("bob", 404),
                                           ("outsider", 404)])  # fmt: skip
def test_a_team_stream_is_for_its_members_only(api_client, setup, monkeypatch, who, code, settings):
    settings.PORTAL_EVENT_STREAM_SECONDS = 0
    FakeClock(monkeypatch)
    api_client.force_authenticate(setup[who])
    response = api_client.get("/api/v1/teams/vision/events/stream/")
    assert response.status_code == code
    if code == 404:
        assert "vision" in response.json()["detail"]
    assert api_client.get("/api/v1/teams/no-such-team/events/stream/").status_code == 404


def test_streams_need_a_sign_in(api_client, setup):
    job = queued(setup)
    assert api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/").status_code in (401, 403)
    assert api_client.get("/api/v1/teams/vision/events/stream/").status_code in (401, 403)
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/").status_code in (401, 403)
    assert JobState.QUEUED == Job.objects.get(pk=job.pk).state


def test_the_schema_documents_the_long_poll_and_the_streams(openapi_schema):
    schema = openapi_schema
    paths = schema["paths"]
    wait = paths["/api/v1/jobs/{id}/wait/"]["get"]
    assert {p["name"] for p in wait["parameters"]} >= {"id", "timeout", "state", "after_event"}
    assert wait["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobWait")
    assert "timed_out" in schema["components"]["schemas"]["JobWait"]["properties"]
    for path in ("/api/v1/jobs/{id}/events/stream/", "/api/v1/teams/{slug}/events/stream/"):
        stream = paths[path]["get"]
        assert "text/event-stream" in stream["responses"]["200"]["content"]
        assert "after" in {p["name"] for p in stream["parameters"]}
    cancel = paths["/api/v1/jobs/{id}/cancel/"]["post"]
    assert "requestBody" in cancel
    # Past the cap on open streams and long-polls (jobs.api.stream_cap): 429, said in the operation's own words.
    for path in ("/api/v1/jobs/{id}/wait/", "/api/v1/jobs/{id}/events/stream/", "/api/v1/jobs/{id}/logs/stream/",
                 "/api/v1/teams/{slug}/events/stream/"):  # fmt: skip
        assert "PORTAL_STREAMS_PER_IDENTITY" in paths[path]["get"]["responses"]["429"]["description"], path
    # Elsewhere the shared answer (core.api.schema_hooks), which says nothing of streams.
    assert cancel["responses"]["429"] == {"$ref": "#/components/responses/TooManyRequests"}
    assert "PORTAL_STREAMS_PER_IDENTITY" not in schema["components"]["responses"]["TooManyRequests"]["description"]


def test_a_teams_streams_send_what_the_process_read_once_for_all_of_them(api_client, setup, monkeypatch, settings):
    """The process reads the new events once a pause for all its streams (jobs.eventstream.RECENT): a team's stream
    sends its team's from there and reads the database itself only the first time round, whatever other teams
    write meanwhile."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.PORTAL_EVENT_HEARTBEAT_SECONDS = 60.0  # no keep-alive look within the stream's 5 s
    made = {}
    other_teams = [lambda: queued(setup, owner="bob", team="nlp") for _ in range(3)]
    FakeClock(monkeypatch, *other_teams, lambda: made.setdefault("vision", queued(setup, name="eval")))
    api_client.force_authenticate(setup["carol"])
    with CaptureQueriesContext(connection) as captured:
        events = parse(api_client.get("/api/v1/teams/vision/events/stream/"))
    sent = [e["data"] for e in events if e.get("event") not in (None, "ready")]
    assert [(d["job"], d["kind"]) for d in sent] == [(made["vision"].pk, "submitted")]
    assert sent[0]["job_name"] == "eval" and sent[0]["state"] == "queued"
    team = setup["vision"].pk
    own_reads = [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].startswith("SELECT") and f'"jobs_job"."team_id" = {team}' in q["sql"] and "LIMIT 500" in q["sql"]
    ]
    assert len(own_reads) == 1, own_reads


def test_what_one_read_brings_goes_out_in_one_write(api_client, setup, monkeypatch, settings):
    """Three events written during one pause reach a team's stream as one chunk, not three: with many streams open
    the writes (and the proxy's copies of them) are what costs."""
    settings.PORTAL_EVENT_HEARTBEAT_SECONDS = 60.0
    made = []
    FakeClock(monkeypatch, lambda: made.extend(queued(setup, name=f"eval-{i}") for i in range(3)))
    api_client.force_authenticate(setup["carol"])
    chunks = list(api_client.get("/api/v1/teams/vision/events/stream/").streaming_content)
    with_events = [chunk for chunk in chunks if b"event: submitted" in chunk]
    assert len(with_events) == 1, chunks
    ids = [int(line[4:]) for line in with_events[0].decode().splitlines() if line.startswith("id: ")]
    assert ids == sorted(JobEvent.objects.filter(job__in=made, kind="submitted").values_list("pk", flat=True))

"""Waiting without polling, from the client's side, against a live portal over HTTP: ``wait()`` long-polls (the
job moves while the portal holds the request) and falls back to polling only where the portal has no long-poll;
``events()`` and ``team_events()`` follow the event streams across reconnects (Last-Event-ID) without losing or
repeating an event; the CLI's ``jobs events`` and ``events --team``; ``--reason`` for someone else's work."""

from __future__ import annotations

import itertools
import json

import pytest

from accounts.choices import MembershipRole
from accounts.models import Membership
from gpuportal import Client, NotFound
from gpuportal import transport as api
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job, JobEvent
from tests.factories import UserFactory

from .conftest import H100

SPEC = {"team": "vision", "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "30"],
        "resource_class": H100}  # fmt: skip


@pytest.fixture
def client(portal) -> Client:
    return Client(portal.url, portal.token)


@pytest.fixture
def carols_job(people):
    """A job of carol, a plain member of vision (alice, the token's holder, leads vision)."""
    carol = UserFactory(username="carol")
    Membership.objects.create(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    fields = {**actions.spec_defaults(), "name": "carols", "image": SPEC["image"], "command": ["sleep", "600"]}
    return actions.submit_job(carol, people["vision"], ResourceClass.objects.get(key=H100), fields).job


def test_wait_long_polls_while_the_portal_moves_the_job(client, driven, monkeypatch):
    job = client.submit(SPEC)

    def no_plain_get(job_id):
        raise AssertionError("wait() polled the job instead of long-polling")

    monkeypatch.setattr(client, "get_job", no_plain_get)
    assert client.wait(job["id"])["state"] == "succeeded"
    assert driven.cycles > 0


def test_wait_falls_back_to_polling_only_on_a_portal_without_the_long_poll(client, driven, monkeypatch):
    monkeypatch.setattr(api, "JOB_WAIT", api.Endpoint("GET", "/api/v1/jobs/{id}/not-a-long-poll/"))
    job = client.submit(SPEC)
    assert client.wait(job["id"])["state"] == "succeeded"
    with pytest.raises(NotFound):  # a job that is not there stays an error, not a reason to poll
        client.wait(999999)


def test_one_long_poll_answers_at_a_change_or_says_it_timed_out(client, portal):
    job = client.submit(SPEC)
    answer = client.wait_for_change(job["id"], state="queued", timeout=0.2)
    assert (answer["state"], answer["timed_out"]) == ("queued", True)
    portal.cycle()
    answer = client.wait_for_change(job["id"], state="queued", timeout=5)
    assert answer["state"] != "queued" and answer["timed_out"] is False


def test_events_follow_a_job_across_reconnects_to_its_end(client, driven):
    job = client.submit(SPEC)
    seen = list(client.events(job["id"]))
    stored = list(JobEvent.objects.filter(job_id=job["id"]).order_by("pk").values_list("pk", "kind"))
    assert [(e["id"], e["kind"]) for e in seen] == stored  # none lost, none twice, across several streams
    assert seen[0]["kind"] == "submitted" and seen[-1]["kind"] == "succeeded" and seen[-1]["state"] == "succeeded"
    later = list(client.events(job["id"], after=seen[1]["id"]))
    assert [e["id"] for e in later] == [e["id"] for e in seen[2:]]


def test_team_events_are_the_teams_new_events_only(client, driven, people):
    job = client.submit(SPEC)
    first = list(itertools.islice(client.team_events("vision"), 3))
    assert {e["job"] for e in first} == {job["id"]} and first[0]["kind"] != "submitted"  # only what came after
    assert [e["id"] for e in first] == sorted({e["id"] for e in first})
    with pytest.raises(NotFound):
        next(client.team_events("nlp"))  # alice is not in nlp


def test_the_cli_follows_a_jobs_events_and_a_teams(driven, gp, client):
    job = client.submit(SPEC)
    result = gp("jobs", "events", str(job["id"]))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"#{job['id']} train  submitted: Submitted by alice" in lines[0] and "succeeded" in lines[-1]
    other = client.submit({**SPEC, "name": "other"})
    result = gp("events", "--team", "vision", "--count", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    assert len(events) == 2 and {e["job"] for e in events} <= {job["id"], other["id"]}
    result = gp("events", "--team", "nlp", "--count", "1")
    assert result.exit_code == 4 and "HTTP 404" in result.output


def test_cancelling_someone_elses_job_takes_a_reason(client, gp, carols_job):
    result = gp("jobs", "cancel", str(carols_job.pk))
    assert result.exit_code == 4 and "Say why you are stopping someone else's job" in result.output
    assert Job.objects.get(pk=carols_job.pk).state == "queued"
    result = gp("jobs", "cancel", str(carols_job.pk), "--reason", "Wrong team quota.")
    assert result.exit_code == 0, result.output
    assert JobEvent.objects.filter(job=carols_job).latest("pk").message == "Cancelled by alice: Wrong team quota."

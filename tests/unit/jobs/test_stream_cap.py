"""The cap on event streams and long-polls one identity holds open (jobs.api.stream_cap): the one past
PORTAL_STREAMS_PER_IDENTITY is answered 429 with Retry-After and a sentence, another user still gets through, and
a stream that is closed or ends, a long-poll that answered and a request that failed give their slot back."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.signals import request_finished
from django.db import close_old_connections
from prometheus_client import REGISTRY

from gpus.models import ResourceClass
from jobs import actions, eventstream
from jobs.api import stream_cap
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people, settings):
    settings.PORTAL_STREAMS_PER_IDENTITY = 2
    settings.PORTAL_EVENT_STREAM_SECONDS = 5.0
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    carol = member(people["vision"])
    fields = {
        "name": "train", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04", "command": ["sleep", "60"],
        "args": [], "env": [], "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "priority": 50,
        "preemptible": False, "max_runtime_seconds": 3600,
    }  # fmt: skip
    job = actions.submit_job(carol, people["vision"], rc, fields).job
    return {**people, "carol": carol, "job": job}


def refusals() -> float:
    return REGISTRY.get_sample_value("gpuportal_stream_cap_refusals_total") or 0.0


def test_the_stream_past_the_cap_is_429_another_user_passes_and_closing_one_frees_a_slot(api_client, setup):
    job = setup["job"]
    api_client.force_authenticate(setup["carol"])
    held = [
        api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/"),
        api_client.get("/api/v1/teams/vision/events/stream/"),
    ]
    assert [r.status_code for r in held] == [200, 200]  # open: their content is not read yet
    before = refusals()

    refused = api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/")
    assert refused.status_code == 429
    assert refused["Content-Type"] == "application/json"
    assert "2 event streams and long-polls open" in refused.json()["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 5  # the soonest of the open streams ends within 5 s
    # A long-poll and a followed log count against the same slots.
    assert api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=1").status_code == 429
    assert api_client.get(f"/api/v1/jobs/{job.pk}/logs/stream/").status_code == 429
    assert refusals() == before + 3

    # Another identity has slots of its own (alice is in vision too).
    api_client.force_authenticate(setup["alice"])
    assert api_client.get("/api/v1/teams/vision/events/stream/").status_code == 200

    # The server closes carol's first stream (it ended or its client went away): her next one passes.
    # (As Django's test client does: the closing does not close the test's database connection.)
    request_finished.disconnect(close_old_connections)
    try:
        held[0].close()
    finally:
        request_finished.connect(close_old_connections)
    api_client.force_authenticate(setup["carol"])
    assert api_client.get("/api/v1/teams/vision/events/stream/").status_code == 200
    assert api_client.get("/api/v1/teams/vision/events/stream/").status_code == 429


def test_a_stream_read_to_its_end_gives_its_slot_back(api_client, setup, monkeypatch, settings):
    settings.PORTAL_STREAMS_PER_IDENTITY = 1
    settings.PORTAL_EVENT_STREAM_SECONDS = 0
    monkeypatch.setattr(eventstream, "sleep", lambda seconds: None)
    api_client.force_authenticate(setup["carol"])
    for _ in range(3):
        response = api_client.get("/api/v1/teams/vision/events/stream/")
        assert response.status_code == 200
        assert b"event: ready" in b"".join(response.streaming_content)


def test_a_long_poll_holds_its_slot_while_it_waits_and_gives_it_back_when_it_answers(api_client, setup, monkeypatch,
                                                                                      settings):  # fmt: skip
    settings.PORTAL_STREAMS_PER_IDENTITY = 1
    carol, job = setup["carol"], setup["job"]
    seen = []

    def pause(seconds):
        with pytest.raises(stream_cap.StreamCapReached):
            stream_cap.take(carol.pk, 1)
        seen.append("held")
        actions.cancel_job(carol, job)

    monkeypatch.setattr(eventstream, "sleep", pause)
    api_client.force_authenticate(carol)
    answer = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?state=queued&timeout=30")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert seen == ["held"]
    stream_cap.take(carol.pk, 1).release()  # free again


def test_a_refused_or_failed_request_holds_no_slot(api_client, setup, settings):
    settings.PORTAL_STREAMS_PER_IDENTITY = 1
    api_client.force_authenticate(setup["bob"])  # not in vision: 404 after the slot was taken
    for _ in range(3):
        assert api_client.get(f"/api/v1/jobs/{setup['job'].pk}/wait/?timeout=1").status_code == 404
        assert api_client.get("/api/v1/teams/vision/events/stream/").status_code == 404
        assert api_client.get("/api/v1/teams/nlp/events/stream/?after=x").status_code == 400
    assert api_client.get("/api/v1/teams/nlp/events/stream/").status_code == 200


def test_zero_turns_the_cap_off(api_client, setup, settings):
    settings.PORTAL_STREAMS_PER_IDENTITY = 0
    api_client.force_authenticate(setup["carol"])
    held = [api_client.get("/api/v1/teams/vision/events/stream/") for _ in range(5)]
    assert {r.status_code for r in held} == {200}


def test_a_slot_released_late_leaves_a_later_holder_alone(setup, settings):
    settings.PORTAL_STREAMS_PER_IDENTITY = 1
    first = stream_cap.take("someone", 5)
    cache.delete(first.key)  # as if its lease lapsed
    second = stream_cap.take("someone", 5)
    first.release()  # the first request ends after all: the second one's slot stays taken
    with pytest.raises(stream_cap.StreamCapReached):
        stream_cap.take("someone", 5)
    second.release()
    stream_cap.take("someone", 5)


def test_a_slot_is_taken_without_reading_every_slot_and_the_last_free_one_is_found(setup, settings, monkeypatch):
    settings.PORTAL_STREAMS_PER_IDENTITY = 4
    reads = []
    real = stream_cap.cache.get_many
    monkeypatch.setattr(stream_cap.cache, "get_many", lambda keys: reads.append(len(keys)) or real(keys))
    first = stream_cap.take("someone", 5)  # nothing held: the first try takes a slot
    assert reads == []
    held = [first, *(stream_cap.take("someone", 5) for _ in range(3))]  # the last free one, wherever it is
    assert len({slot.key for slot in held}) == 4
    reads.clear()
    with pytest.raises(stream_cap.StreamCapReached):
        stream_cap.take("someone", 5)
    assert sum(reads) == 4  # a refusal reads each slot once, its Retry-After included
    freed = held[2].key
    held[2].release()
    assert stream_cap.take("someone", 5).key == freed

    settings.PORTAL_STREAMS_PER_IDENTITY = 64  # a busy identity: 48 of 64 held
    busy = [stream_cap.take("busy", 5) for _ in range(48)]
    reads.clear()
    busy.append(stream_cap.take("busy", 5))
    assert max(reads, default=0) <= stream_cap.WINDOW  # a window at a time, never all 64 slots
    assert len({slot.key for slot in busy}) == 49

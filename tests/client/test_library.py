"""The Python client against a live portal: configuration sources, submit/get/list/cancel/resubmit, errors that
carry every field's messages, Idempotency-Key, arrays, logs (tail, download, followed over SSE) and wait()."""

from __future__ import annotations

import pytest

from gpuportal import BadRequest, Client, ConfigError, Conflict, NotFound, SpecError, Unauthorized, WaitTimeout
from gpuportal.config import write_config
from jobs.models import Job, JobArray

from .conftest import H100

SPEC = {
    "name": "train",
    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
    "command": ["sleep", "30"],
    "resource_class": H100,
    "env": {"SIM_GPU_LOAD": "train"},
}


@pytest.fixture
def client(portal) -> Client:
    return Client(portal.url, portal.token)


def test_the_address_and_token_come_from_arguments_then_the_environment_then_the_login(portal, monkeypatch):
    with pytest.raises(ConfigError, match="gpuportal login"):
        Client()
    write_config(portal.url, "gpp_stored_butwrong")
    assert Client().url == portal.url
    with pytest.raises(Unauthorized):
        Client().me()
    monkeypatch.setenv("GPUPORTAL_TOKEN", portal.token)
    assert Client().me()["username"] == "alice"
    assert portal.token not in repr(Client())


def test_submit_get_list_cancel(client, people):
    job = client.submit(SPEC)
    assert job["state"] == "queued" and job["team"] == "vision" and job["owner"] == "alice"
    assert client.get_job(job["id"])["name"] == "train"
    assert [j["id"] for j in client.list_jobs(state="queued")] == [job["id"]]
    assert client.list_jobs(state=["running", "failed"]) == []
    assert client.list_jobs(team="nlp") == []
    cancelled = client.cancel_job(job["id"])
    assert cancelled["state"] == "cancelled" and Job.objects.get().state == "cancelled"
    with pytest.raises(BadRequest, match="nothing to cancel"):
        client.cancel_job(job["id"])


def test_list_reads_every_page_when_asked(client, monkeypatch):
    monkeypatch.setattr("gpuportal.client.PAGE", 2)
    made = [client.submit({**SPEC, "name": f"train-{i}"})["id"] for i in range(5)]
    assert [j["id"] for j in client.list_jobs(limit=None)] == made[::-1]
    assert [j["id"] for j in client.list_jobs(limit=3)] == made[::-1][:3]


def test_a_refusal_carries_every_fields_messages(client):
    with pytest.raises(BadRequest) as caught:
        client.submit({**SPEC, "count": 0, "image": "NOT AN IMAGE", "working_dir": "data"})
    error = caught.value
    assert error.status == 400 and set(error.field_errors) == {"count", "image", "working_dir"}
    assert "working_dir: 'data' is not an absolute path" in str(error)
    with pytest.raises(NotFound):
        client.get_job(999999)


def test_the_idempotency_key_makes_a_retry_return_the_first_job(client):
    first = client.submit(SPEC, idempotency_key="nightly-1")
    again = client.submit(SPEC, idempotency_key="nightly-1")
    assert again["id"] == first["id"] and Job.objects.count() == 1
    with pytest.raises(Conflict, match="already used"):
        client.submit({**SPEC, "count": 2}, idempotency_key="nightly-1")


def test_a_spec_with_size_is_an_array_and_a_spec_file_is_read(client, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: sweep\nimage: nvcr.io/nvidia/pytorch:24.01-py3\nresource_class: " + H100 + "\nsize: 3\n")
    array = client.submit(path)
    assert array["size"] == 3 and len(array["tasks"]) == 3 and JobArray.objects.get().pk == array["id"]
    assert client.cancel_array(array["id"])["summary"] == "3 cancelled"
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": ')
    with pytest.raises(SpecError, match="not valid JSON at line 1"):
        client.submit(bad)


def test_wait_returns_the_ended_job_and_gives_up_after_its_timeout(client, driven):
    job = client.submit(SPEC)
    assert client.wait(job["id"])["state"] == "succeeded"
    long = client.submit({**SPEC, "command": ["sleep", "3600"]})
    with pytest.raises(WaitTimeout) as caught:
        client.wait(long["id"], timeout=30)
    assert caught.value.job["id"] == long["id"] and caught.value.job["state"] in ("admitted", "running")


def test_resubmit_with_changes(client, driven):
    job = client.submit(SPEC)
    client.wait(job["id"])
    new = client.resubmit(job["id"], {"count": 2, "labels": {"git-sha": "5d6e7f8"}})
    assert new["resubmitted_from"] == job["id"] and new["count"] == 2 and new["labels"] == {"git-sha": "5d6e7f8"}
    assert client.resubmit(job["id"], {"count": 2, "labels": {"git-sha": "5d6e7f8"}})["id"] == new["id"]
    with pytest.raises(BadRequest) as caught:
        client.resubmit(job["id"], {"count": 0, "image": "NOT AN IMAGE"})
    assert set(caught.value.field_errors) == {"count", "image"}


def test_logs_tail_download_and_follow_of_a_running_then_ended_job(client, driven):
    job = client.submit({**SPEC, "command": ["sleep", "60"]})
    while client.get_job(job["id"])["state"] != "running":
        driven.cycle()
    driven.cycle(20)
    tail = client.logs(job["id"], tail=3)
    assert tail["kept"] is False and len(tail["log"].splitlines()) == 3
    # Following: the stream of a running container ends after PORTAL_LOG_FOLLOW_SECONDS; the client reconnects
    # after its pause (a cycle here) from the last line it saw, until the container ends.
    events = list(client.follow_logs(job["id"], tail=1000))
    lines = [e for e in events if e.kind == "line"]
    assert events[-1].kind == "end"
    assert [e.line_no for e in lines] == list(range(len(lines)))  # no line twice, none skipped
    whole = client.download_log(job["id"])
    assert [e.text for e in lines] == whole.splitlines()
    assert "finished after" in whole.splitlines()[-1]


def test_following_a_job_cancelled_in_the_queue_ends_with_the_reason(client, driven):
    job = client.submit({**SPEC, "count": 8, "resource_class": H100, "team": "vision"})
    client.cancel_job(job["id"])
    events = list(client.follow_logs(job["id"]))
    assert len(events) == 1 and events[0].kind == "end" and events[0].text

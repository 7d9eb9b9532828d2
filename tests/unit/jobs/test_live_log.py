"""The log on the page and over the API: followed live as server-sent events (bounded, resumable, no database
connection held), downloaded whole, kept after the pod is gone; pages that refresh themselves stop when final;
only who may see the job gets its log."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import actions
from jobs.choices import JobState
from jobs.models import JobLog
from tests.factories import TRAINING_ENV, cycle, run_until, running_job, submit_job
from tests.sse import events


def test_following_a_running_job_streams_the_tail_then_stops_in_time_and_resumes(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    clock.advance(60)
    whole = backend.pod_logs("team-vision", job.pod_name, tail_lines=10_000).splitlines()
    client.force_login(people["alice"])
    response = client.get(f"/api/v1/jobs/{job.pk}/logs/stream/?tail=3", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    got = events(response)
    assert got[0] == {"retry": "1000"}
    lines = [e for e in got if "id" in e]
    assert [e["data"] for e in lines] == whole[-3:]
    assert [int(e["id"]) for e in lines] == list(range(len(whole) - 3, len(whole)))
    assert not any(e.get("event") == "end" for e in got)  # the container runs on: the client reconnects
    # The reconnect names the last line it saw and gets only what came after.
    clock.advance(30)
    again = events(client.get(f"/api/v1/jobs/{job.pk}/logs/stream/", HTTP_LAST_EVENT_ID=lines[-1]["id"]))
    more = [e["data"] for e in again if "id" in e]
    assert more and more == backend.pod_logs("team-vision", job.pod_name, tail_lines=10_000).splitlines()[len(whole) :]


def test_the_stream_ends_when_the_container_ends_and_then_serves_the_kept_log(backend, clock, people, client):
    job = submit_job(people["alice"], env=TRAINING_ENV)
    cycle(backend, clock)
    run_until(backend, clock, job, JobState.SUCCEEDED)
    client.force_login(people["alice"])
    got = events(client.get(f"/api/v1/jobs/{job.pk}/logs/stream/?tail=2"))
    assert got[-1]["event"] == "end" and "kept log" in got[-1]["data"]
    assert "finished after" in got[-2]["data"]


def test_bad_stream_parameters_are_refused_with_what_to_fix(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    client.force_login(people["alice"])
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/stream/?tail=x").json() == {
        "tail": ["A whole number from 0 to 5000."]
    }
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/stream/?from=-1").json() == {
        "from": ["A line number: a whole number from 0, in ASCII digits."]
    }


def test_only_who_may_see_the_job_gets_its_log(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    client.force_login(people["bob"])  # another team
    for path in (f"/api/v1/jobs/{job.pk}/logs/stream/", f"/api/v1/jobs/{job.pk}/logs/download/",
                 f"/jobs/{job.pk}/log.txt"):  # fmt: skip
        assert client.get(path).status_code == 404
    client.logout()
    assert client.get(f"/jobs/{job.pk}/log.txt").status_code == 302


def test_the_page_follows_a_running_log_and_shows_the_kept_one_after_a_cancel(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    client.force_login(people["alice"])
    page = client.get(job.get_absolute_url())
    html = page.content.decode()
    assert page.context["log_follow"] and f"/api/v1/jobs/{job.pk}/logs/stream/?tail=200" in html
    assert 'data-live-every="3"' in html
    actions.cancel_job(people["alice"], job)
    cycle(backend, clock, 1)
    assert backend.list_pods("team-vision") == []
    page = client.get(job.get_absolute_url())
    html = page.content.decode()
    assert "not found" not in html and "data-live-every" not in html
    assert page.context["log_kept"].pod_name == job.pod_name and "starting" in page.context["logs"]
    download = client.get(f"/jobs/{job.pk}/log.txt")
    assert download["Content-Disposition"] == f'attachment; filename="job-{job.pk}-{job.pod_name}.log"'
    assert download.content.decode() == JobLog.objects.get(job=job).text


def test_a_cut_log_says_so_on_the_page_and_in_the_download(backend, clock, people, client, settings):
    settings.PORTAL_LOG_MAX_BYTES = 150
    job = submit_job(people["alice"], command=["sleep", "300"], env=TRAINING_ENV)
    cycle(backend, clock)
    run_until(backend, clock, job, JobState.SUCCEEDED, step=60)
    client.force_login(people["alice"])
    kept = JobLog.objects.get(job=job)
    assert kept.cut_bytes > 0
    assert kept.cut_notice in client.get(job.get_absolute_url()).content.decode()
    first = client.get(f"/api/v1/jobs/{job.pk}/logs/download/").content.decode().splitlines()[0]
    assert first == f"# {kept.cut_notice}"


def test_a_job_cancelled_in_the_queue_says_it_never_started_a_pod(backend, people, client):
    job = submit_job(people["alice"])  # no cycle runs: it stays queued until cancelled
    actions.cancel_job(people["alice"], job)
    client.force_login(people["alice"])
    html = client.get(job.get_absolute_url()).content.decode()
    assert "This job never started a pod: it waited in the queue for" in html
    response = client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == 404 and "never started a pod" in response.json()["detail"]
    assert client.get(f"/jobs/{job.pk}/log.txt").status_code == 404


def test_pages_poll_while_work_can_change_and_stop_when_it_is_final(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    client.force_login(people["alice"])
    for path in ("/jobs/", "/teams/vision/", job.get_absolute_url()):
        assert "data-live-every" in client.get(path).content.decode()
    actions.cancel_job(people["alice"], job)
    for path in ("/jobs/", "/teams/vision/", job.get_absolute_url()):
        assert "data-live-every" not in client.get(path).content.decode()


def test_the_job_pages_queries_do_not_grow_with_kept_logs(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    actions.cancel_job(people["alice"], job)
    cycle(backend, clock, 1)
    client.force_login(people["alice"])

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(job.get_absolute_url()).status_code == 200
        return len(queries)

    one = count()
    for attempt in range(2, 7):
        JobLog.objects.create(job=job, attempt=attempt, pod_name=f"earlier-{attempt}", text="x\n")
    assert count() == one


def test_a_poll_from_a_page_that_follows_the_log_does_not_ask_the_cluster_for_it(backend, clock, people, client,
                                                                                   monkeypatch):  # fmt: skip
    job = running_job(backend, clock, people["alice"])
    clock.advance(60)
    asked: list[str] = []
    for name in ("pod_logs", "stream_pod_log"):
        real = getattr(backend, name)
        monkeypatch.setattr(
            backend, name, lambda *a, _real=real, _name=name, **k: asked.append(_name) or _real(*a, **k)
        )
    client.force_login(people["alice"])

    page = client.get(job.get_absolute_url())  # the page itself shows the tail it then follows
    assert asked == ["pod_logs"] and page.context["log_follow"] and "step 250" in page.context["logs"]
    assert "X-Live-Log" in page["Vary"]
    version = page.context["log_version"]
    assert f'data-live-version="{version}"' in page.content.decode()

    def poll() -> tuple[object, int]:
        asked.clear()
        with CaptureQueriesContext(connection) as queries:
            response = client.get(job.get_absolute_url(), HTTP_X_LIVE="1", HTTP_X_LIVE_LOG="following")
        assert response.status_code == 200
        return response, len(queries)

    response, queries = poll()
    assert asked == []  # not one call to the cluster for the log
    assert response.context["log_version"] == version and response.context["logs"] == ""
    html = response.content.decode()
    assert f'data-live-version="{version}"' in html and "has written nothing yet" not in html
    # However much history the job has, a poll costs the same queries.
    for attempt in range(2, 6):
        JobLog.objects.create(job=job, attempt=attempt, pod_name=f"earlier-{attempt}", text="x\n")
    clock.advance(60)
    assert poll()[1] == queries and asked == []

    # A poll without the header (the page's stream ended) reads the tail as before.
    asked.clear()
    client.get(job.get_absolute_url(), HTTP_X_LIVE="1")
    assert asked == ["pod_logs"]


def test_a_following_poll_after_the_job_ended_gets_the_kept_log_in_full(backend, clock, people, client):
    job = running_job(backend, clock, people["alice"])
    actions.cancel_job(people["alice"], job)
    cycle(backend, clock, 1)
    client.force_login(people["alice"])
    response = client.get(job.get_absolute_url(), HTTP_X_LIVE="1", HTTP_X_LIVE_LOG="following")
    assert response.context["log_version"] == "" and not response.context["log_skipped"]
    assert response.context["logs"] == "\n".join(JobLog.objects.get(job=job).text.splitlines()[-200:])


def test_a_poll_does_not_work_out_the_utilisation_chart_which_is_not_a_live_part(
    backend, clock, people, client, monkeypatch
):
    from telemetry import samples

    job = running_job(backend, clock, people["alice"])
    asked = []
    real = samples.series
    monkeypatch.setattr(samples, "series", lambda *a, **k: asked.append(a) or real(*a, **k))
    client.force_login(people["alice"])
    page = client.get(f"/jobs/{job.pk}/")
    assert len(asked) == 1 and "X-Live" in page["Vary"]
    poll = client.get(f"/jobs/{job.pk}/", headers={"X-Live": "1"})
    assert poll.status_code == 200 and 'data-live="timeline"' in poll.content.decode()
    assert len(asked) == 1  # the poll asked nothing of the samples

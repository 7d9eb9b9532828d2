"""One time per fact (issue 31, item 15): when a job started and when it finished are the cluster's instants (the
container's ``startedAt`` and ``finishedAt``), and every place that tells them says the same: the job page's
timeline and Times card, ``GET /api/v1/jobs/N/events/`` and the webhook payloads. The portal notices a start or an
end only at its next cycle, seconds later; that observation time is not shown as the start or the end."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from core import webhooks
from core.models import Delivery, Webhook
from jobs.choices import EventKind, JobState
from jobs.lifecycle_bulk import cluster_instant
from tests.factories import cycle, submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


def page_times(html: str) -> dict[str, datetime]:
    """The instants the job page shows: its timeline's started and succeeded lines, and the Times card's."""
    found = {}
    for kind in ("started", "succeeded"):
        line = re.search(rf'<li data-kind="{kind}">\s*<time datetime="([^"]+)"', html)
        found[f"timeline {kind}"] = datetime.fromisoformat(line.group(1))
    for label in ("Started", "Finished"):
        card = re.search(rf'<dt>{label}</dt><dd><time datetime="([^"]+)"', html)
        found[f"times {label}"] = datetime.fromisoformat(card.group(1))
    return found


def test_a_jobs_start_and_end_read_the_same_everywhere(
    cluster, clock, people, client, api_client, django_capture_on_commit_callbacks
):
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.*"])
    with django_capture_on_commit_callbacks(execute=True):
        job = submit_job(people["alice"])
        cycle(cluster, clock)  # admitted and launched
        # The cycles come seconds after the container starts and ends (a busy worker notices late).
        for _ in range(12):
            cycle(cluster, clock, 13)
            job.refresh_from_db()
            if job.state == JobState.SUCCEEDED:
                break
    assert job.state == JobState.SUCCEEDED
    started, finished = job.started_at, job.finished_at
    events = {e.kind: e.at for e in job.events.all()}
    # The cluster's instants, not the cycle's: the cycle that noticed them ran later.
    assert started < events[EventKind.CREATED] + timedelta(seconds=13)
    assert (events[EventKind.STARTED], events[EventKind.SUCCEEDED]) == (started, finished)

    client.force_login(people["alice"])
    shown = page_times(client.get(job.get_absolute_url()).content.decode())
    assert shown == {"timeline started": started, "timeline succeeded": finished,
                     "times Started": started, "times Finished": finished}  # fmt: skip

    api_client.force_login(people["alice"])
    answer = api_client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    listed = {e["kind"]: datetime.fromisoformat(e["at"]) for e in answer}
    assert (listed["started"], listed["succeeded"]) == (started, finished)
    detail = api_client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert (datetime.fromisoformat(detail["started_at"]), datetime.fromisoformat(detail["finished_at"])) == (
        started, finished,
    )  # fmt: skip

    payloads = {d.event_type: d.payload["data"] for d in Delivery.objects.filter(webhook=hook)}
    running, succeeded = payloads["job.running"], payloads["job.succeeded"]
    assert datetime.fromisoformat(running["at"]) == started
    assert datetime.fromisoformat(running["started_at"]) == started
    assert datetime.fromisoformat(succeeded["at"]) == finished
    assert datetime.fromisoformat(succeeded["started_at"]) == started
    assert datetime.fromisoformat(succeeded["finished_at"]) == finished


def test_a_job_that_ended_before_the_portal_saw_it_run_still_has_its_start_on_the_timeline(cluster, clock, people):
    job = submit_job(people["alice"], command=["sleep", "5"])
    cycle(cluster, clock)  # admitted and launched; the next cycle comes after the container has come and gone
    cycle(cluster, clock, 60)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.started_at is not None
    events = {e.kind: e.at for e in job.events.all()}
    assert (events[EventKind.STARTED], events[EventKind.SUCCEEDED]) == (job.started_at, job.finished_at)
    assert list(job.events.values_list("kind", flat=True))[-2:] == [EventKind.STARTED, EventKind.SUCCEEDED]


def test_a_cluster_instant_is_kept_within_what_the_portal_knows():
    created, now = (
        datetime.fromisoformat("2026-12-01T10:00:00+00:00"),
        datetime.fromisoformat("2026-12-01T10:01:00+00:00"),
    )
    reported = datetime.fromisoformat("2026-12-01T10:00:20+00:00")
    assert cluster_instant(reported, not_before=created, now=now) == reported
    # A cluster clock behind or ahead of the portal's never puts a start before the workload existed, nor an end
    # after the portal saw it.
    assert cluster_instant(created - timedelta(seconds=5), not_before=created, now=now) == created
    assert cluster_instant(now + timedelta(seconds=5), not_before=created, now=now) == now
    assert cluster_instant(None, not_before=created, now=now) == now
    assert cluster_instant(reported, not_before=None, now=now) == reported

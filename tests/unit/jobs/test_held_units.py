"""What a team holds has one answer (jobs.usage.held_units, summed by jobs.scheduling.tallies.held_units as
admission sums it): the quota bar, the wait reason, the quotas API and the metrics say the same number when a
service runs more replicas than its minimum and another job of the team waits (issue 31 item 14)."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobs.choices import JobState, WaitReason
from tests.factories import inference_service, submit_job
from tests.sim_objects import H100
from tests.unit.jobs.service_kit import cycle, fresh, scenario

# The service tests' small cluster (4 nodes of 2 H100s); vision is guaranteed 4 H100s and may borrow up to 8. The
# morning's traffic makes the service's autoscaler want more than its minimum of 1.
pytestmark = [pytest.mark.clock(hour=9), pytest.mark.cluster(scenario=scenario(), quotas={"vision": (4, 8)})]


def quota_bar(client, team: str) -> tuple[int, str]:
    """The team page's H100 bar: its "in use" figure and the sentence under it."""
    page = client.get(f"/teams/{team}/").content.decode()
    bar = re.search(rf'data-class-key="{re.escape(H100)}" data-used="(\d+)".*?<p class="quota-note">(.*?)</p>', page,
                    re.S)  # fmt: skip
    assert bar, "no H100 quota bar on the team page"
    return int(bar.group(1)), re.sub(r"<[^>]+>|\s+", " ", bar.group(2)).strip()


def metric(client, name: str, **labels) -> float:
    response = client.get("/metrics")
    assert response.status_code == 200
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    raise AssertionError(f"no {name} {labels} in the scrape")


def test_the_bar_the_wait_reason_the_api_and_the_metrics_say_what_the_team_holds(
    cluster, clock, people, client, api_client
):
    service = inference_service(people["alice"], min_replicas=1, max_replicas=3)
    for _ in range(30):  # a cycle a minute: the minimum runs, then the autoscaler's wants are granted one by one
        cycle(cluster, clock, 60)
        if fresh(service).granted_replicas == 3:
            break
    service = fresh(service)
    assert service.job.state == JobState.RUNNING and service.job.workers == 1 and len(service.replica_slots) == 2
    waiting = submit_job(people["alice"], count=2, preemptible=False)  # 3 held + 2 is above the guarantee of 4
    cycle(cluster, clock, 60)
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED and waiting.wait_reason == WaitReason.QUOTA

    held = 3  # the service's minimum and its 2 granted replicas, 1 H100 each

    # The wait reason (admission's count) ...
    said = re.search(r"holds (\d+) × ", waiting.wait_message)
    assert said and int(said.group(1)) == held and waiting.wait_detail["in_use"] == held, waiting.wait_message
    # ... the quota bar, which then promises no more than the 1 unused guaranteed unit the waiting job cannot fit in,
    client.force_login(people["alice"])
    used, note = quota_bar(client, "vision")
    assert used == held and note.startswith("1 more can start on the guarantee"), note
    # ... the quotas API ...
    api_client.force_authenticate(people["alice"])
    (row,) = api_client.get("/api/v1/quotas/", {"team": "vision"}).json()["results"]
    assert row["used"] == held
    # ... and the metrics.
    assert metric(client, "gpuportal_quota_held", team="vision", resource_class=H100) == held

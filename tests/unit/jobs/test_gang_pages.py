"""A distributed job on the pages and the log endpoints: the list's "W × G class", the job page's Ranks table
(node, pod, state, exit code, utilisation per rank, log link), the failed rank, each rank's log (only the job's
own pods), and showback charging W × G."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from gpus.models import ResourceClass, settings_cluster_pk
from jobs import actions
from jobs.attribution import owners_on
from jobs.choices import JobKind, JobState
from jobs.models import Job, JobLog
from jobs.usage import allocated_gpu_hours_by_day, month_gpu_hours
from telemetry import samples
from tests.factories import running_job, submit_gang
from tests.sim_objects import H100
from tests.sse import events

NODES = ["gpu-h100-01", "gpu-h100-02"]


@pytest.fixture
def gang(inventory, people):
    """A running 2 × 4 H100 job of team vision: rank 0 running, rank 1 failed with exit code 3 and a kept log."""
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    job = submit_gang(
        people["alice"], image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["torchrun", "t.py"], count=4,
        cpu_millicores=8000, memory_mb=65536,
    )  # fmt: skip
    ranks = [
        {"rank": 0, "node": NODES[0], "pod": "gpj-ddp-0-abcde", "state": "running", "exit_code": None, "reason": ""},
        {"rank": 1, "node": NODES[1], "pod": "gpj-ddp-1-fghij", "state": "failed", "exit_code": 3, "reason": "Error"},
    ]
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, node_name=NODES[0], node_names=NODES, ranks=ranks,
        started_at=datetime.now(UTC) - timedelta(minutes=30),
    )  # fmt: skip
    JobLog.objects.create(job=job, pod_name="gpj-ddp-1-fghij", text="rank 1 step 1\nrank 1 CUDA error\n")
    job.refresh_from_db()
    return job


def test_the_list_shows_workers_times_gpus_and_single_jobs_as_before(client, people, gang):
    single = actions.submit_job(
        people["alice"], people["vision"], gang.resource_class,
        {**actions.spec_of(gang), "kind": "batch", "workers": 1, "count": 8, "name": "one"},
    ).job  # fmt: skip
    client.force_login(people["alice"])
    page = client.get("/jobs/").content.decode()
    name = gang.resource_class.display_name
    assert f">2 × 4 {name}</span>" in page
    assert f"8 × {name}" in page and single.name in page
    # Rank 0's node, and how many more the gang runs on (all named on hover).
    assert f'title="{NODES[0]}, {NODES[1]}">+1 more</span>' in page
    team_page = client.get("/teams/vision/").content.decode()
    assert f">2 × 4 {name}</span>" in team_page


def test_the_job_page_has_a_ranks_table_with_utilisation_per_rank(client, people, gang, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    now = datetime.now(UTC)
    # Rank 0's node reports its GPUs at 40% and 60% for this job; rank 1's node reports nothing.
    readings = [
        samples.Reading(ts=now - timedelta(minutes=5), node_name=NODES[0], gpu_uuid=f"GPU-g{g}", gpu_index=g,
                        util_pct=util, pod="gpj-ddp-0-abcde", namespace="team-vision")
        for g, util in ((0, 40.0), (1, 60.0))
    ]  # fmt: skip
    samples.store(readings, "agent")
    client.force_login(people["alice"])
    page = client.get(gang.get_absolute_url()).content.decode()
    assert 'data-testid="ranks"' in page and 'data-live="ranks"' in page
    rows = page.split('data-rank="')[1:]
    assert rows[0].startswith('0" data-state="running"') and NODES[0] in rows[0] and "gpj-ddp-0-abcde" in rows[0]
    assert '<td class="num" data-role="rank-util">50%</td>' in rows[0]
    assert rows[1].startswith('1" data-state="failed"') and NODES[1] in rows[1] and ">3 · Error<" in rows[1]
    assert "no data" in rows[1] and 'href="?rank=1#logs-title"' in rows[1]
    assert "2 workers × 4 × " in page and "8 in all" in page


def test_a_failed_gang_names_the_failed_rank_its_exit_code_and_log(client, people, gang):
    Job.objects.filter(pk=gang.pk).update(
        state=JobState.FAILED, failed_rank=1, exit_code=3, finished_at=datetime.now(UTC)
    )
    client.force_login(people["alice"])
    page = client.get(gang.get_absolute_url()).content.decode()
    failed = page.split('data-testid="failed-rank"')[1].split("</p>")[0]
    assert f"Rank 1 failed on {NODES[1]} with exit code 3" in failed and 'href="?rank=1#logs-title"' in failed
    assert "failed first" in page


def test_each_ranks_log_is_one_of_the_jobs_own_pods(client, api_client, people, gang):
    client.force_login(people["alice"])
    page = client.get(f"{gang.get_absolute_url()}?rank=1").content.decode()
    assert "Log of rank 1" in page and "rank 1 CUDA error" in page
    assert f"/jobs/{gang.pk}/log.txt?pod=gpj-ddp-1-fghij" in page
    download = client.get(f"/jobs/{gang.pk}/log.txt", {"rank": 1})
    assert download.status_code == 200 and b"rank 1 CUDA error" in download.content
    assert client.get(f"{gang.get_absolute_url()}?rank=2").status_code == 404
    api_client.force_login(people["alice"])
    kept = api_client.get(f"/api/v1/jobs/{gang.pk}/logs/", {"rank": 1}).json()
    assert kept["pod"] == "gpj-ddp-1-fghij" and kept["kept"] is True and "CUDA error" in kept["log"]
    # Any other pod name is refused, whatever namespace it may live in.
    for params in ({"pod": "someone-elses-pod"}, {"rank": 5}, {"rank": "x"}):
        assert api_client.get(f"/api/v1/jobs/{gang.pk}/logs/", params).status_code == 404, params
        assert api_client.get(f"/api/v1/jobs/{gang.pk}/logs/download/", params).status_code == 404, params
    assert client.get(f"/jobs/{gang.pk}/log.txt", {"pod": "someone-elses-pod"}).status_code == 404
    # Someone of another team sees neither the job nor its ranks' logs.
    client.force_login(people["bob"])
    assert client.get(f"/jobs/{gang.pk}/log.txt", {"rank": 1}).status_code == 404


def test_a_running_ranks_log_is_followed_from_its_own_pod(backend, clock, people, client):  # noqa: F811
    job = running_job(backend, clock, people["alice"])  # a real pod in the simulated cluster, taken as rank 1 of a gang
    pod = job.pod_name
    ranks = [
        {"rank": 0, "node": "n0", "pod": "", "state": "pending", "exit_code": None, "reason": ""},
        {"rank": 1, "node": job.node_name, "pod": pod, "state": "running", "exit_code": None, "reason": ""},
    ]
    Job.objects.filter(pk=job.pk).update(kind=JobKind.DISTRIBUTED, workers=2, ranks=ranks, pod_name="")
    clock.advance(30)
    client.force_login(people["alice"])
    page = client.get(f"{job.get_absolute_url()}?rank=1").content.decode()
    assert f"Following pod <code>{pod}</code> live" in page and f"&amp;pod={pod}" in page
    response = client.get(
        f"/api/v1/jobs/{job.pk}/logs/stream/", {"tail": 2, "rank": 1}, HTTP_ACCEPT="text/event-stream"
    )
    lines = [e["data"] for e in events(response) if "id" in e]
    whole = backend.pod_logs("team-vision", pod, tail_lines=10_000).splitlines()
    assert lines[:2] == whole[-2:]
    assert client.get(f"/api/v1/jobs/{job.pk}/logs/stream/", {"rank": 0}).status_code == 404  # no pod yet


def test_attribution_gives_every_ranks_node_and_pod_to_the_gang(gang):
    by_pod, only = owners_on(settings_cluster_pk(), NODES + ["gpu-h100-03"])
    owner = (gang.pk, gang.team_id)
    assert by_pod[("team-vision", "gpj-ddp-0-abcde")] == owner and by_pod[("team-vision", "gpj-ddp-1-fghij")] == owner
    assert only[NODES[0]] == owner and only[NODES[1]] == owner and "gpu-h100-03" not in only


def test_showback_charges_a_2_by_4_gang_eight_gpu_hours_an_hour(client, people, gang):
    start = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
    Job.objects.filter(pk=gang.pk).update(
        state=JobState.SUCCEEDED, started_at=start, finished_at=start + timedelta(hours=3)
    )
    gang.refresh_from_db()
    vision = people["vision"].pk
    days = allocated_gpu_hours_by_day(
        [vision], datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC), start + timedelta(days=1)
    )
    assert days[(vision, "2026-11-02")] == pytest.approx(24.0)  # 2 workers × 4 GPUs × 3 h
    month = month_gpu_hours([vision], datetime(2026, 11, 20, tzinfo=UTC))
    assert month[(vision, gang.resource_class_id)] == pytest.approx(24.0)
    assert gang.gpu_seconds() / 3600 == pytest.approx(24.0)
    client.force_login(people["alice"])
    response = client.get("/teams/vision/usage.csv", {"start": "2026-11-02", "end": "2026-11-02"})
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[1][:3] == ["2026-11-02", "vision", "24.000"]

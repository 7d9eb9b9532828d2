"""The jobs API's database round trips do not grow with the data: a list page (any size, any filter), a job's
detail, the long-poll that answers at once and a submission each cost the same number of queries with one job
(and one event) as with many."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework import serializers

from accounts.models import APIToken
from core.api.kept import KeptChecks
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job, JobArray, JobEvent, TeamVolume

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"

#: The list requests pipelines and pages make: first pages of every filter, a page of one and of the most.
LISTS = [
    "/api/v1/jobs/",
    "/api/v1/jobs/?limit=1",
    "/api/v1/jobs/?limit=1000",
    "/api/v1/jobs/?team=vision&limit=50",
    "/api/v1/jobs/?team=vision&state=queued&label=pipeline=p0&limit=20",
    "/api/v1/jobs/?state=queued&state=running&label=pipeline=p0",
    "/api/v1/jobs/?label=pipeline",
    "/api/v1/jobs/?owner=alice&ordering=-priority",
    "/api/v1/jobs/?kind=batch&ordering=state",
    "/api/v1/jobs/?q=seed&offset=1",
]


@contextlib.contextmanager
def counted():
    """The SQL statements run inside (every one, savepoints included)."""
    statements: list[str] = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield statements


@pytest.fixture
def world(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 64, 128)
    _, raw = APIToken.issue(people["alice"], "queries")
    return {**people, "rc": rc, "token": raw}


def add_jobs(world, n: int, *, events_each: int = 1) -> list[Job]:
    """n jobs of vision with everything a row can carry: labels, an array, a resubmission, ranks, timestamps."""
    now = timezone.now()
    array = JobArray.objects.create(team=world["vision"], owner=world["alice"], name="sweep", size=n)
    rows = [
        Job(team=world["vision"], owner=world["alice"], name=f"seed{i}", image="nvcr.io/nvidia/pytorch:24.01-py3",
            resource_class=world["rc"], state=("queued", "running", "succeeded", "failed")[i % 4],
            submitted_at=now - timedelta(seconds=n - i), labels={"pipeline": f"p{i % 3}", "run": str(i)},
            env=[{"name": "EPOCHS", "value": "3"}], command=["python", "train.py"], array=array, array_index=i,
            started_at=now if i % 4 else None, exit_code=1 if i % 4 == 3 else None, node_names=["n1"],
            ranks=[{"rank": 0, "node": "n1", "pod": "p", "state": "running", "exit_code": None, "reason": ""}],
            gpu_util_recent=12.5, wait_detail={"why": "quota"}, queue_position=i or None)
        for i in range(n)
    ]  # fmt: skip
    jobs = Job.objects.bulk_create(rows)
    Job.objects.filter(pk=jobs[-1].pk).update(resubmitted_from=jobs[0])
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, kind="submitted", message=f"event {k}") for job in jobs for k in range(events_each)]
    )
    return jobs


def queries(api_client, world, method: str, url: str, body: dict | None = None) -> tuple[int, object]:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    getattr(api_client, method)(url, body, format="json")  # the token's last_used_at is written once a minute
    with counted() as statements:
        response = getattr(api_client, method)(url, body, format="json")
    assert response.status_code < 300, (url, response.status_code, response.content[:300])
    return len(statements), response


def counts_asked(api_client, world) -> dict[str, int]:
    """Each list's queries, less one where its page says the count (JobPages: not a full page, and not an empty
    one past the first): the token, the count, the page."""
    asked = {}
    for url in LISTS:
        n, response = queries(api_client, world, "get", url)
        query = dict(
            part.split("=", 1) for part in url.partition("?")[2].split("&") if part.startswith(("limit=", "offset="))
        )
        limit, offset = int(query.get("limit", 50)), int(query.get("offset", 0))
        rows = len(response.json()["results"])
        asked[url] = n + (0 if rows == limit or (rows == 0 and offset) else 1)
    return asked


def test_a_list_page_costs_the_same_queries_for_one_job_as_for_many(api_client, world):
    add_jobs(world, 1)
    few = counts_asked(api_client, world)
    add_jobs(world, 60, events_each=3)
    many = counts_asked(api_client, world)
    assert many == few
    # The token, the count, the page: whatever the filter or the page size.
    assert set(many.values()) == {3}


def test_a_list_page_shorter_than_its_limit_says_the_count_without_a_count_query(api_client, world):
    add_jobs(world, 12)
    answers = {}
    for url in ("/api/v1/jobs/?limit=20", "/api/v1/jobs/?limit=5&offset=10", "/api/v1/jobs/?state=queued"):
        n, response = queries(api_client, world, "get", url)
        assert n == 2, url  # the token and the page
        answers[url] = response.json()
    assert [answers[url]["count"] for url in answers] == [12, 12, 3]
    assert answers["/api/v1/jobs/?limit=5&offset=10"]["next"] is None
    assert answers["/api/v1/jobs/?limit=5&offset=10"]["previous"].endswith("/api/v1/jobs/?limit=5&offset=5")
    # A full page, or an empty one past the first, asks the database how many.
    for url, count, rows in (("/api/v1/jobs/?limit=12", 12, 12), ("/api/v1/jobs/?offset=40", 12, 0)):
        n, response = queries(api_client, world, "get", url)
        assert n == 3, url
        assert (response.json()["count"], len(response.json()["results"])) == (count, rows)


def test_a_job_detail_costs_two_queries_however_long_its_timeline(api_client, world):
    one = add_jobs(world, 1)[0]
    long = add_jobs(world, 30, events_each=40)[-1]
    assert queries(api_client, world, "get", f"/api/v1/jobs/{one.pk}/")[0] == 2  # token, job
    assert queries(api_client, world, "get", f"/api/v1/jobs/{long.pk}/")[0] == 2


def test_a_wait_that_answers_at_once_costs_two_queries_however_long_the_timeline(api_client, world):
    for job in (add_jobs(world, 1)[0], add_jobs(world, 30, events_each=40)[0]):
        first = JobEvent.objects.filter(job=job).order_by("pk").first()
        JobEvent.objects.create(job=job, kind="waiting", message="newer")
        n, response = queries(api_client, world, "get", f"/api/v1/jobs/{job.pk}/wait/?after_event={first.pk}")
        assert response.json()["timed_out"] is False
        assert n == 2  # token; the job with its newest event's id (JobViewSet.get_queryset)


def test_a_wait_past_the_newest_event_times_out_and_polls_the_timeline(api_client, world, settings):
    settings.PORTAL_WAIT_POLL_SECONDS = 0.01
    job = add_jobs(world, 1, events_each=3)[0]
    newest = JobEvent.objects.filter(job=job).order_by("-pk").first()
    url = f"/api/v1/jobs/{job.pk}/wait/?after_event={newest.pk}&timeout=0.05"
    n, response = queries(api_client, world, "get", url)
    assert response.json()["timed_out"] is True
    assert n >= 3  # token and job, then each later poll reads the job and asks for a newer event


def test_a_submission_costs_the_same_queries_with_one_job_in_the_team_as_with_many(api_client, world):
    add_jobs(world, 1)

    def submit(i: int) -> int:
        body = {"team": "vision", "name": f"q{i}", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "resource_class": H100, "labels": {"pipeline": "p1"}}  # fmt: skip
        n, response = queries(api_client, world, "post", "/api/v1/jobs/", body)
        assert response.status_code == 201
        return n

    few = submit(1)
    add_jobs(world, 80, events_each=2)
    assert submit(2) == few


def one_submission(api_client, world, name: str) -> list:
    """The statements of one job submission through the API (after a request that wrote the token's use)."""
    add_jobs(world, 1)
    body = {"team": "vision", "name": name, "image": "nvcr.io/nvidia/pytorch:24.01-py3", "resource_class": H100}
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    api_client.get("/api/v1/jobs/")  # the token's last_used_at is written once a minute
    with counted() as statements:
        response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content[:300]
    return statements


def test_a_submission_reads_the_members_role_once(api_client, world):
    # Checked for the right to submit and again for the highest priority a member may give: one read.
    statements = one_submission(api_client, world, "once")
    assert sum('"portal_membership"' in str(sql) for sql in statements) == 1, statements


def test_a_submission_naming_no_secret_reads_no_secrets(api_client, world):
    body = {"team": "vision", "name": "plain", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "resource_class": H100}
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    with counted() as statements:
        assert api_client.post("/api/v1/jobs/", body, format="json").status_code == 201
    assert not [sql for sql in statements if "jobs_teamsecret" in sql]
    body = {**body, "name": "with-secret", "secret_env": [{"name": "K", "secret": "missing", "key": "k"}]}
    with counted() as statements:
        response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400 and "secret_env" in response.json()
    assert [sql for sql in statements if "jobs_teamsecret" in sql]


def test_a_submission_writes_in_one_transaction_without_a_savepoint_of_its_own(api_client, world):
    # actions.submit_job opens the transaction; lifecycle.submit inside it adds no savepoint (two round trips).
    # (Here the test's own transaction is outermost, so submit_job's block is the one savepoint.)
    statements = one_submission(api_client, world, "one-tx")
    assert sum(str(sql).startswith("SAVEPOINT") for sql in statements) == 1, statements


def test_a_submission_costs_twelve_statements(api_client, world):
    statements = one_submission(api_client, world, "twelve")
    # Token; team, role, class (the request's fields); quota, the class's nodes (may it run); the savepoint, the
    # job, its workload name, its timeline line, its audit record, the release.
    assert len(statements) == 12, statements


def test_a_submission_reads_the_quota_and_the_class_without_the_joins_of_their_orderings(api_client, world):
    # Each is one row by a unique key: an ORDER BY (Quota's joins the team and the class) is CPU spent for nothing.
    statements = one_submission(api_client, world, "plain-reads")
    reads = [
        sql for sql in statements
        if sql.startswith("SELECT") and sql.split(" FROM ", 1)[1].startswith(('"jobs_quota"', '"gpus_resourceclass"'))
    ]  # fmt: skip
    assert len(reads) == 2, statements
    assert not [sql for sql in reads if " JOIN " in sql or "ORDER BY" in sql], reads


def test_a_submission_naming_no_volume_builds_no_volume_query(api_client, world):
    # Django builds (and then skips) a query for name__in=[]: about a millisecond of CPU for nothing.
    with mock.patch.object(TeamVolume.objects, "filter", wraps=TeamVolume.objects.filter) as volumes:
        one_submission(api_client, world, "no-volumes")
    assert not volumes.called


def test_kept_checks_read_each_requests_own_user(api_client, world):
    # Valid requests are checked by kept serializers (core.api.kept.KeptChecks): the user of one request
    # must never decide another's. A hidden class is the admin's to request, and stays missing for a member.
    ResourceClass.objects.filter(pk=world["rc"].pk).update(hidden=True)
    _, admin_token = APIToken.issue(world["admin"], "admin")
    body = {"team": "vision", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "resource_class": H100}
    for token, name, answer in [
        (admin_token, "a1", 201), (world["token"], "m1", 400), (admin_token, "a2", 201), (world["token"], "m2", 400),
    ]:  # fmt: skip
        api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        response = api_client.post("/api/v1/jobs/", {**body, "name": name}, format="json")
        assert response.status_code == answer, (name, response.content[:300])
        if answer == 400:
            assert "No resource class" in response.json()["resource_class"][0]


def test_kept_checks_give_a_caller_that_checks_inside_another_its_own_serializer_and_clear_contexts():
    # As a second request of the same process would while the first waits on the database.
    checks = KeptChecks(ProbeSerializer)
    ProbeSerializer.checks = checks
    assert checks.validated({"n": 0}, {"request": "request 0"}) == {"n": 0}
    assert len(checks.free) == 2 and all(checker.context == {} for checker in checks.free)
    assert checks.validated({"n": "x"}, {"request": "request x"}) is None  # a problem: None; the instance is kept
    assert len(checks.free) == 2 and all(checker.context == {} for checker in checks.free)


class ProbeSerializer(serializers.Serializer):
    n = serializers.IntegerField()
    checks: KeptChecks

    def validate_n(self, value):
        assert self.context["request"] == f"request {value}"  # its own request's, never the other's
        if value == 0:
            assert self.checks.validated({"n": 1}, {"request": "request 1"}) == {"n": 1}
            assert self.context["request"] == "request 0"  # the inner check left this one's context alone
        return value

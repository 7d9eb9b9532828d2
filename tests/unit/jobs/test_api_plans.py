"""Every job list the API and the pages serve is read through an index on PostgreSQL: for each filter and
ordering, the ORM's page query (the first 50) is EXPLAINed over 20,000 analysed jobs, and no plan reads the jobs
table sequentially or sorts more than a small part of it (a Sort over a filter's few matches is fine; a Sort
over every visible job is what made a list cost 30 ms). PostgreSQL only (CI runs it there); SQLite skips it,
as tests/integration/test_quota_race.py does.

Orderings other than the default are checked over all visible jobs and over one team's; combined with another
filter, PostgreSQL may walk the ordering's index and filter (a planner's choice, bounded by the matches).
Not checked: the search box (``?q=``, a substring of the name or image), which reads every visible job; a
substring needs a trigram index (pg_trgm, an extension the portal does not install), and no pipeline filter uses
it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIRequestFactory, force_authenticate

from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import access
from jobs.api.views import JobViewSet
from jobs.filtersets import JobFilterSet
from jobs.models import Job, JobArray
from tests.conftest import make_people
from tests.factories import UserFactory
from tests.module_data import seeded_once
from tests.sim_objects import DEMO_SCENARIO

# One worker runs the module, so its 20,000 jobs are seeded once, not once a worker.
pytestmark = pytest.mark.xdist_group("api-plans")

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
JOBS = 20_000
#: A page may read (and sort) at most this share of the table: a filter's matches, never every visible job. A
#: sequential scan that stops after the page (a filter most rows match, under LIMIT) reads as little as an index.
MOST_READ = 0.05

FILTERS = [
    "",
    "team=vision",
    "team=vision&state=queued",
    "team=vision&state=queued&state=running",
    "state=succeeded",
    "state=queued&state=running&label=pipeline=p7",
    "team=vision&state=queued&label=pipeline=p7",
    "owner=alice",
    "label=pipeline=p3",
    "label=run",
    "kind=batch",
    "array={array}",
    "resource_class={rc}",
    "team_id={team}",
    "submitted__after={since}",
]
ORDERINGS = ["-submitted_at", "submitted_at", "state", "-state", "priority", "-priority", "id", "-id"]
#: Each filter in the lists' own order (newest first: the pages' only one, the API's default), and each ordering
#: the API offers over all visible jobs and over one team's.
CASES = [(query, "") for query in FILTERS] + [(query, o) for query in ("", "team=vision") for o in ORDERINGS]
PAGE = 50


def _seed(state_file) -> dict:
    sync_inventory(SimulatedCluster(state_file, scenario=DEMO_SCENARIO))
    people = make_people()
    rc = ResourceClass.objects.get(key=H100)
    carol = UserFactory(username="carol")
    now = timezone.now()
    array = JobArray.objects.create(team=people["vision"], owner=people["alice"], name="sweep", size=100)
    states = ["succeeded"] * 14 + ["failed", "cancelled", "queued", "running"]
    rows = []
    for i in range(JOBS):
        team = people["nlp"] if i % 10 == 0 else people["vision"]
        owner = people["bob"] if i % 10 == 0 else (people["alice"] if i % 3 else carol)
        rows.append(
            Job(
                team=team,
                owner=owner,
                name=f"seed{i}",
                image="nvcr.io/nvidia/pytorch:24.01-py3",
                resource_class=rc,
                state=states[i % len(states)],
                priority=(0, 50, 100)[i % 3],
                submitted_at=now - timedelta(seconds=JOBS - i),
                labels={"pipeline": f"p{i % 50}", "run": str(i)},
                array=array if i < 100 else None,
                array_index=i if i < 100 else None,
            )  # fmt: skip
        )
    Job.objects.bulk_create(rows, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # in the seeding transaction: PostgreSQL counts its own inserted rows
    return {**people, "rc": rc, "array": array, "since": (now - timedelta(hours=1)).isoformat()}


@pytest.fixture(scope="module")
def _many_jobs(django_db_setup, django_db_blocker, tmp_path_factory):
    """The demo inventory, the people and 20,000 analysed jobs, made once for the module's tests
    (tests/module_data.py); the tests only read them."""
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's (CI runs this there); SQLite has no planner worth checking")
    with seeded_once(django_db_blocker, lambda: _seed(tmp_path_factory.mktemp("sim") / "sim.json")) as made:
        yield made


@pytest.fixture
def many_jobs(_many_jobs, db):
    return _many_jobs


def walk(node):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def problems(queryset) -> list[str]:
    """What is wrong with the query's plan, run (EXPLAIN ANALYZE) on the analysed table: a sequential scan of
    jobs_job or a Sort that takes in more than a small part of it, or reading more than that for one page while
    at least a page matches (with fewer matches every ordered plan reads to the end of its index)."""
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = plan[0]["Plan"] if isinstance(plan, list) else plan
    found = []
    read = 0
    for node in walk(plan):
        if node.get("Relation Name") == "jobs_job":
            rows = node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0)
            read += rows + node.get("Rows Removed by Index Recheck", 0)
            if node["Node Type"] == "Seq Scan" and rows > MOST_READ * JOBS:
                found.append(f"a sequential scan of jobs_job reading {rows} rows")
        # An Incremental Sort only orders ties within what an index already hands over in order.
        if node["Node Type"] == "Sort":
            sorted_rows = max(node["Plan Rows"], *(child["Actual Rows"] for child in node.get("Plans", [])))
            if sorted_rows > MOST_READ * JOBS:
                found.append(f"a Sort of {sorted_rows} rows ({node.get('Sort Key')})")
    if read > MOST_READ * JOBS and queryset.count() >= PAGE:
        found.append(f"{read} rows of jobs_job read for one page")
    return found


def api_queryset(user, query: str):
    request = APIRequestFactory().get(f"/api/v1/jobs/?{query}")
    force_authenticate(request, user=user)
    view = JobViewSet(action_map={"get": "list"}, format_kwarg=None, kwargs={}, args=())
    view.request = view.initialize_request(request)
    view.headers = {}
    return view.filter_queryset(view.get_queryset())


def page_queryset(user, query: str):
    """As jobs.views.job_list builds it (its ordering is the model's)."""
    from django.http import QueryDict

    jobs = access.visible_jobs(user).select_related("team", "owner", "resource_class")
    return JobFilterSet(QueryDict(query), queryset=jobs).qs.select_related("array")


def test_every_list_filter_and_ordering_is_served_by_an_index(many_jobs):
    values = {"array": many_jobs["array"].pk, "rc": many_jobs["rc"].pk, "team": many_jobs["vision"].pk,
              "since": many_jobs["since"].replace("+", "%2B")}  # fmt: skip
    failures = []
    for who in ("alice", "admin"):
        user = many_jobs[who]
        for template, ordering in CASES:
            query = template.format(**values)
            full = "&".join(part for part in (query, f"ordering={ordering}" if ordering else "") if part)
            failures += [f"{who} API ?{full}: {p}" for p in problems(api_queryset(user, full)[:PAGE])]
            if not ordering:
                failures += [f"{who} page ?{query}: {p}" for p in problems(page_queryset(user, query)[:PAGE])]
    assert not failures, "\n".join(failures)


def test_the_check_can_fail(many_jobs):
    """Ordering by a column no index leads with (the image) sorts every job; so does the search box: the check
    says so."""
    assert any("Sort of" in p for p in problems(Job.objects.order_by("image")[:50]))
    assert any("rows of jobs_job read" in p for p in problems(page_queryset(many_jobs["admin"], "q=seed12")[:50]))

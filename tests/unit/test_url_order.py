"""A pipeline's requests are resolved before the pages' URL patterns are tried (portal/urls.py): Django tries a path
against each pattern in order and keeps a list of every one it tried, so the order is part of what a request costs."""

from __future__ import annotations

import pytest
from django.urls import resolve


@pytest.mark.parametrize(
    ("path", "name", "most"),
    [
        # Room for a few more routes; the pages' order put the detail at 36 and the long-poll past 40.
        ("/api/v1/jobs/", "api:job-list", 8),
        ("/api/v1/jobs/12/", "api:job-detail", 9),
        ("/api/v1/jobs/12/wait/", "api:job-wait", 24),
        ("/api/v1/telemetry/samples/", "telemetry-ingest", 4),
    ],
)
def test_a_pipelines_requests_try_few_patterns(path, name, most):
    match = resolve(path)
    assert match.view_name == name
    assert len(match.tried) <= most


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/", "overview"),
        ("/login/", "login"),
        ("/jobs/", "jobs:job-list"),
        ("/healthz", "healthz"),
        ("/api/v1/usage/people/", "usage-people"),
        ("/api/v1/me/", "api:me"),
        ("/api/v1/planner/runs/3/results.csv", "api:plan-run-results-csv"),
        ("/api/v1/planner/runs/3/", "api:plan-run-detail"),
        ("/api/v1/teams/vision/events/stream/", "api:team-events-stream"),
        ("/api/schema/", "schema"),
    ],
)
def test_every_other_path_still_reaches_its_view(path, name):
    assert resolve(path).view_name == name

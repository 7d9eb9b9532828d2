"""The main navigation marks the section of the page shown (aria-current="page") and only that one. base.html
compares the URL's view name ("jobs:notebook-list", …), so a link tested against anything else is never marked
(the Notebooks link once compared against "notebooks")."""

from __future__ import annotations

import pytest

from accounts.models import Team
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import NotebookPolicy
from tests.factories import notebook_session
from tests.pages import current_sections
from tests.sim_objects import H100


@pytest.fixture
def notebook(inventory, people):
    team = Team.objects.get(slug="vision")
    actions.set_quota(people["admin"], team, ResourceClass.objects.get(key=H100), 1, 1)
    NotebookPolicy.objects.create(team=team, ttl_seconds=3600, max_ttl_seconds=7200, idle_timeout_seconds=1800,
                                  max_idle_timeout_seconds=3600)  # fmt: skip
    return notebook_session(people["alice"]).notebook


@pytest.mark.parametrize(
    ("url", "section"),
    [
        ("/", "Overview"),
        ("/nodes/", "Nodes"),
        ("/jobs/", "Jobs"),
        ("/jobs/new/", "Jobs"),
        ("/notebooks/", "Notebooks"),
        ("/services/", "Services"),
        ("/services/new/", "Services"),
        ("/teams/", "Teams"),
        ("/usage/", "Usage"),
        ("/planner/", "Planner"),  # alice leads vision: leads read the planner
    ],
)
def test_the_nav_marks_the_section_shown_and_only_it(client, people, inventory, url, section):
    client.force_login(people["alice"])
    response = client.get(url)
    assert response.status_code == 200
    assert current_sections(response.content.decode()) == [section]


def test_a_notebooks_own_page_marks_notebooks(client, people, notebook):
    client.force_login(people["alice"])
    response = client.get(notebook.get_absolute_url())
    assert response.status_code == 200
    assert current_sections(response.content.decode()) == ["Notebooks"]

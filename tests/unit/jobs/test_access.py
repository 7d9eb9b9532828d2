"""jobs.access is the one rule of who may see and manage jobs and notebooks: a matrix of people against both,
and the pages, the API and telemetry's seam answer the same."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from jobs import access
from tests import factories

#: who → (may see, may manage) a job or notebook that "owner" started in team vision.
MATRIX = {
    "owner": (True, True),
    "member": (True, False),
    "lead": (True, True),
    "admin": (True, True),
    "other_team": (False, False),
    "outsider": (False, False),
}


@pytest.fixture
def world(cluster, people):
    """A queued job and a notebook of carol's, a plain member of vision (dave is another), on the demo cluster."""
    vision = people["vision"]
    owner = factories.member(vision)
    member = factories.member(vision, "dave")
    job = factories.submit_job(owner)
    notebook = factories.notebook_session(owner).notebook
    who = {
        "owner": owner, "member": member, "lead": people["alice"], "admin": people["admin"],
        "other_team": people["bob"], "outsider": people["outsider"],
    }  # fmt: skip
    return who, job, notebook


@pytest.mark.parametrize("person", list(MATRIX))
def test_who_may_see_and_manage_a_job_and_a_notebook(world, person):
    who, job, notebook = world
    user = who[person]
    see, manage = MATRIX[person]
    assert access.can_see_job(user, job) is see
    assert access.can_manage_job(user, job) is manage
    assert access.can_see_notebook(user, notebook) is see
    assert access.can_manage_notebook(user, notebook) is manage
    # The querysets the pages and the API list from, and telemetry's question, say the same.
    assert access.visible_jobs(user).filter(pk=job.pk).exists() is see
    assert access.visible_notebooks(user).filter(pk=notebook.pk).exists() is see
    assert access.job_visible(user, job.pk) is see
    assert access.can_submit(user, job.team) is see


def test_anonymous_users_see_and_manage_nothing(world):
    _, job, notebook = world
    anonymous = AnonymousUser()
    assert not access.can_see_job(anonymous, job) and not access.can_manage_job(anonymous, job)
    assert not access.can_manage_notebook(anonymous, notebook)
    assert not access.visible_jobs(anonymous).exists()

"""jobs.access is the one rule of who may see and manage jobs and notebooks: a matrix of people against both,
and the pages, the API and telemetry's seam answer the same."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from accounts.choices import MembershipRole
from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import access, actions
from jobs.notebook import sessions as notebooks
from tests.clock import SimClock
from tests.factories import MembershipFactory, UserFactory
from tests.sim_objects import DEMO_SCENARIO

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"

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
def world(db, tmp_path, people):
    sync_inventory(SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=SimClock()))
    vision, rc = Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], vision, rc, 8, 16)
    owner, member = UserFactory(username="carol"), UserFactory(username="dave")
    MembershipFactory(user=owner, team=vision, role=MembershipRole.MEMBER)
    MembershipFactory(user=member, team=vision, role=MembershipRole.MEMBER)
    fields = dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["sleep", "30"], args=[], env=[], count=1,
        cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    job = actions.submit_job(owner, vision, rc, fields).job
    notebook = notebooks.launch_notebook(
        owner, vision, rc, {"name": "scratch", "count": 1, "cpu_millicores": 2000, "memory_mb": 8192}
    ).notebook
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

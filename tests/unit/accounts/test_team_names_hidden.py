"""Issue 31, item 8: a request naming a team its caller is not in answers exactly as for a team that does not exist,
so nobody outside a team learns that it exists (the job, array, notebook and service creates answered 403 "You are
not a member of team Computer Vision", naming it; the service-account create "not a member" against DRF's "does not
exist"; the secret and registry-credential creates "Only a lead of team Computer Vision")."""

import pytest

from gpus.models import ResourceClass
from jobs import actions
from tests.factories import API_SERVICE_BODY
from tests.sim_objects import H100

pytestmark = pytest.mark.django_db

JOB = {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "60"], "resource_class": H100}
CREATES = {
    "/api/v1/jobs/": JOB,
    "/api/v1/job-arrays/": {**JOB, "size": 2},
    "/api/v1/notebooks/": {"name": "scratch", "resource_class": H100},
    "/api/v1/services/": {k: v for k, v in API_SERVICE_BODY.items() if k != "team"},
    "/api/v1/secrets/": {"name": "wandb", "data": {"token": "x"}},
    "/api/v1/registry-credentials/": {"registry": "nvcr.io", "username": "u", "token": "t"},
    "/api/v1/service-accounts/": {"name": "ci"},
    "/api/v1/webhooks/": {"name": "ci", "url": "https://hooks.example.org/x", "events": ["job.*"]},
}
GETS = ["/api/v1/usage/?team={}&start=2026-01-01&end=2026-01-31", "/api/v1/teams/{}/events/stream/"]


@pytest.fixture
def bob(api_client, inventory, people):
    """bob, a member of nlp only, with vision holding a quota (its jobs would be admitted)."""
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 2, 2)
    api_client.force_authenticate(people["bob"])
    return people["bob"]


def answer(response, slug: str) -> tuple[int, str]:
    return response.status_code, response.content.decode().replace(slug, "<team>")


@pytest.mark.parametrize("path", list(CREATES))
def test_creating_in_another_team_answers_as_for_a_team_that_does_not_exist(api_client, bob, path):
    existing = api_client.post(path, {**CREATES[path], "team": "vision"}, format="json")
    missing = api_client.post(path, {**CREATES[path], "team": "vizion"}, format="json")
    assert answer(existing, "vision") == answer(missing, "vizion")
    assert existing.status_code == 400 and "Computer Vision" not in existing.content.decode()


@pytest.mark.parametrize("path", GETS)
def test_reading_another_team_answers_as_for_a_team_that_does_not_exist(api_client, bob, path):
    existing, missing = api_client.get(path.format("vision")), api_client.get(path.format("vizion"))
    assert answer(existing, "vision") == answer(missing, "vizion")
    assert existing.status_code == 404


def test_a_member_and_an_admin_still_name_the_team(api_client, people, inventory):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 2, 2)
    for user in (people["alice"], people["admin"]):
        api_client.force_authenticate(user)
        response = api_client.post("/api/v1/jobs/", {**JOB, "team": "vision"}, format="json")
        assert response.status_code == 201, response.content

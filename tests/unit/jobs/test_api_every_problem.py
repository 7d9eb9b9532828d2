"""Issue 31, item 15: a request body with a field the API does not take and other mistakes is answered with one
400 naming every problem, the unknown field among them (the walk's "gpus" hid the other three errors of a spec).
Each kind of body the API takes: a job, a job array, a notebook and a service. And the "No resource class" answer
names the closest keys there are."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job, JobArray, Notebook
from jobs.models.service import InferenceService
from tests.factories import API_SERVICE_BODY, api_job_body
from tests.sim_objects import H100

#: Three mistakes besides the unknown field "gpus", each in a field every body takes.
MISTAKES = {"cpu": 0, "image": "Not An Image!", "count": 0, "gpus": 4}

#: A good body of each kind, and what it makes.
BODIES = {
    "/api/v1/jobs/": (api_job_body(), Job),
    "/api/v1/job-arrays/": (api_job_body(size=3), JobArray),
    "/api/v1/notebooks/": ({"team": "vision", "name": "scratch", "resource_class": H100}, Notebook),
    "/api/v1/services/": (API_SERVICE_BODY, InferenceService),
}


@pytest.fixture
def carol(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    return people["alice"]


@pytest.mark.parametrize("path", list(BODIES))
def test_an_unknown_field_is_named_with_every_other_problem_in_one_answer(api_client, carol, path):
    body, model = BODIES[path]
    api_client.force_authenticate(carol)
    response = api_client.post(path, {**body, **MISTAKES}, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert {"gpus", "cpu", "image", "count"} <= set(errors), errors
    assert errors["gpus"][0].startswith("Unknown field."), errors
    assert "container image reference" in " ".join(errors["image"]), errors
    assert "greater than or equal to 1" in " ".join(errors["count"]), errors
    assert not model.objects.exists()


@pytest.mark.parametrize("path", list(BODIES))
def test_an_unknown_field_alone_is_still_refused(api_client, carol, path):
    body, model = BODIES[path]
    api_client.force_authenticate(carol)
    response = api_client.post(path, {**body, "gpus": 4}, format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["gpus"], response.json()
    assert not model.objects.exists()


def test_no_resource_class_names_the_closest_keys(api_client, carol):
    api_client.force_authenticate(carol)
    response = api_client.post(
        "/api/v1/jobs/", api_job_body(resource_class="nvidia.com/gpu@NVIDIA-H100"), format="json"
    )
    assert response.status_code == 400, response.json()
    (message,) = response.json()["resource_class"]
    # The key cut short comes first (ux-walk 2 #7: the product's name without the key's suffix).
    assert message.startswith(f"No resource class 'nvidia.com/gpu@NVIDIA-H100'. Did you mean {H100}"), message
    assert "gpuportal classes" in message and "/api/v1/resource-classes/" in message


def test_no_resource_class_suggests_no_class_the_caller_cannot_see(api_client, carol):
    hidden = ResourceClass.objects.exclude(key=H100).order_by("key").first()
    hidden.hidden = True
    hidden.save(update_fields=["hidden"])
    api_client.force_authenticate(carol)
    response = api_client.post("/api/v1/jobs/", api_job_body(resource_class=hidden.key + "X"), format="json")
    assert response.status_code == 400, response.json()
    assert hidden.key + " " not in response.json()["resource_class"][0] + " "
    assert hidden.key + "," not in response.json()["resource_class"][0]
    assert hidden.key + "?" not in response.json()["resource_class"][0]


@pytest.mark.parametrize(
    ("path", "mistake", "field", "words"),
    [
        ("/api/v1/jobs/", {"count": 9}, "count", "No single node can hold 9 × H100 80GB HBM3"),
        ("/api/v1/job-arrays/", {"count": 9}, "count", "No single node can hold 9 × H100 80GB HBM3"),
        ("/api/v1/notebooks/", {"name": "Has Capitals"}, "name", "1 to 30 lower-case letters"),
        ("/api/v1/notebooks/", {"ttl_seconds": 10**6}, "ttl_seconds", "At most"),
        ("/api/v1/services/", {"count": 9}, "count", "No single node can hold 9 × H100 80GB HBM3"),
    ],
)
def test_an_unknown_field_does_not_hide_what_the_portal_checks_after_the_fields(
    api_client, carol, path, mistake, field, words
):
    """Placement, quota, the drivers and the team's limits are checked once every field reads well: an unknown
    field alone must not put those problems off to a second request."""
    body, model = BODIES[path]
    api_client.force_authenticate(carol)
    response = api_client.post(path, {**body, "gpus": 4, **mistake}, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert errors["gpus"][0].startswith("Unknown field."), errors
    assert words in " ".join(errors.get(field, [])), errors
    assert not model.objects.exists()

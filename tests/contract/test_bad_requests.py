"""Issue 16, finding 4: request shapes that used to answer 500 (8 causes) are each a 400 that names the field.

Unicode digits ("²", which str.isdigit() takes but int() refuses) in ``q``, id and slot fields; dates far in the
past or future in filters and usage ranges; integers past the database's range in id filters and ``limit``;
notebook extend ``seconds`` ≥ 10¹⁴; JSON nested ~1,000 deep; a non-numeric primary key on DELETE. And finding 10's
part: a request body over the API's limit is refused with the limit in words, not parsed whole."""

from __future__ import annotations

import json

import pytest

from accounts.models import APIToken
from cluster.sim import SimulatedCluster
from gpus.models import GPU, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from tests.conftest import make_people
from tests.factories import API_SERVICE_BODY
from tests.module_data import seeded_once
from tests.sim_objects import DEMO_SCENARIO

# One worker runs the module, so its rows are seeded once, not once a worker.
pytestmark = pytest.mark.xdist_group("bad-requests")

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
HUGE = "99999999999999999999"  # past a 64-bit integer (the database's widest)
SQUARED = "²"
FAR_PAST = "0001-01-01T00:00:00+14:00"  # in UTC: before year 1
FAR_FUTURE = "9999-12-31T23:59:59-12:00"  # in UTC: after year 9999


def _seed(state_file) -> dict:
    sync_inventory(SimulatedCluster(state_file, scenario=DEMO_SCENARIO))
    people = make_people()
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 2, 2)
    return people


@pytest.fixture(scope="module")
def _seeded(django_db_setup, django_db_blocker, tmp_path_factory):
    """The demo inventory, the people and vision's H100 quota, made once for the module's 165 tests
    (tests/module_data.py): each test's changes are still rolled back after it."""
    with seeded_once(django_db_blocker, lambda: _seed(tmp_path_factory.mktemp("sim") / "sim.json")) as people:
        yield people


@pytest.fixture
def people(_seeded, db):
    return _seeded


@pytest.fixture
def admin_client(api_client, people):
    api_client.force_authenticate(people["admin"])
    api_client.raise_request_exception = False
    return api_client


GETS = [
    # (path with query, the field the 400 must name)
    (f"/api/v1/jobs/?q={SQUARED}", None),  # a search word, not an id: an ordinary (empty) list
    (f"/api/v1/jobs/?q=%23{HUGE}", None),
    (f"/api/v1/jobs/?team_id={SQUARED}", "team_id"),
    (f"/api/v1/jobs/?team_id={HUGE}", "team_id"),
    (f"/api/v1/jobs/?resource_class={HUGE}", "resource_class"),
    (f"/api/v1/jobs/?array={SQUARED}", "array"),
    (f"/api/v1/jobs/?array={HUGE}", "array"),
    (f"/api/v1/nodes/?team_id={HUGE}", "team_id"),
    (f"/api/v1/gpus/?node_id={HUGE}", "node_id"),
    (f"/api/v1/mig-partitions/?gpu_id={HUGE}", "gpu_id"),
    (f"/api/v1/node-config-operations/?node_id={HUGE}", "node_id"),
    (f"/api/v1/quotas/?team_id={HUGE}", "team_id"),
    (f"/api/v1/quotas/?resource_class={SQUARED}", "resource_class"),
    (f"/api/v1/notebooks/?team_id={HUGE}", "team_id"),
    (f"/api/v1/jobs/?submitted__after={FAR_PAST}", "submitted__after"),
    (f"/api/v1/jobs/?submitted__before={FAR_FUTURE}", "submitted__before"),
    (f"/api/v1/nodes/?last_seen__after={FAR_PAST}", "last_seen__after"),
    (f"/api/v1/notebooks/?created__before={FAR_FUTURE}", "created__before"),
    (f"/api/v1/node-config-operations/?created__after={FAR_PAST}", "created__after"),
    ("/api/v1/usage/?team=vision&start=0001-01-01&end=0001-01-02", "start"),
    ("/api/v1/usage/?team=vision&start=9999-12-30&end=9999-12-31", "end"),
    (f"/api/v1/jobs/?limit={HUGE}", "limit"),
    (f"/api/v1/jobs/?offset={HUGE}", "offset"),
    (f"/api/v1/nodes/?limit={SQUARED}", "limit"),
    ("/api/v1/jobs/?limit=0", "limit"),
    ("/api/v1/jobs/?offset=-1", "offset"),
]


@pytest.mark.parametrize(("path", "field"), GETS)
def test_bad_query_values_are_a_400_naming_the_parameter(admin_client, path, field):
    response = admin_client.get(path)
    if field is None:
        assert response.status_code == 200, response.content
        assert response.json()["count"] == 0
        return
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert field in response.json(), response.json()


def test_the_limit_says_the_largest_page(admin_client):
    response = admin_client.get("/api/v1/jobs/?limit=100000")
    assert response.status_code == 400
    assert "1000" in response.json()["limit"][0]


@pytest.mark.parametrize("pk", [SQUARED, "abc", HUGE])
@pytest.mark.parametrize("collection", ["quotas", "services", "secrets", "registry-credentials", "tokens"])
def test_a_non_numeric_or_huge_primary_key_is_not_found(admin_client, collection, pk):
    response = admin_client.delete(f"/api/v1/{collection}/{pk}/")
    assert response.status_code == 404, (response.status_code, response.content[:300])


@pytest.mark.parametrize("pk", [SQUARED, HUGE])
@pytest.mark.parametrize("collection", ["jobs", "notebooks", "gpus", "quotas", "job-arrays"])
def test_an_unknown_id_on_read_is_not_found(admin_client, collection, pk):
    response = admin_client.get(f"/api/v1/{collection}/{pk}/")
    assert response.status_code == 404, (response.status_code, response.content[:300])


def test_extend_seconds_past_any_lifetime_is_a_400_naming_seconds(admin_client, people):
    launched = admin_client.post(
        "/api/v1/notebooks/", {"team": "vision", "name": "scratch", "resource_class": H100}, format="json"
    )
    assert launched.status_code == 201, launched.json()
    for seconds in (10**14, 10**20):
        response = admin_client.post(f"/api/v1/notebooks/{launched.json()['id']}/extend/", {"seconds": seconds})
        assert response.status_code == 400, (response.status_code, response.content[:300])
        assert "seconds" in response.json()


@pytest.mark.parametrize("slot", [SQUARED, HUGE])
def test_a_mig_slot_in_unicode_digits_or_past_range_is_a_400_naming_the_layout(admin_client, slot):
    node = admin_client.get("/api/v1/nodes/?limit=1000").json()["results"]
    mig_node = next(n for n in node if n.get("gpu_count"))
    response = admin_client.post(
        "/api/v1/node-config-operations/",
        {"node": mig_node["name"], "kind": "mig", "layout": f"3g.40gb@{slot}"},
        format="json",
    )
    assert response.status_code == 400, (response.status_code, response.content[:300])


def nested(depth: int) -> str:
    return '{"name": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/quotas/", "/api/v1/tokens/"])
def test_json_nested_too_deep_is_a_400_saying_so(admin_client, path):
    response = admin_client.post(path, nested(1000), content_type="application/json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "nested" in json.dumps(response.json())


def test_a_body_over_the_limit_is_refused_with_the_limit(admin_client, settings, people):
    _, token = APIToken.issue(people["admin"], "big")
    admin_client.force_authenticate(None)
    body = json.dumps({"name": "x", "image": "a" * (3 * 1024 * 1024)})
    response = admin_client.post(
        "/api/v1/jobs/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert response.status_code == 413, (response.status_code, response.content[:300])
    assert "MB" in response.json()["detail"]


def test_a_new_node_operation_s_location_is_a_plain_string(admin_client):
    """The fuzzer's one 500 on the live server: wsgiref refuses a header value that is not exactly a str."""
    nodes = admin_client.get("/api/v1/nodes/?limit=1000").json()["results"]
    response = admin_client.post(
        "/api/v1/node-config-operations/",
        {"node": "gpu-l40s-mps-01", "kind": "time-slicing", "sharing": "mps", "replicas": 4},
        format="json",
    )
    assert "gpu-l40s-mps-01" in {n["name"] for n in nodes}
    assert response.status_code == 201, response.content[:300]
    assert type(response.headers["Location"]) is str
    assert response.headers["Location"].endswith(f"/api/v1/node-config-operations/{response.json()['id']}/")


# Issue 31, item 7: the last inputs that answered 500.

JOB = {"team": "vision", "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "60"]}
#: Every collection that takes a JSON body (POST), with a body it would take.
CREATES = {
    "/api/v1/jobs/": {**JOB, "resource_class": H100},
    "/api/v1/job-arrays/": {**JOB, "resource_class": H100, "size": 2},
    "/api/v1/notebooks/": {"team": "vision", "name": "scratch", "resource_class": H100},
    "/api/v1/services/": API_SERVICE_BODY,
    "/api/v1/quotas/": {"team": "vision", "resource_class": 1, "guaranteed": 1, "limit": 1},
    "/api/v1/tokens/": {"name": "pipeline"},
    "/api/v1/secrets/": {"team": "vision", "name": "wandb", "data": {"token": "x"}},
    "/api/v1/registry-credentials/": {"team": "vision", "registry": "nvcr.io", "username": "u", "token": "t"},
    "/api/v1/webhooks/": {"team": "vision", "name": "ci", "url": "https://hooks.example.org/x", "events": ["job.*"]},
    "/api/v1/service-accounts/": {"team": "vision", "name": "ci"},
    "/api/v1/node-config-operations/": {"node": "gpu-l40s-mps-01", "kind": "time-slicing", "replicas": 2},
    "/api/v1/auth/device/": {"name": "laptop"},
}
NOT_OBJECTS = [[], [{"name": "train"}], "train", 3, True]


@pytest.mark.parametrize("body", NOT_OBJECTS, ids=["empty-list", "list", "string", "number", "boolean"])
@pytest.mark.parametrize("path", list(CREATES))
def test_a_json_body_that_is_not_an_object_is_a_400_asking_for_one(admin_client, path, body):
    response = admin_client.post(path, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "Expected a dictionary" in json.dumps(response.json()), response.json()


@pytest.mark.parametrize("path", ["/api/v1/jobs/", "/api/v1/job-arrays/", "/api/v1/notebooks/", "/api/v1/services/"])
@pytest.mark.parametrize("value", [SQUARED, f"1{SQUARED}", HUGE, int(HUGE)])
def test_a_resource_class_in_unicode_digits_or_past_any_id_is_a_400_naming_it(admin_client, path, value):
    response = admin_client.post(path, {**CREATES[path], "resource_class": value}, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "No resource class" in response.json()["resource_class"][0]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (f"scope=job&job={SQUARED}", "job"),
        (f"scope=job&job={HUGE}", "job"),
        ("scope=job&job=abc", "job"),
        ("scope=job", "job"),
        (f"scope=gpu&gpu={{gpu}}&gpu_instance_id={SQUARED}", "gpu_instance_id"),
        (f"scope={SQUARED}", "scope"),
        (f"scope=cluster&range={SQUARED}", "range"),
    ],
)
def test_the_utilisation_query_in_unicode_digits_is_a_400_naming_the_parameter(admin_client, query, field):
    uuid = "GPU-5f2c0c4e-0000-4000-8000-000000000001"  # a GPU the admin sees: only the instance id is wrong
    GPU.objects.filter(pk=GPU.objects.order_by("pk").first().pk).update(uuid=uuid)
    response = admin_client.get(f"/api/v1/utilisation/?{query.format(gpu=uuid)}")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert field in response.json(), response.json()


def test_the_utilisation_query_names_every_problem_at_once(admin_client):
    response = admin_client.get(f"/api/v1/utilisation/?scope=job&range={SQUARED}")
    assert response.status_code == 400
    assert set(response.json()) == {"range", "job"}, response.json()


def test_the_schema_lists_the_utilisation_parameters_so_the_fuzzer_sends_them(openapi_schema):
    operation = openapi_schema["paths"]["/api/v1/utilisation/"]["get"]
    params = {p["name"]: p["schema"] for p in operation["parameters"] if p["in"] == "query"}
    assert {"scope", "range", "node", "gpu", "gpu_instance_id", "job", "team"} <= set(params)
    assert params["job"]["type"] == "integer"


def test_a_job_s_utilisation_by_its_id_still_answers(admin_client):
    job = admin_client.post("/api/v1/jobs/", CREATES["/api/v1/jobs/"], format="json").json()
    response = admin_client.get(f"/api/v1/utilisation/?scope=job&job={job['id']}&range=1h")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["scope"] == "job" and response.json()["range"] == "1h"
    assert admin_client.get(f"/api/v1/utilisation/?scope=job&job={job['id'] + 1000}").status_code == 404


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("wait/?timeout=0&after_event={}", "after_event"),
        ("events/stream/?after={}", "after"),
        ("logs/stream/?from={}", "from"),
    ],
)
@pytest.mark.parametrize("value", [SQUARED, HUGE])
def test_an_event_or_line_number_in_unicode_digits_is_a_400_naming_it(admin_client, path, field, value):
    job = admin_client.post("/api/v1/jobs/", CREATES["/api/v1/jobs/"], format="json").json()
    response = admin_client.get(f"/api/v1/jobs/{job['id']}/{path.format(value)}")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert field in response.json(), response.json()


def test_a_team_stream_resuming_after_unicode_digits_is_a_400(admin_client):
    response = admin_client.get(f"/api/v1/teams/vision/events/stream/?after={SQUARED}")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "after" in response.json()


def test_the_job_form_copying_a_job_named_in_unicode_digits_is_an_empty_form(client, people):
    client.force_login(people["alice"])
    response = client.get(f"/jobs/new/?from={SQUARED}")
    assert response.status_code == 200, response.status_code


# Issue 31, item 8: where an answer or an accepted request did not match the schema.


@pytest.mark.parametrize("name", ["offset", "limit"])
def test_an_empty_page_parameter_is_a_400_naming_it(admin_client, name):
    response = admin_client.get(f"/api/v1/jobs/?{name}=")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "whole number" in response.json()[name][0]
    assert admin_client.get("/api/v1/jobs/?limit=5&offset=0").status_code == 200


@pytest.mark.parametrize("field", ["alias", "description"])
@pytest.mark.parametrize("value", [5, 2.5, True, ["H100"]])
def test_a_resource_class_s_text_takes_only_a_json_string(admin_client, field, value):
    rc = ResourceClass.objects.get(key=H100)
    response = admin_client.patch(f"/api/v1/resource-classes/{rc.pk}/", {field: value}, format="json")
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert "JSON string" in response.json()[field][0]
    rc.refresh_from_db()
    assert getattr(rc, field) == "", "nothing stored"
    kept = admin_client.patch(f"/api/v1/resource-classes/{rc.pk}/", {field: "Big H100"}, format="json")
    assert kept.status_code == 200 and kept.json()[field] == "Big H100"


def test_the_smoke_test_list_is_the_plain_list_the_schema_says(admin_client, openapi_schema):
    operation = openapi_schema["paths"]["/api/v1/nodes/{name}/smoke-tests/"]["get"]
    said = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert said["type"] == "array" and said["items"] == {"$ref": "#/components/schemas/NodeSmokeTest"}
    assert [p["name"] for p in operation["parameters"]] == ["name"], "the node list's filters do not apply"
    node = admin_client.get("/api/v1/nodes/?limit=1").json()["results"][0]["name"]
    created = admin_client.post(f"/api/v1/nodes/{node}/smoke-tests/")
    listed = admin_client.get(f"/api/v1/nodes/{node}/smoke-tests/")
    assert listed.status_code == 200 and isinstance(listed.json(), list)
    if created.status_code == 201:
        assert [run["id"] for run in listed.json()] == [created.json()["id"]]

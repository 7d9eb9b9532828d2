"""The OpenAPI schema is generated, complete, and Swagger UI is served without a CDN. The tests read the schema the
session generated once (the ``openapi_schema`` fixture); the first holds it equal to what /api/schema/ serves."""

import pytest
import yaml

pytestmark = pytest.mark.django_db


def test_the_schema_view_serves_the_schema_the_tests_read(client, people, openapi_schema):
    client.force_login(people["alice"])
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert yaml.safe_load(response.content) == openapi_schema


def test_schema_lists_inventory_endpoints_and_auth(openapi_schema):
    schema = openapi_schema
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    for path in [
        "/api/v1/nodes/",
        "/api/v1/nodes/{name}/",
        "/api/v1/gpus/",
        "/api/v1/mig-partitions/",
        "/api/v1/resource-classes/",
        "/api/v1/resource-classes/{id}/",
        "/api/v1/tokens/",
        "/api/v1/me/",
    ]:
        assert path in paths, path
    params = {p["name"] for p in paths["/api/v1/nodes/"]["get"]["parameters"]}
    assert {"product", "health", "team", "q", "limit", "offset"} <= params
    assert "patch" in paths["/api/v1/resource-classes/{id}/"]
    assert "post" not in paths["/api/v1/nodes/"], "the inventory is read-only over the API"
    for path in ["/api/v1/jobs/", "/api/v1/jobs/{id}/cancel/", "/api/v1/jobs/{id}/resubmit/", "/api/v1/jobs/{id}/logs/",
                 "/api/v1/jobs/{id}/events/", "/api/v1/quotas/", "/api/v1/quotas/{id}/"]:  # fmt: skip
        assert path in paths, path
    submit = paths["/api/v1/jobs/"]["post"]
    assert "Idempotency-Key" in {p["name"] for p in submit["parameters"]}
    job = schema["components"]["schemas"]["Job"]
    assert {"state", "wait_reason", "wait_message", "queue_position"} <= set(job["required"]) | set(job["properties"])
    assert job["properties"]["env"]["type"] == "array"
    schemes = schema["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())


def test_swagger_ui_is_served_from_local_static_files(client, people):
    client.force_login(people["alice"])
    html = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in html
    assert "cdn." not in html and "unpkg" not in html and "jsdelivr" not in html
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html


def test_every_choice_a_model_may_leave_blank_is_blank_in_the_schema_too(openapi_schema):
    """A generated client refuses an answer whose value is not in the schema's enum: every model choice field with
    blank=True that the API shows must allow "" (wait_reason of a running job, stop_reason of an active notebook)."""
    from django.apps import apps

    schemas = openapi_schema["components"]["schemas"]
    blankable = {
        field.name
        for model in apps.get_models()
        for field in model._meta.get_fields()
        if getattr(field, "choices", None) and getattr(field, "blank", False)
    }
    checked = 0
    for name, schema in schemas.items():
        for prop, spec in (schema.get("properties") or {}).items():
            refs = [r.get("$ref", "") for r in spec.get("oneOf", spec.get("allOf", []))]
            if prop in blankable and any(ref.endswith("Enum") for ref in refs):
                checked += 1
                assert "#/components/schemas/BlankEnum" in refs, f"{name}.{prop} cannot be blank in the schema"
    assert checked >= 4  # wait_reason, stop_reason, architecture, topology_mode at least

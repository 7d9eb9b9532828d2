"""The client and the portal's OpenAPI schema agree: every endpoint the client calls exists with its method, every
request field the client documents is in the schema's request body, and every field the API takes is one the
client documents (a field added to the API without the client, or dropped from it, fails here)."""

from __future__ import annotations

import pytest

from gpuportal import transport, types


@pytest.fixture
def schema(openapi_schema) -> dict:
    return openapi_schema


def writable(schema: dict, component: str) -> set[str]:
    properties = schema["components"]["schemas"][component]["properties"]
    return {name for name, spec in properties.items() if not spec.get("readOnly")}


def test_every_endpoint_the_client_calls_is_in_the_schema(schema):
    assert len(transport.ENDPOINTS) == 58 and transport.JOB_LOGS_STREAM in transport.ENDPOINTS
    assert {transport.CLASSES_LIST, transport.NODES_LIST, transport.GPUS_LIST, transport.QUOTAS_LIST,
            transport.USAGE, transport.USAGE_PEOPLE} <= set(transport.ENDPOINTS)  # fmt: skip
    assert {transport.JOB_WAIT, transport.JOB_EVENTS_STREAM, transport.TEAM_EVENTS_STREAM} <= set(transport.ENDPOINTS)
    assert {transport.PLANS_CREATE, transport.PLAN_CANCEL, transport.PLAN_CSV} <= set(transport.ENDPOINTS)
    assert {transport.MEMBER_SHARES, transport.MEMBER_WEIGHTS} <= set(transport.ENDPOINTS)
    assert {transport.JOB_CHECKPOINT, transport.PREEMPTION, transport.PREEMPTION_SET} <= set(transport.ENDPOINTS)
    assert {transport.TEMPLATES_LIST, transport.TEMPLATE_SAVE, transport.TEMPLATE_DELETE} <= set(transport.ENDPOINTS)
    missing = [
        f"{e.method} {e.path}" for e in transport.ENDPOINTS if e.method.lower() not in schema["paths"].get(e.path, {})
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("fields", "component"),
    [
        (types.JOB_SPEC_FIELDS, "JobRequest"),
        (types.ARRAY_SPEC_FIELDS, "JobArrayCreateRequest"),
        (types.NOTEBOOK_SPEC_FIELDS, "NotebookRequest"),
        (types.SERVICE_SPEC_FIELDS, "ServiceCreateRequest"),
    ],
)
def test_the_request_fields_the_client_documents_are_the_ones_the_api_takes(schema, fields, component):
    assert set(fields) == writable(schema, component)


@pytest.mark.parametrize(
    ("typed", "component"),
    [
        (types.Job, "Job"),
        (types.JobWait, "JobWait"),
        (types.Notebook, "Notebook"),
        (types.Service, "Service"),
        (types.NodeInfo, "Node"),
        (types.GPUInfo, "GPU"),
        (types.MemberShares, "MemberShares"),
        (types.WorkloadTemplate, "Template"),
        (types.TemplateVersion, "TemplateVersion"),
    ],  # fmt: skip
)
def test_the_answer_fields_the_client_types_are_in_the_schema(schema, typed, component):
    answered = set(schema["components"]["schemas"][component]["properties"])
    extra = set(typed.__annotations__) - answered - {"token"}  # a notebook's token comes only from launch/start
    assert extra == set()


def test_the_endpoints_take_the_request_bodies_the_client_sends(schema):
    def body(path: str) -> str:
        ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return ref.rsplit("/", 1)[1]

    assert body(transport.JOBS_CREATE.path) == "JobRequest"
    assert body(transport.ARRAYS_CREATE.path) == "JobArrayCreateRequest"
    assert body(transport.NOTEBOOKS_CREATE.path) == "NotebookRequest"
    assert body(transport.SERVICES_CREATE.path) == "ServiceCreateRequest"
    assert body(transport.JOB_RESUBMIT.path) == "PatchedJobRequest"

"""Strict schema validation of rendered Kubernetes objects against a release that serves resource.k8s.io/v1.

The test control plane (kube-apiserver v1.20) predates Dynamic Resource Allocation, so DRA objects are checked
against the published schemas instead: ``kubernetes-validate`` (pinned in requirements-dev.txt) ships the JSON
schemas generated from Kubernetes' OpenAPI document per release; the strict variant refuses unknown fields, as the
API server's strict field validation does. Every field name and type of a DeviceClass, ResourceSlice,
ResourceClaim, ResourceClaimTemplate, Pod, Job or Deployment is checked against v1.37.

NVIDIA's ComputeDomain is a custom resource: it is validated against the openAPIV3Schema of its CRD, pinned in
tests/fixtures/dra/computedomain-v1beta1.schema.yaml (source and tag in its header), made strict the same way
(an object schema with properties admits no others, as the API server prunes or, strictly, refuses them).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

#: The Kubernetes release whose schemas the objects are checked against.
KUBERNETES_VERSION = "1.37.0"
COMPUTE_DOMAIN_SCHEMA = Path(__file__).resolve().parent / "fixtures" / "dra" / "computedomain-v1beta1.schema.yaml"


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        strict = {key: _strict(value) for key, value in schema.items()}
        if strict.get("type") == "object" and "properties" in strict:
            strict.setdefault("additionalProperties", False)
        return strict
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@functools.cache
def _compute_domain_validator() -> jsonschema.protocols.Validator:
    schema = _strict(yaml.safe_load(COMPUTE_DOMAIN_SCHEMA.read_text(encoding="utf-8")))
    return jsonschema.Draft202012Validator(schema)


def schema_problems(obj: dict[str, Any]) -> list[str]:
    """What the schema refuses in ``obj`` ("<kind>/<name>: <path>: <message>"); empty when it is valid."""
    where = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    if obj.get("apiVersion") == "resource.nvidia.com/v1beta1" and obj.get("kind") == "ComputeDomain":
        return [
            f"{where}: {'.'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
            for error in sorted(_compute_domain_validator().iter_errors(obj), key=lambda e: list(e.absolute_path))
        ]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{where}: {'.'.join(str(p) for p in error.path) or '(root)'}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{where}: {error.message}"]
    return []


def assert_valid(*objects: dict[str, Any]) -> None:
    """Every object is valid against the schemas of Kubernetes 1.37 (and the ComputeDomain CRD); all problems at
    once otherwise."""
    problems = [problem for obj in objects for problem in schema_problems(obj)]
    assert not problems, "\n".join(problems)

"""drf-spectacular post-processing: the answers every API operation may give besides its own, in the schema, so
that the schema is a contract a generated client and a fuzzer can hold the portal to (issue 16, issue 18).

Every operation may answer 400 (a bad parameter: the body names it), 401 (no or a bad token), 403 (not allowed) and
404 (not found or not visible); one with a request body also 413 (body over the limit) and 415 (not JSON/form).
Each error answer is ``Error``: ``detail`` in words, or one entry per field with what to change. An operation that
gives no words of its own for such an answer refers to the shared one in ``components/responses`` (one copy of each
instead of one per operation: about a third of the document's bytes).

An object-valued ``default`` on a property (a service's ``readiness``) is said in the description instead: generators
such as openapi-python-client cannot hold one and drop the whole request body's model (and its operation)."""

from __future__ import annotations

import json

ERROR_SCHEMA = {
    "type": "object",
    "description": "What went wrong: `detail` in words, or one entry per field naming what to change.",
    "properties": {
        "detail": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    },
    "additionalProperties": True,
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}
#: The shared answers: status code -> (name in components/responses, what it means).
COMMON = {
    "400": ("BadRequest", "The request is invalid; the body names each field or parameter with what to change."),
    "401": ("Unauthorized", "No credentials, or a token that is unknown, expired or revoked."),
    "403": ("Forbidden", "Not allowed for this account or token (the detail says why)."),
    "404": ("NotFound", "No such object among those you can see."),
    "429": (
        "TooManyRequests",
        "Too many requests with a bad token (or sign-in attempts) from your address; wait Retry-After seconds.",
    ),
}
WITH_BODY = {
    "413": ("ContentTooLarge", "The request body is over the API's limit (the detail says the limit)."),
    "415": ("UnsupportedMediaType", "The body's Content-Type is not one the operation reads (send application/json)."),
}
METHODS = ("get", "put", "post", "patch", "delete")


def add_error_responses(result, generator, request, public):
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for component in schemas.values():
        for prop in component.get("properties", {}).values():
            if isinstance(prop.get("default"), dict):
                default = prop.pop("default")
                prop["description"] = f"{prop.get('description', '')} Default: {json.dumps(default)}.".strip()
    schemas["Error"] = ERROR_SCHEMA
    shared = result["components"].setdefault("responses", {})
    for name, description in (COMMON | WITH_BODY).values():
        shared[name] = {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in METHODS:
                continue
            responses = operation.setdefault("responses", {})
            wanted = dict(COMMON)
            if method in ("put", "post", "patch"):
                wanted |= WITH_BODY
            for code, (name, _) in wanted.items():
                responses.setdefault(code, {"$ref": f"#/components/responses/{name}"})
            for code, response in responses.items():
                if code.startswith(("4", "5")) and "content" not in response and "$ref" not in response:
                    response["content"] = {"application/json": {"schema": ERROR_REF}}
    return result

"""Issue 16: API fuzzing in CI. Schemathesis (pinned) reads /api/schema/ from the live portal and sends generated
requests, valid and invalid, to every operation in it with the token of a member, a lead, an admin and a node
agent: a fixed seed (derandomized) and a bounded number of examples per operation, drawn once and sent with each
role's token. Every response is checked: no server error, a status code the schema lists, and a body that matches
the schema. One failure fails the test, which prints every failing operation with the request that broke it.

Issue 31 (item 7): inputs a derandomized run of a few examples seldom draws go to every operation as explicit
examples (schemathesis ``APIOperation.Case``, sent before the drawn ones), with the negative examples: a JSON body
that is not an object, and digits outside ASCII ("²": ``str.isdigit()`` takes it, ``int()`` refuses it) in every
query parameter and body property. Their paths name the seeded objects, so each request reaches the code that reads
its body and query string (a generated id is almost never one that exists)."""

from __future__ import annotations

import re
import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, example, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

#: role -> examples per operation and generation mode (valid, invalid): the budget, ~3 minutes on 2 cores in all.
#: The lead and the agent reach less (the agent: one operation) and get fewer.
FUZZ_ROLES = {"member": 3, "admin": 3, "lead": 2, "agent": 2}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MODES = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)


#: What goes where a value belongs in the explicit examples: bodies that are not a JSON object, and Unicode digits.
NOT_OBJECTS = (["²"], "²")
UNICODE_DIGITS = "²"


def operations(live_portal):
    schema = schemathesis.openapi.from_url(f"{live_portal.url}/api/schema/?format=json")
    found = [result.ok() for result in schema.get_all_operations()]
    assert len(found) >= 70, "the schema lost its operations"
    return schema.raw_schema, found


def body_properties(raw: dict, definition: dict) -> list[str] | None:
    """The property names of the operation's JSON request body (None: it takes none)."""
    body = definition.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is None:
        return None
    if "$ref" in body:
        body = raw["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    return list(body.get("properties", {}))


def explicit_cases(raw: dict, op, objects: dict) -> list:
    """The explicit examples of ``op``: every query parameter and body property in Unicode digits, and each body
    that is not an object, on the seeded object its path names. None for a DELETE (it has no body, and the case
    would delete the object the other operations aim at) or a path with no seeded object."""
    if op.method.lower() == "delete":
        return []
    definition = raw["paths"][op.path][op.method.lower()]
    collection = op.path.split("/")[3]
    path_parameters = {}
    for name in re.findall(r"\{([^}]+)\}", op.path):
        target = objects.get(collection if name in ("id", "name", "slug") else name)
        if target is None:
            return []
        path_parameters[name] = target
    query = {p["name"]: UNICODE_DIGITS for p in definition.get("parameters", []) if p["in"] == "query"}
    properties = body_properties(raw, definition)
    cases = []
    if query or properties:
        body = {name: UNICODE_DIGITS for name in properties or ()} if properties is not None else None
        cases.append(
            op.Case(path_parameters=path_parameters, query=query, **({"body": body} if body is not None else {}))
        )
    if properties is not None:
        cases += [op.Case(path_parameters=path_parameters, body=body, media_type="application/json")
                  for body in NOT_OBJECTS]  # fmt: skip
    return cases


#: (method, path, mode) -> the cases drawn for it, in order. Derandomized, the draw is the same for every role, and
#: drawing costs more than sending (schemathesis builds each case from the schema through hypothesis): each
#: operation's cases are drawn once per test process, as many as the most any role sends, and each role sends the
#: first of them that its budget allows.
DRAWN: dict[tuple[str, str, str], list] = {}


def drawn(op, mode) -> list:
    key = (op.method, op.path, mode.value)
    if key not in DRAWN:
        cases = []

        @settings(
            max_examples=max(FUZZ_ROLES.values()),
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=op.as_strategy(generation_mode=mode))
        def draw(case):
            cases.append(case)

        draw()
        DRAWN[key] = cases
    return DRAWN[key]


def fuzz(live_portal, role: str, examples: int) -> tuple[int, int, int, list[str]]:
    """Fuzz every operation as ``role``, its explicit examples first: (operations, requests, 5xx answers,
    failures)."""
    raw, ops = operations(live_portal)
    headers = live_portal.headers(role)
    sent, server_errors, failures = 0, 0, []
    for op in ops:
        for mode in MODES:
            seen: set[str] = set()
            explicit = explicit_cases(raw, op, live_portal.objects) if mode == MODES[-1] else []

            # Sent as hypothesis runs a test (the drawn cases are its examples now), with the stack room it gives.
            @settings(
                database=None,
                deadline=None,
                phases=[Phase.explicit],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case):
                nonlocal sent, server_errors
                response = case.call(base_url=live_portal.url, headers=headers)  # a connection each: no keep-alive
                sent += 1
                server_errors += response.status_code >= 500
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except (AssertionError, FailureGroup) as failure:
                    found = failure.exceptions if isinstance(failure, FailureGroup) else [failure]
                    first = "; ".join(
                        f"{getattr(f, 'title', type(f).__name__)}: {getattr(f, 'message', str(f))}" for f in found
                    )[:600]
                    if first not in seen:
                        seen.add(first)
                        failures.append(
                            f"{op.label} [{mode.value}] {response.status_code}: {first}\n    "
                            f"{case.as_curl_command(headers=None)[:400]}"
                        )

            for case in reversed([*explicit, *(first.derive() for first in drawn(op, mode)[:examples])]):
                run = example(case=case)(run)  # hypothesis runs the last applied first
            run()
    return len(ops), sent, server_errors, failures


@pytest.mark.xdist_group("fuzz")  # one process runs every role, so each operation's cases are drawn once
@pytest.mark.parametrize("role", list(FUZZ_ROLES))
def test_fuzzing_finds_no_server_error_and_no_schema_violation(live_portal, role, capsys):
    started = time.monotonic()
    ops, sent, server_errors, failures = fuzz(live_portal, role, FUZZ_ROLES[role])
    with capsys.disabled():
        print(
            f"\nfuzz {role}: {ops} operations, {sent} requests, {server_errors} answered 5xx, "
            f"{len(failures)} failing checks ({time.monotonic() - started:.0f}s)"
        )
    assert failures == [], "\n".join(failures)
    assert server_errors == 0

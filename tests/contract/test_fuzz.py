"""Issue 16: API fuzzing in CI. Schemathesis (pinned) reads /api/schema/ from the live portal and sends generated
requests, valid and invalid, to every operation in it with the token of a member, a lead, an admin and a node
agent: a fixed seed (derandomized) and a bounded number of examples per operation. Every response is checked:
no server error, a status code the schema lists, and a body that matches the schema. One failure fails the
test, which prints every failing operation with the request that broke it."""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
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


def operations(live_portal):
    schema = schemathesis.openapi.from_url(f"{live_portal.url}/api/schema/?format=json")
    found = [result.ok() for result in schema.get_all_operations()]
    assert len(found) >= 70, "the schema lost its operations"
    return found


def fuzz(live_portal, role: str, examples: int) -> tuple[int, int, int, list[str]]:
    """Fuzz every operation as ``role``: (operations, requests, 5xx answers, failures)."""
    ops = operations(live_portal)
    headers = live_portal.headers(role)
    sent, server_errors, failures = 0, 0, []
    for op in ops:
        for mode in MODES:
            seen: set[str] = set()

            @settings(
                max_examples=examples,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
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

            run()
    return len(ops), sent, server_errors, failures


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

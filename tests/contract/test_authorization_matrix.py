"""Issue 16: the authorization matrix. Every operation of the OpenAPI schema (drf-spectacular reads it from the URL
conf; a test below checks that every API route of the URL conf is in it) × every role, over real HTTP to the live
portal, with the outcome each cell must have derived from the rules written once below:

- ``allowed``: past authorization (any answer but 401, 403 and 404; a 400 for the empty body counts);
- ``denied``: 401 or 403 (or 429 once a token that is not an API token has been refused too often);
- ``hidden``: 404 (another team's object is not admitted to exist).

The object each detail operation aims at belongs to the vision team: carol (``member``) made it, alice (``lead``)
leads the team, bob (``other_member``) is in nlp, ``no_team`` is in none. Each role runs in its own test on a fresh
database: reads first, then writes, deletes last, so a role's own delete does not hide the object from itself.

Two service accounts of vision are roles too: ``robot_manage`` (a manage-scoped token: a member of the team that
is not carol) and ``robot_read`` (a read-scoped token: every change refused). A submit-scoped token's actions are
checked per view in tests/unit/accounts/test_token_scopes.py."""

from __future__ import annotations

import re

import pytest
import requests
from django.urls import URLPattern, URLResolver, get_resolver

from tests.contract.conftest import ROLE_TOKENS
from tests.openapi import openapi_schema

ALLOWED, DENIED, HIDDEN = "allowed", "denied", "hidden"
OUTCOMES = {ALLOWED: "not 401/403/404", DENIED: "401 or 403", HIDDEN: "404"}
WRITES = ("post", "put", "patch", "delete")

#: Collections whose objects belong to a team: another team's member and a user in no team do not see them.
TEAM_OWNED = {
    "jobs", "job-arrays", "notebooks", "services", "secrets", "registry-credentials", "volumes", "datasets", "quotas",
    "webhooks", "service-accounts", "teams",
}  # fmt: skip
#: Open to everyone by design: the device login's start and poll (the CLI has no token yet); an empty poll is a 400.
PUBLIC = {("post", "/api/v1/auth/device/"), ("post", "/api/v1/auth/device/token/")}
#: Collections only admins reach at all (node reconfigurations: every operation, abort and force included).
ADMIN_COLLECTIONS = {"node-config-operations"}
#: The capacity planner: only admins make and cancel runs; the leads of any team read them; everyone else is refused.
PLANNER = "planner"
#: Collections whose objects belong to one user (even an admin sees only their own).
USER_OWNED = {"tokens", "notifications"}
#: Operations only an admin may make; everyone else is refused before any object is looked up.
ADMIN_ONLY = {
    ("post", "/api/v1/quotas/"), ("put", "/api/v1/quotas/{id}/"), ("patch", "/api/v1/quotas/{id}/"),
    ("delete", "/api/v1/quotas/{id}/"),
    ("post", "/api/v1/datasets/"), ("put", "/api/v1/datasets/{id}/"), ("patch", "/api/v1/datasets/{id}/"),
    ("delete", "/api/v1/datasets/{id}/"),
    ("put", "/api/v1/resource-classes/{id}/"), ("patch", "/api/v1/resource-classes/{id}/"),
    ("get", "/api/v1/nodes/{name}/smoke-tests/"), ("post", "/api/v1/nodes/{name}/smoke-tests/"),
    ("post", "/api/v1/clusters/"), ("patch", "/api/v1/clusters/{name}/"), ("delete", "/api/v1/clusters/{name}/"),
    ("post", "/api/v1/clusters/{name}/check/"),
    ("get", "/api/v1/clusters/{name}/mig-profiles/"), ("post", "/api/v1/clusters/{name}/mig-profiles/"),
}  # fmt: skip
#: Collections a team's leads (and admins) see; its plain members see none of them (a webhook URL may be a
#: credential): their detail operations are hidden from a member too.
LEAD_COLLECTIONS = {"webhooks"}
#: Changes a team's lead (or an admin) makes; a plain member of the team is refused.
LEAD_ONLY = {
    ("post", "/api/v1/webhooks/"),
    ("get", "/api/v1/service-accounts/{id}/tokens/"), ("post", "/api/v1/service-accounts/{id}/tokens/"),
    ("post", "/api/v1/service-accounts/{id}/disable/"),
    ("post", "/api/v1/service-accounts/{id}/tokens/{token_id}/revoke/"),
    ("post", "/api/v1/service-accounts/{id}/tokens/{token_id}/rotate/"),
    ("post", "/api/v1/secrets/"), ("delete", "/api/v1/secrets/{id}/"), ("post", "/api/v1/secrets/{id}/rotate/"),
    ("post", "/api/v1/registry-credentials/"), ("delete", "/api/v1/registry-credentials/{id}/"),
    ("post", "/api/v1/registry-credentials/{id}/rotate/"),
    ("patch", "/api/v1/teams/{slug}/member-shares/"),
    ("put", "/api/v1/teams/{slug}/preemption/"),
    ("post", "/api/v1/teams/{slug}/templates/"), ("delete", "/api/v1/teams/{slug}/templates/{name}/"),
}  # fmt: skip
#: Work only its owner, a lead of its team or an admin changes (cancel, resubmit, stop, scale …): another member
#: of the team is refused.
OWNER_OR_LEAD = {"jobs", "job-arrays", "notebooks", "services"}
#: Only the work's owner (carol) may; a lead and an admin are refused: a notebook's token goes to its owner alone.
OWNER_ONLY = {("post", "/api/v1/notebooks/{id}/token/")}
#: The node agent's one door, closed to every account.
AGENT_ONLY = {("post", "/api/v1/telemetry/samples/")}
#: Operations past authorization that answer 404 in these words while the seeded job's container starts: "no log
#: yet", not "no such job" (another team's member gets the latter).
NOT_YET = {("get", "/api/v1/jobs/{id}/logs/download/"): "No log from pod"}
#: Query strings an operation needs to reach its authorization question (usage: which team).
QUERIES = {"/api/v1/usage/": "?team=vision&start=2026-01-01&end=2026-01-31"}


def expected(method: str, path: str, role: str) -> str:
    """The outcome (method, path) must have for role: the rules above, in one place."""
    op = (method, path)
    collection = path.split("/")[3]
    detail = "{" in path
    if op in PUBLIC:
        return ALLOWED
    if role == "anonymous":
        return DENIED
    if op in AGENT_ONLY or role == "agent":
        return ALLOWED if op in AGENT_ONLY and role == "agent" else DENIED
    if op in OWNER_ONLY and role in ("admin", "lead"):
        return DENIED
    if role == "admin":
        return HIDDEN if detail and collection in USER_OWNED else ALLOWED
    if role == "robot_read" and method in WRITES:
        return DENIED  # a read-scoped token makes no change anywhere, whatever its identity may do
    if role.startswith("robot_"):
        role = "robot"  # a service account of vision: a member of the team, not carol
    if op in ADMIN_ONLY or collection in ADMIN_COLLECTIONS:
        return DENIED
    if collection == PLANNER:
        return ALLOWED if role == "lead" and method not in WRITES else DENIED
    in_team = role in ("member", "lead", "robot")
    if role == "robot" and method in WRITES and detail and collection in OWNER_OR_LEAD:
        return DENIED  # carol's work: her team's robot is a member, not its owner or a lead
    if detail and collection in USER_OWNED:
        return ALLOWED if role == "member" else HIDDEN  # carol's token and notification
    if detail and collection in TEAM_OWNED and not in_team:
        return HIDDEN
    if detail and collection in LEAD_COLLECTIONS and role != "lead":
        return HIDDEN
    if op == ("get", "/api/v1/usage/") and not in_team:
        return HIDDEN
    if op in LEAD_ONLY:
        # With the empty body the matrix sends, a create or rotate may name the missing fields (400) before it
        # asks who is calling; either way nothing changes. A delete is refused outright.
        return ALLOWED if role == "lead" else (DENIED if method == "delete" else DENIED_OR_INVALID)
    if method in WRITES and not in_team and collection in TEAM_OWNED:
        # Creating in a team one does not belong to: refused (403), or a 400 naming the team (the team field
        # of an empty body is checked with the rest); either way nothing is made.
        return DENIED_OR_INVALID
    return ALLOWED


DENIED_OR_INVALID = "denied-or-invalid"
OUTCOMES[DENIED_OR_INVALID] = "401, 403 or 400"


def outcome_of(status: int) -> str:
    if status in (401, 403, 429):  # 429: too many requests with a token that is not an API token (the agent's)
        return DENIED
    if status == 404:
        return HIDDEN
    return ALLOWED


def matches(want: str, status: int) -> bool:
    if want == DENIED_OR_INVALID:
        return status in (400, 401, 403, 429)
    return outcome_of(status) == want


def schema_operations() -> list[tuple[str, str]]:
    schema = openapi_schema()
    ops = [(method, path) for path, item in schema["paths"].items() for method in item if method in ("get", *WRITES)]
    order = {"get": 0, "put": 1, "patch": 1, "post": 2, "delete": 3}
    return sorted(ops, key=lambda op: (order[op[0]], op[1]))


def url_for(live_portal, path: str) -> str:
    collection = path.split("/")[3]
    if "{" in path:
        for name in re.findall(r"\{([^}]+)\}", path):
            # An id, name or slug names an object of the collection it follows (/teams/{slug}/templates/{name}/).
            before = path.split("{" + name + "}")[0].rstrip("/").rsplit("/", 1)[-1]
            key = before if before in live_portal.objects else collection
            target = live_portal.objects.get(key if name in ("id", "name", "slug") else name)
            assert target is not None, f"no seeded object for {name} in {path}: add one in conftest.seed_objects"
            path = path.replace("{" + name + "}", str(target))
    return live_portal.url + path + QUERIES.get(path, "")


@pytest.mark.django_db
def test_every_api_route_of_the_url_conf_is_an_operation_in_the_schema():
    """The matrix walks the schema; a route the schema missed would escape it."""
    schema_paths = {re.sub(r"\{[^}]+\}", "{}", path) for _, path in schema_operations()}
    routes = set()

    def walk(patterns, prefix):
        for pattern in patterns:
            text = prefix + str(pattern.pattern).lstrip("^").rstrip("$")
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, text)
            elif isinstance(pattern, URLPattern) and text.startswith("api/v1/"):
                routes.add(text)

    walk(get_resolver().url_patterns, "")
    as_paths = set()
    for route in routes:
        if "format>" in route or "drf_format_suffix" in route or route == "api/v1/":
            continue  # the format-suffix twins of each route and the browsable root
        path = "/" + re.sub(r"\(\?P<[^>]+>[^)]*\)|<[^>]+>", "{}", route)
        as_paths.add(path)
    missing = sorted(as_paths - schema_paths)
    assert missing == [], f"API routes the schema (and so the matrix and the fuzzer) does not cover: {missing}"


@pytest.mark.parametrize("role", list(ROLE_TOKENS))
def test_every_operation_answers_each_role_as_the_rules_say(live_portal, role, capsys):
    ops = schema_operations()
    wrong = []
    for method, path in ops:
        want = expected(method, path, role)
        body = {} if method in ("post", "put", "patch") else None
        response = requests.request(
            method.upper(), url_for(live_portal, path), json=body, headers=live_portal.headers(role), timeout=30
        )
        status = response.status_code
        if want == ALLOWED and status == 404 and NOT_YET.get((method, path), "\0") in response.text:
            status = 200  # past authorization: the log is not there yet
        if not matches(want, status):
            said = response.text[:160]
            wrong.append(f"{method.upper()} {path}: {response.status_code}, want {OUTCOMES[want]}: {said}")
    with capsys.disabled():
        print(f"\nauthorization matrix, {role}: {len(ops)} operations, {len(ops) - len(wrong)} as the rules say")
    assert wrong == [], "\n".join(wrong)


@pytest.mark.django_db
def test_the_matrix_is_every_operation_times_every_role(capsys):
    ops = schema_operations()
    cells = {(m, p, role): expected(m, p, role) for m, p in ops for role in ROLE_TOKENS}
    assert len(ops) >= 105 and len(cells) == len(ops) * len(ROLE_TOKENS)
    with capsys.disabled():
        print(f"\nauthorization matrix: {len(ops)} operations × {len(ROLE_TOKENS)} roles = {len(cells)} cells")
    # The rules are not vacuous: each role but the admin is refused something, and anonymous everything.
    for role in ROLE_TOKENS:
        outcomes = {cells[(m, p, role)] for m, p in ops}
        assert outcomes != {ALLOWED} or role == "admin", role
    assert {cells[(m, p, "anonymous")] for m, p in ops if (m, p) not in PUBLIC} == {DENIED}

"""Token scopes (read / submit / manage) enforced by the one permission every API view uses, the limits on tokens
made with tokens (never outlive, never out-scope), rotation with an overlap, and the read_only spelling."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts import tokens
from accounts.choices import TokenScope
from accounts.models import APIToken
from core.models import AuditEvent

pytestmark = pytest.mark.django_db

JOB = {"team": "vision", "name": "x"}  # invalid on purpose: past the permission it is a 400, before it a 403


def bearer(raw):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


# What each kind of request answers when the scope allows it (the request is then refused for its body or
# done) and the 403 when it does not.
REQUESTS = {
    "read a list": ("get", "/api/v1/jobs/", None, 200),
    "submit a job": ("post", "/api/v1/jobs/", JOB, 400),
    "launch a notebook": ("post", "/api/v1/notebooks/", {"team": "vision"}, 400),
    "issue a token": ("post", "/api/v1/tokens/", {"name": "made by a token", "days": 1}, 201),
    "create a team secret": ("post", "/api/v1/secrets/", {}, 400),
}
ALLOWED = {
    TokenScope.READ: {"read a list"},
    TokenScope.SUBMIT: {"read a list", "submit a job", "launch a notebook"},
    TokenScope.MANAGE: set(REQUESTS),
}


@pytest.mark.parametrize("scope", list(TokenScope))
@pytest.mark.parametrize("what", list(REQUESTS))
def test_scope_permission_matrix(api_client, people, scope, what):
    _, raw = APIToken.issue(people["alice"], "t", scope=scope)
    method, url, data, allowed_status = REQUESTS[what]
    response = getattr(api_client, method)(url, data, format="json", **bearer(raw))
    if what in ALLOWED[scope]:
        assert response.status_code == allowed_status, response.content
    else:
        assert response.status_code == 403, response.content
        assert "scope" in response.json()["detail"]


def test_a_browser_session_has_no_scope(api_client, people):
    api_client.force_login(people["alice"])
    assert api_client.post("/api/v1/tokens/", {"name": "x"}, format="json").status_code == 201


def test_read_only_is_still_accepted_and_means_scope_read(api_client, people):
    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/tokens/", {"name": "dash", "read_only": True}, format="json")
    assert response.status_code == 201 and response.json()["scope"] == "read" and response.json()["read_only"]
    token, _ = APIToken.issue(people["alice"], "old style", read_only=True)
    assert token.scope == TokenScope.READ


def test_a_token_cannot_mint_a_token_that_outlives_it(api_client, people):
    maker, raw = APIToken.issue(people["alice"], "short", days=10)
    response = api_client.post("/api/v1/tokens/", {"name": "long", "days": 365}, format="json", **bearer(raw))
    assert response.status_code == 400
    assert "may not outlive it" in response.json()["days"][0]
    assert APIToken.objects.count() == 1
    response = api_client.post("/api/v1/tokens/", {"name": "ok", "days": 9}, format="json", **bearer(raw))
    assert response.status_code == 201
    assert APIToken.objects.get(name="ok").expires_at <= maker.expires_at


def test_a_token_cannot_mint_a_wider_scope_and_every_problem_is_listed():
    maker = APIToken(scope=TokenScope.SUBMIT, expires_at=timezone.now() + timedelta(days=1))
    problems = tokens.check_limits(TokenScope.MANAGE, timezone.now() + timedelta(days=30), maker)
    assert "can only make tokens of scope read, submit" in problems["scope"][0]
    assert "may not outlive it" in problems["days"][0]
    assert tokens.check_limits(TokenScope.READ, timezone.now() + timedelta(hours=1), maker) == {}


def test_max_lifetime_setting_caps_every_token(api_client, people, settings):
    settings.PORTAL_TOKEN_MAX_DAYS = 30
    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/tokens/", {"name": "long", "days": 31}, format="json")
    assert response.status_code == 400 and "at most 30 days" in response.json()["days"][0]


def test_rotation_issues_a_new_secret_and_the_old_one_stops_after_the_overlap(api_client, people):
    old, old_raw = APIToken.issue(people["alice"], "pipeline", days=30, scope=TokenScope.SUBMIT)
    api_client.force_login(people["alice"])
    response = api_client.post(f"/api/v1/tokens/{old.pk}/rotate/", {"overlap_hours": 2}, format="json")
    assert response.status_code == 201
    new_raw = response.json()["token"]
    new = APIToken.objects.get(pk=response.json()["id"])
    assert new.scope == "submit" and new.name == "pipeline" and new.rotated_from == old
    assert abs((new.expires_at - new.created) - timedelta(days=30)) < timedelta(minutes=1)
    api_client.logout()
    assert api_client.get("/api/v1/me/", **bearer(old_raw)).status_code == 200, "still works during the overlap"
    assert api_client.get("/api/v1/me/", **bearer(new_raw)).status_code == 200
    APIToken.objects.filter(pk=old.pk).update(revoked_at=timezone.now() - timedelta(seconds=1))
    assert api_client.get("/api/v1/me/", **bearer(old_raw)).status_code == 401
    assert AuditEvent.objects.filter(action="token.rotate", object_id=str(new.pk)).exists()


def test_rotation_without_overlap_stops_the_old_token_at_once(api_client, people):
    old, old_raw = APIToken.issue(people["alice"], "pipeline")
    api_client.force_login(people["alice"])
    assert api_client.post(f"/api/v1/tokens/{old.pk}/rotate/", {}, format="json").status_code == 201
    api_client.logout()
    assert api_client.get("/api/v1/me/", **bearer(old_raw)).status_code == 401
    api_client.force_login(people["alice"])
    again = api_client.post(f"/api/v1/tokens/{old.pk}/rotate/", {}, format="json")
    assert again.status_code == 400 and "Only an active token" in again.json()["detail"][0]


def test_rotating_with_a_token_cannot_stretch_its_life(api_client, people):
    token, raw = APIToken.issue(people["alice"], "self", days=30)
    APIToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() + timedelta(days=2))
    response = api_client.post(f"/api/v1/tokens/{token.pk}/rotate/", {}, format="json", **bearer(raw))
    assert response.status_code == 400 and "may not outlive it" in response.json()["days"][0]
    assert APIToken.objects.count() == 1 and APIToken.objects.get().revoked_at is None


def test_revoking_is_audited_and_stops_a_token_in_its_overlap_too(api_client, people):
    token, raw = APIToken.issue(people["alice"], "x")
    APIToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now() + timedelta(hours=3))
    api_client.force_login(people["alice"])
    assert api_client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    api_client.logout()
    assert api_client.get("/api/v1/me/", **bearer(raw)).status_code == 401
    assert AuditEvent.objects.filter(action="token.revoke", object_id=str(token.pk)).count() == 1


def test_tokens_page_issues_a_scoped_token_and_shows_the_secret_once(client, people):
    client.force_login(people["alice"])
    response = client.post("/account/tokens/", {"name": "ci", "scope": "submit", "days": 7})
    assert response.status_code == 200
    token = APIToken.objects.get()
    secret = response.context["new_token"]["secret"]
    assert token.scope == "submit" and secret.startswith(f"gpp_{token.key_prefix}_")
    assert secret in response.content.decode()
    assert secret not in client.get("/account/tokens/").content.decode()
    response = client.post(f"/account/tokens/{token.pk}/rotate/", {"overlap_hours": 0})
    assert response.status_code == 200 and APIToken.objects.count() == 2
    assert response.context["new_token"]["secret"] != secret


# A lead's submit token acts on the lead's own work only (issue 31, item 6): each request is one a lead may make on a
# member's work with a manage token or in the browser, and one the member may make on it with their own submit token.
OTHERS_WORK = {
    "cancel a job": ("job", "post", "/api/v1/jobs/{id}/cancel/", {"reason": "making room"}),
    "change a job's priority": ("job", "post", "/api/v1/jobs/{id}/priority/", {"priority": "low"}),
    "stop a notebook": ("notebook", "post", "/api/v1/notebooks/{id}/stop/", {"reason": "making room"}),
    "scale a service": ("service", "post", "/api/v1/services/{id}/scale/", {"min_replicas": 1, "max_replicas": 1}),
    "pause a service": ("service", "post", "/api/v1/services/{id}/pause/", {}),
    "change a service": ("service", "patch", "/api/v1/services/{id}/", {"image": "vllm/vllm-openai:v0.6.4"}),
}


def _work(kind, owner, name):
    from tests.factories import inference_service, notebook_session, submit_job

    if kind == "job":
        return submit_job(owner, name=name).pk
    if kind == "notebook":
        return notebook_session(owner, name=name).notebook.pk
    return inference_service(owner, name=name).pk


@pytest.mark.parametrize("what", list(OTHERS_WORK))
def test_a_leads_submit_token_does_not_act_on_a_members_work(api_client, cluster, people, what):
    from tests.factories import member

    carol = member(people["vision"])
    kind, method, url, body = OTHERS_WORK[what]
    _, lead_submit = APIToken.issue(people["alice"], "ci", scope=TokenScope.SUBMIT)
    refused = getattr(api_client, method)(
        url.format(id=_work(kind, carol, "first")), body, format="json", **bearer(lead_submit)
    )
    assert refused.status_code == 403, refused.content
    assert "your own work only" in refused.json()["detail"]
    assert not AuditEvent.objects.filter(actor=people["alice"]).exclude(action="token.issue").exists()

    # The same request on fresh work: the lead with a manage token, the member with their own submit token.
    _, own_submit = APIToken.issue(carol, "ci", scope=TokenScope.SUBMIT)
    _, lead_manage = APIToken.issue(people["alice"], "admin work", scope=TokenScope.MANAGE)
    for name, raw in (("second", lead_manage), ("third", own_submit)):
        allowed = getattr(api_client, method)(
            url.format(id=_work(kind, carol, name)), body, format="json", **bearer(raw)
        )
        assert allowed.status_code == 200, (what, allowed.content)

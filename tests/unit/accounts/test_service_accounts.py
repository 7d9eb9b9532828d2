"""Team service accounts: leads (and admins) create and disable them and issue, rotate and revoke their tokens;
members list them; other teams see nothing; their jobs show them as owner; they survive their creator leaving."""

import pytest
from django.urls import reverse

from accounts.models import APIToken, Membership, ServiceAccount
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job
from tests.factories import member
from tests.sim_objects import H100

pytestmark = pytest.mark.django_db


def bearer(raw):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


@pytest.fixture
def carol(people):
    """A plain member of vision (alice leads it)."""
    user = member(people["vision"])
    return user


def create(api_client, user, **body):
    api_client.force_login(user)
    return api_client.post("/api/v1/service-accounts/", {"team": "vision", "name": "nightly", **body}, format="json")


def test_a_lead_creates_a_service_account_backed_by_its_own_user(api_client, people):
    response = create(api_client, people["alice"], description="nightly training")
    assert response.status_code == 201, response.content
    assert response.json()["username"] == "sa-vision-nightly" and response.json()["created_by"] == "alice"
    account = ServiceAccount.objects.get()
    assert not account.user.has_usable_password() and not account.user.is_staff
    assert Membership.objects.get(user=account.user).team == people["vision"]
    event = AuditEvent.objects.get(action="service_account.create")
    assert event.actor == people["alice"] and event.team == people["vision"]


def test_every_problem_with_a_new_service_account_is_listed(api_client, people):
    create(api_client, people["alice"])
    again = create(api_client, people["alice"])
    assert again.status_code == 400 and "already has a service account 'nightly'" in again.json()["name"][0]
    bad = create(api_client, people["alice"], name="Not A Name")
    assert bad.status_code == 400 and "lowercase" in bad.json()["name"][0]


def test_members_list_but_cannot_create_and_other_teams_see_nothing(api_client, people, carol):
    create(api_client, people["alice"])
    account = ServiceAccount.objects.get()
    refused = create(api_client, carol, name="mine")
    assert refused.status_code == 403 and "Only leads of vision" in refused.json()["detail"]
    assert [a["name"] for a in api_client.get("/api/v1/service-accounts/").json()["results"]] == ["nightly"]
    assert api_client.get(f"/api/v1/service-accounts/{account.pk}/tokens/").status_code == 403
    api_client.force_login(people["bob"])  # nlp
    assert api_client.get("/api/v1/service-accounts/").json()["results"] == []
    assert api_client.get(f"/api/v1/service-accounts/{account.pk}/").status_code == 404
    assert api_client.post(f"/api/v1/service-accounts/{account.pk}/disable/").status_code == 404
    assert api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/", {"name": "x"}).status_code == 404
    other = api_client.post("/api/v1/service-accounts/", {"team": "vision", "name": "sneaky"}, format="json")
    assert other.status_code == 400 and other.json()["team"] == ["No team 'vision'. GET /api/v1/me/ lists your teams."]


def test_the_list_takes_a_team_and_refuses_unknown_parameters(api_client, people):
    create(api_client, people["alice"])
    api_client.force_login(people["admin"])
    assert len(api_client.get("/api/v1/service-accounts/?team=vision").json()["results"]) == 1
    assert api_client.get("/api/v1/service-accounts/?team=nlp").json()["results"] == []
    wrong = api_client.get("/api/v1/service-accounts/?teem=vision")
    assert wrong.status_code == 400 and "It takes:" in wrong.json()["teem"][0]


def test_its_token_submits_jobs_it_owns_and_survives_its_creator_leaving(api_client, client, inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    create(api_client, people["alice"])
    account = ServiceAccount.objects.get()
    issued = api_client.post(
        f"/api/v1/service-accounts/{account.pk}/tokens/", {"name": "ci", "scope": "submit", "days": 30}, format="json"
    )
    assert issued.status_code == 201 and issued.json()["user"] == "sa-vision-nightly"
    raw = issued.json()["token"]
    assert AuditEvent.objects.filter(action="token.issue", team=people["vision"]).exists()
    people["alice"].delete()  # the lead who made it leaves
    api_client.logout()
    job = {"team": "vision", "name": "nightly", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["train"],
           "resource_class": H100, "count": 1, "cpu": 2, "memory_mb": 4096}  # fmt: skip
    response = api_client.post("/api/v1/jobs/", job, format="json", **bearer(raw))
    assert response.status_code == 201, response.content
    assert response.json()["owner"] == "sa-vision-nightly"
    assert Job.objects.get().owner == account.user
    client.force_login(people["admin"])
    page = client.get(reverse("jobs:job-detail", args=[Job.objects.get().pk])).content.decode()
    assert "nightly (service account of vision)" in page
    # A submit-scoped robot still cannot manage the team.
    assert api_client.post("/api/v1/tokens/", {"name": "x"}, format="json", **bearer(raw)).status_code == 403


def test_disabling_revokes_its_tokens_and_is_audited(api_client, people):
    create(api_client, people["alice"])
    account = ServiceAccount.objects.get()
    raw = api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/", {"name": "ci"}, format="json").json()[
        "token"
    ]
    response = api_client.post(f"/api/v1/service-accounts/{account.pk}/disable/")
    assert response.status_code == 200 and response.json()["active"] is False
    api_client.logout()
    assert api_client.get("/api/v1/me/", **bearer(raw)).status_code == 401
    event = AuditEvent.objects.get(action="service_account.disable")
    assert event.after["tokens_revoked"] == [APIToken.objects.get().key_prefix]
    api_client.force_login(people["alice"])
    again = api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/", {"name": "ci"}, format="json")
    assert again.status_code == 400 and "disabled" in again.json()["detail"][0]


def test_a_lead_rotates_and_revokes_its_tokens(api_client, people):
    create(api_client, people["alice"])
    account = ServiceAccount.objects.get()
    first = api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/", {"name": "ci"}, format="json").json()
    rotated = api_client.post(
        f"/api/v1/service-accounts/{account.pk}/tokens/{first['id']}/rotate/", {"overlap_hours": 1}, format="json"
    )
    assert rotated.status_code == 201 and rotated.json()["user"] == "sa-vision-nightly"
    listed = api_client.get(f"/api/v1/service-accounts/{account.pk}/tokens/").json()
    assert {t["id"] for t in listed} == {first["id"], rotated.json()["id"]}
    revoked = api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/{rotated.json()['id']}/revoke/")
    assert revoked.status_code == 204
    alices, _ = APIToken.issue(people["alice"], "not the robot's")
    assert api_client.post(f"/api/v1/service-accounts/{account.pk}/tokens/{alices.pk}/revoke/").status_code == 404
    assert AuditEvent.objects.filter(action__in=["token.rotate", "token.revoke"], team=people["vision"]).count() == 2


def test_the_team_page_lists_them_and_only_leads_get_the_forms(client, people, carol):
    client.force_login(people["alice"])
    url = reverse("service-account-list", args=["vision"])
    response = client.post(url, {"name": "robot", "description": "CI"})
    assert response.status_code == 302 and ServiceAccount.objects.get().name == "robot"
    account = ServiceAccount.objects.get()
    response = client.post(
        reverse("service-account-token-issue", args=["vision", account.pk]), {"name": "ci", "scope": "read", "days": 3}
    )
    secret = response.context["new_token"]["secret"]
    assert APIToken.objects.get(user=account.user).scope == "read" and secret in response.content.decode()
    client.force_login(carol)
    page = client.get(url).content.decode()
    assert "robot" in page and "New service account" not in page and "Issue token" not in page
    assert client.post(url, {"name": "mine"}).status_code == 403
    client.force_login(people["bob"])
    assert client.get(url).status_code == 404

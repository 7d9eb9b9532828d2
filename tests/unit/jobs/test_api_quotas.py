"""The quotas API: everyone signed in reads their own teams' quotas with the units in use, only admins change
them (through jobs.actions, so every change is audited), and a bad change says what to do."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.models import APIToken
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job, Quota
from tests.factories import member
from tests.sim_objects import H100

A10 = "nvidia.com/gpu@NVIDIA-A10-SHARED"


@pytest.fixture
def setup(inventory, people):
    """H100 quotas for vision (8/16) and nlp (4/8); carol is a plain member of vision, alice its lead."""
    h100 = ResourceClass.objects.get(key=H100)
    admin = people["admin"]
    vision = actions.set_quota(admin, people["vision"], h100, 8, 16)
    nlp = actions.set_quota(admin, people["nlp"], h100, 4, 8)
    carol = member(people["vision"])
    return {**people, "carol": carol, "h100": h100, "a10": ResourceClass.objects.get(key=A10), "q_vision": vision,
            "q_nlp": nlp}  # fmt: skip


def job(setup, team="vision", owner="carol", count=1, state=JobState.QUEUED, rc=None) -> Job:
    fields = dict(
        name="train", image="busybox", command=[], args=[], env=[], count=count, cpu_millicores=1000,
        memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    created = actions.submit_job(setup[owner], setup[team], rc or setup["h100"], fields).job
    Job.objects.filter(pk=created.pk).update(state=state)
    return created


def results(response) -> list[tuple]:
    return [
        (q["team"], q["resource_class"], q["guaranteed"], q["limit"], q["used"]) for q in response.json()["results"]
    ]


# -- reading --------------------------------------------------------------------------------------------------


def test_members_see_their_teams_quotas_with_units_in_use(api_client, setup):
    h100 = setup["h100"].pk
    job(setup, count=3, state=JobState.RUNNING)
    job(setup, count=2, state=JobState.ADMITTED)
    job(setup, count=1, state=JobState.PREEMPTING)
    job(setup, count=4, state=JobState.QUEUED)  # waiting: holds nothing
    job(setup, count=5, state=JobState.SUCCEEDED)  # ended: holds nothing
    job(setup, team="nlp", owner="bob", count=2, state=JobState.RUNNING)

    api_client.force_login(setup["carol"])
    assert results(api_client.get("/api/v1/quotas/")) == [("vision", h100, 8, 16, 6)]
    api_client.force_login(setup["bob"])
    assert results(api_client.get("/api/v1/quotas/")) == [("nlp", h100, 4, 8, 2)]
    api_client.force_login(setup["outsider"])
    assert api_client.get("/api/v1/quotas/").json()["count"] == 0
    api_client.force_login(setup["admin"])
    assert results(api_client.get("/api/v1/quotas/")) == [("nlp", h100, 4, 8, 2), ("vision", h100, 8, 16, 6)]
    assert results(api_client.get("/api/v1/quotas/", {"team": "vision"})) == [("vision", h100, 8, 16, 6)]
    assert results(api_client.get("/api/v1/quotas/", {"team_id": setup["nlp"].pk})) == [("nlp", h100, 4, 8, 2)]
    assert api_client.get("/api/v1/quotas/", {"resource_class": setup["a10"].pk}).json()["count"] == 0
    assert [q["team"] for q in api_client.get("/api/v1/quotas/", {"ordering": "-used"}).json()["results"]] == [
        "vision",
        "nlp",
    ]


def test_one_quota_in_full_and_hidden_from_other_teams(api_client, setup):
    quota = setup["q_vision"]
    api_client.force_login(setup["alice"])
    data = api_client.get(f"/api/v1/quotas/{quota.pk}/").json()
    assert data == {
        "id": quota.pk, "team": "vision", "resource_class": setup["h100"].pk, "resource_class_name": "H100 80GB HBM3",
        "resource_class_key": H100, "guaranteed": 8, "limit": 16, "monthly_gpu_hours": None, "used": 0,
        "cluster_caps": {}, "updated": data["updated"], "updated_by": "admin",
    }  # fmt: skip
    for name in ("bob", "outsider"):
        api_client.force_login(setup[name])
        assert api_client.get(f"/api/v1/quotas/{quota.pk}/").status_code == 404, name


def test_anonymous_gets_nothing_from_any_quotas_endpoint(api_client, setup):
    quota = setup["q_vision"]
    payload = {"team": "vision", "resource_class": setup["a10"].pk, "guaranteed": 1, "limit": 1}
    calls = [
        ("get", "/api/v1/quotas/"), ("post", "/api/v1/quotas/"), ("get", f"/api/v1/quotas/{quota.pk}/"),
        ("put", f"/api/v1/quotas/{quota.pk}/"), ("patch", f"/api/v1/quotas/{quota.pk}/"),
        ("delete", f"/api/v1/quotas/{quota.pk}/"),
    ]  # fmt: skip
    for method, url in calls:
        response = getattr(api_client, method)(url, payload, format="json")
        assert response.status_code in (401, 403), (method, url, response.status_code)
    assert Quota.objects.count() == 2 and Quota.objects.get(pk=quota.pk).limit == 16


# -- who may change them --------------------------------------------------------------------------------------


@pytest.mark.parametrize("actor", ["carol", "alice", "bob", "outsider"])
def test_only_admins_write_quotas(api_client, setup, actor):
    quota = setup["q_vision"]
    audits = AuditEvent.objects.count()
    api_client.force_login(setup[actor])
    payload = {"team": "vision", "resource_class": setup["h100"].pk, "guaranteed": 1, "limit": 99}
    responses = [
        api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 99}, format="json"),
        api_client.put(f"/api/v1/quotas/{quota.pk}/", payload, format="json"),
        api_client.delete(f"/api/v1/quotas/{quota.pk}/"),
        api_client.post("/api/v1/quotas/", {**payload, "resource_class": setup["a10"].pk}, format="json"),
    ]
    for response in responses:
        assert response.status_code == 403
        assert response.json()["detail"] == "Only portal admins can change this."
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (8, 16) and Quota.objects.count() == 2
    assert AuditEvent.objects.count() == audits


def test_an_admins_read_only_token_reads_but_cannot_change(api_client, setup):
    _, raw = APIToken.issue(setup["admin"], "dashboards", read_only=True)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert api_client.get("/api/v1/quotas/", **headers).json()["count"] == 2
    quota = setup["q_vision"]
    response = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 32}, format="json", **headers)
    assert response.status_code == 403
    assert (
        response.json()["detail"]
        == "This API token is read-only; use a token of scope 'submit' or 'manage' for changes."
    )
    assert Quota.objects.get(pk=quota.pk).limit == 16


# -- what admins do, and the audit log ------------------------------------------------------------------------


def test_admin_creates_changes_and_removes_a_quota_with_an_audit_trail(api_client, setup):
    api_client.force_login(setup["admin"])
    payload = {"team": "nlp", "resource_class": setup["a10"].pk, "guaranteed": 2, "limit": 4, "monthly_gpu_hours": 100}
    created = api_client.post("/api/v1/quotas/", payload, format="json")
    assert created.status_code == 201, created.json()
    data = created.json()
    assert (data["team"], data["resource_class"], data["guaranteed"], data["limit"]) == ("nlp", setup["a10"].pk, 2, 4)
    assert (data["monthly_gpu_hours"], data["used"], data["updated_by"]) == ("100.0", 0, "admin")
    quota = Quota.objects.get(pk=data["id"])
    assert (quota.team, quota.monthly_gpu_hours) == (setup["nlp"], Decimal("100.0"))
    event = AuditEvent.objects.get(action="quota.set", object_id=str(quota.pk))
    assert event.before is None and event.after["limit"] == 4 and event.after["resource_class"] == A10
    assert event.actor == setup["admin"] and event.team == setup["nlp"]

    changed = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 6, "monthly_gpu_hours": None}, format="json")
    assert changed.status_code == 200
    assert (changed.json()["guaranteed"], changed.json()["limit"], changed.json()["monthly_gpu_hours"]) == (2, 6, None)
    event = AuditEvent.objects.filter(action="quota.set", object_id=str(quota.pk)).latest("when", "id")
    assert (event.before["limit"], event.after["limit"]) == (4, 6)
    assert (event.before["monthly_gpu_hours"], event.after["monthly_gpu_hours"]) == ("100.0", None)

    # A change to the same values is not a change: no audit event.
    events = AuditEvent.objects.count()
    assert api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 6}, format="json").status_code == 200
    assert AuditEvent.objects.count() == events

    full = {"team": "nlp", "resource_class": setup["a10"].pk, "guaranteed": 3, "limit": 3}
    replaced = api_client.put(f"/api/v1/quotas/{quota.pk}/", full, format="json")
    assert replaced.status_code == 200 and (replaced.json()["guaranteed"], replaced.json()["limit"]) == (3, 3)

    assert api_client.delete(f"/api/v1/quotas/{quota.pk}/").status_code == 204
    assert not Quota.objects.filter(pk=quota.pk).exists()
    event = AuditEvent.objects.get(action="quota.delete")
    assert event.object_id == str(quota.pk) and event.before["limit"] == 3 and event.actor == setup["admin"]
    assert api_client.get(f"/api/v1/quotas/{quota.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"guaranteed": 5, "limit": 2}, "limit", "The limit (2) must be at least the guaranteed amount (5)."),
        ({"guaranteed": -1, "limit": 2}, "guaranteed", "Ensure this value is greater than or equal to 0."),
        ({"limit": -4, "guaranteed": 0}, "limit", "Ensure this value is greater than or equal to 0."),
        ({"monthly_gpu_hours": -1}, "monthly_gpu_hours", "Ensure this value is greater than or equal to 0."),
        ({"team": "nope"}, "team", "No team 'nope'. GET /api/v1/me/ lists your teams."),
        ({"resource_class": 99999}, "resource_class", "No resource class 99999. GET /api/v1/resource-classes/"),
        ({"guaranteed": "many"}, "guaranteed", "A valid integer is required."),
        ({"limit": None}, "limit", "This field may not be null."),
    ],
)
def test_bad_quota_requests_say_what_to_fix_and_change_nothing(api_client, setup, payload, field, message):
    api_client.force_login(setup["admin"])
    body = {"team": "nlp", "resource_class": setup["a10"].pk, "guaranteed": 1, "limit": 2, **payload}
    events = AuditEvent.objects.count()
    response = api_client.post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400
    assert message in " ".join(response.json()[field]), response.json()
    assert Quota.objects.count() == 2 and AuditEvent.objects.count() == events


def test_a_team_has_one_quota_per_class(api_client, setup):
    quota = setup["q_vision"]
    api_client.force_login(setup["admin"])
    dup = api_client.post(
        "/api/v1/quotas/",
        {"team": "vision", "resource_class": setup["h100"].pk, "guaranteed": 1, "limit": 1},
        format="json",
    )
    assert dup.status_code == 400
    assert dup.json()["resource_class"] == [
        f"Team vision already has quota #{quota.pk} for this class; change it with PATCH /api/v1/quotas/{quota.pk}/."
    ]
    moved = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"team": "nlp"}, format="json")
    assert moved.status_code == 400
    assert moved.json()["team"] == ["A quota's team and resource class cannot change; create another quota."]
    lowered = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 4}, format="json")
    assert lowered.status_code == 400
    assert lowered.json()["limit"] == ["The limit (4) must be at least the guaranteed amount (8)."]
    quota.refresh_from_db()
    assert (quota.team, quota.guaranteed, quota.limit) == (setup["vision"], 8, 16) and Quota.objects.count() == 2


def test_a_new_quota_lets_a_team_submit_to_that_class(api_client, setup):
    """The quota API and the jobs API meet: no quota, the submission is refused; after an admin grants one, it
    is queued."""
    request = {"name": "infer", "image": "busybox", "resource_class": A10, "count": 2}
    api_client.force_login(setup["bob"])
    refused = api_client.post("/api/v1/jobs/", request, format="json")
    assert refused.status_code == 400 and "has no quota for" in refused.json()["resource_class"][0]
    api_client.force_login(setup["admin"])
    grant = {"team": "nlp", "resource_class": setup["a10"].pk, "guaranteed": 2, "limit": 4}
    assert api_client.post("/api/v1/quotas/", grant, format="json").status_code == 201
    api_client.force_login(setup["bob"])
    accepted = api_client.post("/api/v1/jobs/", request, format="json")
    assert accepted.status_code == 201 and accepted.json()["team"] == "nlp"

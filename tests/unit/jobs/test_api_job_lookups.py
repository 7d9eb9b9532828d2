"""The API's reads of one job go through the see rule (jobs.access.visible_jobs, the one home of "which jobs may
this user see"): another team's job and a key that is no job (not a number, out of range) are a 404; a submission
finds its team and class by slug and key, and names a missing one as before. (What a read costs in queries:
test_api_queries.py.)"""

from __future__ import annotations

import pytest

from accounts.models import APIToken
from gpus.models import ResourceClass
from jobs import access, actions
from jobs.models import Job

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def jobs(inventory, people):
    rc = ResourceClass.objects.get(key=H100)

    def job(team: str, owner: str) -> Job:
        return Job.objects.create(team=people[team], owner=people[owner], name=f"{team}-job", image="busybox",
                                  resource_class=rc, state="running", labels={"a": "b"})  # fmt: skip

    return {"vision": job("vision", "alice"), "nlp": job("nlp", "bob")}


@pytest.mark.django_db
@pytest.mark.parametrize(("who", "sees"), [("alice", {"vision"}), ("bob", {"nlp"}), ("admin", {"vision", "nlp"}),
                                           ("outsider", set())])  # fmt: skip
def test_a_job_read_answers_the_jobs_the_see_rule_gives(api_client, people, jobs, who, sees):
    _, raw = APIToken.issue(people[who], "reads")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    for team, job in jobs.items():
        assert access.visible_jobs(people[who]).filter(pk=job.pk).exists() == (team in sees)
        for url in (f"/api/v1/jobs/{job.pk}/", f"/api/v1/jobs/{job.pk}/wait/?timeout=0"):
            response = api_client.get(url)
            assert response.status_code == (200 if team in sees else 404), (url, response.content)
        if team in sees:
            body = api_client.get(f"/api/v1/jobs/{job.pk}/").json()
            assert (body["team"], body["owner"]) == (job.team.slug, job.owner.username)


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["abc", "1.5", "", str(2**63), str(-(2**63) - 1), "99999999"])
def test_a_key_that_is_no_job_is_a_404(api_client, people, jobs, key):
    _, raw = APIToken.issue(people["admin"], "reads")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    if key:
        assert api_client.get(f"/api/v1/jobs/{key}/").status_code == 404
        assert api_client.get(f"/api/v1/jobs/{key}/wait/?timeout=0").status_code == 404


@pytest.mark.django_db
def test_the_api_answers_another_teams_job_with_a_404(api_client, people, jobs):
    _, raw = APIToken.issue(people["alice"], "reads")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api_client.get(f"/api/v1/jobs/{jobs['nlp'].pk}/").status_code == 404
    assert api_client.get(f"/api/v1/jobs/{jobs['vision'].pk}/").json()["id"] == jobs["vision"].pk
    # A detail asked with the list's filters still goes through them (DRF's own read).
    assert api_client.get(f"/api/v1/jobs/{jobs['vision'].pk}/?state=queued").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("team", "klass", "field", "says"),
    [
        ("no-such-team", H100, "team", "No team 'no-such-team'"),
        ("bad\x00slug", H100, "team", "No team"),  # a 500 on PostgreSQL before
        ("vision", "nvidia.com/gpu@NO-SUCH-GPU", "resource_class", "No resource class 'nvidia.com/gpu@NO-SUCH-GPU'"),
        ("vision", "bad\x00key", "resource_class", "No resource class"),  # a 500 on PostgreSQL before
    ],
)
def test_a_submission_naming_no_team_or_class_answers_as_before(api_client, jobs, people, team, klass, field, says):
    _, raw = APIToken.issue(people["alice"], "reads")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"team": team, "name": "x", "image": "busybox", "resource_class": klass}
    response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    if says:
        assert says in str(response.json()[field])


@pytest.mark.django_db
def test_a_submission_finds_its_team_and_class_by_slug_and_key(api_client, jobs, people):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 8, 8)
    _, raw = APIToken.issue(people["alice"], "reads")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = {"team": "vision", "name": "x", "image": "busybox", "resource_class": H100}
    response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.team.slug, job.resource_class.key) == ("vision", H100)

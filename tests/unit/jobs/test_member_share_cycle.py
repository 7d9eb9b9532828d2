"""Fair share among a team's members through the database: the admission cycle orders a team's queue member by
member, writes the passed-over job's reason, and keeps each member's decayed use (jobs.models.MemberShare); leads
set weights on the members page and over the API (every problem at once, nothing half-saved, audited); members
read the shares, others get nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from accounts.choices import MembershipRole
from core.models import AuditEvent
from jobs.choices import JobAuditAction, JobState, WaitReason
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.models import Job, MemberShare
from tests.factories import MembershipFactory, UserFactory, submit_job
from tests.sim_objects import H100

pytestmark = pytest.mark.cluster(quotas={"vision": (2, 2), "nlp": (8, 8)})


@pytest.fixture
def carol(people):
    """A second member of vision (alice is its lead)."""
    user = UserFactory(username="carol")
    MembershipFactory(user=user, team=people["vision"], role=MembershipRole.MEMBER)
    return user


def test_the_cycle_lets_a_colleague_pass_an_array_and_keeps_each_members_use(cluster, clock, people, carol, client):
    alices = [submit_job(people["alice"], "vision", H100) for _ in range(5)]
    carols = submit_job(carol, "vision", H100)
    admit(CycleResult(), clock.now)
    # Quota 2: alice's oldest (no one used anything yet: submission order), then carol's (alice now holds one).
    admitted = set(Job.objects.filter(state=JobState.ADMITTED).values_list("pk", flat=True))
    assert admitted == {alices[0].pk, carols.pk}
    passed = Job.objects.get(pk=alices[1].pk)
    assert passed.wait_reason == WaitReason.MEMBER_SHARE
    assert passed.wait_message.startswith("alice has used 1.0× their share of team Computer Vision's GPUs lately")
    assert f"carol's job #{carols.pk} goes first" in passed.wait_message
    assert passed.wait_detail["member_share"]["ahead_user"] == "carol"
    # The job page labels the numbers.
    client.force_login(people["alice"])
    page = client.get(f"/jobs/{passed.pk}/").content.decode()
    for label, value in (("alice&#x27;s use ÷ share", "1.0×"), ("Goes first", f"#{carols.pk} (carol, 1.0×)"),
                         ("Else it would wait for", "Team quota"), ("Use counts half after", "1 h")):  # fmt: skip
        assert label in page and value in page
    # Carol's job passed every one of alice's waiting tasks; the sentence ends with the quota's own.
    reasons = Job.objects.filter(pk__in=[j.pk for j in alices[1:]]).values_list("wait_reason", "wait_message")
    assert all(reason == WaitReason.MEMBER_SHARE and "holds 2 of its limit of 2" in text for reason, text in reasons)
    # Each cycle folds what each member held since the last into their decayed average: the next cycle finds the
    # two admitted jobs holding one GPU each.
    admit(CycleResult(), clock.now)
    rows = {(ms.team.slug, ms.user.username) for ms in MemberShare.objects.select_related("team", "user")}
    assert rows == {("vision", "alice"), ("vision", "carol")}
    admit(CycleResult(), clock.now + timedelta(hours=1))
    averages = dict(MemberShare.objects.values_list("user__username", "average_units"))
    assert averages["alice"] == pytest.approx(0.5) and averages["carol"] == pytest.approx(0.5)


def test_leads_set_weights_on_the_members_page_every_problem_at_once(client, people, carol):
    url = f"/teams/{people['vision'].slug}/members/weights/"
    client.force_login(people["alice"])
    response = client.post(url, {"weight-alice": "0", "weight-carol": "lots"})
    assert response.status_code == 400
    errors = response.content.decode()
    assert "The weight of alice is 0; give a number above 0 and at most 100" in errors
    assert "The weight of carol is &#x27;lots&#x27;; give a number" in errors
    assert 'value="lots"' in errors  # what was typed stays
    assert not MemberShare.objects.exists() and not AuditEvent.objects.filter(action="team.member_weights").exists()
    response = client.post(url, {"weight-alice": "1", "weight-carol": "2"})
    assert response.status_code == 302
    assert dict(MemberShare.objects.values_list("user__username", "weight")) == {"carol": 2.0}
    event = AuditEvent.objects.get(action=JobAuditAction.MEMBER_WEIGHTS)
    assert (event.before, event.after, event.actor_name) == ({"carol": 1.0}, {"carol": 2.0}, "alice")
    page = client.get(f"/teams/{people['vision'].slug}/members/").content.decode()
    assert 'name="weight-carol" value="2"' in page
    # A plain member may not: the page answers 403 and nothing changes.
    client.force_login(carol)
    assert client.post(url, {"weight-carol": "50"}).status_code == 403
    assert MemberShare.objects.get(user=carol).weight == 2.0


def test_the_api_shows_shares_to_members_and_lets_leads_set_weights(api_client, people, carol):
    url = f"/api/v1/teams/{people['vision'].slug}/member-shares/"
    MemberShare.objects.create(team=people["vision"], user=people["alice"], average_units=3.0)
    MemberShare.objects.create(team=people["vision"], user=carol, average_units=1.0)
    api_client.force_login(carol)
    body = api_client.get(url).json()
    assert body["member_share"] is True and body["half_life_seconds"] == 3600.0
    shown = {m["user"]: (m["weight"], round(m["use_share"], 2), round(m["ratio"], 1)) for m in body["members"]}
    assert shown == {"alice": (1.0, 0.75, 1.5), "carol": (1.0, 0.25, 0.5)}
    assert api_client.patch(url, {"weights": {"carol": 5}}, format="json").status_code == 403
    api_client.force_login(people["alice"])
    bad = api_client.patch(url, {"weights": {"carol": -1, "bob": 2, "alice": True}}, format="json")
    assert bad.status_code == 400
    problems = bad.json()["weights"]
    assert set(problems) == {"carol", "bob", "alice"}
    assert "'bob' is not a member of team vision" in problems["bob"][0]
    assert MemberShare.objects.get(user=carol).weight == 1.0  # nothing half-saved
    empty = api_client.patch(url, {"weights": {}}, format="json")
    assert empty.status_code == 400 and "Give at least one member's weight" in empty.json()["weights"][0]
    assert "weights" in api_client.patch(url, {"weights": ["carol", 2]}, format="json").json()
    assert api_client.patch(url, {"weights": {"carol": "NaN"}}, format="json").status_code == 400
    ok = api_client.patch(url, {"weights": {"carol": 3}}, format="json")
    assert ok.status_code == 200
    assert {m["user"]: m["weight"] for m in ok.json()["members"]} == {"alice": 1.0, "carol": 3.0}
    # Another team's shares are not there for an outsider.
    api_client.force_login(people["bob"])
    assert api_client.get(url).status_code == 404


def test_the_team_page_shows_each_members_recent_share(client, people, carol):
    MemberShare.objects.create(team=people["vision"], user=people["alice"], average_units=3.0, weight=2.0)
    MemberShare.objects.create(team=people["vision"], user=carol, average_units=1.0)
    client.force_login(carol)
    page = client.get(f"/teams/{people['vision'].slug}/").content.decode()
    # alice: 3 of 4 GPUs for 2 of 3 weights (1.125×); carol: 1 of 4 for 1 of 3 (0.75×).
    assert "3.0 GPUs lately · 1.1× share · weight 2</span>" in page
    assert "1.0 GPUs lately · 0.8× share</span>" in page


def test_the_cycle_reads_the_weights_leads_set(cluster, clock, people, carol):
    # alice used 2 GPUs lately with weight 4 (key 0.5), carol 1 with weight 1 (key 1): alice's two jobs go before
    # carol's older one (after the first, alice's key is (1 + 2) / 4 = 0.75, still below carol's).
    MemberShare.objects.create(team=people["vision"], user=people["alice"], average_units=2.0, weight=4.0,
                               updated=clock.now)  # fmt: skip
    MemberShare.objects.create(team=people["vision"], user=carol, average_units=1.0, updated=clock.now)
    carols = submit_job(carol, "vision", H100)
    alices = [submit_job(people["alice"], "vision", H100) for _ in range(2)]
    admit(CycleResult(), clock.now)
    assert set(Job.objects.filter(state=JobState.ADMITTED).values_list("pk", flat=True)) == {j.pk for j in alices}
    waiting = Job.objects.get(pk=carols.pk)
    assert waiting.wait_reason == WaitReason.MEMBER_SHARE
    # Now the team's use is 2 held + 3 lately: carol 1 of 5 for 1 of 5 weights, alice 4 of 5 for 4 of 5.
    assert waiting.wait_message.startswith("carol has used 1.0× their weighted share of team Computer Vision's GPUs")
    assert f"alice's job #{alices[1].pk} goes first (alice: 1.0×)" in waiting.wait_message

"""The teams list counts every member of a team, whoever looks (ux-walk R4: a member saw "1" where the team
page listed 2, because the count ran over the join that picked the viewer's own teams)."""

from __future__ import annotations

import pytest

from tests.factories import member


@pytest.mark.parametrize("viewer", ["alice", "carol", "admin"])
def test_member_count_is_the_whole_team_for_members_and_admins(client, people, viewer):
    carol = member(people["vision"])
    user = carol if viewer == "carol" else people[viewer]
    client.force_login(user)
    rows = {row["team"].slug: row for row in client.get("/teams/").context["rows"]}
    assert rows["vision"]["team"].member_count == 2
    assert ("nlp" in rows) == user.is_staff


def test_team_page_puts_a_queued_jobs_wait_reason_on_its_own_row_and_volumes_in_the_main_column(
    client, people, inventory
):
    """ux-walk R8: the wait text no longer widens the State cell until the Node column falls off the card."""
    from gpus.models import ResourceClass
    from jobs import actions

    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    actions.set_quota(people["admin"], people["vision"], rc, 1, 1)
    job = actions.submit_job(
        people["alice"], people["vision"], rc,
        dict(name="big", image="busybox", command=["true"], args=[], env=[], count=1, cpu_millicores=1000,
             memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=600),
    ).job  # fmt: skip
    type(job).objects.filter(pk=job.pk).update(wait_message="Waiting for the H100 guarantee.")
    client.force_login(people["alice"])
    html = client.get("/teams/vision/").content.decode()
    row = html.index(f'data-wait-for="{job.pk}"')
    assert 'colspan="5" class="wait-line">Waiting for the H100 guarantee.</td>' in html[row : row + 300]
    assert html.index('data-testid="team-volumes"') < html.index('<div class="stack">', html.index("team-jobs"))

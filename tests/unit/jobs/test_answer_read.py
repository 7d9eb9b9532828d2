"""jobs.api.answer_read: the detail's and the long-poll's one statement reads the job as the ORM's narrowed read
does (every field the answer shows, the joined rows, the newest event's id), and sees it exactly when the see rule
of jobs.access does; a job nobody may see through it answers 404 as a missing one."""

from __future__ import annotations

import pytest
from django.db.models import Max

from accounts.models import APIToken
from jobs import access
from jobs.api.answer_read import visible_job
from jobs.api.serializers import JOB_ANSWERS, answered
from jobs.models import Job, JobEvent
from tests.unit.jobs.test_api_answers import varied_jobs, world  # noqa: F401 - the fixture


def test_the_statement_reads_each_job_as_the_orm_does(world):  # noqa: F811
    jobs = varied_jobs(world)
    JobEvent.objects.create(job=jobs[0], kind="waiting", message="later")
    shown = [f.attname for f in Job._meta.concrete_fields]
    for job in jobs:
        orm = answered(Job.objects.all()).get(pk=job.pk)
        read = visible_job(world["alice"], job.pk, newest_event=True)
        assert read is not None
        assert read.get_deferred_fields() == orm.get_deferred_fields()
        loaded = [name for name in shown if name not in orm.get_deferred_fields()]
        assert [getattr(read, n) for n in loaded] == [getattr(orm, n) for n in loaded], job.name
        for relation in ("team", "owner", "resource_class", "cluster"):
            ours, theirs = getattr(read, relation), getattr(orm, relation)
            assert (ours and ours.__dict__.keys() - {"_state"}) == (theirs and theirs.__dict__.keys() - {"_state"})
            assert ours == theirs
        newest = JobEvent.objects.filter(job=job).aggregate(newest=Max("pk"))["newest"]
        assert read.newest_event == newest
        assert JOB_ANSWERS.kept.to_representation(read) == JOB_ANSWERS.kept.to_representation(orm)


@pytest.mark.parametrize("who", ["alice", "bob", "admin", "outsider"])
def test_it_sees_a_job_exactly_when_the_see_rule_does(world, who):  # noqa: F811
    job = varied_jobs(world)[0]
    user = world[who]
    assert (visible_job(user, job.pk) is not None) == access.can_see_job(user, job)
    assert (visible_job(user, job.pk) is not None) == access.visible_jobs(user).filter(pk=job.pk).exists()


def test_no_such_job_reads_as_none(world):  # noqa: F811
    assert visible_job(world["admin"], 10**12) is None


def test_a_job_the_user_may_not_see_answers_as_a_missing_one(api_client, world):  # noqa: F811
    job = varied_jobs(world)[0]
    _, raw = APIToken.issue(world["bob"], "elsewhere")
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    hidden = [api_client.get(f"/api/v1/jobs/{job.pk}/{tail}") for tail in ("", "wait/?timeout=0")]
    missing = [api_client.get(f"/api/v1/jobs/{10**12}/{tail}") for tail in ("", "wait/?timeout=0")]
    assert [r.status_code for r in hidden] == [r.status_code for r in missing] == [404, 404]
    assert [r.json() for r in hidden] == [r.json() for r in missing]
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    assert api_client.get(f"/api/v1/jobs/{job.pk}/").json()["id"] == job.pk

"""The API's hottest reads of one job, compiled to SQL once per process (accounts.compiled): a pipeline polls its
job by id, and building that query's SQL (the job with its team, owner and class) cost more CPU than the database
took to answer. The see rule is access.visible_to's: every job for an admin, the jobs of the user's teams for
everyone else (tests/unit/jobs/test_api_reads.py holds the two to the same answers).

The wait endpoint's read also brings the id of the job's newest timeline event (``newest_event``), so a wait
that answers at once needs no second query (jobs.eventstream reads it)."""

from django.db.models import OuterRef, Subquery

from accounts.compiled import CompiledQuery

from ..models import Job, JobEvent

#: A primary key PostgreSQL can compare with a bigint column; anything else is no job (as Django answers).
_PK_RANGE = range(-(2**63), 2**63)


def _job(pk: int, user_id: int | None, newest_event: bool):
    jobs = Job.objects.filter(pk=pk)
    if user_id is not None:
        jobs = jobs.filter(team__memberships__user_id=user_id)
    if newest_event:
        newest = JobEvent.objects.filter(job_id=OuterRef("pk")).order_by("-pk").values("pk")[:1]
        jobs = jobs.annotate(newest_event=Subquery(newest))
    return jobs.select_related("team", "owner", "resource_class")[:2]


_READS = {
    (staff, newest): CompiledQuery(
        (lambda pk, newest=newest: _job(pk, None, newest))
        if staff
        else (lambda pk, user_id, newest=newest: _job(pk, user_id, newest)),
        *((int,) if staff else (int, int)),
    )
    for staff in (True, False)
    for newest in (True, False)
}


def visible_job(user, raw_pk, *, newest_event: bool = False) -> Job | None:
    """JobViewSet.get_object's read: the job ``raw_pk`` (the URL's text) if ``user`` may see it (the rule of
    access.visible_jobs), with its team, owner and class; else None (a 404, as DRF's get_object answers, for
    a key that is not a whole number too). ``newest_event``: annotate the id of its newest timeline event."""
    try:
        pk = int(raw_pk)
    except (TypeError, ValueError):
        return None
    if pk not in _PK_RANGE or not user.is_authenticated:
        return None
    read = _READS[user.is_staff, newest_event]
    found = read(pk) if user.is_staff else read(pk, user.pk)
    return found[0] if len(found) == 1 else None

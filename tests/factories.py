import factory
from django.contrib.auth import get_user_model

from accounts.choices import MembershipRole
from accounts.models import Membership, Team

#: The demo's H100 resource class.
H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
#: A job's request as the form and the API take it (jobs.actions.submit_job): submit_job's defaults.
JOB_REQUEST = {
    "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "30"], "args": [], "env": [],
    "count": 1, "cpu_millicores": 2000, "memory_mb": 8192, "priority": 50, "preemptible": False,
    "max_runtime_seconds": 3600,
}  # fmt: skip


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password("correct-horse-battery")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    namespace = factory.LazyAttribute(lambda t: f"team-{t.slug}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = MembershipRole.MEMBER


def finished_job(team, owner, resource_class, submitted, started_after, ran_for, **fields):
    """A job that ran and succeeded in the past: submitted at ``submitted`` (submitted_at defaults to now on
    create, so it is set afterwards), started ``started_after`` later, ran for ``ran_for`` (timedeltas). The
    planner's tests build their history from these."""
    from jobs.choices import JobState
    from jobs.models import Job

    started = submitted + started_after
    job = Job.objects.create(
        team=team, owner=owner, resource_class=resource_class, image=fields.pop("image", "x/y:1"),
        state=JobState.SUCCEEDED, node_name=fields.pop("node_name", "gpu-h100-01"),
        started_at=started, finished_at=started + ran_for, **fields,
    )  # fmt: skip
    Job.objects.filter(pk=job.pk).update(submitted_at=submitted)
    job.submitted_at = submitted
    return job


def submit_job(user, team="vision", resource_class=H100, **fields):
    """A job ``user`` submitted the way the form and the API do (jobs.actions.submit_job, so validated, audited
    and queued): ``team`` a Team or its slug, ``resource_class`` a ResourceClass or its key, ``fields`` over
    JOB_REQUEST."""
    from gpus.models import ResourceClass
    from jobs import actions

    if isinstance(team, str):
        team = Team.objects.get(slug=team)
    if isinstance(resource_class, str):
        resource_class = ResourceClass.objects.get(key=resource_class)
    return actions.submit_job(user, team, resource_class, JOB_REQUEST | fields).job

import factory
from django.contrib.auth import get_user_model

from accounts.choices import MembershipRole
from accounts.models import Membership, Team


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

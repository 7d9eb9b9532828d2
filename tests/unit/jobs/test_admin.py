"""Quotas edited in Django's admin are validated and audited; jobs are read-only there; team namespaces are
fixed once created."""

from django.urls import reverse

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs.models import Quota


def test_admin_quota_edit_is_validated_and_audited(client, inventory, people):
    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    quota = Quota.objects.create(team=people["vision"], resource_class=rc, guaranteed=2, limit=4)
    client.force_login(people["admin"])
    url = reverse("admin:jobs_quota_change", args=[quota.pk])
    form = {"team": people["vision"].pk, "resource_class": rc.pk, "guaranteed": 6, "limit": 3, "monthly_gpu_hours": ""}
    response = client.post(url, form)
    assert response.status_code == 200  # the form again, with the error
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (2, 4)
    assert not AuditEvent.objects.filter(object_type="jobs.Quota").exists()

    response = client.post(url, {**form, "guaranteed": 3, "limit": 8})
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit, quota.updated_by) == (3, 8, people["admin"])
    event = AuditEvent.objects.get(object_type="jobs.Quota", object_id=str(quota.pk))
    assert event.before["limit"] == 4 and event.after["limit"] == 8 and event.actor == people["admin"]


def test_jobs_are_read_only_and_namespaces_fixed_in_admin(client, people):
    client.force_login(people["admin"])
    assert client.get(reverse("admin:jobs_job_add")).status_code == 403
    page = client.get(reverse("admin:portal_team_change", args=[people["vision"].pk])).content.decode()
    assert 'name="namespace"' not in page and "team-vision" in page


def test_admin_sets_a_team_notebook_policy_checked_and_audited(client, people):
    from jobs.models import NotebookPolicy

    client.force_login(people["admin"])
    url = reverse("admin:jobs_notebookpolicy_add")
    form = {"team": people["vision"].pk, "ttl_seconds": 7200, "max_ttl_seconds": 3600, "idle_timeout_seconds": 600,
            "max_idle_timeout_seconds": 1200}  # fmt: skip
    assert client.post(url, form).status_code == 200  # a maximum under the default is refused
    assert not NotebookPolicy.objects.exists()
    assert client.post(url, {**form, "max_ttl_seconds": 14400}).status_code == 302
    policy = NotebookPolicy.for_team(people["vision"])
    assert (policy.ttl_seconds, policy.max_ttl_seconds) == (7200, 14400)
    assert AuditEvent.objects.filter(object_type="jobs.NotebookPolicy", action="create").exists()
    assert NotebookPolicy.for_team(people["nlp"]).pk is None  # no row: the settings' defaults

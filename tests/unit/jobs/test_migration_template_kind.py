"""Migration jobs.0027 is forward-safe: every template saved before it was a job's, and it stays one (kind "job"),
its versions untouched; code from before it, which names no kind, still saves job templates; a template of another
kind can be saved after it."""

import pytest
from django.db import connection

from tests.migration_steps import migrate_to as migrate

BEFORE = [("jobs", "0026_notebook_workspace")]
AFTER = [("jobs", "0027_template_kind")]


@pytest.mark.django_db(transaction=True)
def test_existing_templates_become_job_templates(restores_schema):
    old = migrate(BEFORE)
    team = old.get_model("portal", "Team").objects.create(slug="vision", name="Vision", namespace="team-vision")
    template = old.get_model("jobs", "WorkloadTemplate").objects.create(team=team, name="resnet")
    old.get_model("jobs", "WorkloadTemplateVersion").objects.create(template=template, number=1, spec={"count": 2})
    new = migrate(AFTER)
    templates = new.get_model("jobs", "WorkloadTemplate").objects
    kept = templates.get(name="resnet")
    assert kept.kind == "job" and list(kept.versions.values_list("number", "spec")) == [(1, {"count": 2})]
    templates.create(team_id=team.pk, name="lab", kind="notebook")
    with connection.cursor() as cursor:  # as the code before it writes a row: no kind
        cursor.execute(
            "INSERT INTO jobs_workloadtemplate (team_id, name, description, created_at, updated_at) "
            "VALUES (%s, 'older', '', %s, %s)", [team.pk, kept.created_at, kept.created_at],
        )  # fmt: skip
    assert sorted(templates.values_list("name", "kind")) == [("lab", "notebook"), ("older", "job"), ("resnet", "job")]

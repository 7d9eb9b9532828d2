"""Each app owns its audit verbs: registered at start-up, recorded by value, never a migration elsewhere."""

import pytest
from django.db import models

from accounts.choices import AuditAction
from core import audit
from core.models import AuditEvent
from gpus.choices import InventoryAuditAction
from jobs.choices import JobAuditAction
from planner.choices import PlannerAuditAction
from telemetry.choices import TelemetryAuditAction


def test_every_apps_verbs_are_registered_with_their_labels():
    verbs = audit.registered_verbs()
    for choices in (AuditAction, InventoryAuditAction, JobAuditAction, PlannerAuditAction, TelemetryAuditAction):
        for value, label in choices.choices:
            assert verbs[value] == label


def test_no_verb_value_is_declared_by_two_apps():
    values = [
        v
        for c in (AuditAction, InventoryAuditAction, JobAuditAction, PlannerAuditAction, TelemetryAuditAction)
        for v in c.values
    ]
    assert len(values) == len(set(values))


def test_the_log_column_has_no_choices_so_a_new_verb_needs_no_accounts_migration():
    assert not AuditEvent._meta.get_field("action").choices


@pytest.mark.django_db
def test_an_unregistered_verb_is_refused_and_nothing_is_written():
    with pytest.raises(ValueError, match="not registered"):
        audit.record(None, "job.sbumit", object_type="jobs.Job", object_id="1", object_repr="typo")
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_a_registered_verb_is_recorded_by_value_and_shown_by_label():
    event = audit.record(None, JobAuditAction.JOB_SUBMIT, object_type="jobs.Job", object_id="7", object_repr="x")
    assert AuditEvent.objects.get(pk=event.pk).action == "job.submit"
    assert audit.verb_label("job.submit") == "Job submitted"
    assert audit.verb_label("retired.verb") == "retired.verb"


def test_a_value_registered_again_with_another_meaning_is_refused():
    class Clash(models.TextChoices):
        SUBMIT = "job.submit", "Something else"

    with pytest.raises(ValueError, match="already registered"):
        audit.register_verbs(Clash)

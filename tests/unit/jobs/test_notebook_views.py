"""Notebook pages: launch from the form (the token shown once, to its owner), the countdowns, Extend, Stop and
Start again, and other teams' notebooks answering 404."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import NotebookState
from jobs.models import Notebook

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def setup(inventory, people, settings):
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 3600
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 1, 1)
    return {**people, "rc": rc}


def launch(client, setup, **overrides):
    client.force_login(setup["alice"])
    form = {"team": setup["vision"].pk, "name": "scratch", "image": "quay.io/jupyter/pytorch-notebook:cuda12-latest",
            "resource_class": setup["rc"].pk, "count": 1, "cpu": 4, "memory_gib": 16, "volume_gib": 20,
            "ttl_hours": "", "idle_minutes": ""} | overrides  # fmt: skip
    return client.post(reverse("jobs:notebook-list"), form)


def test_launch_shows_the_token_once_then_the_countdowns(client, setup):
    response = launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    assert response.status_code == 302 and response["Location"] == notebook.get_absolute_url()
    page = client.get(notebook.get_absolute_url()).content.decode()
    assert 'data-testid="notebook-token"' in page and notebook.url in page
    assert 'data-testid="notebook-token"' not in client.get(notebook.get_absolute_url()).content.decode()
    now = timezone.now()
    Notebook.objects.filter(pk=notebook.pk).update(
        running_since=now, expires_at=now + timedelta(hours=8), idle_deadline=now + timedelta(minutes=40)
    )
    page = client.get(notebook.get_absolute_url()).content.decode()
    assert 'class="countdown"' in page and "Extend" in page
    assert page.count('class="countdown"') == 2


def test_form_errors_name_the_field(client, setup):
    response = launch(client, setup, name="Not OK", ttl_hours="99")
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "lower-case" in errors["name"][0] and "At most" in errors["ttl_hours"][0]


def test_extend_stop_and_start_again_from_the_page(client, setup):
    launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    now = timezone.now()
    Notebook.objects.filter(pk=notebook.pk).update(running_since=now, expires_at=now + timedelta(hours=1))
    client.post(reverse("jobs:notebook-extend", args=[notebook.pk]))
    notebook.refresh_from_db()
    assert notebook.expires_at == now + timedelta(hours=2)
    client.post(reverse("jobs:notebook-stop", args=[notebook.pk]))
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STOPPED and notebook.stop_reason == "user"
    page = client.get(notebook.get_absolute_url()).content.decode()
    assert "Start again" in page and "Stopped by its owner" in page
    first = notebook.session_id
    response = client.post(reverse("jobs:notebook-start", args=[notebook.pk]), follow=True)
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.ACTIVE and notebook.session_id != first
    assert 'data-testid="notebook-token"' in response.content.decode()


def test_other_teams_get_404(client, setup):
    launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    client.force_login(setup["bob"])
    assert client.get(notebook.get_absolute_url()).status_code == 404
    assert client.post(reverse("jobs:notebook-stop", args=[notebook.pk])).status_code == 404
    assert notebook.get_absolute_url() not in client.get(reverse("jobs:notebook-list")).content.decode()

"""Notebook pages: launch from the form (the token shown once, to its owner), the countdowns, Extend, Stop and
Start again, and other teams' notebooks answering 404."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import NotebookState
from jobs.models import Notebook, NotebookPolicy
from vocab.durations import duration_text

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


# -- the live page (issue 31 item 13) ------------------------------------------------------------------------

COUNTDOWN = re.compile(r'<span class="countdown"[^>]*>([^<]*)</span>')
CSRF = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')


def live_region(html: str, name: str) -> str:
    """The element with ``data-live="<name>"``, as the page's live refresh swaps it (CSRF tokens left out: they
    differ on every render)."""
    at = html.find(f'data-live="{name}"')
    assert at != -1, f"no live region {name!r} on the page"
    start = html.rfind("<", 0, at)
    tag = re.match(r"<(\w+)", html[start:]).group(1)
    depth, pos = 0, start
    for match in re.finditer(rf"<(/?){tag}\b[^>]*>", html[start:]):
        depth += -1 if match.group(1) else 1
        if depth == 0:
            pos = start + match.end()
            break
    return CSRF.sub("", html[start:pos])


def running(notebook, *, ttl=timedelta(hours=8), idle=timedelta(minutes=40), since=timedelta(0)):
    now = timezone.now()
    Notebook.objects.filter(pk=notebook.pk).update(
        running_since=now - since, expires_at=now - since + ttl, idle_deadline=now + idle
    )


def test_a_live_refresh_renders_the_page_as_the_first_render_does(client, setup):
    launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    with time_machine.travel(timezone.now(), tick=False):
        running(notebook, ttl=timedelta(hours=3, minutes=58), idle=timedelta(minutes=19, seconds=48))
        first = client.get(notebook.get_absolute_url()).content.decode()
        refresh = client.get(notebook.get_absolute_url(), headers={"X-Live": "1"}).content.decode()
    # The countdowns are words from vocab.durations on the server, never raw seconds for a script to format.
    words = [duration_text(3 * 3600 + 58 * 60), duration_text(19 * 60 + 48)]
    assert words == ["3 h 58 min", "19 min 48 s"]
    assert COUNTDOWN.findall(live_region(refresh, "facts")) == words
    assert "<script>" not in first.split('data-live-every="', 1)[1]  # no second formatter on the page
    for name in ("state", "actions", "facts", "timeline"):
        assert live_region(refresh, name) == live_region(first, name)


def test_extend_is_in_the_live_region_and_appears_once_the_session_runs(client, setup):
    launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    queued = live_region(client.get(notebook.get_absolute_url(), headers={"X-Live": "1"}).content.decode(), "actions")
    assert 'data-testid="notebook-extend" disabled' in queued and "its limits start counting when it runs" in queued
    running(notebook)
    poll = client.get(notebook.get_absolute_url(), headers={"X-Live": "1"}).content.decode()
    actions_now = live_region(poll, "actions")
    assert re.search(r'data-testid="notebook-extend">Extend</button>', actions_now)
    assert 'data-testid="extend-why"' not in actions_now


def test_extend_is_disabled_with_the_reason_at_the_maximum(client, setup, settings):
    settings.PORTAL_NOTEBOOK_MAX_TTL_SECONDS = 8 * 3600
    launch(client, setup)
    notebook = Notebook.objects.get(name="scratch")
    running(notebook, ttl=timedelta(hours=8), since=timedelta(hours=1))
    page = client.get(notebook.get_absolute_url()).content.decode()
    actions_now = live_region(page, "actions")
    assert 'data-testid="notebook-extend" disabled aria-describedby="extend-why"' in actions_now
    why = re.search(r'<p class="action-note" id="extend-why" data-testid="extend-why">([^<]*)</p>', actions_now)
    assert why and "already runs until the team&#x27;s maximum age of 8 hours" in why.group(1)
    # The same sentence the action gives when pressed anyway (one rule for the button and the action).
    response = client.post(reverse("jobs:notebook-extend", args=[notebook.pk]), follow=True)
    assert why.group(1) in response.content.decode()
    notebook.refresh_from_db()
    assert notebook.extended_at is None


def test_the_launch_form_shows_the_teams_defaults_and_maxima_and_what_is_free(client, setup):
    limits = dict(ttl_seconds=4 * 3600, max_ttl_seconds=12 * 3600, idle_timeout_seconds=1800,
                  max_idle_timeout_seconds=7200)  # fmt: skip
    NotebookPolicy.objects.update_or_create(team=setup["vision"], defaults=limits)
    client.force_login(setup["alice"])
    page = client.get(reverse("jobs:notebook-list")).content.decode()
    ttl = re.search(r'<input[^>]*name="ttl_hours"[^>]*>', page).group(0)
    idle = re.search(r'<input[^>]*name="idle_minutes"[^>]*>', page).group(0)
    assert 'value="4"' in ttl and 'max="12"' in ttl
    assert 'value="30"' in idle and 'max="120"' in idle
    assert "Default 4 hours, at most 12 hours" in page
    assert "Default 30 minutes, at most 2 hours" in page
    setup["rc"].refresh_from_db()
    assert f"{setup['rc'].display_name} · {setup['rc'].free} free now" in page

"""Issue 31, item 8: after a lead (or an admin) starts a member's notebook again, the owner gets its new access
token: once, only the owner, from the notebook's page (Show the new token) or the API (POST .../token/). The lead's
own answer still carries no token (audit finding 2), and the portal still stores no token: only a salt, until the
owner has collected it."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from core.models import Notification
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Notebook
from jobs.notebook.sessions import check_token
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 2, 2)
    return {**people, "carol": member(people["vision"])}


@pytest.fixture
def restarted(api_client, setup):
    """carol's notebook, stopped by her and started again by alice, her team's lead: (notebook id, its API URL)."""
    api_client.force_authenticate(setup["carol"])
    launched = api_client.post("/api/v1/notebooks/", {"team": "vision", "name": "lab", "resource_class": H100})
    assert launched.status_code == 201, launched.json()
    url = f"/api/v1/notebooks/{launched.json()['id']}/"
    assert api_client.post(url + "stop/").status_code == 200
    api_client.force_authenticate(setup["alice"])
    started = api_client.post(url + "start/")
    assert started.status_code == 201 and "token" not in started.json(), "the lead never receives it"
    return launched.json()["id"], url


def test_the_owner_collects_the_new_token_once_through_the_api(api_client, setup, restarted):
    notebook_id, url = restarted
    told = Notification.objects.get(user=setup["carol"], kind="notebook.token")
    assert "alice started your notebook lab again" in told.title and told.url == f"/notebooks/{notebook_id}/"
    for who in ("alice", "admin"):
        api_client.force_authenticate(setup[who])
        refused = api_client.post(url + "token/")
        assert refused.status_code == 403 and "Only the notebook's owner" in refused.json()["detail"]
    api_client.force_authenticate(setup["carol"])
    collected = api_client.post(url + "token/")
    assert collected.status_code == 200, collected.json()
    notebook = Notebook.objects.get(pk=notebook_id)
    assert check_token(notebook.token_hash, collected.json()["token"])
    assert notebook.owner_token_salt == "" and collected.json()["token"] not in str(Notebook.objects.values())
    again = api_client.post(url + "token/")
    assert again.status_code == 400 and "shown once" in again.json()["detail"]


def test_no_token_waits_after_a_stop_or_the_owner_s_own_start(api_client, setup, restarted):
    _, url = restarted
    api_client.force_authenticate(setup["carol"])
    assert api_client.post(url + "stop/").status_code == 200
    assert api_client.post(url + "token/").status_code == 400, "a stopped session's token opens nothing"
    assert "token" in api_client.post(url + "start/").json(), "her own start answers her the token, as before"
    assert api_client.post(url + "token/").status_code == 400


def test_the_owner_sees_the_new_token_once_on_the_notebook_page(client, setup, restarted):
    notebook_id, _ = restarted
    page_url = reverse("jobs:notebook-detail", args=[notebook_id])
    client.force_login(setup["alice"])
    assert 'data-testid="notebook-token-waiting"' not in client.get(page_url).content.decode()
    client.post(reverse("jobs:notebook-token", args=[notebook_id]))
    assert 'data-testid="notebook-token"' not in client.get(page_url).content.decode(), "never to the lead"
    client.force_login(setup["carol"])
    page = client.get(page_url).content.decode()
    assert 'data-testid="notebook-token-waiting"' in page and 'data-testid="notebook-token-show"' in page
    shown = client.post(reverse("jobs:notebook-token", args=[notebook_id]), follow=True).content.decode()
    token = re.search(r'data-testid="notebook-token">.*?<code>([^<]+)</code>', shown, re.S).group(1)
    assert check_token(Notebook.objects.get(pk=notebook_id).token_hash, token)
    after = client.get(page_url).content.decode()
    assert 'data-testid="notebook-token"' not in after and 'data-testid="notebook-token-waiting"' not in after


def test_the_owner_collects_the_token_after_the_secret_key_was_rotated(api_client, setup, restarted, settings):
    """Issue 31, item 9: with the key the token was made under kept in DJANGO_SECRET_KEY_FALLBACKS, a rotation of
    DJANGO_SECRET_KEY does not lose a token waiting for its owner."""
    notebook_id, url = restarted
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "the-next-secret-key-" + "n" * 44
    api_client.force_authenticate(setup["carol"])
    collected = api_client.post(url + "token/")
    assert collected.status_code == 200, collected.json()
    assert check_token(Notebook.objects.get(pk=notebook_id).token_hash, collected.json()["token"])

"""The team's Secrets page: reachable from the team page, names and keys for members, forms for leads, every
problem shown at once, and never a value in what the page sends back."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from jobs.models import RegistryCredential, TeamSecret
from jobs.storage import secrets
from tests.factories import member
from tests.sim_objects import DEMO_SCENARIO

VALUE = "page-secret-value-91c2"


@pytest.fixture
def setup(people, tmp_path, monkeypatch):
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    monkeypatch.setattr(secrets, "get_backend", lambda: sim)
    carol = member(people["vision"])
    return {**people, "carol": carol, "sim": sim}


def test_a_lead_stores_a_secret_and_a_credential_from_the_page(client, setup):
    client.force_login(setup["alice"])
    team_page = client.get("/teams/vision/").content.decode()
    assert "/teams/vision/secrets/" in team_page
    response = client.post(
        "/teams/vision/secrets/new/",
        {"secret-name": "wandb", "secret-description": "", "secret-values": f"token={VALUE}\nentity=acme"},
    )
    assert response.status_code == 302
    assert TeamSecret.objects.get().keys == ["entity", "token"]
    response = client.post(
        "/teams/vision/registries/new/",
        {"registry-registry": "nvcr.io", "registry-username": "$oauthtoken", "registry-token": VALUE},
    )
    assert response.status_code == 302 and RegistryCredential.objects.get().registry == "nvcr.io"
    page = client.get("/teams/vision/secrets/").content.decode()
    assert "wandb" in page and "portal-registry-nvcr.io" in page and VALUE not in page
    secret = TeamSecret.objects.get()
    response = client.post(f"/teams/vision/secrets/{secret.pk}/rotate/", {f"rotate-{secret.pk}-values": "token=new"})
    assert response.status_code == 302
    secret.refresh_from_db()
    assert secret.keys == ["token"] and secret.rotated_by == setup["alice"]


def test_errors_come_all_at_once_and_the_values_are_not_sent_back(client, setup):
    client.force_login(setup["alice"])
    response = client.post(
        "/teams/vision/secrets/new/", {"secret-name": "Bad Name", "secret-values": f"bad key={VALUE}\nempty="}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "is not a valid secret name" in page and "bad key" in page and "is empty" in page
    assert VALUE not in page
    response = client.post(
        "/teams/vision/registries/new/",
        {"registry-registry": "not a host", "registry-username": "", "registry-token": VALUE},
    )
    page = response.content.decode()
    assert response.status_code == 400 and "is not a registry host" in page and "user name" in page
    assert VALUE not in page
    assert not TeamSecret.objects.exists() and not RegistryCredential.objects.exists()


def test_members_see_names_only_and_other_teams_nothing(client, setup):
    secrets.create_secret(setup["alice"], setup["vision"], "wandb", {"token": VALUE})
    client.force_login(setup["carol"])
    page = client.get("/teams/vision/secrets/").content.decode()
    assert "wandb" in page and "Store secret" not in page and "Rotate or delete" not in page
    secret = TeamSecret.objects.get()
    assert client.post(f"/teams/vision/secrets/{secret.pk}/delete/").status_code == 403
    client.force_login(setup["bob"])
    assert client.get("/teams/vision/secrets/").status_code == 404
    assert client.post(f"/teams/vision/secrets/{secret.pk}/delete/").status_code == 404
    assert TeamSecret.objects.exists()

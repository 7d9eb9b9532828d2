"""Strict query strings: a list's unknown parameter or ordering field is a 400 that names what it takes; what a
list does take still works; detail endpoints keep their own parameters."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import actions

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def alice(api_client, inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    job = actions.submit_job(people["alice"], people["vision"], rc, {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "60"], "count": 1,
        "cpu_millicores": 2000, "memory_mb": 8192, "priority": 50, "preemptible": False, "max_runtime_seconds": 3600,
    }).job  # fmt: skip
    api_client.force_login(people["alice"])
    return api_client, job


def test_a_typo_in_a_filter_is_a_400_naming_what_the_list_takes(alice):
    client, _ = alice
    response = client.get("/api/v1/jobs/?status=running&colour=red")
    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"status", "colour"}  # every unknown parameter at once
    message = body["status"][0]
    assert message.startswith("This list has no parameter 'status'. It takes: ")
    assert "state" in message and "ordering" in message and "limit" in message


def test_an_ordering_field_the_list_does_not_offer_is_a_400(alice):
    client, job = alice
    response = client.get("/api/v1/jobs/?ordering=-colour,state")
    assert response.status_code == 400
    (message,) = response.json()["ordering"]
    assert message.startswith("This list cannot be ordered by colour. It orders by: ")
    assert "submitted_at" in message
    ok = client.get("/api/v1/jobs/?ordering=-submitted_at&state=queued&limit=5&offset=0")
    assert ok.status_code == 200 and [j["id"] for j in ok.json()["results"]] == [job.pk]


def test_what_lists_read_themselves_and_detail_parameters_still_work(alice):
    client, job = alice
    assert client.get("/api/v1/services/?state=stopped").status_code == 200
    assert client.get("/api/v1/notifications/?unread=true").status_code == 200
    assert client.get(f"/api/v1/jobs/{job.pk}/?anything=1").status_code == 200
    assert client.get("/api/v1/nodes/?producto=H100").status_code == 400

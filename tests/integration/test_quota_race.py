"""A quota PATCH racing a DELETE of the same quota (audit finding 5): each answers what it did or 404, never a
server error, and a deleted quota never comes back under a new id. Runs on PostgreSQL (CI), threads each with
their own connection, as tests/integration/test_admission_concurrency.py."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from rest_framework.test import APIClient

from core.models import AuditEvent
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.models import Quota

pytestmark = pytest.mark.integration

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def test_a_quota_patch_racing_its_delete_is_a_404_and_never_brings_it_back(transactional_db, sim_cluster, people):
    if connection.vendor != "postgresql":
        pytest.skip("the race is proven on PostgreSQL (CI runs it there); SQLite serialises all writers anyway")
    sync_inventory(sim_cluster)
    rc = ResourceClass.objects.get(key=H100)
    team = people["vision"]
    outcomes: list[tuple[int, int, int]] = []
    for round_ in range(40):
        quota = actions.set_quota(people["admin"], team, rc, 2, 4)
        answers: dict[str, int] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(2)

        def call(method: str, body: dict | None = None, quota_id: int = quota.pk, answers=answers, errors=errors,
                 start=start) -> None:  # fmt: skip
            client = APIClient()
            client.force_authenticate(people["admin"])
            try:
                start.wait()
                url = f"/api/v1/quotas/{quota_id}/"
                response = getattr(client, method)(url, body, format="json") if body else client.delete(url)
                answers[method] = response.status_code
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)
            finally:
                connections.close_all()

        client_delay = round_ % 2  # half the rounds start the PATCH first, half the DELETE
        threads = [
            threading.Thread(target=call, args=("patch", {"limit": 5 + round_})),
            threading.Thread(target=call, args=("delete",)),
        ]
        for thread in threads if client_delay else reversed(threads):
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert answers["patch"] in (200, 404), answers
        assert answers["delete"] in (204, 404), answers
        left = list(Quota.objects.filter(team=team, resource_class=rc).values_list("pk", flat=True))
        if answers["delete"] == 204:
            assert left == [], f"round {round_}: the deleted quota #{quota.pk} came back as {left} ({answers})"
        outcomes.append((answers["patch"], answers["delete"], len(left)))
        Quota.objects.filter(team=team, resource_class=rc).delete()
    assert AuditEvent.objects.filter(action="quota.delete").count() == sum(1 for _, d, _ in outcomes if d == 204)

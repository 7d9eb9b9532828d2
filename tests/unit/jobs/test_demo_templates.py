"""The demo's templates of each kind (issue 35, item 4): the seeded demo keeps a job template of team vision, a
notebook template of vision and a service template of nlp; each starts through its create API as it is."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.demo import A100_1G, seed_quotas_and_jobs, seed_session_templates
from jobs.models import Notebook, WorkloadTemplate
from tests.sim_objects import DEMO_SCENARIO


@pytest.mark.django_db
def test_the_demo_keeps_a_template_of_each_kind_and_each_starts(tmp_path, people, api_client):
    sync_inventory(SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO))
    seed_quotas_and_jobs()
    assert seed_session_templates() == 0  # once
    kinds = dict(WorkloadTemplate.objects.values_list("name", "kind"))
    assert kinds == {"resnet50-train": "job", "explore-1g": "notebook", "chat-llm": "service"}
    api_client.force_authenticate(people["alice"])
    notebook = api_client.post("/api/v1/notebooks/", {"template": "explore-1g", "name": "explore-2"}, format="json")
    assert notebook.status_code == 201, notebook.content
    assert Notebook.objects.get(name="explore-2").resource_class.key == A100_1G
    api_client.force_authenticate(people["bob"])
    service = api_client.post("/api/v1/services/", {"template": "chat-llm", "name": "chat-2"}, format="json")
    assert service.status_code == 201, service.content
    assert (service.data["port"], service.data["max_replicas"]) == (8000, 6)
    wrong = api_client.post("/api/v1/services/", {"template": "explore-1g", "name": "x"}, format="json")
    assert wrong.status_code == 400 and "template" in wrong.data

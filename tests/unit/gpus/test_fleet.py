"""The fleet: registering clusters (API and pages), each cluster's inventory on its own, an unreachable cluster, and
removing one (gpus.fleet, issue 32 items 1-3). The real API servers' side (a wrong CA, a rejected token) is in
tests/kube/test_fleet.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent
from gpus import fleet
from gpus.choices import ClusterHealth, InventoryAuditAction
from gpus.models import Cluster, Node, ResourceClass
from tests.sim_objects import CLOUD_CLUSTER, H100

CLOUD = CLOUD_CLUSTER


@pytest.fixture
def fleet_of_two(cluster, people, settings, tmp_path):
    """The demo cluster (configured in settings) and the simulated cloud cluster, registered and synced."""
    settings.DATA_DIR = tmp_path
    cloud = fleet.register(people["admin"], fleet.ClusterInput(**CLOUD))
    assert fleet.sync(cloud) is not None
    return cloud


def test_existing_nodes_belong_to_the_cluster_configured_in_settings(cluster):
    default = Cluster.objects.get(name="default")
    assert default.connection == "settings"
    assert Node.objects.count() > 0
    assert set(Node.objects.values_list("cluster", flat=True)) == {default.pk}


def test_an_admin_registers_a_cluster_over_the_api_and_its_inventory_joins_the_fleet(
    cluster, people, api_client, settings, tmp_path
):
    settings.DATA_DIR = tmp_path
    h100_before = ResourceClass.objects.get(key=H100).total
    api_client.force_authenticate(people["admin"])
    answer = api_client.post("/api/v1/clusters/", CLOUD, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["health"] == "reachable"
    assert body["capabilities"]["server_version"] == "v1.33.5-gke.1200000"
    assert body["capabilities"]["gpu_operator"] is False
    registered = AuditEvent.objects.filter(action=InventoryAuditAction.CLUSTER_REGISTER, object_repr="GKE europe-west4")
    assert registered.exists()

    checked = api_client.post("/api/v1/clusters/cloud/check/")
    assert checked.status_code == 200, checked.content
    assert checked.json()["nodes"] == 6 and checked.json()["gpus"] == 32
    # One class over both clusters: 64 on-premise H100s and 16 in the cloud.
    assert ResourceClass.objects.get(key=H100).total == h100_before + 16
    listed = api_client.get("/api/v1/nodes/", {"cluster": "cloud"}).json()
    assert listed["count"] == 6 and {n["cluster"] for n in listed["results"]} == {"cloud"}
    assert (
        api_client.get("/api/v1/nodes/", {"cluster": "default"}).json()["count"]
        == Node.objects.filter(cluster__name="default", gone_at__isnull=True).count()
    )


def test_registration_reports_every_problem_at_once_and_stores_nothing(cluster, people, api_client):
    api_client.force_authenticate(people["admin"])
    before = (Cluster.objects.count(), AuditEvent.objects.count())
    answer = api_client.post(
        "/api/v1/clusters/",
        {"name": "default", "connection": "token", "server": "http://k8s.example.org:6443", "gpus": 4,
         "ca_certificate": "not a pem"},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 400
    errors = answer.json()
    assert "already registered" in " ".join(errors["name"])
    assert "https://" in " ".join(errors["server"])
    assert errors["token"] and errors["ca_certificate"]
    assert "Unknown field" in " ".join(errors["gpus"])
    assert (Cluster.objects.count(), AuditEvent.objects.count()) == before


def test_an_unreachable_api_server_is_refused_with_what_to_fix(cluster, people, api_client, refusing_port):
    api_client.force_authenticate(people["admin"])
    answer = api_client.post(
        "/api/v1/clusters/",
        {"name": "far", "connection": "token", "server": f"https://127.0.0.1:{refusing_port}", "token": "t0ken"},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    assert "cannot be reached" in " ".join(answer.json()["server"])
    assert not Cluster.objects.filter(name="far").exists()


@pytest.fixture
def refusing_port_named_like_a_status():
    """A local port whose number holds "401" (4010-4019, 40100-40199), bound by a socket that never listens, so every
    connection to it is refused: the status codes' digits in a URL."""
    import socket

    for port in [*range(4010, 4020), *range(40100, 40200)]:
        held = socket.socket()
        try:
            held.bind(("127.0.0.1", port))
        except OSError:
            held.close()
            continue
        with held:
            yield port
        return
    pytest.fail("no free port with 401 in its number")


def test_an_unreachable_api_server_whose_port_reads_like_a_status_is_still_the_servers_problem(
    cluster, people, api_client, refusing_port_named_like_a_status
):
    # "401" in the URL is not an HTTP 401: the admin is told to fix the server, not the token.
    api_client.force_authenticate(people["admin"])
    server = f"https://127.0.0.1:{refusing_port_named_like_a_status}"
    answer = api_client.post(
        "/api/v1/clusters/", {"name": "far", "connection": "token", "server": server, "token": "t0ken"}, format="json"
    )
    assert answer.status_code == 400, answer.content
    assert list(answer.json()) == ["server"]
    assert "cannot be reached" in " ".join(answer.json()["server"])


@pytest.mark.parametrize(
    ("problem", "kind", "field"),
    [
        ("HTTPSConnection(host='10.0.0.1', port=40137): Failed to establish a new connection: [Errno 111] "
         "Connection refused", "unreachable", "server"),
        ("Failed to resolve 'k8s-403.example.org' ([Errno -2] Name or service not known)", "unreachable", "server"),
        ("Read the server version was refused with HTTP 401: Unauthorized.", "unauthorised", "token"),
        ("Read the server version was refused with HTTP 403: forbidden.", "forbidden", "token"),
        ("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate", "certificate",
         "ca_certificate"),
        ("[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate or crl found", "unusable ca", "ca_certificate"),
        ("Failed to resolve 'certificates.example.org' (Name or service not known)", "unreachable", "server"),
        ("Read the server version failed with HTTP 500: etcdserver: leader changed", "", None),
    ],
)  # fmt: skip
def test_a_clusters_failure_is_read_by_its_words_not_by_digits_in_its_url(problem, kind, field):
    from cluster.connect import FIELD_TO_FIX, failure_kind

    assert failure_kind(problem) == kind
    assert FIELD_TO_FIX.get(kind) == field


def test_only_admins_register_and_members_never_see_how_a_cluster_is_reached(cluster, people, api_client):
    api_client.force_authenticate(people["alice"])
    assert api_client.post("/api/v1/clusters/", CLOUD, format="json").status_code == 403
    listed = api_client.get("/api/v1/clusters/").json()["results"]
    assert [c["name"] for c in listed] == ["default"]
    assert listed[0]["connection"] is None and listed[0]["server"] is None and listed[0]["last_error"] is None


def test_a_token_is_sealed_and_never_shown(cluster, people, api_client, monkeypatch):
    from cluster.connect import Capabilities

    found = Capabilities("v1.31.2", True, (), True, False)
    monkeypatch.setattr(fleet, "probe", lambda cluster, token=None: found)
    api_client.force_authenticate(people["admin"])
    secret = "eyJhbGciOiJSUzI1NiJ9.very-secret-token"
    body = {"name": "dgx", "connection": "token", "server": "https://dgx.example.org:6443", "token": secret}
    answer = api_client.post("/api/v1/clusters/", body, format="json")
    assert answer.status_code == 201, answer.content
    stored = Cluster.objects.get(name="dgx")
    assert secret not in stored.token_sealed and fleet.connection_of(stored).token == secret
    assert secret not in answer.content.decode() and answer.json()["has_token"] is True
    assert secret not in api_client.get("/api/v1/clusters/dgx/").content.decode()
    assert not any(secret in str(e.after) for e in AuditEvent.objects.all())
    # A change without a token keeps the sealed one.
    assert api_client.patch("/api/v1/clusters/dgx/", {"region": "on-prem"}, format="json").status_code == 200
    assert fleet.connection_of(Cluster.objects.get(name="dgx")).token == secret


def test_an_unreachable_cluster_is_marked_withholds_its_gpus_and_comes_back(fleet_of_two, refusing_port):
    cloud = fleet_of_two
    h100 = ResourceClass.objects.get(key=H100)
    # The cloud's API server goes away: the portal now reaches for it where nothing answers.
    Cluster.objects.filter(pk=cloud.pk).update(connection="token", server=f"https://127.0.0.1:{refusing_port}")
    cloud.refresh_from_db()
    assert fleet.sync(cloud) is None
    cloud.refresh_from_db()
    assert cloud.health == ClusterHealth.UNREACHABLE and cloud.unreachable_since is not None
    assert "127.0.0.1" in cloud.last_error
    since = cloud.unreachable_since
    withheld = ResourceClass.objects.get(key=H100)
    assert withheld.total == h100.total and withheld.free == h100.free - 16
    # Its nodes are kept (not declared gone), and the other cluster's pass is untouched.
    assert Node.objects.filter(cluster=cloud, gone_at__isnull=True).count() == 6
    assert fleet.sync(Cluster.objects.get(name="default")) is not None
    assert fleet.sync(cloud) is None
    cloud.refresh_from_db()
    assert cloud.unreachable_since == since  # since the first failure

    Cluster.objects.filter(pk=cloud.pk).update(connection="simulated", server="")
    cloud.refresh_from_db()
    assert fleet.sync(cloud) is not None
    cloud.refresh_from_db()
    assert cloud.health == ClusterHealth.REACHABLE and cloud.unreachable_since is None
    assert ResourceClass.objects.get(key=H100).free == h100.free
    assert AuditEvent.objects.filter(action=InventoryAuditAction.CLUSTER_UNREACHABLE).count() == 1
    assert AuditEvent.objects.filter(action=InventoryAuditAction.CLUSTER_BACK).count() == 1


def test_a_cluster_that_runs_work_is_not_removed(fleet_of_two, people, api_client):
    from tests.factories import job_in_state

    job = job_in_state(people["alice"], "running", node="gke-a3-h100-01")
    api_client.force_authenticate(people["admin"])
    refused = api_client.delete("/api/v1/clusters/cloud/")
    assert refused.status_code == 409
    assert f"#{job.pk} {job.name}" in refused.json()["detail"]
    assert api_client.delete("/api/v1/clusters/default/").status_code == 409
    job.state = "succeeded"
    job.save(update_fields=["state"])
    assert api_client.delete("/api/v1/clusters/cloud/").status_code == 204
    assert not Node.objects.filter(name__startswith="gke-").exists()
    assert AuditEvent.objects.filter(action=InventoryAuditAction.CLUSTER_REMOVE).exists()


def test_the_fleet_pages(fleet_of_two, people, client):
    client.force_login(people["alice"])
    page = client.get(reverse("gpus:cluster-list")).content.decode()
    assert 'data-cluster="cloud"' in page and 'data-cluster="default"' in page
    assert "Register a cluster" not in page
    detail = client.get(reverse("gpus:cluster-detail", args=["cloud"])).content.decode()
    assert "gke-a3-h100-01" in detail and "Reached through" not in detail
    assert client.get(reverse("gpus:cluster-new")).status_code == 404

    client.force_login(people["admin"])
    form = client.post(reverse("gpus:cluster-new"), {"name": "Bad Name", "connection": "token", "server": "http://x"})
    text = form.content.decode()
    assert form.status_code == 200
    assert "slug" in text.lower() or "letters" in text.lower()
    assert "https://" in text and "needs this" in text  # the connection's rules too, in the same round
    assert Cluster.objects.count() == 2


def test_list_and_detail_requests_keep_their_query_counts_as_clusters_are_added(
    cluster, people, api_client, settings, tmp_path
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    api_client.force_authenticate(people["admin"])
    paths = ["/api/v1/nodes/", "/api/v1/nodes/gpu-h100-01/", "/api/v1/clusters/", "/api/v1/resource-classes/"]

    def counts():
        found = {}
        for path in paths:
            with CaptureQueriesContext(connection) as queries:
                assert api_client.get(path).status_code == 200
            found[path] = len(queries)
        return found

    one = counts()
    settings.DATA_DIR = tmp_path
    fleet.sync(fleet.register(people["admin"], fleet.ClusterInput(**CLOUD)))
    assert counts() == one


def test_a_node_name_two_clusters_share_is_told_apart_by_cluster(
    cluster, people, api_client, client, settings, tmp_path
):
    settings.DATA_DIR = tmp_path
    twin = fleet.register(people["admin"], fleet.ClusterInput(name="twin", connection="simulated", sim_scenario="demo"))
    fleet.sync(twin)
    assert Node.objects.filter(name="gpu-h100-01").count() == 2
    api_client.force_authenticate(people["admin"])
    assert api_client.get("/api/v1/nodes/gpu-h100-01/").json()["cluster"] == "default"
    assert api_client.get("/api/v1/nodes/gpu-h100-01/", {"cluster": "twin"}).json()["cluster"] == "twin"
    assert api_client.get("/api/v1/nodes/gpu-h100-01/", {"cluster": "nowhere"}).status_code == 404
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:node-detail", args=["gpu-h100-01"]), {"cluster": "twin"})
    assert page.status_code == 200 and page.context["node"].cluster == twin


def test_a_body_that_is_not_an_object_is_a_400(cluster, people, api_client):
    api_client.force_authenticate(people["admin"])
    for body in ('"\\u00b2"', "[1, 2]", "7"):
        answer = api_client.post("/api/v1/clusters/", body, content_type="application/json")
        assert answer.status_code == 400 and "JSON object" in str(answer.json()), body
        changed = api_client.patch("/api/v1/clusters/default/", body, content_type="application/json")
        assert changed.status_code == 400, body


def test_a_pass_of_one_cluster_runs_once_at_a_time_and_not_for_a_removed_cluster(fleet_of_two):
    seen = []

    def inner(cluster):
        seen.append(cluster.name)
        # Another worker's pass of the same kind meanwhile is skipped; a pass of another kind is not.
        assert fleet.one_pass("scrape", "cloud", 60, lambda c: {"ran": 1}) == {"skipped": 1}
        assert fleet.one_pass("presence", "cloud", 60, lambda c: {"ran": 1}) == {"ran": 1}
        return {"ran": 1}

    assert fleet.one_pass("scrape", "cloud", 60, inner) == {"ran": 1} and seen == ["cloud"]
    assert fleet.one_pass("scrape", "cloud", 60, lambda c: {"again": 1}) == {"again": 1}  # the lock is gone
    assert fleet.one_pass("scrape", "nowhere", 60, inner) == {"gone": 1} and seen == ["cloud"]

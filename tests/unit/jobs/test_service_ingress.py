"""A service's external address (issue 13): the Ingress rendered from the operator's URL template and ingress class
(golden file), what the start-up checks say of bad settings, the simulated API server's Ingress validation, and the
cycle creating the Ingress at launch and deleting it at stop on the simulated cluster. Regenerate the golden file
with UPDATE_GOLDEN=1 after an intended change and review the diff."""

from __future__ import annotations

import pytest
from django.test import override_settings

from cluster.base import Conflict, Invalid, NotFound
from cluster.sim import SimulatedCluster
from cluster.sim.ingress_api import ingress_errors
from jobs.checks import service_address_settings
from jobs.choices import EventKind, JobState
from jobs.models import JobEvent
from jobs.service import ops as service_ops
from jobs.service.render import render_ingress, service_url, url_template_problems
from tests.factories import inference_service, service_spec
from tests.golden import assert_golden
from tests.unit.jobs.service_kit import SMALL_CLUSTER, cycle, fresh

TEMPLATE = "https://{name}-{team}.apps.example.com"

pytestmark = [pytest.mark.clock(hour=3), SMALL_CLUSTER]  # the cluster of the tests through the cycle (``night``)


def test_the_rendered_ingress_routes_the_url_host_to_the_service_port():
    spec = service_spec()
    url = service_url(TEMPLATE, spec)
    assert url == "https://llm-chat-vision.apps.example.com"
    ingress = render_ingress(spec, url, "nginx")
    assert_golden("service-llm-ingress.yaml", [ingress])
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "llm-chat-vision.apps.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    assert path["backend"] == {"service": {"name": "llm-chat", "port": {"number": 80}}}
    assert ingress["spec"]["tls"] == [{"hosts": ["llm-chat-vision.apps.example.com"]}]
    assert ingress["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert ingress_errors(ingress) == []


def test_an_http_url_with_a_path_routes_that_prefix_without_tls():
    spec = service_spec()
    ingress = render_ingress(spec, service_url("http://serve.example.com/{team}/{name}/", spec), "traefik")
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert ingress["spec"]["rules"][0]["host"] == "serve.example.com"
    assert path["path"] == "/vision/llm-chat" and "tls" not in ingress["spec"]
    assert ingress_errors(ingress) == []


@pytest.mark.parametrize(
    "url",
    ["https://10.0.0.1/llm", "https://" + "x" * 64 + ".example.com", "ftp://llm.example.com", "https:///llm"],
)
def test_no_ingress_for_a_url_an_ingress_cannot_route(url):
    assert render_ingress(service_spec(), url, "nginx") is None


def test_url_template_problems_are_all_told_at_once():
    assert url_template_problems("") == []
    assert url_template_problems(TEMPLATE, ingress=True) == []
    assert url_template_problems("https://{name}.{team}.example.com/{namespace}", ingress=True) == []
    (unknown,) = url_template_problems("https://{service}.example.com")
    assert "may use only {name}, {team}, {namespace}" in unknown
    problems = url_template_problems("http://10.1.2.3/{team}?q=1", ingress=True)
    assert len(problems) == 3
    assert any("has no {name}" in p for p in problems)
    assert any("IP address 10.1.2.3" in p for p in problems)
    assert any("query or fragment" in p for p in problems)
    # Without an Ingress the portal only shows the URL: an IP host or a query is the operator's business.
    assert url_template_problems("http://10.1.2.3/{name}?q=1") == []
    assert "https:// or http://" in url_template_problems("{name}.example.com")[0]


def test_the_start_up_check_reports_bad_settings():
    with override_settings(PORTAL_SERVICE_URL_TEMPLATE=TEMPLATE, PORTAL_SERVICE_INGRESS_CLASS="nginx"):
        assert service_address_settings() == []
    with override_settings(PORTAL_SERVICE_URL_TEMPLATE="https://Apps_{name}.example.com",
                           PORTAL_SERVICE_INGRESS_CLASS="Nginx_Public"):  # fmt: skip
        assert sorted(m.id for m in service_address_settings()) == ["jobs.E001", "jobs.E002"]
    with override_settings(PORTAL_SERVICE_URL_TEMPLATE="", PORTAL_SERVICE_INGRESS_CLASS="nginx"):
        (warning,) = service_address_settings()
        assert warning.id == "jobs.W001" and "PORTAL_SERVICE_URL_TEMPLATE is empty" in warning.msg


# -- the simulated API server ---------------------------------------------------------------------------------


def _ingress(spec: dict, name: str = "llm", labels: dict | None = None) -> dict:
    metadata = {"name": name, "namespace": "team-vision", "labels": labels or {}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata, "spec": spec}


BACKEND = {"service": {"name": "llm", "port": {"number": 80}}}


def test_the_simulated_api_server_validates_ingresses_as_v1_20_does(tmp_path):
    sim = SimulatedCluster(tmp_path / "sim.json", scenario={"namespaces": ["team-vision"], "nodes": [],
                                                            "server_version": "v1.20.2"})  # fmt: skip
    with pytest.raises(Invalid) as refused:
        sim.apply_ingress(_ingress({}))
    assert str(refused.value) == (
        'Ingress.extensions "llm" is invalid: spec: Invalid value: []networking.IngressRule(nil): either '
        "`defaultBackend` or `rules` must be specified"
    )
    bad = _ingress({
        "ingressClassName": "Nginx_X",
        "rules": [{"host": "1.2.3.4", "http": {"paths": [
            {"path": "rel", "backend": BACKEND},
            {"path": "/", "pathType": "Bogus", "backend": {"service": {"name": "Bad_svc", "port": {"number": 0}}}},
            {"path": "/", "pathType": "Prefix", "backend": {}},
        ]}}],
    })  # fmt: skip
    errors = ingress_errors(bad)
    assert errors == [
        'spec.rules[0].host: Invalid value: "1.2.3.4": must be a DNS name, not an IP address',
        "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
        'spec.rules[0].http.paths[1].pathType: Unsupported value: "Bogus": supported values: "Exact", '
        '"ImplementationSpecific", "Prefix"',
        f'spec.rules[0].http.paths[1].backend.service.name: Invalid value: "Bad_svc": {errors[3].split(": ", 3)[3]}',
        "spec.rules[0].http.paths[1].backend: Required value: port name or number is required",
        'spec.rules[0].http.paths[2].backend: Invalid value: "": resource or service backend is required',
        f'spec.ingressClassName: Invalid value: "Nginx_X": {errors[6].split(": ", 3)[3]}',
    ]
    assert "DNS-1035 label" in errors[3] and "RFC 1123 subdomain" in errors[6]
    with pytest.raises(Invalid, match=r"^Ingress.extensions \"llm\" is invalid: \[spec.rules\[0\].host"):
        sim.apply_ingress(bad)
    with pytest.raises(NotFound):
        sim.get_ingress("team-vision", "llm")  # nothing stored


def test_stored_with_defaults_replaced_by_the_portal_and_refused_over_a_foreign_one(tmp_path):
    sim = SimulatedCluster(tmp_path / "sim.json", scenario={"namespaces": ["team-vision"], "nodes": []})
    ours = {"app.kubernetes.io/managed-by": "gpu-portal"}
    spec = {"rules": [{"host": "llm.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                                        "backend": BACKEND}]}}]}  # fmt: skip
    first = sim.apply_ingress(_ingress(spec, labels=ours))
    assert first["metadata"]["generation"] == 1 and first["status"] == {"loadBalancer": {}}
    spec["rules"][0]["host"] = "llm2.example.com"
    second = sim.apply_ingress(_ingress(spec, labels=ours))
    assert second["metadata"]["uid"] == first["metadata"]["uid"] and second["metadata"]["generation"] == 2
    assert sim.get_ingress("team-vision", "llm")["spec"]["rules"][0]["host"] == "llm2.example.com"
    sim.apply_ingress(_ingress(spec, name="theirs"))
    with pytest.raises(Conflict, match="not managed by the portal"):
        sim.apply_ingress(_ingress(spec, name="theirs", labels=ours))
    with pytest.raises(NotFound, match='namespaces "elsewhere" not found'):
        sim.apply_ingress(_ingress(spec) | {"metadata": {"name": "x", "namespace": "elsewhere"}})
    assert sim.delete_ingress("team-vision", "llm") is True and sim.delete_ingress("team-vision", "llm") is False


def test_a_server_before_v1_19_serves_no_networking_v1_ingress(tmp_path):
    sim = SimulatedCluster(tmp_path / "sim.json", scenario={"namespaces": ["team-vision"], "nodes": [],
                                                            "server_version": "v1.18.6"})  # fmt: skip
    with pytest.raises(NotFound, match='no matches for kind "Ingress" in version "networking.k8s.io/v1"'):
        sim.apply_ingress(_ingress({"defaultBackend": BACKEND}))


# -- through the cycle ----------------------------------------------------------------------------------------


@pytest.fixture
def night(cluster, clock):
    """The service tests' small cluster at 03:00, the night's trough: the HPA wants no more than the minimum."""
    return cluster, clock


def test_the_cycle_creates_the_ingress_at_launch_and_deletes_it_at_stop(night, people, settings):
    settings.PORTAL_SERVICE_URL_TEMPLATE = TEMPLATE
    settings.PORTAL_SERVICE_INGRESS_CLASS = "nginx"
    sim, clock = night
    svc = inference_service(people["alice"])
    cycle(sim, clock, 30, times=3)
    assert fresh(svc).job.state == JobState.RUNNING
    ingress = sim.get_ingress("team-vision", "llm")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["rules"][0]["host"] == "llm-vision.apps.example.com"
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "llm"
    assert ingress["metadata"]["labels"]["gpu-portal.io/job-id"] == str(svc.job_id)
    service_ops.stop_service(people["alice"], fresh(svc))
    cycle(sim, clock, 30, times=2)
    for get in (sim.get_ingress, sim.get_deployment, sim.get_hpa):
        with pytest.raises(NotFound):
            get("team-vision", "llm")


def test_no_ingress_without_an_ingress_class(night, people, settings):
    settings.PORTAL_SERVICE_URL_TEMPLATE = TEMPLATE
    settings.PORTAL_SERVICE_INGRESS_CLASS = ""
    sim, clock = night
    svc = inference_service(people["alice"])
    cycle(sim, clock, 30, times=3)
    assert fresh(svc).job.state == JobState.RUNNING
    with pytest.raises(NotFound):
        sim.get_ingress("team-vision", "llm")


def test_a_refused_ingress_costs_the_url_not_the_service(night, people, settings):
    settings.PORTAL_SERVICE_URL_TEMPLATE = "https://{name}-" + "x" * 60 + ".example.com"  # a 64-character label
    settings.PORTAL_SERVICE_INGRESS_CLASS = "nginx"
    sim, clock = night
    svc = inference_service(people["alice"])
    cycle(sim, clock, 30, times=3)
    assert fresh(svc).job.state == JobState.RUNNING
    with pytest.raises(NotFound):
        sim.get_ingress("team-vision", "llm")
    (refused,) = JobEvent.objects.filter(job=svc.job, kind=EventKind.SERVICE, data__action="ingress_refused")
    assert "No external address" in refused.message and "reachable inside the cluster" in refused.message

"""Long-polls and event streams are served apart from the API (issue 30): every way the portal runs sends exactly the
capped views' paths (jobs.api.stream_cap) to the stream server and everything else to web. The portal's own URL
conf gives the paths, so a new stream that the routes would miss, or a route that would take an ordinary API call
to the stream server, fails here. Each router is emulated the way its documentation says it matches: ingress-nginx
(regular-expression paths, longest first, as a case-insensitive prefix) and nginx (the first matching regular
expression location, else the longest prefix location)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml
from django.urls import URLPattern, URLResolver, reverse
from django.urls.exceptions import NoReverseMatch

from jobs.api.streams import STREAM_SERVER_PATHS
from portal.urls import api_patterns
from tests.procfile import demo_processes

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROXY_TEMPLATE = DEPLOY / "proxy" / "portal.conf.template"
SAMPLE_ARGUMENTS = {"pk": "7", "slug": "vision", "name": "gpu-h100-01", "id": "7", "key": "abc"}
#: Page paths and the probes: never the stream server's.
PAGES = ["/", "/healthz", "/metrics", "/jobs/7/", "/login/", "/api/docs/", "/api/v1/telemetry/samples/"]


def _patterns(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern.url_patterns, prefix)
        elif isinstance(pattern, URLPattern) and pattern.name:
            yield pattern


def _capped(callback) -> bool:
    if hasattr(callback, "actions"):  # a viewset's route: method -> action
        return any(getattr(getattr(callback.cls, action, None), "stream_capped", False)
                   for action in callback.actions.values())  # fmt: skip
    view_class = getattr(callback, "view_class", None)
    return bool(view_class) and any(
        getattr(getattr(view_class, method, None), "stream_capped", False) for method in ("get", "post")
    )


def api_paths() -> tuple[list[str], list[str]]:
    """(paths of the capped views, paths of every other API view), one sample path per named route."""
    capped, other = [], []
    for pattern in _patterns(api_patterns):
        groups = [g for g in pattern.pattern.regex.groupindex if g != "format"]
        try:
            path = reverse(f"api:{pattern.name}", kwargs={g: SAMPLE_ARGUMENTS[g] for g in groups})
        except (KeyError, NoReverseMatch):
            continue
        (capped if _capped(pattern.callback) else other).append(path)
    return sorted(set(capped)), sorted(set(other))


CAPPED, OTHER = api_paths()


def test_the_url_conf_gives_the_streams_and_the_rest():
    assert CAPPED == [
        "/api/v1/jobs/7/events/stream/",
        "/api/v1/jobs/7/logs/stream/",
        "/api/v1/jobs/7/wait/",
        "/api/v1/teams/vision/events/stream/",
    ]
    assert "/api/v1/jobs/7/" in OTHER and "/api/v1/jobs/7/events/" in OTHER and len(OTHER) > 40


def test_the_expression_matches_the_streams_and_nothing_else():
    for path in CAPPED:
        assert re.match(STREAM_SERVER_PATHS, path), path
    for path in [*OTHER, *PAGES]:
        assert not re.match(STREAM_SERVER_PATHS, path), path


# -- the cluster: deploy/70-ingress.yaml ----------------------------------------------------------------------


def _documents() -> list[dict]:
    return [d for p in sorted(DEPLOY.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def ingress_route(path: str) -> str:
    """The Service ingress-nginx sends ``path`` to (use-regex: each path a case-insensitive regular expression
    anchored at the start, the longest path tried first)."""
    (ingress,) = [d for d in _documents() if d["kind"] == "Ingress"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/use-regex"] == "true"
    (rule,) = ingress["spec"]["rules"]
    paths = sorted(rule["http"]["paths"], key=lambda p: len(p["path"]), reverse=True)
    for entry in paths:
        if re.match(entry["path"], path, flags=re.IGNORECASE):
            return entry["backend"]["service"]["name"]
    return "(none)"


def test_the_ingress_sends_the_streams_to_the_stream_server_and_the_rest_to_web():
    for path in CAPPED:
        assert ingress_route(path) == "gpu-portal-streams", path
        assert ingress_route(path + "?timeout=30") == "gpu-portal-streams", path
    for path in [*OTHER, *PAGES]:
        assert ingress_route(path) == "gpu-portal-web", path


def test_each_service_selects_its_own_deployment():
    documents = _documents()
    for component in ("web", "streams"):
        (service,) = [
            d for d in documents if d["kind"] == "Service" and d["metadata"]["name"] == f"gpu-portal-{component}"
        ]
        selector = service["spec"]["selector"].items()
        (deployment,) = [
            d
            for d in documents
            if d["kind"] == "Deployment" and selector <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert deployment["metadata"]["name"] == f"gpu-portal-{component}"


# -- one host: the nginx configuration of docker-compose.yml and `make demo` --------------------------------------


def nginx_route(path: str, config: str) -> str:
    """The upstream nginx sends ``path`` to: the first ``location ~`` whose expression matches, else the longest
    matching prefix ``location``."""
    locations = re.findall(r"location\s+(~\s+)?(\S+)\s*\{(.*?)\}", config, flags=re.S)
    target = {}
    for regex, where, body in locations:
        (upstream,) = re.findall(r"proxy_pass\s+http://(\w+);", body)
        target[(bool(regex), where)] = upstream
    for (regex, where), upstream in target.items():
        if regex and re.search(where, path):
            return upstream
    prefixes = [
        (where, upstream) for (regex, where), upstream in target.items() if not regex and path.startswith(where)
    ]
    return max(prefixes, key=lambda p: len(p[0]))[1] if prefixes else "(none)"


def test_the_proxy_sends_the_streams_to_the_stream_server_and_the_rest_to_web():
    config = PROXY_TEMPLATE.read_text()
    assert f"location ~ ^{STREAM_SERVER_PATHS} {{" in config
    for path in CAPPED:
        assert nginx_route(path, config) == "portal_streams", path
    for path in [*OTHER, *PAGES]:
        assert nginx_route(path, config) == "portal_web", path
    upstreams = dict(re.findall(r"upstream\s+(\w+)\s*\{\s*server\s+(\S+);", config))
    assert upstreams == {"portal_web": "${PORTAL_WEB_ADDRESS}", "portal_streams": "${PORTAL_STREAMS_ADDRESS}"}


def test_compose_puts_the_proxy_in_front_of_web_and_streams():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    proxy = services["proxy"]
    assert proxy["image"].startswith("nginx:")
    assert "./deploy/proxy/portal.conf.template:/etc/nginx/templates/portal.conf.template:ro" in proxy["volumes"]
    environment = proxy["environment"]
    assert (environment["PORTAL_WEB_ADDRESS"], environment["PORTAL_STREAMS_ADDRESS"]) == ("web:8000", "streams:8000")
    assert proxy["ports"] == ["8000:8000"]
    # Nothing reaches web or the stream server but through the proxy.
    assert [name for name, service in services.items() if service.get("ports")] == ["proxy"]
    for name in ("web", "streams"):
        assert "0.0.0.0:8000" in services[name]["command"], name


def test_the_demo_runs_the_proxy_in_front_of_web_and_streams():
    processes = demo_processes()
    assert processes["proxy"] == [".venv/bin/python", "deploy/proxy/demo.py"]
    for name, port in (("web", "PORTAL_WEB_PORT"), ("streams", "PORTAL_STREAMS_PORT")):
        command = processes[name]
        assert command[:2] == [".venv/bin/gunicorn", "portal.wsgi:application"], name
        assert command[command.index("--bind") + 1] == f"127.0.0.1:${{{port}}}", name
    sys.path.insert(0, str(DEPLOY / "proxy"))
    try:
        import demo  # noqa: PLC0415 - deploy/proxy/demo.py, not a package
    finally:
        sys.path.remove(str(DEPLOY / "proxy"))
    config = demo.render("127.0.0.1:8000", "127.0.0.1:8001", "127.0.0.1:8002")
    assert "${" not in config and "listen 127.0.0.1:8000;" in config
    assert 'proxy_set_header X-Forwarded-For "";' in config  # so /metrics stays open to this host
    for path in CAPPED:
        assert nginx_route(path, config) == "portal_streams", path
    assert nginx_route("/api/v1/jobs/7/", config) == "portal_web"


@pytest.mark.parametrize(
    "path", ["/api/v1/jobs/7/waiting/", "/api/v1/jobs/x/wait/", "/api/v1/teams/a/b/events/stream/"]
)
def test_lookalikes_stay_on_web(path):
    assert not re.match(STREAM_SERVER_PATHS, path)
    assert ingress_route(path) == "gpu-portal-web"

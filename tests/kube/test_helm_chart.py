"""The Helm chart deploy/chart/gpu-portal: `helm lint` and `helm template` with the values the operator guide shows
(its "Install with Helm" block) and with the chart's defaults; every rendered object strictly valid against the
Kubernetes 1.37 schemas; pod specs restricted; the plain manifests in deploy/ equal to the chart's rendering; the
rendered objects created on the real kube-apiserver (v1.20, RBAC on), and the backend driven with a token of the
chart's ServiceAccount (TokenRequest: the harness runs no token controller) to list nodes and make a team
namespace and a Job, which proves the chart's RBAC is enough.

The Prometheus Operator's kinds (monitoring.coreos.com) have no published schema and no CRD on a cluster without
the operator: they are rendered and checked here, and created only when the apiserver serves them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from cluster.kubernetes import KubernetesBackend
from tests.k8s_schema import schema_problems

from . import helm as chart
from .controlplane import LocalControlPlane
from .support import TEST_RUN_LABEL, unavailable, wait_for

pytestmark = pytest.mark.kube

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "operator-guide.md"
MONITORING_GROUP = "monitoring.coreos.com"
FIELD_MANAGER = "portal-helm-chart-tests"
#: The only hook: migrations before every install and upgrade.
MIGRATE_HOOK = "pre-install,pre-upgrade"


def guide_values() -> str:
    """The values block of the operator guide's "Install with Helm" (the first ```yaml block of that section)."""
    text = GUIDE.read_text()
    section = text[text.index("## Install with Helm\n") :]
    section = section[: section.index("\n## ", 1)]
    match = re.search(r"```yaml\n(.*?)```\n", section, re.S)
    assert match, "the operator guide's 'Install with Helm' shows no values block"
    return match.group(1)


@pytest.fixture(scope="module")
def helm_ready() -> None:
    try:
        chart.ensure_helm()
    except chart.HelmUnavailable as error:
        unavailable(str(error))


@pytest.fixture(scope="module")
def values_file(tmp_path_factory, helm_ready) -> Path:
    path = tmp_path_factory.mktemp("helm") / "site-values.yaml"
    path.write_text(guide_values())
    return path


def objects(rendered: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


@pytest.fixture(scope="module")
def rendered(values_file: Path) -> list[dict[str, Any]]:
    """The chart with the guide's values, as `helm install` would create it (hooks included)."""
    return objects(chart.render("--values", str(values_file)))


def by_kind(docs: list[dict[str, Any]], *kinds: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] in kinds]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


# helm itself -------------------------------------------------------------------------------------------
def test_the_pinned_helm_is_the_one_run(helm_ready) -> None:
    assert chart.helm("version", "--short").stdout.startswith(chart.HELM_VERSION)


@pytest.mark.parametrize("with_guide_values", [True, False], ids=["guide-values", "defaults"])
def test_helm_lint_strict_passes(with_guide_values, values_file) -> None:
    args = ["--values", str(values_file)] if with_guide_values else []
    result = chart.helm("lint", "--strict", str(chart.CHART), *args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_fails_on_a_broken_value(tmp_path, helm_ready) -> None:
    # The lint can fail: a list where the chart expects a map of resources breaks the rendering.
    broken = tmp_path / "broken.yaml"
    broken.write_text("web:\n  resources: [1, 2]\nworkers:\n  control: 3\n")
    result = chart.helm("lint", "--strict", str(chart.CHART), "--values", str(broken), check=False)
    assert result.returncode != 0


# What it renders ---------------------------------------------------------------------------------------
def test_it_renders_every_part(rendered) -> None:
    deployments = {d["metadata"]["name"] for d in by_kind(rendered, "Deployment")}
    assert deployments == {
        "gpu-portal-web", "gpu-portal-streams", "gpu-portal-worker", "gpu-portal-worker-webhooks",
        "gpu-portal-worker-background", "gpu-portal-beat",
    }  # fmt: skip
    assert {d["metadata"]["name"] for d in by_kind(rendered, "DaemonSet")} == {"gpu-portal-agent"}
    assert {d["metadata"]["name"] for d in by_kind(rendered, "Service")} == {"gpu-portal-web", "gpu-portal-streams"}
    assert {d["kind"] for d in rendered if d["apiVersion"].startswith(MONITORING_GROUP)} == {
        "ServiceMonitor", "PodMonitor", "PrometheusRule"
    }  # fmt: skip
    assert named(rendered, "ConfigMap", "gpu-portal-grafana-dashboard")["metadata"]["labels"]["grafana_dashboard"]
    assert named(rendered, "ServiceMonitor", "gpu-portal-web")["metadata"]["labels"]["release"] == (
        "kube-prometheus-stack"
    )
    # Workers: one Deployment per queue.
    queues = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["command"][5]
        for d in by_kind(rendered, "Deployment") if "worker" in d["metadata"]["name"]
    }  # fmt: skip
    assert queues == {
        "gpu-portal-worker": "control", "gpu-portal-worker-webhooks": "webhooks",
        "gpu-portal-worker-background": "background",
    }  # fmt: skip
    assert named(rendered, "Deployment", "gpu-portal-web")["spec"]["replicas"] == 3


def test_values_reach_the_settings(rendered) -> None:
    data = named(rendered, "ConfigMap", "gpu-portal-config")["data"]
    assert data["DJANGO_ALLOWED_HOSTS"] == "gpu-portal.example.com,localhost"
    assert data["PORTAL_BASE_URL"] == "https://gpu-portal.example.com"
    assert data["CELERY_BROKER_URL"] == "redis://redis.gpu-portal.svc:6379/0"
    assert data["CACHE_URL"] == "redis://redis.gpu-portal.svc:6379/1"
    assert data["OIDC_RP_CLIENT_ID"] == "gpu-portal"
    assert data["OIDC_OP_DISCOVERY_URL"].endswith("/.well-known/openid-configuration")
    web = named(rendered, "Deployment", "gpu-portal-web")["spec"]["template"]["spec"]
    container = web["containers"][0]
    assert container["image"] == "registry.example.com/gpu-portal:0.1.0"
    secret_keys = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secret_keys["DATABASE_URL"] == {"name": "gpu-portal-secrets", "key": "DATABASE_URL"}
    assert secret_keys["OIDC_RP_CLIENT_SECRET"]["name"] == "gpu-portal-secrets"
    # The registered clusters' kubeconfigs: read-only, where the processes that call clusters run.
    for name in ("gpu-portal-web", "gpu-portal-streams", "gpu-portal-worker"):
        spec = named(rendered, "Deployment", name)["spec"]["template"]["spec"]
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["kubeconfigs"] == {
            "name": "kubeconfigs", "mountPath": "/etc/gpu-portal/kubeconfigs", "readOnly": True
        }  # fmt: skip
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["kubeconfigs"]["secret"]["secretName"] == "gpu-portal-kubeconfigs"
    beat = named(rendered, "Deployment", "gpu-portal-beat")["spec"]["template"]["spec"]
    assert "kubeconfigs" not in {v["name"] for v in beat["volumes"]}


def test_migrations_run_as_a_hook_before_install_and_upgrade(rendered) -> None:
    hooks = [d for d in rendered if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    assert [(d["kind"], d["metadata"]["name"]) for d in hooks] == [("Job", "gpu-portal-migrate")]
    job = hooks[0]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == MIGRATE_HOOK
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    # It runs before the ConfigMap exists: the settings are written into the Job.
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["DJANGO_ALLOWED_HOSTS"] == "gpu-portal.example.com,localhost" and "DATABASE_URL" in env
    assert "envFrom" not in spec["containers"][0]
    # No web pod migrates any more.
    for deployment in by_kind(rendered, "Deployment"):
        assert "initContainers" not in deployment["spec"]["template"]["spec"], deployment["metadata"]["name"]


def test_the_ingress_sends_the_stream_paths_to_the_stream_pool(rendered) -> None:
    ingress = named(rendered, "Ingress", "gpu-portal")
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "gpu-portal.example.com"
    routes = {p["path"]: p["backend"]["service"]["name"] for p in rule["http"]["paths"]}
    streams = [path for path, service in routes.items() if service == "gpu-portal-streams"]
    assert routes["/"] == "gpu-portal-web" and len(streams) == 1
    pattern = re.compile(streams[0])
    for path in ("/api/v1/jobs/12/wait/", "/api/v1/jobs/3/events/stream/", "/api/v1/jobs/3/logs/stream/",
                 "/api/v1/teams/vision/events/stream/"):  # fmt: skip
        assert pattern.match(path), path
    for path in ("/api/v1/jobs/12/", "/api/v1/jobs/", "/healthz", "/api/v1/teams/vision/"):
        assert not pattern.match(path), path
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/use-regex"] == "true"
    assert ingress["spec"]["tls"] == [{"hosts": ["gpu-portal.example.com"], "secretName": "gpu-portal-tls"}]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def test_no_pod_is_privileged_or_touches_the_host(rendered) -> None:
    workloads = by_kind(rendered, "Deployment", "DaemonSet", "Job")
    assert len(workloads) == 8
    for workload in workloads:
        name, spec = workload["metadata"]["name"], pod_spec(workload)
        assert not (spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC")), name
        # The agent reads NVML through the NVIDIA runtime (runtimeClassName, NVIDIA_VISIBLE_DEVICES): no host path.
        assert all("hostPath" not in volume for volume in spec.get("volumes", [])), name
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert "memory" in container["resources"]["limits"], name
    agent = named(rendered, "DaemonSet", "gpu-portal-agent")
    assert pod_spec(agent)["runtimeClassName"] == "nvidia"
    assert pod_spec(agent)["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("with_guide_values", [True, False], ids=["guide-values", "defaults"])
def test_every_object_is_valid_for_kubernetes_1_37(with_guide_values, values_file) -> None:
    args = ["--values", str(values_file)] if with_guide_values else []
    docs = objects(chart.render(*args))
    checked = [d for d in docs if not d["apiVersion"].startswith(MONITORING_GROUP)]
    assert len(checked) >= 15
    problems = [problem for doc in checked for problem in schema_problems(doc)]
    assert problems == []


def test_the_schema_check_can_fail(rendered) -> None:
    web = yaml.safe_load(yaml.safe_dump(named(rendered, "Deployment", "gpu-portal-web")))
    web["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert schema_problems(web)


def test_the_plain_manifests_are_the_chart_rendered(helm_ready) -> None:
    """deploy/*.yaml and deploy/monitoring/*.yaml: exactly `make manifests`' output, and nothing else there."""
    expected = chart.plain_manifests()
    committed = {
        path for path in [*chart.DEPLOY.glob("*.yaml"), *(chart.DEPLOY / "monitoring").glob("*.yaml")]
    }  # fmt: skip
    assert committed == set(expected), "run `make manifests` (deploy/ holds files the chart does not render)"
    for path, text in expected.items():
        assert path.read_text() == text, f"{path.relative_to(REPO_ROOT)} differs from the chart: run `make manifests`"


# On the real apiserver ---------------------------------------------------------------------------------
#: Kept after the module: the same objects (same content) deploy/10-rbac.yaml holds, which test_deploy_manifests.py
#: applies too. Everything else this module creates in the namespace is deleted afterwards, so the dry runs there
#: never meet this module's (differently valued) objects.
KEPT_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.fixture(scope="module")
def installed(
    rendered, kube_api_client: client.ApiClient, kube_core: client.CoreV1Api
) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """The rendered objects created for real (server-side apply, so the test re-runs on the same server), the hook
    first as helm does; the objects of kinds the server does not serve are returned apart."""
    for namespace in (chart.NAMESPACE, "gpu-operator"):
        try:
            kube_core.create_namespace({"metadata": {"name": namespace}})
        except ApiException as error:
            if error.status != 409:
                raise
    dynamic = DynamicClient(kube_api_client)  # fresh discovery: CRDs another module made count
    created, unserved = [], []
    hooks_first = sorted(rendered, key=lambda d: "helm.sh/hook" not in d["metadata"].get("annotations", {}))
    for doc in hooks_first:
        try:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:
            unserved.append(doc)
            continue
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        result = resource.server_side_apply(
            body=doc, name=doc["metadata"]["name"], namespace=namespace, field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )  # fmt: skip
        created.append(result.to_dict())
    yield {"created": created, "unserved": unserved}
    for doc in created:
        if doc["kind"] in KEPT_KINDS:
            continue
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        try:
            resource.delete(name=doc["metadata"]["name"], namespace=namespace, propagation_policy="Background")
        except ApiException as error:
            if error.status != 404:
                raise


def test_the_apiserver_takes_every_object_it_serves(installed, rendered) -> None:
    created, unserved = installed["created"], installed["unserved"]
    assert {d["apiVersion"].split("/")[0] for d in unserved} <= {MONITORING_GROUP}
    assert len(created) + len(unserved) == len(rendered)
    assert all(d["metadata"]["uid"] for d in created)
    kinds = {d["kind"] for d in created}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Job",
            "Deployment", "DaemonSet", "Service", "Ingress"} <= kinds  # fmt: skip


@pytest.fixture(scope="module")
def chart_identity_backend(
    installed, kube_controlplane: LocalControlPlane, kube_core: client.CoreV1Api, tmp_path_factory
) -> KubernetesBackend:
    """KubernetesBackend with a token of the chart's ServiceAccount, minted by the apiserver (TokenRequest)."""
    (account,) = [d for d in installed["created"] if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == (
        "gpu-portal")]  # fmt: skip
    request = kube_core.create_namespaced_service_account_token(
        account["metadata"]["name"],
        account["metadata"]["namespace"],
        {"spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}},
    )
    kubeconfig = tmp_path_factory.mktemp("chart-sa") / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "chart",
            "clusters": [{"name": "test", "cluster": {"server": kube_controlplane.server,
                                                      "certificate-authority": str(kube_controlplane.ca_path)}}],
            "users": [{"name": "chart-sa", "user": {"token": request.status.token}}],
            "contexts": [{"name": "chart", "context": {"cluster": "test", "user": "chart-sa"}}],
        })
    )  # fmt: skip
    return KubernetesBackend.from_kubeconfig(str(kubeconfig))


def test_the_charts_service_account_can_run_the_portal(
    chart_identity_backend: KubernetesBackend, make_gpu_node, test_id: str
) -> None:
    backend = chart_identity_backend
    node = make_gpu_node("helm")["metadata"]["name"]
    nodes, _ = backend.list_nodes(label_selector=f"{TEST_RUN_LABEL}={test_id}")
    assert [n["metadata"]["name"] for n in nodes] == [node]

    namespace = backend.ensure_namespace(f"team-helm-{test_id}")["metadata"]["name"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "helm-check", "namespace": namespace},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never", "schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox"}],
        }}},
    }  # fmt: skip
    created = backend.create_workload(job)
    assert created["metadata"]["namespace"] == namespace
    assert [j["metadata"]["name"] for j in backend.list_workloads(namespace)] == ["helm-check"]
    wait_for("the Job controller to create the pod", lambda: backend.list_pods(namespace))
    created_cm = backend.apply_config_map("gpu-operator", f"helm-{test_id}", {"config.yaml": "version: v1\n"})
    assert created_cm["metadata"]["uid"]
    assert backend.delete_workload(namespace, "helm-check") is True


def test_the_charts_service_account_is_refused_the_rest(chart_identity_backend, kube_namespace: str) -> None:
    # The token is really the chart's ServiceAccount, held to its RBAC: no ConfigMaps outside the GPU operator's
    # namespace, no namespace deletion.
    core = client.CoreV1Api(chart_identity_backend.api_client)
    for forbidden in (
        lambda: core.list_namespaced_config_map(kube_namespace),
        lambda: core.delete_namespace(kube_namespace),
    ):
        with pytest.raises(ApiException) as raised:
            forbidden()
        assert raised.value.status == 403

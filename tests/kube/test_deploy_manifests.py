"""The manifests in deploy/ (rendered from the Helm chart deploy/chart/gpu-portal: tests/kube/test_helm_chart.py):
checked for least privilege and a restricted pod security posture, then validated by the real kube-apiserver
(server-side dry run) and by kubectl's strict schema validation.

Why two validators: a v1.20 apiserver silently drops fields it does not know on create, so a plain server-side
dry run passes a misspelled field. Two things do catch it, and both are used here: server-side *apply* (its typed
merge rejects "field not declared in schema"), and ``kubectl --validate=strict``, which against a server this old
(no fieldValidation support) falls back to checking the manifest against the server's OpenAPI schema itself.
The negative tests prove each check can fail.
"""

from __future__ import annotations

import ast
import copy
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from cluster.base import ClusterError
from cluster.kubernetes import KubernetesBackend
from vocab import dra as vocab_dra

from . import monitoring_crds
from .controlplane import LocalControlPlane
from .support import PORTAL_SERVICE_ACCOUNT_USER, TEST_RUN_LABEL, unavailable, wait_for

pytestmark = pytest.mark.kube

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
#: The KubernetesBackend and its mixins (cluster/kubernetes_storage.py): every module whose calls need RBAC.
BACKEND_SOURCES = sorted((REPO_ROOT / "cluster").glob("kubernetes*.py"))
IMAGE = "gpu-portal:latest"
FIELD_MANAGER = "portal-manifest-tests"

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod"}
READ_WRITE_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}

#: The RBAC each client call of KubernetesBackend needs: (apiGroup, resource, verb).
CLIENT_CALL_PERMISSIONS: dict[str, tuple[str, str, str]] = {
    "list_node": ("", "nodes", "list"),
    "read_node": ("", "nodes", "get"),
    "read_namespace": ("", "namespaces", "get"),
    "create_namespace": ("", "namespaces", "create"),
    "list_namespaced_job": ("batch", "jobs", "list"),
    "list_job_for_all_namespaces": ("batch", "jobs", "list"),
    "create_namespaced_job": ("batch", "jobs", "create"),
    "read_namespaced_job": ("batch", "jobs", "get"),
    "delete_namespaced_job": ("batch", "jobs", "delete"),
    "list_namespaced_pod": ("", "pods", "list"),
    "list_pod_for_all_namespaces": ("", "pods", "list"),
    "read_namespaced_pod_log": ("", "pods/log", "get"),
    "list_namespaced_event": ("", "events", "list"),
    "read_namespaced_config_map": ("", "configmaps", "get"),
    "create_namespaced_config_map": ("", "configmaps", "create"),
    "replace_namespaced_config_map": ("", "configmaps", "update"),
    "create_namespaced_persistent_volume_claim": ("", "persistentvolumeclaims", "create"),
    "read_namespaced_persistent_volume_claim": ("", "persistentvolumeclaims", "get"),
    "delete_namespaced_persistent_volume_claim": ("", "persistentvolumeclaims", "delete"),
    "list_namespaced_persistent_volume_claim": ("", "persistentvolumeclaims", "list"),
    "list_persistent_volume_claim_for_all_namespaces": ("", "persistentvolumeclaims", "list"),
    "create_persistent_volume": ("", "persistentvolumes", "create"),
    "read_persistent_volume": ("", "persistentvolumes", "get"),
    "list_persistent_volume": ("", "persistentvolumes", "list"),
    "delete_persistent_volume": ("", "persistentvolumes", "delete"),
    "create_namespaced_service": ("", "services", "create"),
    "read_namespaced_service": ("", "services", "get"),
    "delete_namespaced_service": ("", "services", "delete"),
    "connect_get_namespaced_service_proxy_with_path": ("", "services/proxy", "get"),
    "read_namespaced_secret": ("", "secrets", "get"),
    "list_namespaced_secret": ("", "secrets", "list"),
    "create_namespaced_secret": ("", "secrets", "create"),
    "replace_namespaced_secret": ("", "secrets", "update"),
    "delete_namespaced_secret": ("", "secrets", "delete"),
    # Inference services (cluster/kubernetes_apps.py).
    "create_namespaced_deployment": ("apps", "deployments", "create"),
    "read_namespaced_deployment": ("apps", "deployments", "get"),
    "list_namespaced_deployment": ("apps", "deployments", "list"),
    "list_deployment_for_all_namespaces": ("apps", "deployments", "list"),
    "replace_namespaced_deployment": ("apps", "deployments", "update"),
    "patch_namespaced_deployment": ("apps", "deployments", "patch"),
    "delete_namespaced_deployment": ("apps", "deployments", "delete"),
    "list_namespaced_replica_set": ("apps", "replicasets", "list"),
    "create_namespaced_ingress": ("networking.k8s.io", "ingresses", "create"),
    "read_namespaced_ingress": ("networking.k8s.io", "ingresses", "get"),
    "replace_namespaced_ingress": ("networking.k8s.io", "ingresses", "update"),
    "delete_namespaced_ingress": ("networking.k8s.io", "ingresses", "delete"),
}
#: HorizontalPodAutoscalers go through call_api on the group-version path (_hpa_call): HTTP method → verb.
HPA_METHOD_VERBS = {"POST": "create", "GET": "get", "PUT": "update", "DELETE": "delete"}


def load_documents() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]):
        if "chart" in path.relative_to(DEPLOY).parts:
            continue  # the chart's templates and values: tests/kube/test_helm_chart.py
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                documents.append((str(path.relative_to(DEPLOY)), doc))
    return documents


DOCUMENTS = load_documents()


def doc_id(entry: tuple[str, dict[str, Any]]) -> str:
    path, doc = entry
    return f"{path}:{doc['kind']}/{doc['metadata']['name']}"


def of_kind(*kinds: str) -> list[dict[str, Any]]:
    return [doc for _, doc in DOCUMENTS if doc["kind"] in kinds]


def pod_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in of_kind(*WORKLOAD_KINDS):
        spec = doc["spec"]
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        yield doc["metadata"]["name"], spec if doc["kind"] == "Pod" else spec["template"]["spec"]


def containers_of(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def deployment(component: str) -> dict[str, Any]:
    matches = [d for d in of_kind("Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    assert len(matches) == 1, f"expected one {component} Deployment"
    return matches[0]


def resolved_env(container: dict[str, Any]) -> dict[str, Any]:
    """Container environment: literal values, the ConfigMaps it pulls in with envFrom, and secretKeyRefs."""
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in of_kind("ConfigMap")}
    env: dict[str, Any] = {}
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        assert name in config_maps, f"envFrom references ConfigMap {name}, which deploy/ does not define"
        env.update(config_maps[name])
    for var in container.get("env", []):
        env[var["name"]] = var.get("value", var.get("valueFrom"))
    return env


# Static checks: no apiserver needed ---------------------------------------------------------------------
def test_manifests_exist_and_are_objects() -> None:
    kinds = {doc["kind"] for _, doc in DOCUMENTS}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"} <= kinds
    for entry in DOCUMENTS:
        _, doc = entry
        assert doc.get("apiVersion") and doc["metadata"].get("name"), doc_id(entry)


def test_rbac_has_no_wildcards_or_escalation() -> None:
    for role in of_kind("ClusterRole", "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard in {field}"
            assert "nonResourceURLs" not in rule
            assert set(rule["verbs"]) <= READ_WRITE_VERBS, f"escalating verbs in {role['metadata']['name']}: {rule}"
            if "secrets" in rule["resources"]:
                # Team secrets and registry credentials (jobs/storage/secrets.py); never watch, never a wildcard.
                assert rule["resources"] == ["secrets"] and "watch" not in rule["verbs"], rule


def backend_permissions() -> set[tuple[str, str, str]]:
    """What cluster/kubernetes.py actually calls, translated into RBAC."""
    assert {p.name for p in BACKEND_SOURCES} >= {"kubernetes.py", "kubernetes_storage.py"}  # the glob found them
    sources = {path: path.read_text() for path in BACKEND_SOURCES}
    source = "\n".join(sources.values())
    called = {
        node.attr
        for text in sources.values()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr in {"core", "batch", "apps", "networking"}
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    }
    unknown = called - set(CLIENT_CALL_PERMISSIONS)
    assert not unknown, f"add the RBAC for these new backend calls to CLIENT_CALL_PERMISSIONS and deploy/: {unknown}"
    needed = {CLIENT_CALL_PERMISSIONS[name] for name in called}
    # Calls that are not plain client methods: a node watch, and the label merge patch through call_api.
    if re.search(r"\.stream\(\s*self\.core\.list_node\b", source):
        needed.add(("", "nodes", "watch"))
    if re.search(r'call_api,\s*"/api/v1/nodes/\{name\}",\s*"PATCH"', source):
        needed.add(("", "nodes", "patch"))
    # The watch caches (kubernetes_cache.py) watch what they list: each client call named there, with watch=True.
    cache_source = next((text for path, text in sources.items() if path.name == "kubernetes_cache.py"), "")
    if "watch=True" in cache_source:
        for name in re.findall(r"self\.(?:core|batch)\.(\w+)", cache_source):
            group, resource, _ = CLIENT_CALL_PERMISSIONS[name]
            needed.add((group, resource, "watch"))
    for method in re.findall(r'_hpa_call\(\s*[^,]+,\s*"([A-Z]+)"', source):
        needed.add(("autoscaling", "horizontalpodautoscalers", HPA_METHOD_VERBS[method]))
    # The DRA reads (kubernetes_dra.py): lists through CustomObjectsApi, each call naming its resource.
    for plural in re.findall(r'_dra_list\(\s*"[^"]+",\s*"([a-z]+)"', source):
        needed.add(("resource.k8s.io", plural, "list"))

    # What workloads claim from (ResourceClaimTemplates, ComputeDomains): created (read back on a 409) and deleted,
    # each call naming its API version and plural, literally or by a vocab.dra name.
    def value(word: str) -> str:
        return word.strip('"') if word.startswith('"') else getattr(vocab_dra, word)

    for call, version, plural in re.findall(
        r"_dra_(create|delete)\((?:manifest,)?\s*(\w+),\s*\w+,\s*(\S+?)[,)]", source
    ):
        group = value(version).split("/", 1)[0]
        verbs = ("create", "get") if call == "create" else ("delete",)
        needed.update((group, value(plural), verb) for verb in verbs)
    return needed


def test_rbac_grants_exactly_what_the_backend_calls() -> None:
    granted = {
        (group, resource, verb)
        for role in of_kind("ClusterRole", "Role")
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = backend_permissions()
    assert needed - granted == set(), "the portal would be forbidden from calls it makes"
    assert granted - needed == set(), "RBAC grants more than the portal uses"


def test_configmap_access_is_confined_to_one_namespace() -> None:
    for role in of_kind("ClusterRole"):
        assert all("configmaps" not in rule["resources"] for rule in role["rules"])
    roles = [r for r in of_kind("Role") if any("configmaps" in rule["resources"] for rule in r["rules"])]
    assert [r["metadata"]["namespace"] for r in roles] == ["gpu-operator"]


def test_bindings_point_at_the_portal_service_account() -> None:
    accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in of_kind("ServiceAccount")}
    roles = {(r["kind"], r["metadata"]["name"]) for r in of_kind("ClusterRole", "Role")}
    bindings = of_kind("ClusterRoleBinding", "RoleBinding")
    assert bindings
    for binding in bindings:
        assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) in roles
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert (subject["namespace"], subject["name"]) in accounts
    for workload in of_kind(*WORKLOAD_KINDS):
        spec = workload["spec"]["template"]["spec"]
        account = spec.get("serviceAccountName")
        if account is None:
            # The migrations hook runs before the chart's ServiceAccount exists: the namespace's default, no token.
            assert spec.get("automountServiceAccountToken") is False, workload["metadata"]["name"]
            continue
        assert (workload["metadata"]["namespace"], account) in accounts, workload["metadata"]["name"]


def test_no_pod_is_privileged_or_touches_the_host() -> None:
    specs = list(pod_specs())
    assert {name for name, _ in specs} == {
        "gpu-portal-web", "gpu-portal-streams", "gpu-portal-worker", "gpu-portal-worker-webhooks",
        "gpu-portal-worker-background", "gpu-portal-beat", "gpu-portal-agent", "gpu-portal-migrate",
    }  # fmt: skip
    for name, spec in specs:
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC"), name
        assert all("hostPath" not in volume for volume in spec.get("volumes", [])), name
        pod_context = spec.get("securityContext", {})
        assert pod_context.get("runAsNonRoot") is True, name
        assert pod_context.get("runAsUser", 0) != 0, name
        assert pod_context.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        for container in containers_of(spec):
            context = container.get("securityContext", {})
            where = f"{name}/{container['name']}"
            assert context.get("privileged") is not True, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("readOnlyRootFilesystem") is True, where
            assert context.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not context.get("capabilities", {}).get("add"), where
            assert context.get("runAsUser", pod_context["runAsUser"]) != 0, where
            assert container["image"] == IMAGE, where
            assert "memory" in container.get("resources", {}).get("limits", {}), f"{where}: no memory limit"


def test_process_commands() -> None:
    def command(component: str) -> list[str]:
        return deployment(component)["spec"]["template"]["spec"]["containers"][0]["command"]

    assert command("web") == [
        "gunicorn",
        "portal.wsgi:application",
        "--bind",
        "0.0.0.0:8000",
        "--workers",
        "4",
        "--threads",
        "1",
    ]
    assert command("streams") == [
        "gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "2", "--threads", "128",
        "--worker-class", "gthread",
    ]  # fmt: skip
    # One worker Deployment per queue group: the control loop's alone (tests/unit/test_worker_queues.py checks the
    # queues against the routes).
    assert command("worker") == ["celery", "-A", "portal", "worker", "-Q", "control", "-l", "info"]
    assert command("worker-webhooks") == [
        "celery", "-A", "portal", "worker", "-Q", "webhooks", "-l", "info", "--concurrency", "4"
    ]  # fmt: skip
    assert command("worker-background") == [
        "celery", "-A", "portal", "worker", "-Q", "background", "-l", "info", "--concurrency", "2"
    ]  # fmt: skip
    assert command("beat") == ["celery", "-A", "portal", "beat", "-l", "info"]
    beat = deployment("beat")["spec"]
    assert beat["replicas"] == 1 and beat["strategy"]["type"] == "Recreate", "two beats would enqueue twice"


def test_environment() -> None:
    for component in ("web", "streams", "worker", "worker-webhooks", "worker-background", "beat"):
        for container in containers_of(deployment(component)["spec"]["template"]["spec"]):
            env = resolved_env(container)
            where = f"{component}/{container['name']}"
            for secret in ("DJANGO_SECRET_KEY", "DATABASE_URL"):
                assert env[secret] == {"secretKeyRef": {"name": "gpu-portal-secrets", "key": secret}}, where
            # Every process that derives from the key takes the earlier keys too while it is rotated (issue 31, item 9).
            fallbacks = {"name": "gpu-portal-secrets", "key": "DJANGO_SECRET_KEY_FALLBACKS", "optional": True}
            assert env["DJANGO_SECRET_KEY_FALLBACKS"] == {"secretKeyRef": fallbacks}, where
            assert env["CELERY_BROKER_URL"].startswith("redis://"), where
            # One cache for every process: the watch caches share their write marks through it (PORTAL_K8S_WATCH_CACHE
            # is on by default), and throttles count across processes.
            assert env["CACHE_URL"].startswith("redis://"), where
            assert env["CACHE_URL"] != env["CELERY_BROKER_URL"], where
            # Throttles and lockouts count by the address the ingress appended, not the ingress pod's.
            assert env["PORTAL_TRUSTED_PROXIES"] == "1", where
            assert env["DJANGO_ALLOWED_HOSTS"], where
            assert env["PORTAL_CLUSTER_BACKEND"] == "kubernetes", where
            assert env["PORTAL_K8S_IN_CLUSTER"] == "true", where


def test_only_processes_that_call_the_cluster_get_a_token() -> None:
    assert all(sa.get("automountServiceAccountToken") is False for sa in of_kind("ServiceAccount"))
    tokens = {
        c: deployment(c)["spec"]["template"]["spec"].get("automountServiceAccountToken")
        for c in ("web", "streams", "worker", "worker-webhooks", "worker-background", "beat")
    }
    # streams: a followed log. The webhook workers, which connect where teams say, hold no token at all.
    assert tokens == {"web": True, "streams": True, "worker": True, "worker-webhooks": False,
                      "worker-background": False, "beat": False}  # fmt: skip


@pytest.mark.parametrize("component", ["web", "streams"])
def test_web_probes_and_service(component) -> None:
    spec = deployment(component)["spec"]["template"]
    container = spec["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": 8000}
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz", probe
        assert ports.get(get["port"], get["port"]) == 8000, probe
        host = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}.get("Host")
        allowed = resolved_env(container)["DJANGO_ALLOWED_HOSTS"].split(",")
        assert host in allowed, f"{probe}: the probe's Host header must be in DJANGO_ALLOWED_HOSTS"
    # One Service each for web and streams; the workers' metrics need none: a PodMonitor scrapes them.
    (service,) = [s for s in of_kind("Service") if s["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    assert service["spec"]["selector"].items() <= spec["metadata"]["labels"].items()
    target = service["spec"]["ports"][0]["targetPort"]
    assert ports.get(target, target) == 8000


def test_no_real_secret_is_committed() -> None:
    for path, doc in DOCUMENTS:
        if doc["kind"] != "Secret":
            continue
        assert path.startswith("examples/"), "Secrets belong in examples/, which `kubectl apply -f deploy/` skips"
        for key, value in {**doc.get("stringData", {}), **doc.get("data", {})}.items():
            assert "CHANGE-ME" in value, f"{path}: {key} must be a placeholder"


# Against the real apiserver -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dynamic(kube_api_client: client.ApiClient) -> DynamicClient:
    return DynamicClient(kube_api_client)


@pytest.fixture(scope="module")
def deploy_namespaces(kube_core: client.CoreV1Api, kube_api_client: client.ApiClient) -> list[str]:
    """The namespaces the manifests live in, created for real: namespaced dry runs need them to exist.

    gpu-operator is not ours (the GPU operator's install creates it), so it is made here too; so are the
    Prometheus Operator's CRDs, which deploy/monitoring/ needs (stand-ins: tests/kube/monitoring_crds.py).
    """
    monitoring_crds.install(kube_api_client)
    names = {doc["metadata"]["name"] for doc in of_kind("Namespace")}
    names |= {doc["metadata"].get("namespace") for _, doc in DOCUMENTS} - {None}
    for name in sorted(names):
        try:
            kube_core.create_namespace({"metadata": {"name": name}})
        except ApiException as error:
            if error.status != 409:
                raise
    return sorted(names)


def dry_run_apply(dynamic: DynamicClient, doc: dict[str, Any]) -> dict[str, Any]:
    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    namespace = doc["metadata"].get("namespace") if resource.namespaced else None
    result = resource.server_side_apply(
        body=doc, name=doc["metadata"]["name"], namespace=namespace, field_manager=FIELD_MANAGER, dry_run="All"
    )
    return result.to_dict()


@pytest.mark.parametrize("entry", DOCUMENTS, ids=[doc_id(e) for e in DOCUMENTS])
def test_server_side_dry_run_accepts(entry, dynamic, deploy_namespaces) -> None:
    _, doc = entry
    result = dry_run_apply(dynamic, doc)
    assert result["kind"] == doc["kind"]
    assert result["metadata"]["name"] == doc["metadata"]["name"]
    if doc["kind"] == "Deployment":
        # Defaulting ran, so the server really processed the object.
        assert result["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirst"


def broken_web_deployment(how: str) -> dict[str, Any]:
    web = copy.deepcopy(deployment("web"))
    container = web["spec"]["template"]["spec"]["containers"][0]
    if how == "misspelled-field":
        container["imagePullPolicyy"] = container.pop("imagePullPolicy")
    elif how == "wrong-type":
        web["spec"]["replicas"] = "two"
    return web


@pytest.mark.parametrize("how", ["misspelled-field", "wrong-type"])
def test_server_side_dry_run_rejects_a_broken_manifest(how, dynamic, deploy_namespaces) -> None:
    with pytest.raises(ApiException) as raised:
        dry_run_apply(dynamic, broken_web_deployment(how))
    body = raised.value.body.decode() if isinstance(raised.value.body, bytes) else str(raised.value.body)
    # v1.20 reports these as HTTP 500 "failed to create typed patch object"; newer servers answer 4xx.
    expected = {
        "misspelled-field": "imagePullPolicyy: field not declared in schema",
        "wrong-type": ".spec.replicas: expected numeric",
    }[how]
    assert expected in body


def test_plain_create_would_silently_drop_a_misspelled_field(dynamic, deploy_namespaces) -> None:
    # The reason the checks above use apply: a v1.20 create (even a dry run) quietly discards unknown fields.
    web = broken_web_deployment("misspelled-field")
    resource = dynamic.resources.get(api_version=web["apiVersion"], kind=web["kind"])
    created = resource.create(body=web, namespace=web["metadata"]["namespace"], dry_run="All").to_dict()
    assert "imagePullPolicyy" not in str(created)


@pytest.fixture(scope="module")
def kubectl(kube_controlplane: LocalControlPlane, tmp_path_factory) -> list[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        unavailable("kubectl is not installed (the manifests are checked with kubectl --validate=strict)")
    cache = tmp_path_factory.mktemp("kubectl-cache")
    return [binary, f"--kubeconfig={kube_controlplane.kubeconfig_path}", f"--cache-dir={cache}"]


def run_kubectl(kubectl: list[str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=120, check=False)


def test_kubectl_strict_server_dry_run_accepts_deploy(kubectl, deploy_namespaces) -> None:
    # examples/ too, so the Secret template is validated like the rest; not chart/ (templates, not manifests).
    folders = [DEPLOY, DEPLOY / "monitoring", DEPLOY / "examples"]
    result = run_kubectl(
        kubectl, "apply", "--dry-run=server", "--validate=strict", *[f"--filename={f}" for f in folders]
    )
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if line.endswith("(server dry run)")]
    assert len(applied) == len(DOCUMENTS), result.stdout


@pytest.mark.parametrize("how", ["misspelled-field", "wrong-type"])
def test_kubectl_strict_validation_rejects_a_broken_manifest(how, kubectl, deploy_namespaces, tmp_path) -> None:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(yaml.safe_dump(broken_web_deployment(how)))

    result = run_kubectl(kubectl, "apply", "--dry-run=server", "--validate=strict", "-f", str(manifest))

    assert result.returncode != 0
    expected = {
        "misspelled-field": 'unknown field "imagePullPolicyy" in io.k8s.api.core.v1.Container',
        "wrong-type": 'DeploymentSpec.replicas: got "string", expected "integer"',
    }[how]
    assert expected in result.stderr


# The RBAC, enforced ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def portal_identity_backend(
    kube_controlplane: LocalControlPlane, dynamic: DynamicClient, deploy_namespaces: list[str]
) -> KubernetesBackend:
    """The backend as the portal's ServiceAccount, with deploy/'s RBAC really applied (the server runs RBAC)."""
    for doc in of_kind("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        resource.server_side_apply(
            body=doc,
            name=doc["metadata"]["name"],
            namespace=namespace,
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
    kubeconfig = kube_controlplane.kubeconfig_for(PORTAL_SERVICE_ACCOUNT_USER)
    return KubernetesBackend.from_kubeconfig(str(kubeconfig))


def test_the_rbac_lets_the_backend_do_its_job(
    portal_identity_backend: KubernetesBackend, make_gpu_node, test_id: str
) -> None:
    backend = portal_identity_backend
    node = make_gpu_node("rbac")["metadata"]["name"]

    nodes, resource_version = backend.list_nodes(label_selector=f"{TEST_RUN_LABEL}={test_id}")
    assert [n["metadata"]["name"] for n in nodes] == [node]
    assert backend.get_node(node)["metadata"]["name"] == node
    assert backend.patch_node_labels(node, {"nvidia.com/mig.config": "all-disabled"})["metadata"]["labels"]
    assert any(e.type == "MODIFIED" for e in backend.watch_nodes(resource_version, timeout_seconds=1))

    namespace = backend.ensure_namespace(f"team-rbac-{test_id}")["metadata"]["name"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "rbac-check", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "schedulerName": "nobody",  # stays unscheduled: only the API calls matter here
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
    }
    assert backend.create_workload(job)["metadata"]["uid"] == backend.create_workload(job)["metadata"]["uid"]
    assert [j["metadata"]["name"] for j in backend.list_workloads(namespace)] == ["rbac-check"]
    assert any(j["metadata"]["namespace"] == namespace for j in backend.list_workloads())
    pod = wait_for("the Job controller to create the pod", lambda: backend.list_pods(namespace))[0]
    assert any(p["metadata"]["namespace"] == namespace for p in backend.list_pods())
    assert backend.pod_events(namespace, pod["metadata"]["name"]) == []
    assert backend.pod_logs(namespace, pod["metadata"]["name"]) == ""
    assert backend.delete_workload(namespace, "rbac-check") is True

    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home", "namespace": namespace},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}  # fmt: skip
    assert backend.ensure_pvc(claim)["metadata"]["uid"] == backend.ensure_pvc(claim)["metadata"]["uid"]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nb", "namespace": namespace},
               "spec": {"selector": {"app": "nb"}, "ports": [{"port": 80, "targetPort": 8888}]}}  # fmt: skip
    assert backend.ensure_service(service)["metadata"]["uid"] == backend.ensure_service(service)["metadata"]["uid"]
    assert backend.delete_service(namespace, "nb") is True and backend.delete_pvc(namespace, "home") is True

    created = backend.apply_config_map("gpu-operator", f"mig-parted-{test_id}", {"config.yaml": "version: v1\n"})
    replaced = backend.apply_config_map("gpu-operator", f"mig-parted-{test_id}", {"config.yaml": "version: v2\n"})
    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert backend.get_config_map("gpu-operator", f"mig-parted-{test_id}")["data"]["config.yaml"] == "version: v2\n"


def test_the_rbac_refuses_what_the_portal_does_not_need(
    portal_identity_backend: KubernetesBackend, kube_namespace: str
) -> None:
    backend = portal_identity_backend
    # ConfigMaps outside the GPU operator's namespace.
    with pytest.raises(ClusterError, match="HTTP 403"):
        backend.apply_config_map(kube_namespace, "sneaky", {"a": "b"})
    core = client.CoreV1Api(backend.api_client)
    for forbidden in (
        lambda: core.list_namespaced_config_map(kube_namespace),
        lambda: core.delete_namespace(kube_namespace),
        lambda: core.create_namespaced_pod(
            kube_namespace, {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        ),
        lambda: core.delete_node("any"),
    ):
        with pytest.raises(ApiException) as raised:
            forbidden()
        assert raised.value.status == 403


def test_the_rbac_lets_the_watch_caches_watch(
    kube_controlplane: LocalControlPlane, portal_identity_backend: KubernetesBackend, make_gpu_node
) -> None:
    """PORTAL_K8S_WATCH_CACHE (on by default) watches nodes, pods and Jobs as the portal's ServiceAccount."""
    kubeconfig = kube_controlplane.kubeconfig_for(PORTAL_SERVICE_ACCOUNT_USER)
    backend = KubernetesBackend.from_kubeconfig(str(kubeconfig), watch_cache=True, watch_timeout=(3, 4))
    try:
        backend.list_nodes()
        backend.list_pods(label_selector=None)
        backend.list_workloads()
        for name in ("nodes", "pods", "jobs"):
            informer = backend.informer(name)
            wait_for(f"the {name} watch to be up", lambda informer=informer: informer._watching)
        node = make_gpu_node("rbac-watch")["metadata"]["name"]
        wait_for("the new node, by watch", lambda: node in {n["metadata"]["name"] for n in backend.list_nodes()[0]})
        assert [backend.informer(name).lists for name in ("nodes", "pods", "jobs")] == [1, 1, 1]
    finally:
        backend.stop_informers()

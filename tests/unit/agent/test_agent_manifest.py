"""deploy/60-agent-daemonset.yaml (the chart's agent, rendered): parses, lands on GPU nodes only, sees the GPUs
without privilege or host paths, takes its node's token from a Secret, and passes the agent options its command line
really has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agent import cli
from tests.kube import helm

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "deploy" / "60-agent-daemonset.yaml"


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    docs = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
    return {doc["kind"]: doc for doc in docs}


@pytest.fixture(scope="module")
def pod(documents) -> dict:
    return documents["DaemonSet"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def container(pod) -> dict:
    (agent,) = pod["containers"]
    return agent


def env_of(container: dict) -> dict:
    return {var["name"]: var.get("value", var.get("valueFrom")) for var in container.get("env", [])}


def test_objects(documents):
    assert sorted(documents) == ["DaemonSet", "ServiceAccount"]  # no Secret: real tokens are never committed
    daemonset, account = documents["DaemonSet"], documents["ServiceAccount"]
    assert daemonset["apiVersion"] == "apps/v1" and daemonset["metadata"]["namespace"] == "gpu-portal"
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert selector.items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False


def test_runs_on_gpu_nodes_only_and_tolerates_their_taint(pod):
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


def test_sees_every_gpu_without_taking_one(pod, container):
    env = env_of(container)
    assert pod.get("runtimeClassName") == "nvidia" or env.get("NVIDIA_VISIBLE_DEVICES") == "all"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    resources = {**container["resources"].get("requests", {}), **container["resources"].get("limits", {})}
    assert not [name for name in resources if name.startswith("nvidia.com/")]
    assert "memory" in container["resources"]["limits"]


def test_no_privilege_and_no_host_access(pod, container):
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert all("hostPath" not in volume for volume in pod["volumes"])
    assert pod["automountServiceAccountToken"] is False
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    own = container["securityContext"]
    assert own["privileged"] is False and own["allowPrivilegeEscalation"] is False
    assert own["readOnlyRootFilesystem"] is True and own["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == "gpu-portal:latest"


def test_token_comes_from_a_secret_key_named_after_the_node(pod, container):
    env = env_of(container)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    secret_volumes = [name for name, volume in volumes.items() if "secret" in volume]
    assert secret_volumes == ["tokens"]
    assert volumes["tokens"]["secret"]["secretName"] == "gpu-portal-agent-tokens"
    assert mounts["tokens"]["readOnly"] is True
    args = cli.build_parser().parse_args(container["args"])
    assert args.token_file == mounts["tokens"]["mountPath"] + "/$(NODE_NAME)"  # the kubelet expands $(NODE_NAME)
    # 0440 files are readable by the pod's group only if fsGroup gives them that group.
    assert volumes["tokens"]["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    assert "PORTAL_AGENT_TOKEN" not in env


def test_command_and_environment_are_the_agents(container):
    assert container["command"] == ["python", "-m", "agent"]
    source = Path(cli.__file__).read_text()
    for name in env_of(container):
        if not name.startswith("NVIDIA_"):
            assert f'"{name}"' in source, f"{name} is set in the manifest but the agent does not read it"
    env = env_of(container)
    interval, flush, size = (float(env[f"PORTAL_AGENT_{k}"]) for k in ("INTERVAL", "FLUSH", "BUFFER_SIZE"))
    assert (interval, flush, size) == (10, 30, 10_000)


def test_portal_url_is_the_web_service():
    web = [d for d in yaml.safe_load_all((REPO / "deploy" / "30-web.yaml").read_text()) if d and d["kind"] == "Service"]
    (service,) = web
    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    url = env_of(daemonset["spec"]["template"]["spec"]["containers"][0])["PORTAL_URL"]
    match = re.fullmatch(r"http://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?::(\d+))?", url)
    assert match, url
    name, namespace, port = match.group(1), match.group(2), int(match.group(3) or 80)
    assert (name, namespace) == (service["metadata"]["name"], service["metadata"]["namespace"])
    assert port in [p["port"] for p in service["spec"]["ports"]]


def test_one_copy_per_cluster_says_its_cluster(monkeypatch):
    """The header's recipe: the chart's agent alone, rendered with agent.cluster (and the portal's public URL), for
    the cluster it goes to; the agent reads its cluster's name from PORTAL_AGENT_CLUSTER."""
    text = MANIFEST.read_text()
    assert "--show-only templates/60-agent-daemonset.yaml" in text and "--set agent.cluster=cloud" in text
    rendered = helm.render(
        "--show-only", "templates/60-agent-daemonset.yaml",
        "--set", "agent.cluster=cloud", "--set", "agent.portalUrl=https://gpu-portal.example.com",
    )  # fmt: skip
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted(d["kind"] for d in documents) == ["DaemonSet", "ServiceAccount"]
    (daemonset,) = [d for d in documents if d["kind"] == "DaemonSet"]
    env = env_of(daemonset["spec"]["template"]["spec"]["containers"][0])
    assert env["PORTAL_AGENT_CLUSTER"] == "cloud"
    assert env["PORTAL_URL"] == "https://gpu-portal.example.com"
    monkeypatch.setenv("PORTAL_AGENT_CLUSTER", env["PORTAL_AGENT_CLUSTER"])
    assert cli.build_parser().parse_args([]).cluster == "cloud"

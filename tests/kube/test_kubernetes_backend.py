"""KubernetesBackend against a real kube-apiserver, scheduler and controller-manager (v1.20.2, no kubelets).

Nodes are fake GPU nodes created through the raw client, shaped like what GPU feature discovery and the NVIDIA
device plugin publish; the scheduling assertions come from the real kube-scheduler.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client

from cluster.base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    ClusterBackend,
    ClusterError,
    Conflict,
    Invalid,
    NotFound,
)
from cluster.kubernetes import KubernetesBackend

from .controlplane import free_port
from .support import TEST_RUN_LABEL, wait_for

pytestmark = pytest.mark.kube

T = TypeVar("T")
GPU = "nvidia.com/gpu"


def gpu_job(namespace: str, name: str, gpus: int, run_id: str, tolerate: bool = True) -> dict[str, Any]:
    """A batch/v1 Job asking for whole GPUs the way the portal renders one (limits only, integer count)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # Only this test's nodes: the scheduler sees every node in the shared control plane.
        "nodeSelector": {TEST_RUN_LABEL: run_id},
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["nvidia-smi"],
                "resources": {"limits": {GPU: str(gpus)}},
            }
        ],
    }
    if tolerate:
        pod_spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"job": name}}, "spec": pod_spec}},
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def job_pods(backend: KubernetesBackend, namespace: str, job_name: str) -> list[dict[str, Any]]:
    return [p for p in backend.list_pods(namespace) if p["metadata"]["labels"].get("job-name") == job_name]


def test_backend_satisfies_the_protocol(kube_backend: KubernetesBackend) -> None:
    assert isinstance(kube_backend, ClusterBackend)
    assert kube_backend.name == "kubernetes"


# Nodes ------------------------------------------------------------------------------------------------
def test_list_and_get_gpu_nodes(kube_backend: KubernetesBackend, make_gpu_node: Callable, test_id: str) -> None:
    make_gpu_node("a", gpus=8)
    make_gpu_node("b", gpus=4, product="NVIDIA-A100-SXM4-80GB")

    nodes, resource_version = kube_backend.list_nodes(label_selector=f"{TEST_RUN_LABEL}={test_id}")

    assert resource_version.isdigit()
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert set(by_name) == {f"gpu-{test_id}-a", f"gpu-{test_id}-b"}
    a = by_name[f"gpu-{test_id}-a"]
    assert (a["apiVersion"], a["kind"]) == ("v1", "Node")
    assert a["status"]["capacity"][GPU] == "8"
    assert a["status"]["allocatable"][GPU] == "8"
    assert a["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert a["spec"]["taints"] == [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
    assert "creationTimestamp" in a["metadata"] and "resourceVersion" in a["metadata"]  # camelCase, as kubectl
    assert "managedFields" not in a["metadata"]
    assert by_name[f"gpu-{test_id}-b"]["status"]["allocatable"][GPU] == "4"

    h100s, _ = kube_backend.list_nodes(
        label_selector=f"{TEST_RUN_LABEL}={test_id},nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"
    )
    assert [n["metadata"]["name"] for n in h100s] == [f"gpu-{test_id}-a"]

    node = kube_backend.get_node(f"gpu-{test_id}-b")
    assert node["kind"] == "Node"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


def test_get_missing_node_raises_not_found(kube_backend: KubernetesBackend, test_id: str) -> None:
    with pytest.raises(NotFound, match=f"no-such-node-{test_id}"):
        kube_backend.get_node(f"no-such-node-{test_id}")


def test_watch_nodes_from_the_list_resource_version(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, test_id: str
) -> None:
    _, resource_version = kube_backend.list_nodes()
    name = make_gpu_node("w")["metadata"]["name"]
    kube_backend.patch_node_labels(name, {"nvidia.com/mig.config": "all-1g.10gb"})

    seen: list[tuple[str, str | None]] = []
    started = time.monotonic()
    for event in kube_backend.watch_nodes(resource_version=resource_version, timeout_seconds=10):
        if event.object["metadata"]["name"] != name:
            continue
        seen.append((event.type, event.object["metadata"]["labels"].get("nvidia.com/mig.config")))
        if event.type == "MODIFIED" and seen[-1][1] == "all-1g.10gb":
            break
    assert time.monotonic() - started < 10, "the events should arrive at once, not at the timeout"
    assert seen[0] == ("ADDED", None)
    assert ("MODIFIED", "all-1g.10gb") in seen
    assert event.object["kind"] == "Node" and event.object["status"]["capacity"][GPU] == "8"


def test_watch_nodes_ends_at_its_timeout(kube_backend: KubernetesBackend) -> None:
    _, resource_version = kube_backend.list_nodes()
    started = time.monotonic()
    for _event in kube_backend.watch_nodes(resource_version=resource_version, timeout_seconds=1):
        pass  # the TTL controller may annotate nodes meanwhile; only the ending matters here
    assert time.monotonic() - started < 8


def test_patch_node_labels_sets_and_removes(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, test_id: str
) -> None:
    name = make_gpu_node("p", labels={"nvidia.com/device-plugin.config": "default", "keep": "me"})["metadata"]["name"]

    patched = kube_backend.patch_node_labels(
        name, {"nvidia.com/device-plugin.config": None, "nvidia.com/mig.config": "all-3g.40gb"}
    )

    labels = patched["metadata"]["labels"]
    assert "nvidia.com/device-plugin.config" not in labels
    assert labels["nvidia.com/mig.config"] == "all-3g.40gb"
    assert labels["keep"] == "me" and labels[TEST_RUN_LABEL] == test_id
    assert kube_backend.get_node(name)["metadata"]["labels"] == labels
    # Taints and status are untouched by a label patch.
    assert patched["spec"]["taints"][0]["key"] == GPU
    assert patched["status"]["allocatable"][GPU] == "8"


def test_patch_labels_of_missing_node_raises_not_found(kube_backend: KubernetesBackend, test_id: str) -> None:
    with pytest.raises(NotFound):
        kube_backend.patch_node_labels(f"no-such-node-{test_id}", {"a": "b"})


# Namespaces and ConfigMaps ----------------------------------------------------------------------------
def test_ensure_namespace_is_idempotent(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, test_id: str
) -> None:
    name = f"team-{test_id}"
    try:
        first = kube_backend.ensure_namespace(name, labels={"portal/team": "vision"})
        second = kube_backend.ensure_namespace(name, labels={"portal/team": "vision"})
        assert first["metadata"]["uid"] == second["metadata"]["uid"]
        assert second["metadata"]["labels"]["portal/team"] == "vision"
        assert second["kind"] == "Namespace"
    finally:
        kube_core.delete_namespace(name)


def test_apply_config_map_creates_then_replaces(kube_backend: KubernetesBackend, kube_namespace: str) -> None:
    created = kube_backend.apply_config_map(
        kube_namespace, "device-plugin-config", {"default": "version: v1\n"}, labels={"portal/purpose": "sharing"}
    )
    assert created["data"] == {"default": "version: v1\n"}
    assert created["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "portal/purpose": "sharing"}

    sliced = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    replaced = kube_backend.apply_config_map(kube_namespace, "device-plugin-config", {"ts-4": sliced})

    assert replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert replaced["data"] == {"ts-4": sliced}  # replaced, not merged: the old key is gone
    assert replaced["metadata"]["labels"]["portal/purpose"] == "sharing"  # labels not re-sent are kept
    assert kube_backend.get_config_map(kube_namespace, "device-plugin-config")["data"] == {"ts-4": sliced}

    unchanged = kube_backend.apply_config_map(kube_namespace, "device-plugin-config", {"ts-4": sliced})
    assert unchanged["metadata"]["resourceVersion"] == replaced["metadata"]["resourceVersion"]


def test_apply_config_map_retries_after_a_concurrent_change(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, kube_namespace: str, monkeypatch
) -> None:
    kube_backend.apply_config_map(kube_namespace, "mig-parted", {"config.yaml": "v1"})
    real_get = kube_backend.get_config_map
    reads = []

    def get_then_race(namespace: str, name: str) -> dict:
        current = real_get(namespace, name)
        reads.append(current["metadata"]["resourceVersion"])
        if len(reads) == 1:
            # Another writer changes it after our read, so our replace carries a stale resourceVersion (409).
            kube_core.patch_namespaced_config_map(name, namespace, {"metadata": {"annotations": {"racer": "1"}}})
        return current

    monkeypatch.setattr(kube_backend, "get_config_map", get_then_race)
    result = kube_backend.apply_config_map(kube_namespace, "mig-parted", {"config.yaml": "v2"})

    assert len(reads) == 2, "the 409 should have caused exactly one re-read"
    assert result["data"] == {"config.yaml": "v2"}
    assert result["metadata"]["annotations"] == {"racer": "1"}  # the other writer's change survives


def test_get_missing_config_map_raises_not_found(kube_backend: KubernetesBackend, kube_namespace: str) -> None:
    with pytest.raises(NotFound):
        kube_backend.get_config_map(kube_namespace, "absent")


# Workloads --------------------------------------------------------------------------------------------
def test_create_workload_twice_returns_one_job(
    kube_backend: KubernetesBackend, kube_namespace: str, test_id: str
) -> None:
    manifest = gpu_job(kube_namespace, "train-1", gpus=1, run_id=test_id)

    first = kube_backend.create_workload(manifest)
    second = kube_backend.create_workload(manifest)

    assert first["metadata"]["uid"] == second["metadata"]["uid"]
    assert (second["apiVersion"], second["kind"]) == ("batch/v1", "Job")
    assert first["spec"]["completions"] == 1  # server-side defaulting happened
    jobs = kube_backend.list_workloads(kube_namespace)
    assert [j["metadata"]["name"] for j in jobs] == ["train-1"]
    assert manifest["spec"]["template"]["metadata"]["labels"] == {"job": "train-1"}, "caller's dict not mutated"
    # The pod template got the managed-by label too, so list_pods finds the Job's pods.
    assert first["spec"]["template"]["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE
    assert any(j["metadata"]["name"] == "train-1" for j in kube_backend.list_workloads())


def test_create_workload_refuses_to_adopt_a_foreign_job(
    kube_backend: KubernetesBackend, kube_api_client: client.ApiClient, kube_namespace: str, test_id: str
) -> None:
    foreign = gpu_job(kube_namespace, "someone-elses", gpus=1, run_id=test_id)
    foreign["metadata"]["labels"] = {"owner": "helm"}
    client.BatchV1Api(kube_api_client).create_namespaced_job(kube_namespace, foreign)

    with pytest.raises(Conflict, match="not managed by the portal"):
        kube_backend.create_workload(gpu_job(kube_namespace, "someone-elses", gpus=1, run_id=test_id))
    assert kube_backend.list_workloads(kube_namespace) == []


def test_gpu_job_is_bound_to_the_node_with_room(
    kube_backend: KubernetesBackend,
    kube_core: client.CoreV1Api,
    make_gpu_node: Callable,
    kube_namespace: str,
    test_id: str,
) -> None:
    busy = make_gpu_node("busy", gpus=8)["metadata"]["name"]
    free = make_gpu_node("free", gpus=8)["metadata"]["name"]
    # Six of the busy node's eight GPUs are taken by a pod already running there.
    kube_core.create_namespaced_pod(
        kube_namespace,
        {
            "metadata": {"name": "resident"},
            "spec": {
                "nodeName": busy,
                "tolerations": [{"key": GPU, "operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: "6"}}}],
            },
        },
    )

    kube_backend.create_workload(gpu_job(kube_namespace, "needs-four", gpus=4, run_id=test_id))

    pods = wait_for(
        "the Job's pod to be bound",
        lambda: [p for p in job_pods(kube_backend, kube_namespace, "needs-four") if p["spec"].get("nodeName")],
    )
    assert len(pods) == 1
    assert pods[0]["spec"]["nodeName"] == free
    assert condition(pods[0], "PodScheduled")["status"] == "True"
    assert pods[0]["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE


def test_gpu_job_larger_than_any_node_stays_pending_with_the_reason(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str
) -> None:
    make_gpu_node("small", gpus=8)
    kube_backend.create_workload(gpu_job(kube_namespace, "needs-sixteen", gpus=16, run_id=test_id))

    def unschedulable_pod() -> dict | None:
        for pod in job_pods(kube_backend, kube_namespace, "needs-sixteen"):
            scheduled = condition(pod, "PodScheduled")
            if scheduled and scheduled["status"] == "False":
                return pod
        return None

    pod = wait_for("the scheduler to give up on the pod", unschedulable_pod)
    assert pod["status"]["phase"] == "Pending"
    assert "nodeName" not in pod["spec"]
    scheduled = condition(pod, "PodScheduled")
    assert scheduled["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in scheduled["message"]

    name = pod["metadata"]["name"]
    events = wait_for(
        "a FailedScheduling event",
        lambda: [e for e in kube_backend.pod_events(kube_namespace, name) if e["reason"] == "FailedScheduling"],
    )
    assert "Insufficient nvidia.com/gpu" in events[0]["message"]
    assert events[0]["involvedObject"]["name"] == name and events[0]["involvedObject"]["kind"] == "Pod"
    assert events[0]["type"] == "Warning"


def test_gpu_job_without_the_toleration_is_kept_off_tainted_nodes(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str
) -> None:
    make_gpu_node("tainted", gpus=8)
    kube_backend.create_workload(gpu_job(kube_namespace, "no-toleration", gpus=1, run_id=test_id, tolerate=False))

    def reason() -> str | None:
        for pod in job_pods(kube_backend, kube_namespace, "no-toleration"):
            scheduled = condition(pod, "PodScheduled")
            if scheduled and scheduled["status"] == "False":
                return scheduled["message"]
        return None

    assert "taint" in wait_for("the pod to be refused", reason)


def test_pod_events_are_oldest_first(kube_backend: KubernetesBackend, kube_namespace: str, kube_core) -> None:
    # A scheduler nobody runs, so the only events are the ones this test writes.
    spec = {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]}
    kube_core.create_namespaced_pod(kube_namespace, {"metadata": {"name": "p"}, "spec": spec})
    for i, reason in enumerate(["First", "Second", "Third"]):
        stamp = f"2026-01-01T00:00:0{3 - i}Z" if reason != "Third" else "2026-01-01T00:00:09Z"
        kube_core.create_namespaced_event(
            kube_namespace,
            {
                "metadata": {"name": f"p.{i}"},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": kube_namespace},
                "reason": reason,
                "message": reason,
                "type": "Normal",
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
            },
        )
    # An event about something else with the same name must not be included.
    kube_core.create_namespaced_event(
        kube_namespace,
        {
            "metadata": {"name": "other"},
            "involvedObject": {"kind": "Job", "name": "p", "namespace": kube_namespace},
            "reason": "Other",
        },
    )

    events = kube_backend.pod_events(kube_namespace, "p")

    assert [e["reason"] for e in events] == ["Second", "First", "Third"]
    assert all(e["kind"] == "Event" for e in events)


def test_delete_workload_removes_the_job(
    kube_backend: KubernetesBackend,
    kube_api_client: client.ApiClient,
    make_gpu_node: Callable,
    kube_namespace: str,
    test_id: str,
) -> None:
    make_gpu_node("d", gpus=8)
    kube_backend.create_workload(gpu_job(kube_namespace, "short-lived", gpus=2, run_id=test_id))
    wait_for("the Job's pod", lambda: job_pods(kube_backend, kube_namespace, "short-lived"))

    assert kube_backend.delete_workload(kube_namespace, "short-lived") is True

    batch = client.BatchV1Api(kube_api_client)

    def job_gone() -> bool:
        try:
            batch.read_namespaced_job("short-lived", kube_namespace)
        except client.ApiException as error:
            return error.status == 404
        return False

    wait_for("the Job to disappear", job_gone)
    assert kube_backend.list_workloads(kube_namespace) == []
    # Background propagation: the garbage collector deletes the pods (with no kubelet, a bound pod then waits in
    # Terminating for a kubelet that never comes, so look for the deletion mark rather than absence).
    wait_for(
        "the garbage collector to delete the pods",
        lambda: all(
            p["metadata"].get("deletionTimestamp") for p in job_pods(kube_backend, kube_namespace, "short-lived")
        ),
    )
    assert kube_backend.delete_workload(kube_namespace, "short-lived") is False


# Error mapping ----------------------------------------------------------------------------------------
def test_invalid_manifest_raises_invalid(kube_backend: KubernetesBackend, kube_namespace: str, test_id: str) -> None:
    with pytest.raises(Invalid, match="invalid"):
        kube_backend.create_workload(gpu_job(kube_namespace, "Not_A_DNS_Name", gpus=1, run_id=test_id))
    with pytest.raises(Invalid):
        kube_backend.create_workload({"metadata": {"name": "no-namespace"}})


def test_workload_in_missing_namespace_raises_not_found(kube_backend: KubernetesBackend, test_id: str) -> None:
    with pytest.raises(NotFound):
        kube_backend.create_workload(gpu_job(f"absent-{test_id}", "j", gpus=1, run_id=test_id))


def test_pod_logs_of_missing_pod_raise_not_found(kube_backend: KubernetesBackend, kube_namespace: str) -> None:
    with pytest.raises(NotFound):
        kube_backend.pod_logs(kube_namespace, "absent")


def test_pod_logs_of_a_pod_not_yet_scheduled_are_empty(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, kube_namespace: str
) -> None:
    kube_core.create_namespaced_pod(
        kube_namespace, {"metadata": {"name": "waiting"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    )
    # v1.20 answers 204 No Content for a pod with no node yet.
    assert kube_backend.pod_logs(kube_namespace, "waiting") == ""


def test_pod_logs_that_the_node_cannot_serve_raise_a_readable_error(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, make_gpu_node: Callable, kube_namespace: str
) -> None:
    node = make_gpu_node("logs")["metadata"]["name"]
    kube_core.create_namespaced_pod(
        kube_namespace,
        {"metadata": {"name": "bound"}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}},
    )
    impatient = KubernetesBackend(kube_backend.api_client, retries=1, backoff_seconds=0.01)
    # The apiserver proxies log reads to the node's kubelet; a fake node has no address to reach one at.
    with pytest.raises(ClusterError, match="no preferred addresses found") as raised:
        impatient.pod_logs(kube_namespace, "bound")
    assert not isinstance(raised.value, NotFound)


def test_following_the_log_of_a_missing_pod_raises_not_found(
    kube_backend: KubernetesBackend, kube_namespace: str
) -> None:
    with pytest.raises(NotFound):
        list(kube_backend.stream_pod_log(kube_namespace, "absent", follow=True, timeout_seconds=2))


def test_following_a_pod_the_node_cannot_serve_raises_a_readable_error(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, make_gpu_node: Callable, kube_namespace: str
) -> None:
    # This harness runs no kubelet, so no container ever writes a line: the real apiserver takes the follow
    # request (read_namespaced_pod_log follow=true) and answers that it cannot reach the node, which must come
    # back as a ClusterError with the apiserver's words, not hang or crash.
    node = make_gpu_node("follow")["metadata"]["name"]
    kube_core.create_namespaced_pod(
        kube_namespace,
        {
            "metadata": {"name": "followed"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        },
    )
    impatient = KubernetesBackend(kube_backend.api_client, retries=1, backoff_seconds=0.01)
    with pytest.raises(ClusterError, match="no preferred addresses found"):
        list(impatient.stream_pod_log(kube_namespace, "followed", follow=True, tail_lines=10, timeout_seconds=2))


# Retries (no control plane needed: a tiny local HTTP server plays a flaky apiserver) ------------------
class _FlakyApiserver(http.server.BaseHTTPRequestHandler):
    failures_left = 0
    requests = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        type(self).requests += 1
        if "watch=true" in self.path.lower():
            # What an apiserver streams when the requested resourceVersion has been compacted away.
            status, body = (
                200,
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "code": 410,
                        "reason": "Expired",
                        "message": "too old resource version",
                    },
                },
            )
        elif type(self).failures_left > 0:
            type(self).failures_left -= 1
            body = {"kind": "Status", "status": "Failure", "message": "etcdserver: leader changed", "code": 503}
            status = 503
        else:
            body = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "42"}, "items": []}
            status = 200
        payload = json.dumps(body).encode() + b"\n"  # watch events are newline-delimited JSON
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky_apiserver() -> Iterator[tuple[str, type[_FlakyApiserver]]]:
    handler = type("Handler", (_FlakyApiserver,), {"failures_left": 0, "requests": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def _backend_for(host: str, retries: int) -> KubernetesBackend:
    configuration = client.Configuration()
    configuration.host = host
    return KubernetesBackend(client.ApiClient(configuration), retries=retries, backoff_seconds=0.01)


def test_transient_server_errors_are_retried(flaky_apiserver) -> None:
    host, handler = flaky_apiserver
    handler.failures_left = 2

    nodes, resource_version = _backend_for(host, retries=3).list_nodes()

    assert (nodes, resource_version) == ([], "42")
    assert handler.requests == 3


def test_persistent_server_errors_become_a_cluster_error(flaky_apiserver) -> None:
    host, handler = flaky_apiserver
    handler.failures_left = 100

    with pytest.raises(ClusterError, match="failed 3 times, last with HTTP 503: etcdserver: leader changed"):
        _backend_for(host, retries=2).list_nodes()
    assert handler.requests == 3


def test_watch_from_an_expired_resource_version_says_to_relist(flaky_apiserver) -> None:
    host, _ = flaky_apiserver
    with pytest.raises(ClusterError, match=r"too old \(HTTP 410 Gone\)\. List the nodes again"):
        for _event in _backend_for(host, retries=2).watch_nodes(resource_version="1", timeout_seconds=5):
            pass


def test_unreachable_apiserver_becomes_a_cluster_error() -> None:
    host = f"https://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match=f"server at {host} is reachable"):
        _backend_for(host, retries=1).get_node("any")


def _notebook_objects(namespace: str) -> tuple[dict, dict]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "gpu-portal.io/notebook": "nb-1-explore"}
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "nb-1-explore-home", "namespace": namespace, "labels": labels},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nb-1-explore", "namespace": namespace, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": {"gpu-portal.io/notebook": "nb-1-explore"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8888, "protocol": "TCP"}],
        },
    }
    return claim, service


def test_notebook_volume_and_service_are_created_once_and_deleted(
    kube_backend: KubernetesBackend, kube_namespace: str, kube_core
) -> None:
    claim, service = _notebook_objects(kube_namespace)
    first = kube_backend.ensure_pvc(claim)
    again = kube_backend.ensure_pvc(claim)
    assert first["metadata"]["uid"] == again["metadata"]["uid"]
    assert first["spec"]["resources"]["requests"]["storage"] == "20Gi"
    created = kube_backend.ensure_service(service)
    assert kube_backend.ensure_service(service)["metadata"]["uid"] == created["metadata"]["uid"]
    assert created["spec"]["clusterIP"] and created["spec"]["clusterIP"] != "None"
    assert kube_backend.notebook_kernels(kube_namespace, "nb-1-explore", "nb-pod") is None  # cannot tell: GPU rule
    assert kube_backend.delete_service(kube_namespace, "nb-1-explore") is True
    assert kube_backend.delete_service(kube_namespace, "nb-1-explore") is False
    assert kube_backend.delete_pvc(kube_namespace, "nb-1-explore-home") is True
    # The pvc-protection finalizer may keep it a moment; it is marked for deletion either way.
    left = kube_core.list_namespaced_persistent_volume_claim(kube_namespace).items
    assert all(c.metadata.deletion_timestamp for c in left)


def test_simulated_cluster_answers_the_notebook_objects_the_same_way(tmp_path, kube_namespace) -> None:
    from cluster.sim import SimulatedCluster

    sim = SimulatedCluster(tmp_path / "sim.json", scenario="demo")
    sim.ensure_namespace(kube_namespace)
    claim, service = _notebook_objects(kube_namespace)
    assert sim.ensure_pvc(claim)["metadata"]["uid"] == sim.ensure_pvc(claim)["metadata"]["uid"]
    made = sim.ensure_service(service)
    assert made["spec"]["clusterIP"] and made["spec"]["selector"] == service["spec"]["selector"]
    assert (sim.delete_service(kube_namespace, "nb-1-explore"), sim.delete_service(kube_namespace, "nb-1-explore")) == (
        True,
        False,
    )
    assert sim.delete_pvc(kube_namespace, "nb-1-explore-home") is True

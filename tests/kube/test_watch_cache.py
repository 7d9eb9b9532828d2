"""The Kubernetes backend's list-then-watch caches (cluster/informer.py, cluster/kubernetes_cache.py) against the real
kube-apiserver v1.20: changes arrive by watch without a relist, deletes are seen, an expired watch (410 Gone) relists
and ends with exactly what the server has, bookmarks move the resourceVersion, and the portal's own writes are read
back at once, in its own process and in another one."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config
from prometheus_client import REGISTRY

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from cluster.informer import Informer, rv_number
from cluster.kubernetes import KubernetesBackend
from cluster.kubernetes_cache import WriteMarks

from .controlplane import LocalControlPlane
from .support import TEST_RUN_LABEL, wait_for

pytestmark = pytest.mark.kube


def relists(resource: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "gpuportal_kubernetes_watch_cache_relists_total", {"resource": resource, "reason": reason}
    )
    return value or 0.0


def informer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("informer-")]


@pytest.fixture
def make_cached_backend(kube_controlplane: LocalControlPlane) -> Iterator[Callable[..., KubernetesBackend]]:
    """Cached backends with short watches (3-4 s, so bookmarks and restarts happen within a test); every one's
    threads are stopped afterwards, and none may be left running."""
    made: list[KubernetesBackend] = []

    def make(**options: Any) -> KubernetesBackend:
        backend = KubernetesBackend.from_kubeconfig(
            str(kube_controlplane.kubeconfig_path), watch_cache=True, watch_timeout=(3, 4), **options
        )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.stop_informers()
    assert informer_threads() == []


def _pod(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    # No scheduler runs pods named for "nobody", and there are no kubelets: the pod stays Pending, and a pod bound to
    # no node is deleted at once.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox"}]},
    }


def _job(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "schedulerName": "nobody",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
    }


MANAGED = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}


def test_a_node_label_change_arrives_by_watch_without_a_relist(
    make_cached_backend, make_gpu_node, kube_core: client.CoreV1Api, test_id: str
) -> None:
    backend = make_cached_backend()
    name = make_gpu_node("watched")["metadata"]["name"]
    selector = f"{TEST_RUN_LABEL}={test_id}"
    nodes, first_rv = backend.list_nodes(label_selector=selector)
    assert [n["metadata"]["name"] for n in nodes] == [name]
    informer = backend.informer("nodes")
    lists_before, relisted_before = informer.lists, sum(relists("nodes", r) for r in ("expired", "stale", "behind"))

    # Changed by someone else (not through this backend, so read-your-writes plays no part).
    kube_core.patch_node(name, {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb"}}})

    def seen() -> str | None:
        found, _ = backend.list_nodes(label_selector=selector)
        return found[0]["metadata"]["labels"].get("nvidia.com/mig.config") if found else None

    assert wait_for("the label change in the cache", seen) == "all-1g.10gb"
    assert informer.lists == lists_before == 1
    assert sum(relists("nodes", r) for r in ("expired", "stale", "behind")) == relisted_before
    assert rv_number(backend.list_nodes()[1]) > rv_number(first_rv)
    # Filtering in memory: a selector on the new label finds it, one on another value does not.
    assert [n["metadata"]["name"] for n in backend.list_nodes(f"{selector},nvidia.com/mig.config=all-1g.10gb")[0]]
    assert backend.list_nodes(f"{selector},nvidia.com/mig.config in (all-disabled)")[0] == []


def test_a_deleted_pod_disappears_from_the_cache(
    make_cached_backend, kube_core: client.CoreV1Api, kube_namespace: str
) -> None:
    backend = make_cached_backend()
    kube_core.create_namespaced_pod(kube_namespace, _pod(kube_namespace, "doomed", MANAGED))
    kube_core.create_namespaced_pod(kube_namespace, _pod(kube_namespace, "kept", MANAGED))
    kube_core.create_namespaced_pod(kube_namespace, _pod(kube_namespace, "foreign", {"app": "other"}))

    def names() -> list[str]:
        return sorted(p["metadata"]["name"] for p in backend.list_pods(kube_namespace))

    assert wait_for("both portal pods", lambda: names() == ["doomed", "kept"])
    informer = backend.informer("pods-managed")
    kube_core.delete_namespaced_pod("doomed", kube_namespace, grace_period_seconds=0)
    assert wait_for("the deleted pod to go", lambda: names() == ["kept"])
    assert informer.lists == 1
    # Every pod (the inventory's list) has its own cache; the portal's pods are then filtered from it.
    assert sorted(p["metadata"]["name"] for p in backend.list_pods(kube_namespace, label_selector=None)) == [
        "foreign",
        "kept",
    ]
    assert names() == ["kept"]
    assert backend.list_pods(kube_namespace, label_selector="app=other")[0]["metadata"]["name"] == "foreign"


@pytest.fixture(scope="module")
def etcd_watched_plane(kube_controlplane: LocalControlPlane) -> Iterator[LocalControlPlane]:
    """A second control plane whose pod watches go to etcd itself (no watch cache for pods), so compacting etcd's
    history expires them as a long outage would in a busy cluster. (With v1.20's watch cache the window of events
    grows to 100 Ki while they are recent, too many for a test to push out.)"""
    plane = LocalControlPlane(
        binaries=kube_controlplane.binaries,
        with_scheduler=False,
        with_controller_manager=False,
        apiserver_args=["--watch-cache-sizes=pods#0"],
    )
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def _compact_etcd(plane: LocalControlPlane) -> int:
    """Compact etcd's history up to its current revision (etcd's JSON gateway), as the API server itself does
    every five minutes; returns that revision."""

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(
            plane.etcd_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - a loopback test server
            return json.loads(response.read())

    revision = int(post("/v3/kv/range", {"key": "Lw=="})["header"]["revision"])  # key "/", any key will do
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def test_an_expired_watch_relists_and_drops_what_was_deleted_in_the_gap(etcd_watched_plane) -> None:
    backend = KubernetesBackend.from_kubeconfig(
        str(etcd_watched_plane.kubeconfig_path), watch_cache=True, watch_timeout=(3, 4)
    )
    core = client.CoreV1Api(new_client_from_config(config_file=str(etcd_watched_plane.kubeconfig_path)))
    namespace = "expiry"
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        for name in ("gone-in-gap", "changed-in-gap", "stays"):
            core.create_namespaced_pod(namespace, _pod(namespace, name, MANAGED))
        assert wait_for("three pods", lambda: len(backend.list_pods(namespace)) == 3)
        informer: Informer = backend.informer("pods-managed")
        before = informer.resource_version
        expired_before = relists("pods-managed", "expired")

        # The gap: the watch is down while the cluster changes and etcd compacts its history past the informer's
        # resourceVersion. Resuming from it, the server answers 410 Gone.
        informer.stop()
        core.delete_namespaced_pod("gone-in-gap", namespace, grace_period_seconds=0)
        core.patch_namespaced_pod("changed-in-gap", namespace, {"metadata": {"labels": {"phase": "two"}}})
        core.create_namespaced_pod(namespace, _pod(namespace, "born-in-gap", MANAGED))
        assert _compact_etcd(etcd_watched_plane) > int(before)
        informer.start()
        assert informer.resource_version == before  # it resumes from where it was, not from a new list

        wait_for("the relist after 410 Gone", lambda: relists("pods-managed", "expired") > expired_before)
        pods = {p["metadata"]["name"]: p for p in backend.list_pods(namespace)}
        assert sorted(pods) == ["born-in-gap", "changed-in-gap", "stays"]
        assert pods["changed-in-gap"]["metadata"]["labels"]["phase"] == "two"
        assert informer.lists == 2
        # And it goes on watching from the new list's resourceVersion.
        core.delete_namespaced_pod("stays", namespace, grace_period_seconds=0)
        assert wait_for("a delete after the relist", lambda: len(backend.list_pods(namespace)) == 2)
        assert informer.lists == 2
    finally:
        backend.stop_informers()
        core.api_client.close()
    assert informer_threads() == []


def test_bookmarks_move_the_resource_version_past_events_the_selector_hides(
    make_cached_backend, kube_core: client.CoreV1Api, kube_namespace: str
) -> None:
    backend = make_cached_backend()
    assert backend.list_pods(kube_namespace) == []
    informer = backend.informer("pods-managed")
    # A pod that is not the portal's: the managed-pod watch never sees it as an event, only bookmarks tell it the
    # server has moved on.
    foreign = kube_core.create_namespaced_pod(kube_namespace, _pod(kube_namespace, "foreign", {"app": "other"}))
    foreign_rv = int(foreign.metadata.resource_version)
    # (Other tests' namespaces may still be emptying, so events of their pods can come too: look at the bookmark.)
    wait_for(
        "a bookmark at or past the foreign pod's resourceVersion",
        lambda: (rv_number(informer.last_bookmark) or 0) >= foreign_rv,
        timeout=20,
    )
    assert (rv_number(informer.resource_version) or 0) >= foreign_rv
    assert informer.lists == 1
    assert backend.list_pods(kube_namespace) == []


def test_the_portals_own_writes_are_read_back_at_once(make_cached_backend, kube_namespace: str) -> None:
    backend = make_cached_backend()
    assert backend.list_workloads(kube_namespace) == []
    informer = backend.informer("jobs")

    created = backend.create_workload(_job(kube_namespace, "mine"))
    # At once, in this process: the create's answer went into the cache.
    listed = backend.list_workloads(kube_namespace)
    assert [j["metadata"]["uid"] for j in listed] == [created["metadata"]["uid"]]
    # A watch that lags (here: stopped, and started again by the read) must not show the deleted Job: the delete
    # answers no resourceVersion to wait for, so the cache drops it and keeps a tombstone.
    informer.stop()
    assert backend.delete_workload(kube_namespace, "mine") is True
    assert backend.list_workloads(kube_namespace) == []
    # The watch's own events for the object (ADDED, MODIFIED by the Job controller) do not bring it back.
    wait_for("the watch to deliver the DELETED event", lambda: "/mine" not in str(informer.store.tombstones))
    assert backend.list_workloads(kube_namespace) == []
    assert informer.lists == 1


def test_another_process_write_is_waited_for_before_absence_is_believed(
    make_cached_backend, kube_namespace: str
) -> None:
    # Two worker processes (two backends) sharing write marks, as SharedWriteMarks shares them through Redis.
    marks = WriteMarks()
    launcher, reconciler = make_cached_backend(write_marks=marks), make_cached_backend(write_marks=marks)
    assert reconciler.list_workloads(kube_namespace) == []
    assert launcher.list_workloads(kube_namespace) == []
    for index in range(5):
        name = f"launched-{index}"
        launcher.create_workload(_job(kube_namespace, name))
        # Right after the launch, the other process's pass sees it: its read waited for its watch.
        assert name in {j["metadata"]["name"] for j in reconciler.list_workloads(kube_namespace)}

    # With that process's watch broken, the read does not answer from the old store: it lists itself.
    broken: Informer = reconciler.informer("jobs")
    broken.stop()

    def refuse(rv: str, timeout: int):
        raise ConnectionError("the watch cannot connect")

    broken.watch_func = refuse
    behind_before = relists("jobs", "behind")
    launcher.create_workload(_job(kube_namespace, "while-broken"))
    assert "while-broken" in {j["metadata"]["name"] for j in reconciler.list_workloads(kube_namespace)}
    assert relists("jobs", "behind") == behind_before + 1

"""What a reconcile pass pays the real kube-apiserver for its reads, listing every time or from the watch caches.

Starts a local v1.20 control plane (tests/kube/controlplane.py: etcd and kube-apiserver only, no scheduler or
controllers, so nothing moves by itself), fills it with ``--nodes`` GPU-shaped Nodes, ``--workloads`` of the
portal's Jobs and as many of its pods (each bound to a node), then times the reads of one inventory sync plus one
job pass (list_nodes, list_pods of every pod, list_workloads, list_pods of the portal's) through KubernetesBackend:
- cached: a backend with PORTAL_K8S_WATCH_CACHE's cache: the first pass (its lists), then ``--passes`` passes, then
  how soon ``--changes`` node label changes are read, the lists each cache made, and what the caches hold in memory;
- listing: a backend without the cache, ``--passes`` times (after the cached one, whose memory figure it would
  otherwise blur).
A release without the cache (before it existed) prints the listing figures and says so. Needs the control-plane
binaries and etcd (tests/kube/binaries.py says how to get them).

    .venv/bin/python bench/watch_cache.py
    .venv/bin/python bench/watch_cache.py --nodes 5000 --workloads 20000
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, config  # noqa: E402

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE  # noqa: E402
from cluster.kubernetes import KubernetesBackend  # noqa: E402
from tests.kube.binaries import ensure_binaries  # noqa: E402
from tests.kube.controlplane import LocalControlPlane  # noqa: E402

NAMESPACE = "bench"


def node_body(index: int) -> dict:
    name = f"gpu-{index:05d}"
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true",
                       "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "64", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
        },
    }  # fmt: skip


def job_body(index: int) -> dict:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "gpu-portal.io/job-id": str(index)}
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": f"gpj-{index}-bench", "namespace": NAMESPACE, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels},
                 "spec": {"restartPolicy": "Never", "containers": [container]}}},
    }  # fmt: skip


def pod_body(index: int, nodes: int) -> dict:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, "gpu-portal.io/job-id": str(index), "job-name": f"gpj-{index}-bench"}
    container = {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {
        "metadata": {"name": f"gpj-{index}-bench-x", "namespace": NAMESPACE, "labels": labels},
        "spec": {"nodeName": f"gpu-{index % nodes:05d}", "restartPolicy": "Never", "containers": [container]},
    }


def fill(api: client.ApiClient, nodes: int, workloads: int) -> float:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    began = time.perf_counter()
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: core.create_node(node_body(i)), range(nodes)))
        list(pool.map(lambda i: batch.create_namespaced_job(NAMESPACE, job_body(i)), range(workloads)))
        list(pool.map(lambda i: core.create_namespaced_pod(NAMESPACE, pod_body(i, nodes)), range(workloads)))
    return time.perf_counter() - began


def one_pass(backend: KubernetesBackend) -> tuple[float, tuple[int, int, int, int]]:
    began = time.perf_counter()
    nodes, _ = backend.list_nodes()
    every_pod = backend.list_pods(label_selector=None)
    workloads = backend.list_workloads()
    portal_pods = backend.list_pods()
    return time.perf_counter() - began, (len(nodes), len(every_pod), len(workloads), len(portal_pods))


def cache_mib(kubeconfig: str) -> float:
    """What a fresh cached backend's caches hold after one pass, in MiB of Python allocations (tracemalloc: the
    process's resident size is blurred by what the filling freed)."""
    tracemalloc.start()
    backend = KubernetesBackend.from_kubeconfig(kubeconfig, watch_cache=True)
    try:
        one_pass(backend)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        backend.stop_informers()
        tracemalloc.stop()
    return held / 2**20


def cached_passes(cached: KubernetesBackend, api: client.ApiClient, args: argparse.Namespace) -> None:
    first, counts = one_pass(cached)
    print(f"cached: first pass (the caches' lists) {first:.3f} s, read {counts}")
    times = [one_pass(cached)[0] for _ in range(args.passes)]
    print(f"cached: {args.passes} passes, median {statistics.median(times) * 1000:.1f} ms per pass")
    core = client.CoreV1Api(api)
    for index in range(args.changes):
        core.patch_node(f"gpu-{index:05d}", {"metadata": {"labels": {"bench/changed": "yes"}}})
    began = time.perf_counter()
    while len(cached.list_nodes(label_selector="bench/changed=yes")[0]) < args.changes:
        time.sleep(0.005)
    print(f"cached: {args.changes} node label changes seen {1000 * (time.perf_counter() - began):.1f} ms "
          f"after the last patch answered")  # fmt: skip
    lists = {name: cached.informer(name).lists for name in ("nodes", "pods", "jobs")}
    print(f"cached: lists made per cache {lists} (1 each: everything else came by watch)")
    print(f"cached: the caches hold {cache_mib(args.kubeconfig):.0f} MiB (Python allocations, tracemalloc)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--workloads", type=int, default=4000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--changes", type=int, default=10)
    args = parser.parse_args()

    plane = LocalControlPlane(binaries=ensure_binaries(allow_build=False), with_scheduler=False,
                              with_controller_manager=False)  # fmt: skip
    plane.start()
    try:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(plane.kubeconfig_path), client_configuration=configuration)
        configuration.connection_pool_maxsize = 16  # the filling threads
        api = client.ApiClient(configuration)
        seconds = fill(api, args.nodes, args.workloads)
        print(f"filled {args.nodes} nodes, {args.workloads} Jobs and pods in {seconds:.1f} s")

        try:
            cached = KubernetesBackend.from_kubeconfig(str(plane.kubeconfig_path), watch_cache=True)
        except TypeError:
            cached = None
            print("cached: this release has no watch cache")
        if cached is not None:
            try:
                cached_passes(cached, api, argparse.Namespace(**vars(args), kubeconfig=str(plane.kubeconfig_path)))
            finally:
                cached.stop_informers()

        listing = KubernetesBackend.from_kubeconfig(str(plane.kubeconfig_path))
        times = []
        for _ in range(args.passes):
            seconds, counts = one_pass(listing)
            times.append(seconds)
        print(f"listing: {args.passes} passes, median {statistics.median(times):.3f} s per pass "
              f"(nodes, all pods, Jobs, portal pods read: {counts})")  # fmt: skip
        print(f"bench process peak resident size {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

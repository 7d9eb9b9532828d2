"""Fetching dcgm-exporter text: from the exporter pods of a real cluster, or from the simulated cluster.

In a real cluster the GPU Operator runs dcgm-exporter as a DaemonSet (namespace ``PORTAL_DCGM_NAMESPACE``,
pods matching ``PORTAL_DCGM_SELECTOR``, port ``PORTAL_DCGM_PORT``); the portal reads each pod's ``/metrics``
directly over the pod network, so it needs no Prometheus. ``PORTAL_DCGM_URLS`` (``node=url`` or plain urls)
overrides discovery, e.g. for exporters outside Kubernetes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import urllib3
from django.conf import settings

log = logging.getLogger(__name__)


@dataclass
class Scrape:
    node_name: str
    url: str
    text: str = ""
    error: str = ""


def targets(backend, static_urls: bool = True) -> list[tuple[str, str]]:
    """(node name, metrics URL) of every exporter to read; node name may be "" (then the host label says).
    ``static_urls``: PORTAL_DCGM_URLS applies (it names the exporters of the cluster configured in settings)."""
    if static_urls and settings.PORTAL_DCGM_URLS:
        out = []
        for entry in settings.PORTAL_DCGM_URLS:
            node, _, url = entry.rpartition("=") if "=" in entry.split("://", 1)[0] else ("", "", entry)
            out.append((node, url))
        return out
    pods = backend.list_pods(namespace=settings.PORTAL_DCGM_NAMESPACE, label_selector=settings.PORTAL_DCGM_SELECTOR)
    out = []
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        phase = (pod.get("status") or {}).get("phase")
        if ip and phase == "Running":
            host = f"[{ip}]" if ":" in ip else ip
            out.append((pod["spec"].get("nodeName") or "", f"http://{host}:{settings.PORTAL_DCGM_PORT}/metrics"))
    return out


_http = urllib3.PoolManager(num_pools=4, retries=False, timeout=urllib3.Timeout(connect=2.0, read=5.0))


def scrape(backend, static_urls: bool = True) -> list[Scrape]:
    """One scrape of every exporter of ``backend``'s cluster (``static_urls``: as for ``targets``). A failing
    exporter is reported in its Scrape, not raised; a cluster that cannot be asked where its exporters are raises
    ClusterError."""
    simulated = getattr(backend, "dcgm_metrics", None)
    if simulated is not None and not (static_urls and settings.PORTAL_DCGM_URLS):
        return [Scrape(node, "simulated://" + node, text) for node, text in simulated().items()]
    found = targets(backend, static_urls)  # ClusterError: the cluster cannot be asked where its exporters are
    results = []
    for node, url in found:
        try:
            response = _http.request("GET", url, headers={"Accept": "text/plain"})
        except urllib3.exceptions.HTTPError as error:
            results.append(Scrape(node, url, error=f"{type(error).__name__}: {error}"))
            continue
        if response.status != 200:
            results.append(Scrape(node, url, error=f"HTTP {response.status}"))
            continue
        results.append(Scrape(node, url, text=response.data.decode("utf-8", errors="replace")))
    return results

"""The objects an inference service becomes: a Deployment, a ClusterIP Service and a HorizontalPodAutoscaler in the
team's namespace. Pure functions over a plain ``ServiceSpec`` (no ORM), like jobs/render.py, whose helpers they
reuse for resources, secrets and volumes, so a service's pods get exactly the jobs' guarantees: no privileges, no
host namespaces or paths, the team's own claims and Secrets only, /dev/shm and /scratch as every workload.

What differs from a job: ``restartPolicy: Always`` (a Deployment's only one), replicas start at the minimum (the
HPA moves them between minimum and maximum), a RollingUpdate strategy (the caller chooses the surge: one extra
replica when quota allows, else none and one replica at a time), readiness and liveness probes, a preferred pod
anti-affinity on the node hostname so replicas spread across nodes, and optionally the dedicated pool's node label
and taint toleration (settings PORTAL_SERVICE_POOL_LABEL / PORTAL_SERVICE_POOL_TAINT). Pods are not pinned to a
node by the portal: the scheduler places each replica on a node of the resource class's GPU product, so they
tolerate the GPU-keeping taints of every node pool with nodes of that product (``ServiceSpec.gpu_taints``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from cluster.base import AUTOSCALING_V2, AUTOSCALING_V2BETA2, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NETWORKING_V1
from jobs.dra_claims import (
    GPU_CLAIM,
    add_claims,
    add_shared_claim,
    gpu_limits,
    render_shared_claim,
    shared_claim_name,
    shares_devices,
    template_name,
)
from jobs.dra_claims import render_claim_template as claim_template
from jobs.pools import pool_toleration
from jobs.render import (
    CLASS_ANNOTATION,
    KIND_LABEL,
    OWNER_ANNOTATION,
    TEAM_LABEL,
    add_secrets,
    add_volumes,
    cpu_memory,
    gpu_tolerations,
)
from vocab import names
from vocab.cloud import labels_naming
from vocab.names import DNS1123_SUBDOMAIN
from vocab.taints import Taint

SERVICE_LABEL = "gpu-portal.io/service"
SERVICE_KIND = "service"
#: The metric type for CPU; any other metric is a custom one (Pods) or, with ``metric_external``, External.
CPU_METRIC = "cpu"
#: The port of a service's ClusterIP Service (its pods' port is the service's own ``port``).
SERVICE_PORT = 80
#: The placeholders a service URL template may use.
URL_PLACEHOLDERS = ("name", "team", "namespace")


@dataclass(frozen=True)
class Probe:
    """An HTTP GET on ``path`` (or, with ``path`` empty, a TCP connect) to ``port``."""

    port: int
    path: str = ""
    initial_delay_seconds: int = 0
    period_seconds: int = 10
    failure_threshold: int = 3

    def render(self) -> dict[str, Any]:
        handler = {"httpGet": {"path": self.path, "port": self.port}} if self.path else {
            "tcpSocket": {"port": self.port}}  # fmt: skip
        return {
            **handler,
            "initialDelaySeconds": self.initial_delay_seconds,
            "periodSeconds": self.period_seconds,
            "failureThreshold": self.failure_threshold,
        }


@dataclass(frozen=True)
class ResourceClass:
    """What one replica gets of the class (jobs' GPU resource name, count, and the GFD product label value); for a
    DRA class also what its claim selects and how it shares its GPU (jobs.dra_claims)."""

    key: str
    resource_name: str
    product_label: str
    kind: str = ""
    profile: str = ""
    sharing_strategy: str = ""
    #: Users sharing one device of a DRA class an admin shares (then every replica uses the service's one claim).
    replicas: int = 1
    memory_mb: int | None = None


@dataclass(frozen=True)
class ServiceSpec:
    """Everything a service's objects are rendered from (issue 13's service kind): the caller fills it from the
    service's model after validation."""

    name: str  # DNS-1123 label: the Deployment, Service and HPA name
    namespace: str
    team: str
    owner: str
    image: str
    port: int
    resource_class: ResourceClass
    count: int  # GPUs per replica
    cpu_millicores: int
    memory_mb: int
    min_replicas: int
    max_replicas: int
    readiness: Probe
    liveness: Probe | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[dict, ...] = ()  # {"name", "value"}
    secret_env: tuple[dict, ...] = ()  # {"name", "secret", "key"}, as jobs
    secret_files: tuple[dict, ...] = ()  # {"secret", "path", "keys"}, as jobs
    volumes: tuple[dict, ...] = ()  # {"claim", "mount_path", "read_only"}, as jobs
    pull_secrets: tuple[str, ...] = ()
    shm_mb: int = 0
    metric: str = CPU_METRIC  # "cpu", or a custom metric's name ("requests_per_second", "queue_depth")
    metric_target: str = "70"  # per cent of the CPU request, or the metric's average value per replica
    metric_external: bool = False  # the custom metric is an External one (not per pod)
    max_surge: int = 1  # 0: replace one replica at a time, never above the replica count
    dedicated_pool: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    #: The GPU-keeping taints of the node pools with nodes of the class (gpus.node_pools.PoolTaints.for_product):
    #: the scheduler may put a replica on any of them, so the pods tolerate exactly these.
    gpu_taints: tuple[Taint, ...] = ()
    #: A DRA class asked for through a claim (jobs.dra_claims.uses_claims): each replica claims its GPUs from the
    #: template ``claim_template_name(spec)`` instead of a limit, and the claim, not a node label, picks the product.
    gpu_claims: bool = False


def _labels(spec: ServiceSpec) -> dict[str, str]:
    return {
        **{str(k): str(v) for k, v in spec.labels.items()},
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        TEAM_LABEL: spec.team,
        KIND_LABEL: SERVICE_KIND,
        SERVICE_LABEL: spec.name,
    }


def _metadata(spec: ServiceSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": _labels(spec),
        "annotations": {OWNER_ANNOTATION: spec.owner, CLASS_ANNOTATION: spec.resource_class.key},
    }


def _pool() -> tuple[dict[str, str], dict[str, str]]:
    """(node selector, toleration) of the dedicated pool, from the settings."""
    key, _, value = settings.PORTAL_SERVICE_POOL_LABEL.partition("=")
    return {key: value}, pool_toleration()


def claim_template_name(spec: ServiceSpec) -> str:
    return template_name(spec.name)


def render_claim_template(spec: ServiceSpec) -> dict[str, Any]:
    """The ResourceClaimTemplate each replica claims its ``count`` GPUs from (a claim, and a device, per replica);
    for a class whose pods share devices, the one ResourceClaim every replica shares (a Deployment's pods all name
    the same claim, so a service has one: its replicas are at most the class's users per device, jobs.service.ops)."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: spec.team, SERVICE_LABEL: spec.name}
    if shares_devices(spec.resource_class):
        return render_shared_claim(spec.resource_class, shared_claim_name(spec.name), spec.namespace, labels)
    return claim_template(spec.resource_class, spec.count, claim_template_name(spec), spec.namespace, labels)


def render_deployment(spec: ServiceSpec) -> dict[str, Any]:
    labels = _labels(spec)
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image,
        "env": [{"name": str(e["name"]), "value": str(e["value"])} for e in spec.env],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "resources": {
            "limits": {**gpu_limits(spec.resource_class, spec.count, spec.gpu_claims), **cpu_memory(spec)},
            "requests": cpu_memory(spec),
        },
        "readinessProbe": spec.readiness.render(),
        "securityContext": {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if spec.liveness is not None:
        container["livenessProbe"] = spec.liveness.render()
    if spec.command:
        container["command"] = [str(word) for word in spec.command]
    if spec.args:
        container["args"] = [str(word) for word in spec.args]
    # Nodes of the class's GPU, by whichever label says so: GFD's product, or a managed pool's own (terms are ORed).
    product_terms = [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
        for key, values in labels_naming(spec.resource_class.product_label)
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "terminationGracePeriodSeconds": settings.PORTAL_PREEMPTION_GRACE,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": gpu_tolerations(spec.gpu_taints),
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": product_terms}},
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {SERVICE_LABEL: spec.name}},
                            "topologyKey": names.HOSTNAME_LABEL,
                        },
                    }
                ]
            },
        },
        "containers": [container],
    }
    if spec.dedicated_pool:
        selector, toleration = _pool()
        pod_spec["nodeSelector"] = selector
        pod_spec["tolerations"].append(toleration)
    if settings.PORTAL_RUNTIME_CLASS:
        pod_spec["runtimeClassName"] = settings.PORTAL_RUNTIME_CLASS
    if spec.gpu_claims:
        # The claim's selectors pick the product (a DRA node may carry no GFD label); the replicas still spread.
        del pod_spec["affinity"]["nodeAffinity"]
        if shares_devices(spec.resource_class):
            add_shared_claim(pod_spec, container, shared_claim_name(spec.name))
        else:
            add_claims(pod_spec, container, {GPU_CLAIM: claim_template_name(spec)})
    add_volumes(spec, list(spec.volumes), container, pod_spec)
    add_secrets(spec, container, pod_spec, list(spec.pull_secrets))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec),
        "spec": {
            "replicas": spec.min_replicas,
            "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {SERVICE_LABEL: spec.name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": spec.max_surge, "maxUnavailable": 0 if spec.max_surge else 1},
            },
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def render_service(spec: ServiceSpec) -> dict[str, Any]:
    """A ClusterIP Service in front of the ready replicas: ``<name>.<namespace>.svc`` inside the cluster."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": {SERVICE_LABEL: spec.name},
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": spec.port, "protocol": "TCP"}],
        },
    }


def _metric(spec: ServiceSpec) -> dict[str, Any]:
    if spec.metric == CPU_METRIC:
        target = {"type": "Utilization", "averageUtilization": int(spec.metric_target)}
        return {"type": "Resource", "resource": {"name": CPU_METRIC, "target": target}}
    target = {"type": "AverageValue", "averageValue": str(spec.metric_target)}
    if spec.metric_external:
        return {"type": "External", "external": {"metric": {"name": spec.metric}, "target": target}}
    return {"type": "Pods", "pods": {"metric": {"name": spec.metric}, "target": target}}


def render_hpa(spec: ServiceSpec, api_version: str, max_replicas: int | None = None) -> dict[str, Any]:
    """The HorizontalPodAutoscaler for ``api_version`` (the backend's ``autoscaling_api()``; v2 and v2beta2 share
    this shape). ``max_replicas`` is the cap the quota rule allows now (never above the service's own maximum)."""
    if api_version not in (AUTOSCALING_V2, AUTOSCALING_V2BETA2):
        raise ValueError(f"Unknown autoscaling API version {api_version!r}.")
    cap = spec.max_replicas if max_replicas is None else max(spec.min_replicas, min(max_replicas, spec.max_replicas))
    return {
        "apiVersion": api_version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": spec.name},
            "minReplicas": spec.min_replicas,
            "maxReplicas": cap,
            "metrics": [_metric(spec)],
        },
    }


def service_url(template: str, spec: ServiceSpec) -> str:
    """The template with the service's name, team and namespace filled in ("" for no template)."""
    return template.format(name=spec.name, team=spec.team, namespace=spec.namespace) if template else ""


def _host_problem(host: str) -> str:
    if not host:
        return "has no host name (write it as https://{name}-{team}.apps.example.com)"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return f"has the IP address {host} as its host; an Ingress routes by DNS name, so use one"
    if len(host) > 253 or not DNS1123_SUBDOMAIN.fullmatch(host):
        return (f"gives the host {host!r}, which is not a lowercase DNS name (letters, digits, '-' and '.', each "
                "part at most 63 characters)")  # fmt: skip
    if any(len(part) > 63 for part in host.split(".")):
        return f"gives the host {host!r}, one of whose parts is longer than 63 characters"
    return ""


def url_template_problems(template: str, ingress: bool = False) -> list[str]:
    """Every problem of a PORTAL_SERVICE_URL_TEMPLATE, each a sentence that says what to fix ([]: none); with
    ``ingress`` (the portal makes Ingresses for it) also what keeps an Ingress from routing it: a host that is not
    a DNS name, a query or a fragment."""
    if not template:
        return []
    problems = []
    try:
        url = template.format(name="llm", team="vision", namespace="team-vision")
    except (KeyError, IndexError, ValueError) as error:
        known = ", ".join(f"{{{p}}}" for p in URL_PLACEHOLDERS)
        return [f"PORTAL_SERVICE_URL_TEMPLATE {template!r} cannot be filled in ({error!r}); it may use only {known}."]
    if "{name}" not in template:
        problems.append(f"PORTAL_SERVICE_URL_TEMPLATE {template!r} has no {{name}}, so every service of a team would "
                        "get the same address; put {name} in its host or path.")  # fmt: skip
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        problems.append(f"PORTAL_SERVICE_URL_TEMPLATE {template!r} must start with https:// or http://.")
    elif ingress and (problem := _host_problem(parts.hostname or "")):
        problems.append(f"PORTAL_SERVICE_URL_TEMPLATE {template!r} {problem}.")
    if ingress and (parts.query or parts.fragment):
        problems.append(f"PORTAL_SERVICE_URL_TEMPLATE {template!r} has a query or fragment; an Ingress routes by host "
                        "and path only, so remove it.")  # fmt: skip
    return problems


def render_ingress(spec: ServiceSpec, url: str, ingress_class: str) -> dict[str, Any] | None:
    """The Ingress of class ``ingress_class`` routing ``url``'s host and path (a prefix) to the service's Service;
    None when ``url`` has no host an Ingress can route (a service name and team too long for one DNS label)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or _host_problem(host):
        return None
    path = parts.path.rstrip("/") or "/"
    rule = {
        "host": host,
        "http": {
            "paths": [
                {
                    "path": path,
                    "pathType": "Prefix",
                    "backend": {"service": {"name": spec.name, "port": {"number": SERVICE_PORT}}},
                }
            ]
        },
    }
    ingress_spec: dict[str, Any] = {"ingressClassName": ingress_class, "rules": [rule]}
    if parts.scheme == "https":
        ingress_spec["tls"] = [{"hosts": [host]}]
    return {"apiVersion": NETWORKING_V1, "kind": "Ingress", "metadata": _metadata(spec), "spec": ingress_spec}

"""A service's objects: what the cluster is given for it (Deployment, Service, HPA and, when configured, its
Ingress), rendered from the service and its job, and launched. Split from jobs.service.follow (which follows the
objects and applies the quota rule) to keep each module short; jobs.service.follow re-exports these names."""

from __future__ import annotations

import logging
from dataclasses import replace

from django.conf import settings
from django.utils import timezone

from cluster.base import ClusterBackend, Conflict, Invalid
from gpus.node_pools import PoolTaints
from jobs import lifecycle
from jobs.choices import EventKind, JobState, ServiceMetric, ServiceState
from jobs.dra_claims import is_dra_class, uses_claims
from jobs.models import Job
from jobs.models.service import InferenceService
from jobs.pools import pool_in_use
from jobs.render import JOB_ID_LABEL
from jobs.service.render import (
    Probe,
    ResourceClass,
    ServiceSpec,
    render_claim_template,
    render_deployment,
    render_hpa,
    render_ingress,
    render_service,
    service_url,
)
from jobs.storage.secrets import pull_secret_names
from vocab import names
from vocab.dra import RESOURCE_CLAIM_KIND
from vocab.taints import Taint

log = logging.getLogger(__name__)

#: The annotation on the Deployment with the portal's revision of the service (what the cluster was last given).
REVISION_ANNOTATION = "gpu-portal.io/service-revision"
ACTIVE_JOB_STATES = (JobState.ADMITTED, JobState.RUNNING)


# -- rendering and launch -------------------------------------------------------------------------------------


def _probe(probe: dict, port: int) -> Probe | None:
    if not probe:
        return None
    path = probe.get("path", "") if probe.get("type", "http") == "http" else ""
    return Probe(
        port=int(probe.get("port") or port),
        path=path or ("/" if probe.get("type", "http") == "http" else ""),
        initial_delay_seconds=int(probe.get("initial_delay_seconds", 0)),
        period_seconds=int(probe.get("period_seconds", 10)),
        failure_threshold=int(probe.get("failure_threshold", 3)),
    )


def granted(service: InferenceService, job: Job) -> int:
    """Replicas the portal holds for the service now: its admitted minimum and the extra slots (0 while queued)."""
    if job.state not in (*ACTIVE_JOB_STATES, JobState.PREEMPTING):
        return 0
    return max(job.workers, 1) + len(service.replica_slots)


def booked_nodes(service: InferenceService, job: Job) -> list[str]:
    """The nodes the portal reserved for the service's replicas: the minimum's, then the granted slots'."""
    minimum = list(job.node_names) or ([job.node_name] if job.node_name else [])
    return sorted({*minimum, *(slot["node"] for slot in service.replica_slots if slot.get("node"))})


def spec_for(
    service: InferenceService,
    job: Job,
    dedicated_pool: bool = False,
    gpu_taints: tuple[Taint, ...] = (),
    gpu_claims: bool = False,
) -> ServiceSpec:
    """The service's spec; ``gpu_taints``: what its pods tolerate (render_objects reads them, an Ingress needs none);
    ``gpu_claims``: its replicas claim their GPUs (``claims_gpus``)."""
    rc = job.resource_class
    readiness = _probe(service.readiness, service.port) or Probe(port=service.port)
    return ServiceSpec(
        name=service.name,
        namespace=job.team.namespace,
        team=job.team.slug,
        owner=job.owner.get_username(),
        image=job.image,
        port=service.port,
        resource_class=ResourceClass(
            rc.key,
            rc.resource_name,
            rc.product_label,
            rc.kind,
            rc.profile,
            rc.sharing_strategy,
            rc.replicas,
            rc.memory_mb,
        ),  # fmt: skip
        count=job.count,
        cpu_millicores=job.cpu_millicores,
        memory_mb=job.memory_mb,
        min_replicas=service.min_replicas,
        max_replicas=service.max_replicas,
        readiness=readiness,
        liveness=_probe(service.liveness, service.port),
        command=tuple(job.command or ()),
        args=tuple(job.args or ()),
        env=tuple(job.env or ()),
        secret_env=tuple(job.secret_env or ()),
        secret_files=tuple(job.secret_files or ()),
        volumes=tuple(job.volumes or ()),
        pull_secrets=tuple(pull_secret_names(job.team_id, job.image)),
        shm_mb=job.shm_mb,
        metric=service.metric_name if service.metric != ServiceMetric.CPU else "cpu",
        metric_target=f"{service.metric_target:g}",
        metric_external=service.metric == ServiceMetric.EXTERNAL,
        max_surge=0,  # render_objects allows one surge replica only where a granted replica is unused
        dedicated_pool=dedicated_pool,
        labels={**(job.labels or {}), JOB_ID_LABEL: str(job.pk)},
        gpu_taints=gpu_taints,
        gpu_claims=gpu_claims,
    )


def claims_gpus(job: Job, table: PoolTaints | None = None) -> bool:
    """Whether the service's replicas claim their GPUs through a ResourceClaimTemplate (jobs.dra_claims): a DRA
    class, unless every pool with nodes of its product on the job's cluster maps nvidia.com/gpu onto DRA."""
    rc = job.resource_class
    if not is_dra_class(rc):
        return False
    table = table or PoolTaints.load()
    return uses_claims(rc, table.maps_extended_resource(job.cluster_id, product_label=rc.product_label))


def render_gpu_claim_template(service: InferenceService, job: Job) -> dict | None:
    """The ResourceClaimTemplate the service's replicas claim their GPUs from (for a shared class the ResourceClaim
    they share), or None where they ask by limit."""
    return render_claim_template(spec_for(service, job)) if claims_gpus(job) else None


def render_objects(
    service: InferenceService, job: Job, *, max_replicas: int | None, api_version: str = "autoscaling/v2beta2",
    dedicated_pool: bool = False, replicas: int | None = None,
) -> list[dict]:  # fmt: skip
    """The Service, the Deployment (paused as the service is; ``replicas``: keep the count the HPA set) and the
    HPA (maxReplicas: ``max_replicas``, what is granted) of the service."""
    table = PoolTaints.load()
    taints = tuple(table.for_product(job.resource_class.product_label, job.cluster_id))
    spec = spec_for(service, job, dedicated_pool, taints, claims_gpus(job, table))
    # A rollout may start a new replica before an old one goes (surge) only while the grant has room for it:
    # the Deployment runs fewer replicas than the portal granted. Otherwise it replaces one at a time, so the
    # replicas never outnumber what the team's quota granted.
    running = replicas if replicas is not None else service.min_replicas
    spec = replace(spec, max_surge=1 if running < granted(service, job) else 0)
    deployment = render_deployment(spec)
    deployment["metadata"].setdefault("annotations", {})[REVISION_ANNOTATION] = str(service.revision)
    deployment["spec"]["paused"] = service.state == ServiceState.PAUSED
    if replicas is not None:
        deployment["spec"]["replicas"] = replicas
    if booked := booked_nodes(service, job):
        # Prefer the nodes whose capacity the portal reserved (the scheduler still decides; reconcile moves a
        # reservation to where a replica actually runs). Set when the Deployment is created or rolled out only,
        # so a grant never rolls it.
        affinity = deployment["spec"]["template"]["spec"].setdefault("affinity", {})
        affinity.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": names.HOSTNAME_LABEL, "operator": "In", "values": booked}]}}
        ]  # fmt: skip
    low = min(service.min_replicas, max_replicas) if max_replicas else service.min_replicas
    hpa = render_hpa(spec, api_version, max_replicas)
    hpa["spec"]["minReplicas"] = max(1, low)
    return [render_service(spec), deployment, hpa]


def launch_service(backend: ClusterBackend, job: Job) -> dict | None:
    """Create the admitted service's Service, its GPU claim template on a DRA class, Deployment and HPA (idempotent:
    apply); returns the Deployment."""
    service = job.inference_service
    template = render_gpu_claim_template(service, job)
    if template is not None and template["kind"] == RESOURCE_CLAIM_KIND:
        backend.apply_resource_claim(template)  # the one claim a shared class's replicas share
    elif template is not None:
        backend.apply_resource_claim_template(template)
    service_obj, deployment, hpa = render_objects(
        service, job, max_replicas=granted(service, job), api_version=backend.autoscaling_api(),
        dedicated_pool=pool_in_use(),
    )  # fmt: skip
    backend.ensure_service(service_obj)
    created = backend.apply_deployment(deployment)
    backend.apply_hpa(hpa)
    _launch_ingress(backend, service, job)
    return created


def ingress_for(service: InferenceService, job: Job) -> dict | None:
    """The service's Ingress when the operator configured both a URL template and an ingress class, else None."""
    template, ingress_class = settings.PORTAL_SERVICE_URL_TEMPLATE, settings.PORTAL_SERVICE_INGRESS_CLASS
    if not (template and ingress_class):
        return None
    spec = spec_for(service, job)
    return render_ingress(spec, service_url(template, spec), ingress_class)


def _launch_ingress(backend: ClusterBackend, service: InferenceService, job: Job) -> None:
    """Create the external address. A refused Ingress (an invalid host, a name clash with an Ingress the portal did
    not make) costs the service its external URL, not its launch: the timeline says why. Other cluster errors
    propagate, and the launch (idempotent) is retried next cycle."""
    if not (settings.PORTAL_SERVICE_URL_TEMPLATE and settings.PORTAL_SERVICE_INGRESS_CLASS):
        return
    manifest = ingress_for(service, job)
    try:
        if manifest is None:
            raise Invalid(f"the URL template gives service {service.name} no host an Ingress can route (a DNS name "
                          "of at most 63 characters per part)")  # fmt: skip
        backend.apply_ingress(manifest)
    except (Invalid, Conflict) as error:
        lifecycle.event(job, EventKind.SERVICE, f"No external address: the Ingress for {service.name} was refused "
                        f"({error}). The service runs and is reachable inside the cluster; ask an admin to check "
                        "PORTAL_SERVICE_URL_TEMPLATE and the namespace's Ingresses.", timezone.now(),
                        action="ingress_refused")  # fmt: skip


# -- the quota rule: views for admission, and its decisions --------------------------------------------------

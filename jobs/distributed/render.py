"""The Kubernetes objects a distributed job (a gang of W ranks × G GPUs) becomes.

Each rank's pod is the batch job's pod (``render.render_job``: the same image, command, environment, secrets,
volumes, /dev/shm, labels, security context, GPU tolerations and namespace — nothing here adds host access) with
what torchrun needs to find the others:

- a headless Service named like the gang (``clusterIP: None``, selecting the job's pods, publishing addresses
  before they are Ready, port ``MASTER_PORT``), rendered first, so every rank has the stable DNS name
  ``<base>-<rank>.<base>.<namespace>.svc``;
- torchrun's environment: MASTER_ADDR (rank 0's DNS name), MASTER_PORT, WORLD_SIZE (W nodes; torchrun sets
  the per-process WORLD_SIZE = W × G itself), NODE_RANK, NPROC_PER_NODE (G), the same as torchrun's own PET_*
  variables (``torch.distributed.run`` reads PET_<OPTION> for every option not given on its command line) and
  PORTAL_WORLD_SIZE_GPUS (W × G).

Two shapes, by what the API server supports (``cluster.base.forms_for``):

- Kubernetes ≥ 1.24: one Indexed Job (completionMode Indexed, completions = parallelism = W, backoffLimit 0).
  The Job controller numbers the pods and names their hosts ``<base>-<index>``; NODE_RANK comes from the pod's
  completion-index annotation. Its pods may run only on the gang's chosen nodes (required node affinity on the
  node names) and never two on one node (required pod anti-affinity on the hostname among the gang's pods).
- Older servers (v1.20 drops completionMode): one Job per rank, ``<base>-<rank>``, each pinned to its own chosen
  node as a single job is, with the literal NODE_RANK and the same hostname and subdomain.

On a DRA class (jobs.dra_claims) the gang has one GPU claim template, ``<base>-gpus``, from which each rank's pod
gets its own claim. When its chosen nodes share one NVLink domain (GFD's ``nvidia.com/gpu.clique``, the same
non-empty value on every node) and the cluster has NVIDIA's ComputeDomain channel DeviceClass (its last check
found it: the ComputeDomain plugin is installed), the gang also gets NVIDIA's ComputeDomain ``<base>`` for W nodes,
whose controller makes the channel claim template ``<base>-channel``; each rank's pod claims an IMEX channel from
it, which is what lets its ranks reach each other's GPU memory over multi-node NVLink. The template and the domain
belong to the attempt and are deleted with its workloads (``attempt_objects``).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpus.choices import ClusterConnection
from gpus.models import Cluster, Node
from jobs.dra_claims import (
    CHANNEL_CLAIM,
    GPU_CLAIM,
    channel_template_name,
    is_dra_class,
    render_compute_domain,
    template_name,
)
from jobs.render import (
    JOB_ID_LABEL,
    KIND_LABEL,
    TEAM_LABEL,
    WORLD_GPUS_ENV,
    claims_gpus,
    gpu_tolerations,
    pool_taints,
    render_gpu_claim_template,
    render_job,
)
from vocab import names
from vocab.dra import COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS, COMPUTE_DOMAIN_KIND, RESOURCE_CLAIM_TEMPLATE_KIND

#: The rendezvous port torchrun's rank 0 listens on (its default).
MASTER_PORT = 29500
#: The rank of a pod of a one-Job-per-rank gang (an Indexed Job's pods carry their completion index instead).
RANK_LABEL = "gpu-portal.io/rank"
_LABEL_MAX = 63


def gang_base(job) -> str:
    """The gang's name: the Service's, the Indexed Job's and the prefix of every rank's Job and host name.

    ``job.workload_name`` (new for each attempt) when ``<it>-<last rank>`` fits in a DNS label, else its start
    and a digest of the whole, so two attempts never share a name."""
    name = job.workload_name
    keep = _LABEL_MAX - len(f"-{max(0, job.workers - 1)}")
    if len(name) <= keep:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: keep - 9].rstrip('-')}-{digest}"


def rank_name(job, rank: int) -> str:
    return f"{gang_base(job)}-{rank}"


def gang_workload_names(job) -> set[str]:
    """Every workload name the current attempt may have, in either shape."""
    return {gang_base(job), *(rank_name(job, rank) for rank in range(job.workers))}


def master_addr(job) -> str:
    base = gang_base(job)
    return f"{base}-0.{base}.{job.team.namespace}.svc"


def nvlink_domain(job) -> str:
    """The NVLink domain (``nvidia.com/gpu.clique``) every chosen node of a gang of several nodes shares, where the
    cluster's last check found NVIDIA's ComputeDomain channel DeviceClass (the ComputeDomain plugin is installed);
    else "" (two queries)."""
    if job.workers < 2 or len(set(job.node_names)) < 2:
        return ""
    if job.cluster_id is not None:
        mine, cluster = Cluster.objects.filter(pk=job.cluster_id), {"cluster_id": job.cluster_id}
    else:
        mine = Cluster.objects.filter(connection=ClusterConnection.SETTINGS)
        cluster = {"cluster__connection": ClusterConnection.SETTINGS}
    capabilities = mine.values_list("capabilities", flat=True).first() or {}
    if COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS not in (capabilities.get("dra_device_classes") or []):
        return ""
    found = dict(Node.objects.filter(name__in=job.node_names, **cluster).values_list("name", "clique"))
    cliques = {found.get(name, "") for name in job.node_names}
    return cliques.pop() if len(cliques) == 1 and "" not in cliques else ""


def gang_claims(job) -> dict[str, str]:
    """Each rank pod's claims from templates (pod claim name → template): the GPUs and, in an NVLink domain, the
    ComputeDomain's channel; {} for a gang that asks for its GPUs through limits."""
    if not claims_gpus(job, job.node_names):
        return {}
    claims = {GPU_CLAIM: template_name(gang_base(job))}
    if nvlink_domain(job):
        claims[CHANNEL_CLAIM] = channel_template_name(gang_base(job))
    return claims


def attempt_objects(job) -> list[tuple[str, str]]:
    """(kind, name) of what the attempt has beside its workloads: the headless Service and, on a DRA class, the GPU
    claim template and any ComputeDomain (names only: no query, so it can be called for any attempt)."""
    base = gang_base(job)
    objects = [("Service", base)]
    if is_dra_class(job.resource_class):
        objects += [(RESOURCE_CLAIM_TEMPLATE_KIND, template_name(base)), (COMPUTE_DOMAIN_KIND, base)]
    return objects


def render_gang(job, pull_secrets=(), *, indexed: bool) -> list[dict[str, Any]]:
    """The headless Service, the DRA objects the ranks claim from (the GPU claim template, the ComputeDomain),
    then the workloads: one Indexed Job (``indexed``) or one Job per rank."""
    objects = [render_gang_service(job)]
    claims = gang_claims(job)
    if claims:
        objects.append(render_gpu_claim_template(job, gang_base(job)))
    if CHANNEL_CLAIM in claims:
        objects.append(render_compute_domain(gang_base(job), job.team.namespace, job.workers, _portal_labels(job)))
    if indexed:
        return [*objects, _indexed_job(job, pull_secrets, claims)]
    return [*objects, *(_rank_job(job, rank, pull_secrets, claims) for rank in range(job.workers))]


def render_gang_service(job) -> dict[str, Any]:
    base = gang_base(job)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": base,
            "namespace": job.team.namespace,
            "labels": _portal_labels(job),
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_ID_LABEL: str(job.pk)},
            # Ranks resolve each other while they start (no readiness probe would make them Ready anyway).
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def _portal_labels(job) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        TEAM_LABEL: job.team.slug,
        JOB_ID_LABEL: str(job.pk),
        KIND_LABEL: str(job.kind),
    }


def _torchrun_env(job, node_rank: dict[str, Any]) -> list[dict[str, Any]]:
    """torchrun's variables; ``node_rank`` is NODE_RANK's value part ({"value": "1"} or a valueFrom)."""
    world = str(job.workers)
    plain = {
        "MASTER_ADDR": master_addr(job),
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": world,
        "NPROC_PER_NODE": str(job.count),
        WORLD_GPUS_ENV: str(job.workers * job.count),
        "PET_MASTER_ADDR": master_addr(job),
        "PET_MASTER_PORT": str(MASTER_PORT),
        "PET_NNODES": world,
        "PET_NPROC_PER_NODE": str(job.count),
    }
    env = [{"name": name, "value": value} for name, value in plain.items()]
    env += [{"name": "NODE_RANK", **copy.deepcopy(node_rank)}, {"name": "PET_NODE_RANK", **copy.deepcopy(node_rank)}]
    return env


def _rank_template(job, node_name: str, pull_secrets, claims: dict[str, str]) -> dict[str, Any]:
    """The single job's manifest for one rank pinned on ``node_name`` (render_job pins by node name), with the
    gang's claims (``gang_claims``) in place of a single job's."""
    original = job.node_name
    job.node_name = node_name
    try:
        manifest = render_job(job, pull_secrets)
    finally:
        job.node_name = original
    if claims:
        pod = manifest["spec"]["template"]["spec"]
        pod["resourceClaims"] = [{"name": claim, "resourceClaimTemplateName": t} for claim, t in claims.items()]
        pod["containers"][0]["resources"]["claims"] = [{"name": claim} for claim in claims]
    return manifest


def _rank_job(job, rank: int, pull_secrets, claims: dict[str, str]) -> dict[str, Any]:
    manifest = _rank_template(job, job.node_names[rank], pull_secrets, claims)
    manifest["metadata"]["name"] = rank_name(job, rank)
    manifest["metadata"]["labels"][RANK_LABEL] = str(rank)
    template = manifest["spec"]["template"]
    template["metadata"]["labels"][RANK_LABEL] = str(rank)
    pod = template["spec"]
    pod["hostname"], pod["subdomain"] = rank_name(job, rank), gang_base(job)
    pod["containers"][0]["env"] += _torchrun_env(job, {"value": str(rank)})
    return manifest


def _indexed_job(job, pull_secrets, claims: dict[str, str]) -> dict[str, Any]:
    manifest = _rank_template(job, job.node_names[0], pull_secrets, claims)
    manifest["metadata"]["name"] = gang_base(job)
    spec = manifest["spec"]
    spec.update(completionMode="Indexed", completions=job.workers, parallelism=job.workers, backoffLimit=0)
    pod = spec["template"]["spec"]
    # Any of the chosen nodes, one rank on each: the single job's node term once per chosen node. Terms are ORed,
    # and a node field selector takes exactly one value (the API server refuses "metadata.name In [a, b]").
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (term,) = required["nodeSelectorTerms"]
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        for node in job.node_names
    ]
    # Any chosen node may get any rank: the pods tolerate the GPU-keeping taints of every chosen node's pool.
    pod["tolerations"] = gpu_tolerations(pool_taints(job).for_nodes(job.cluster_id, job.node_names))
    pod["affinity"]["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {JOB_ID_LABEL: str(job.pk)}},
                "topologyKey": names.HOSTNAME_LABEL,
            }
        ]
    }
    # The Job controller sets the pods' hostnames (<base>-<index>); the Service makes them resolvable.
    pod["subdomain"] = gang_base(job)
    field = f"metadata.annotations['{names.JOB_COMPLETION_INDEX_ANNOTATION}']"
    pod["containers"][0]["env"] += _torchrun_env(job, {"valueFrom": {"fieldRef": {"fieldPath": field}}})
    return manifest

"""The batch/v1 Job a portal job becomes. Everything a user sent lands in fixed places of a fixed template:
no field of theirs can add host access, privileges or another namespace. The only volumes ever rendered are
PersistentVolumeClaims of the team's own namespace (checked at submission, jobs.storage.mounts.check_volume_mounts),
the portal's emptyDirs (/dev/shm in memory, /scratch on the node's disk) and, for other parts of the portal,
Secrets and ConfigMaps; tests/unit/jobs/test_volumes.py holds every rendered spec to that. Secret volumes of the
team's own secrets are mounted read-only at paths jobs.storage.mounts.check_mount_paths allowed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from gpus.choices import ClusterConnection
from gpus.models import Node
from gpus.node_pools import PoolTaints
from jobs.dra_claims import (
    GPU_CLAIM,
    add_claims,
    add_shared_claim,
    gpu_limits,
    is_dra_class,
    render_claim_template,
    render_shared_claim,
    shared_claim_name,
    shares_devices,
    template_name,
    uses_claims,
)
from vocab import names
from vocab.taints import Taint, tolerations_for

#: The DNS domain of the portal's own labels and annotations; a job's labels may not use it (nor a subdomain).
PORTAL_LABEL_DOMAIN = "gpu-portal.io"
TEAM_LABEL = "gpu-portal.io/team"
#: Set on every task of a job array: its 0-based index and the number of tasks (docs/user-guide.md).
ARRAY_INDEX_ENV = "PORTAL_ARRAY_INDEX"
ARRAY_SIZE_ENV = "PORTAL_ARRAY_SIZE"
#: Set on a job that declared a checkpoint and on every later attempt of any job (docs/user-guide.md, "Checkpoints
#: and preemption"): the attempt (1-based), "1" when an earlier attempt ran, and the last checkpoint reported (ISO
#: 8601, empty for none).
ATTEMPT_ENV = "PORTAL_ATTEMPT"
RESUMING_ENV = "PORTAL_RESUMING"
LAST_CHECKPOINT_ENV = "PORTAL_LAST_CHECKPOINT"
#: Set on a job that reports its checkpoints with its own token (checkpoint "report": "token"; jobs.checkpoint_tokens):
#: the token, from the attempt's Secret (``checkpoint_secret_name``, key ``CHECKPOINT_SECRET_KEY``), never in clear
#: in the pod spec, and the address to POST it to.
CHECKPOINT_TOKEN_ENV = "PORTAL_CHECKPOINT_TOKEN"
CHECKPOINT_URL_ENV = "PORTAL_CHECKPOINT_URL"
CHECKPOINT_SECRET_KEY = "token"
#: The API path a job reports its checkpoints to (jobs.api.views.JobViewSet.checkpoint).
CHECKPOINT_PATH = "/api/v1/jobs/{id}/checkpoint/"
JOB_ID_LABEL = "gpu-portal.io/job-id"
KIND_LABEL = "gpu-portal.io/kind"
OWNER_ANNOTATION = "gpu-portal.io/owner"
CLASS_ANNOTATION = "gpu-portal.io/resource-class"
PRODUCT_LABEL = names.GPU_PRODUCT_LABEL
FINISHED_TTL_SECONDS = 24 * 3600
NOTEBOOK_LABEL = "gpu-portal.io/notebook"
NOTEBOOK_PORT = 8888
NOTEBOOK_HOME = "/home/jovyan"
#: The Jupyter Docker Stacks' "users" group, which owns the home directory.
NOTEBOOK_GID = 100
#: Every workload's memory-backed /dev/shm (PyTorch DataLoader workers and NCCL pass tensors through it; the
#: container runtime's default is 64 MiB) and its scratch directory on the node's disk (docs/user-guide.md).
SHM_PATH = "/dev/shm"  # noqa: S108 - the container's own shared-memory mount point, not a temporary file
SCRATCH_PATH = "/scratch"
#: Only these volume sources are ever rendered (tests hold every manifest to it).
RENDERED_VOLUME_SOURCES = frozenset({"persistentVolumeClaim", "emptyDir", "secret", "configMap"})
#: The rendezvous port torchrun's rank 0 listens on (its default).
#: The rank of a pod of a one-Job-per-rank gang (an Indexed Job's pods carry their completion index instead).
WORLD_GPUS_ENV = "PORTAL_WORLD_SIZE_GPUS"
#: Every name torchrun's environment uses; validation keeps users from setting them on a distributed job.
TORCHRUN_ENV = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "NPROC_PER_NODE", "PET_MASTER_ADDR",
    "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", WORLD_GPUS_ENV,
)  # fmt: skip


def shm_mebibytes(job) -> int:
    """The job's own /dev/shm size, or PORTAL_SHM_FRACTION of its memory request (at least 64 MiB)."""
    if job.shm_mb:
        return int(job.shm_mb)
    return max(64, int(job.memory_mb * settings.PORTAL_SHM_FRACTION))


#: Secret volumes are named secret-file-<n>, by their place in the job's secret_files.
SECRET_VOLUME_PREFIX = "secret-file-"


def _cpu(millicores: int) -> str:
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def cpu_memory(job) -> dict[str, str]:
    return {names.CPU_RESOURCE: _cpu(job.cpu_millicores), names.MEMORY_RESOURCE: f"{job.memory_mb}Mi"}


def managed_nodes():
    """The nodes of managed node pools without GPU Feature Discovery (gpus.models.Node.provider): their pods are
    pinned by node name only. A queryset, so the cycle folds it into the query that fetches the jobs it launches
    (``Exists(managed_nodes().filter(cluster_id=..., name=OuterRef("node_name")))``: names are unique per cluster
    only) instead of asking once per job."""
    return Node.objects.exclude(provider="").exclude(product_source="gfd")


def _managed_node(job) -> bool:
    """Whether ``job.node_name`` is a managed node: ``job.on_managed_node`` when the caller fetched the job with
    that annotation (the cycle's launch does), else one lookup (a single job rendered on its own)."""
    known = getattr(job, "on_managed_node", None)
    if known is not None:
        return bool(known)
    if not job.node_name:
        return False
    cluster = (
        {"cluster_id": job.cluster_id}
        if job.cluster_id is not None
        else {"cluster__connection": ClusterConnection.SETTINGS}
    )
    return managed_nodes().filter(name=job.node_name, **cluster).exists()


def gpu_tolerations(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """The tolerations of every GPU workload's pod (jobs, gang ranks, notebooks, service replicas): exactly the
    GPU-keeping taints of the node pools it may land on (gpus.node_pools.PoolTaints), each by key, value and
    effect, and nothing more: never a blanket toleration, never another value of a tolerated key. Admission's taint
    gate (jobs.scheduling.node_trust.untolerated) checks nodes against these same tolerations."""
    return tolerations_for(taints)


def pool_taints(job) -> PoolTaints:
    """``job.pool_taints`` when the caller loaded the table once for many jobs (the cycle's launch does), else the
    table read now (two queries)."""
    table = getattr(job, "pool_taints", None)
    return table if table is not None else PoolTaints.load()


def claims_gpus(job, nodes: Iterable[str] | None = None, table: PoolTaints | None = None) -> bool:
    """Whether the job's pods ask for their GPUs through a ResourceClaimTemplate (jobs.dra_claims): a DRA class,
    unless every pool of the job's nodes (``nodes``, else its own) maps nvidia.com/gpu onto DRA and the class can
    be asked for that way."""
    if not is_dra_class(job.resource_class):
        return False
    chosen = list(nodes) if nodes is not None else [job.node_name]
    extended = (table or pool_taints(job)).maps_extended_resource(job.cluster_id, chosen)
    return uses_claims(job.resource_class, extended)


def render_gpu_claim_template(job, workload: str) -> dict[str, Any]:
    """The ResourceClaimTemplate the pods of ``workload`` claim the job's GPUs from (jobs.dra_claims), in the team's
    namespace, labelled as the job's workloads are; for a shared class, the one ResourceClaim the workload's pod
    shares a device through (jobs.dra_claims.shared_claim_name)."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, TEAM_LABEL: job.team.slug, JOB_ID_LABEL: str(job.pk)}
    if shares_devices(job.resource_class):
        return render_shared_claim(job.resource_class, shared_claim_name(workload), job.team.namespace, labels)
    return render_claim_template(job.resource_class, job.count, template_name(workload), job.team.namespace, labels)


def checkpoint_secret_name(workload_name: str) -> str:
    """The Secret holding the checkpoint token of the attempt whose workload is ``workload_name``. The "portal-"
    prefix is one no team secret may take (jobs.storage.mounts.PORTAL_SECRET_PREFIX), so the two never meet."""
    return f"portal-checkpoint-{workload_name}"


def checkpoint_url(job_id: int) -> str:
    """Where the job POSTs its checkpoints: the portal's address (PORTAL_BASE_URL) and the job's endpoint."""
    return settings.PORTAL_BASE_URL.rstrip("/") + CHECKPOINT_PATH.format(id=job_id)


def checkpoint_spec(job, container: dict) -> None:
    """What a job learns of its attempts and gets for its checkpoints (jobs.checkpoints): the resume environment,
    and for a declared signal other than SIGTERM a preStop hook that sends it to the container's main process (PID
    1) and waits out the grace, so Kubernetes sends its SIGTERM (then SIGKILL) only at the end. Kubernetes runs the
    hook when the pod is deleted; it needs /bin/sh in the image and no privilege (a process may signal its own
    PID 1). The pod's terminationGracePeriodSeconds is the declared grace (render_job). A job that reports with its
    own token gets it from the attempt's Secret (a secretKeyRef: the spec holds its name, never its value) and the
    address to report to; jobs.checkpoint_tokens makes the Secret before the workload."""
    declared = getattr(job, "checkpoint", None) or {}
    attempt = max(1, getattr(job, "attempts", 0) or 0)
    if not declared and attempt == 1:
        return
    last = getattr(job, "last_checkpoint_at", None)
    container["env"] += [
        {"name": ATTEMPT_ENV, "value": str(attempt)},
        {"name": RESUMING_ENV, "value": "1" if attempt > 1 else "0"},
        {"name": LAST_CHECKPOINT_ENV, "value": last.isoformat() if last else ""},
    ]
    if declared.get("report") == "token":
        ref = {"name": checkpoint_secret_name(job.workload_name), "key": CHECKPOINT_SECRET_KEY}
        container["env"] += [
            {"name": CHECKPOINT_TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}},
            {"name": CHECKPOINT_URL_ENV, "value": checkpoint_url(job.pk)},
        ]
    signal = declared.get("signal", "SIGTERM")
    if declared and signal != "SIGTERM":
        wait = max(1, int(declared["grace_seconds"]) - 10)  # SIGTERM comes 10 s before the end (SIGKILL)
        name = signal.removeprefix("SIG")
        container["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"kill -{name} 1; sleep {wait}"]}}}


def render_job(job, pull_secrets: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The manifest for ``job`` (a jobs.models.Job that has been placed on ``job.node_name``); ``pull_secrets``
    are the team's dockerconfigjson Secrets for the image's registry (jobs.storage.secrets.pull_secret_names).

    A job of a DRA class asks for its GPUs through the claim template ``render_gpu_claim_template`` makes for its
    workload (jobs.dra_claims), with no GPU limit; the claim's selectors pick the product, so the pod is pinned by
    node name only."""
    rc = job.resource_class
    table = pool_taints(job)
    claims = claims_gpus(job, table=table)
    # The user's labels first: the portal's own always win (validation refuses their prefixes anyway).
    labels = {
        **{str(k): str(v) for k, v in (getattr(job, "labels", None) or {}).items()},
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        TEAM_LABEL: job.team.slug,
        JOB_ID_LABEL: str(job.pk),
        KIND_LABEL: str(job.kind),
    }
    env = [{"name": str(e["name"]), "value": str(e["value"])} for e in job.env]
    if getattr(job, "array_index", None) is not None:
        # The task's place in its array (validation keeps users from setting these names themselves).
        env += [
            {"name": ARRAY_INDEX_ENV, "value": str(job.array_index)},
            {"name": ARRAY_SIZE_ENV, "value": str(job.array.size)},
        ]
    container = {
        "name": "main",
        "image": job.image,
        "env": env,
        "resources": {
            # Extended resources go in limits only, as integers; the API server copies them to requests.
            "limits": {**gpu_limits(rc, job.count, claims), **cpu_memory(job)},
            "requests": cpu_memory(job),
        },
        "securityContext": {
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    checkpoint_spec(job, container)
    if job.command:
        container["command"] = [str(word) for word in job.command]
    if job.args:
        container["args"] = [str(word) for word in job.args]
    if getattr(job, "working_dir", ""):
        container["workingDir"] = str(job.working_dir)
    node_terms = [
        {
            "matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": [rc.product_label]}],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [job.node_name]}],
        }
    ]
    if claims or _managed_node(job):
        # A managed node pool has no GFD product label (its model comes from the provider's labels), and a DRA
        # claim selects the product itself: the node name alone pins the pod.
        del node_terms[0]["matchExpressions"]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "terminationGracePeriodSeconds": (getattr(job, "checkpoint", None) or {}).get(
            "grace_seconds", settings.PORTAL_PREEMPTION_GRACE
        ),
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": gpu_tolerations(table.for_nodes(job.cluster_id, [job.node_name])),
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": node_terms}}
        },
        "containers": [container],
    }
    if job.architecture:
        pod_spec["nodeSelector"] = {names.ARCH_LABEL: job.architecture}
    if settings.PORTAL_RUNTIME_CLASS:
        pod_spec["runtimeClassName"] = settings.PORTAL_RUNTIME_CLASS
    if job.notebook_id is not None:
        _add_notebook(job.notebook, labels, container, pod_spec)
    mounts = job.notebook.volumes if job.notebook_id is not None else job.volumes
    add_volumes(job, mounts, container, pod_spec)
    add_secrets(job, container, pod_spec, pull_secrets)
    if claims:
        if shares_devices(rc):
            add_shared_claim(pod_spec, container, shared_claim_name(job.workload_name))
        else:
            add_claims(pod_spec, container, {GPU_CLAIM: template_name(job.workload_name)})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.workload_name,
            "namespace": job.team.namespace,
            "labels": labels,
            "annotations": {OWNER_ANNOTATION: job.owner.get_username(), CLASS_ANNOTATION: rc.key},
        },
        "spec": {
            # The portal decides about retries (requeue after preemption, resubmit); Kubernetes does not.
            "backoffLimit": 0,
            "activeDeadlineSeconds": job.max_runtime_seconds,
            # Finished Jobs are garbage-collected a day later (the job cycle has recorded them long before);
            # clusters older than v1.21 without the TTLAfterFinished feature ignore the field.
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }


def add_secrets(job, container: dict, pod_spec: dict, pull_secrets) -> None:
    """Team secrets as environment variables (secretKeyRef) and read-only files (a Secret volume per secret,
    named by position so no user text becomes a volume name), and the registry's pull secret."""
    for item in job.secret_env or []:
        ref = {"name": str(item["secret"]), "key": str(item["key"])}
        container["env"].append({"name": str(item["name"]), "valueFrom": {"secretKeyRef": ref}})
    for index, item in enumerate(job.secret_files or []):
        name = f"{SECRET_VOLUME_PREFIX}{index}"
        source: dict[str, Any] = {"secretName": str(item["secret"])}
        if item.get("keys"):
            source["items"] = [{"key": str(key), "path": str(key)} for key in item["keys"]]
        pod_spec.setdefault("volumes", []).append({"name": name, "secret": source})
        container.setdefault("volumeMounts", []).append(
            {"name": name, "mountPath": str(item["path"]), "readOnly": True}
        )
    if pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": str(name)} for name in pull_secrets]


def _add_notebook(notebook, labels: dict, container: dict, pod_spec: dict) -> None:
    """A Jupyter server: its port, its home on the notebook's volume, a non-root user, and a login that checks
    the token against the salted hash (the token itself is never in the manifest)."""
    labels[NOTEBOOK_LABEL] = notebook.resource_name
    container["command"] = ["start-notebook.py"]
    container["args"] = [
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={NOTEBOOK_PORT}",
        "--ServerApp.base_url=/",
        "--ServerApp.allow_remote_access=True",
        "--IdentityProvider.token=",
        f"--PasswordIdentityProvider.hashed_password={notebook.token_hash}",
        "--PasswordIdentityProvider.password_required=True",
    ]
    container["ports"] = [{"name": "http", "containerPort": NOTEBOOK_PORT, "protocol": "TCP"}]
    container["workingDir"] = NOTEBOOK_HOME
    container.setdefault("volumeMounts", []).append({"name": "home", "mountPath": NOTEBOOK_HOME})
    container["readinessProbe"] = {
        "httpGet": {"path": "/api", "port": NOTEBOOK_PORT},
        "periodSeconds": 10,
        "failureThreshold": 3,
    }
    container["securityContext"]["runAsNonRoot"] = True
    pod_spec["securityContext"].update(
        runAsUser=settings.PORTAL_NOTEBOOK_UID, runAsGroup=NOTEBOOK_GID, fsGroup=NOTEBOOK_GID, runAsNonRoot=True
    )
    pod_spec.setdefault("volumes", []).append(
        {"name": "home", "persistentVolumeClaim": {"claimName": notebook.volume_name}}
    )


def add_volumes(job, mounts: list[dict], container: dict, pod_spec: dict) -> None:
    """The team's claims at the paths asked for (``vol-<n>``, read-only at both the claim and the mount when
    asked), then /dev/shm in memory sized from the memory request and /scratch on the node's disk.

    A memory-backed emptyDir's pages count against the container's memory limit, so /dev/shm is sized as a part
    of the memory request, never on top of it (docs/user-guide.md)."""
    volumes, volume_mounts = pod_spec.setdefault("volumes", []), container.setdefault("volumeMounts", [])
    for index, mount in enumerate(mounts or []):
        read_only = bool(mount.get("read_only"))
        name = f"vol-{index}"
        claim = {"claimName": str(mount["claim"])}
        if read_only:
            claim["readOnly"] = True
        volumes.append({"name": name, "persistentVolumeClaim": claim})
        volume_mounts.append({"name": name, "mountPath": str(mount["mount_path"]), "readOnly": read_only})
    volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mebibytes(job)}Mi"}})
    volume_mounts.append({"name": "dshm", "mountPath": SHM_PATH})
    volumes.append({"name": "scratch", "emptyDir": {"sizeLimit": f"{settings.PORTAL_SCRATCH_GIB}Gi"}})
    volume_mounts.append({"name": "scratch", "mountPath": SCRATCH_PATH})


def _notebook_metadata(notebook, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": notebook.team.namespace,
        "labels": {
            MANAGED_BY_LABEL: MANAGED_BY_VALUE,
            TEAM_LABEL: notebook.team.slug,
            NOTEBOOK_LABEL: notebook.resource_name,
        },
        "annotations": {OWNER_ANNOTATION: notebook.owner.get_username()},
    }


def render_notebook_volume(notebook) -> dict[str, Any]:
    """The home volume: a ReadWriteOnce claim that outlives every session of the notebook."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{notebook.volume_gib}Gi"}},
    }
    if settings.PORTAL_NOTEBOOK_STORAGE_CLASS:
        spec["storageClassName"] = settings.PORTAL_NOTEBOOK_STORAGE_CLASS
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _notebook_metadata(notebook, notebook.volume_name),
        "spec": spec,
    }


def render_notebook_service(notebook) -> dict[str, Any]:
    """A ClusterIP Service in front of the server, named like the URL's host part; the ingress routes to it. It
    targets the container's port by name, so every workspace kind (jobs.notebook.workspaces) is reached on port 80."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _notebook_metadata(notebook, notebook.resource_name),
        "spec": {
            "type": "ClusterIP",
            "selector": {NOTEBOOK_LABEL: notebook.resource_name},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
        },
    }

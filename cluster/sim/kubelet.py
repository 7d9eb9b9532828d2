"""The kubelet on every node, with its device manager: what happens to a pod once it is bound.

Reads pods bound to a node (``spec.nodeName``), the pod's ``podsim`` record, the Node's ``hw`` record (GPUs,
MIG layout, time-slicing replicas, pod CIDR) and the owning Job (annotations, ``activeDeadlineSeconds``).
Writes the pod's status (hostIP, podIP, conditions, containerStatuses, phase), the ``podsim`` record (stage,
devices, duration and exit code from the simulation conventions) and the kubelet's Events. A pod moves
bound -> ContainerCreating -> Running -> Succeeded/Failed as the clock passes ``container_creating_seconds``
and its duration; an image that cannot be pulled goes ErrImagePull -> ImagePullBackOff instead. The device
manager hands the container specific GPUs, MIG devices or time-sliced replicas (``podsim.devices``), which the
logs and the DCGM exporter show.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import json
import re
from typing import Any

from vocab.dra import GPU_DRIVER, PROFILE_ATTRIBUTE
from vocab.images import normalise_registry, registry_of
from vocab.names import (
    DOCKERCONFIGJSON_ITEM,
    DOCKERCONFIGJSON_SECRET_TYPE,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MIG_STRATEGY_SINGLE,
    is_mig_resource,
    is_nvidia,
    mig_resource_name,
    shared_resource_name,
)

from ..base import KubeObject
from .constants import (
    CUDA_CHECK_PROGRAM,
    CUDA_CHECK_SECONDS,
    DURATION_ANNOTATION,
    DURATION_ENV,
    EXIT_CODE_ANNOTATION,
    EXIT_CODE_ENV,
    FAIL_AFTER_ENV,
    FAIL_RANK_ENV,
    IMAGE_PULL_FAILURE_MARKER,
    OOM_EXIT_CODE,
    TERMINAL,
)
from .events import bump_event_count, kubelet_event
from .pod_resources import pod_rank, pod_requests
from .store import Txn, mark_changed, object_key, stable_hex, timestamp, touch


def _qualified_image(image: str) -> str:
    """docker.io/library/name:latest style reference, as containerd reports it."""
    name = image
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + (name if rest else "library/" + name)
    last = name.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        name += ":latest"
    return name


def reconcile(tx: Txn) -> None:
    """Start the pods the scheduler bound since the last round (in bind order), then move every pod on."""
    fresh = sorted(
        (sim.get("bound_rv", 0), key)
        for key, sim in tx.state["podsim"].items()
        if sim.get("stage") == "bound" and "devices" not in sim and key in tx.state["pods"]
    )
    for _, key in fresh:
        _admit(tx, key)
    _advance_pods(tx)


def _admit(tx: Txn, key: str) -> None:
    """The pod arrives on the node: its devices, its IP, ContainerCreating."""
    pod, sim = tx.state["pods"][key], tx.state["podsim"][key]
    node_name = pod["spec"].get("nodeName")
    if node_name not in tx.state["nodes"]:
        return
    node, hw = tx.state["nodes"][node_name], tx.state["hw"][node_name]
    bound = sim["bound"]
    duration, exit_code = _workload_behaviour(tx, pod)
    sim.update(duration=duration, exit_code=exit_code)
    sim["pull_error"] = _pull_error(tx, pod)
    sim["image_fails"] = sim["pull_error"] is not None
    sim["devices"] = _assign_devices(tx, node_name, pod)
    addresses = node["status"].get("addresses") or []
    host_ip = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")
    pod_ip = f"10.244.{hw['index']}.{hw['next_ip'] % 250 + 2}"
    hw["next_ip"] += 1
    sim["pod_ip"] = pod_ip
    status = pod["status"]
    status.update(
        phase="Pending",
        hostIP=host_ip,
        startTime=timestamp(bound),
        conditions=_pod_conditions(pod, bound, None),
        containerStatuses=_container_statuses(pod, {"waiting": {"reason": "ContainerCreating"}}, False, False),
    )
    status.pop("message", None)
    status.pop("reason", None)
    touch(tx, pod)


def next_due(tx: Txn) -> float | None:
    """The next moment a pod's containers change state on their own (created, pull failed, exited)."""
    timing = tx.state["timing"]
    times: list[float] = []
    for sim in tx.state["podsim"].values():
        stage, bound = sim.get("stage"), sim.get("bound")
        if stage == "bound" and (sim.get("mount_problem") or sim.get("config_problem")):
            continue  # waits for a Secret to appear (an API write settles the clock), not for time
        if stage == "bound" and bound is not None:
            delay = "image_pull_error_seconds" if sim.get("image_fails") else "container_creating_seconds"
            times.append(bound + timing[delay])
        elif stage == "errimagepull":
            times.append(bound + timing["image_pull_error_seconds"] + timing["image_pull_backoff_seconds"])
        elif stage == "running" and sim.get("duration") is not None:
            times.append(sim["running"] + sim["duration"])
    return min(times) if times else None


def _advance_pods(tx: Txn) -> None:
    timing = tx.state["timing"]
    for key in sorted(tx.state["pods"]):
        pod = tx.state["pods"].get(key)
        sim = tx.state["podsim"].get(key)
        if pod is None or sim is None or sim.get("bound") is None or sim["stage"] in ("succeeded", "failed"):
            continue
        horizon = tx.now
        job_deadline = _job_deadline(tx, sim.get("job"))
        if job_deadline is not None:
            horizon = min(horizon, job_deadline)
        bound = sim["bound"]
        images = [str(c.get("image")) for c in pod["spec"]["containers"]]
        if sim.get("image_fails"):
            error_at = bound + timing["image_pull_error_seconds"]
            backoff_at = error_at + timing["image_pull_backoff_seconds"]
            if sim["stage"] == "bound" and horizon >= error_at:
                kubelet_event(tx, pod, "Normal", "Pulling", f'Pulling image "{images[0]}"', bound + 0.5)
                failed_image, why = sim.get("pull_error") or _not_found(images[0])
                kubelet_event(tx, pod, "Warning", "Failed", f'Failed to pull image "{failed_image}": {why}', error_at)
                kubelet_event(tx, pod, "Warning", "Failed", "Error: ErrImagePull", error_at)
                _set_waiting(tx, pod, "ErrImagePull", why)
                sim["stage"] = "errimagepull"
            if sim["stage"] == "errimagepull" and horizon >= backoff_at:
                sim["backoff_event"] = kubelet_event(
                    tx, pod, "Normal", "BackOff", f'Back-off pulling image "{images[0]}"', backoff_at
                )
                kubelet_event(tx, pod, "Warning", "Failed", "Error: ImagePullBackOff", backoff_at)
                _set_waiting(tx, pod, "ImagePullBackOff", f'Back-off pulling image "{images[0]}"')
                sim["stage"] = "backoff"
                sim["backoff_at"] = backoff_at
            if sim["stage"] == "backoff":
                # The kubelet keeps retrying; the aggregated events count up.
                count = 1 + int((horizon - sim["backoff_at"]) // 20)
                bump_event_count(tx, sim.get("backoff_event"), count, horizon)
            continue
        running_at = bound + timing["container_creating_seconds"]
        if sim["stage"] == "bound" and horizon >= running_at:
            # The kubelet mounts the pod's volumes before it pulls, and builds each container's environment after:
            # a missing Secret keeps the pod ContainerCreating (FailedMount) or its container waiting in
            # CreateContainerConfigError until the Secret appears.
            blocked = bool(sim.get("mount_problem") or sim.get("config_problem"))
            mount_problem = _secret_volume_problem(tx, pod)
            if mount_problem:
                if sim.get("mount_problem") != mount_problem:
                    kubelet_event(tx, pod, "Warning", "FailedMount", mount_problem, horizon if blocked else running_at)
                    sim["mount_problem"] = mount_problem
                    mark_changed(tx)
                continue
            if not sim.get("pulled"):
                kubelet_event(tx, pod, "Normal", "Pulling", f'Pulling image "{images[0]}"', bound + 0.5)
                pull = max(0.1, timing["container_creating_seconds"] - 1.5)
                kubelet_event(
                    tx,
                    pod,
                    "Normal",
                    "Pulled",
                    f'Successfully pulled image "{images[0]}" in {pull:.6f}s',
                    bound + 0.5 + pull,
                )
                sim["pulled"] = True
            config_problem = _secret_env_problem(tx, pod)
            if config_problem:
                if sim.get("config_problem") != config_problem:
                    kubelet_event(tx, pod, "Warning", "Failed", f"Error: {config_problem}", horizon)
                    _set_waiting(tx, pod, "CreateContainerConfigError", config_problem)
                    sim["config_problem"] = config_problem
                continue
            if blocked:
                running_at = horizon
                sim.pop("mount_problem", None)
                sim.pop("config_problem", None)
            for container in pod["spec"]["containers"]:
                kubelet_event(
                    tx,
                    pod,
                    "Normal",
                    "Created",
                    f"Created container {container['name']}",
                    running_at,
                    container["name"],
                )
                kubelet_event(
                    tx,
                    pod,
                    "Normal",
                    "Started",
                    f"Started container {container['name']}",
                    running_at,
                    container["name"],
                )
            status = pod["status"]
            status.update(
                phase="Running",
                podIP=sim["pod_ip"],
                podIPs=[{"ip": sim["pod_ip"]}],
                conditions=_pod_conditions(pod, bound, running_at),
                containerStatuses=_container_statuses(
                    pod, {"running": {"startedAt": timestamp(running_at)}}, True, True
                ),
            )
            sim.update(stage="running", running=running_at)
            touch(tx, pod)
        if sim["stage"] == "running" and sim.get("duration") is not None:
            finished_at = sim["running"] + sim["duration"]
            if horizon >= finished_at:
                _terminate_pod(tx, key, finished_at, int(sim.get("exit_code") or 0))


def _terminate_pod(tx: Txn, key: str, when: float, exit_code: int) -> None:
    pod, sim = tx.state["pods"][key], tx.state["podsim"][key]
    succeeded = exit_code == 0
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if succeeded else "OOMKilled" if exit_code == OOM_EXIT_CODE else "Error",
        "startedAt": timestamp(sim["running"]),
        "finishedAt": timestamp(when),
    }
    pod["status"].update(
        phase="Succeeded" if succeeded else "Failed",
        conditions=_pod_conditions(pod, sim["bound"], None, terminal=True, not_ready_at=when),
        containerStatuses=_container_statuses(pod, {"terminated": terminated}, False, False),
    )
    sim.update(stage="succeeded" if succeeded else "failed", finished=when)
    touch(tx, pod)  # the Job controller counts it from the phase


def _set_waiting(tx: Txn, pod: KubeObject, reason: str, message: str) -> None:
    pod["status"]["containerStatuses"] = _container_statuses(
        pod, {"waiting": {"reason": reason, "message": message}}, False, False
    )
    touch(tx, pod)


def _job_deadline(tx: Txn, job_key: str | None) -> float | None:
    job = tx.state["jobs"].get(job_key or "")
    if job is None or job["spec"].get("activeDeadlineSeconds") is None:
        return None
    return tx.state["jobsim"][job_key]["started"] + job["spec"]["activeDeadlineSeconds"]


def _assign_devices(tx: Txn, node_name: str, pod: KubeObject) -> list[str]:
    """Which devices the device plugin (and NVIDIA's DRA plugin, for claims) hands to the container (for believable
    logs and the GPU telemetry of the pod)."""
    hw = tx.state["hw"][node_name]
    requests = pod_requests(pod["spec"])
    if not hw.get("gpu"):
        # A node added as a raw object: all we know is what its labels say.
        product = (tx.state["nodes"][node_name]["metadata"].get("labels") or {}).get(GPU_PRODUCT_LABEL, "GPU")
        wanted = sum(int(v) for r, v in requests.items() if is_nvidia(r))
        return [f"{index}|{product}|" for index in range(wanted)]
    taken: set[str] = set()
    for other_key, other in tx.state["pods"].items():
        if other["spec"].get("nodeName") == node_name and other["status"].get("phase") not in TERMINAL:
            taken.update(tx.state["podsim"].get(other_key, {}).get("devices") or [])
    product = hw["gpu"]["product"]
    count = int(hw["gpu"]["count"])
    devices: list[str] = _prepared_dra_devices(tx, node_name, pod, product)
    gpus = hw["mig"].get("gpus") or [None] * count
    for resource, amount in sorted(requests.items()):
        if not is_nvidia(resource) or amount <= 0:
            continue
        candidates: list[str] = []
        if is_mig_resource(resource) or (
            hw["mig"].get("strategy") == MIG_STRATEGY_SINGLE and any(g is not None for g in gpus)
        ):
            for index, layout in enumerate(gpus):
                for profile, n in sorted((layout or {}).items()):
                    own = mig_resource_name(profile)
                    if is_mig_resource(resource) and resource not in (own, shared_resource_name(own)):
                        continue
                    for slot in range(n):
                        candidates.append(f"{index}|{product}|MIG {profile} Device {slot}")
        else:
            replicas = int(((hw.get("sharing") or {}).get("resources") or {}).get(GPU_RESOURCE, 1))
            for replica in range(replicas):
                for index in range(count):
                    candidates.append(f"{index}|{product}|{'replica ' + str(replica) if replicas > 1 else ''}")
        free = [c for c in candidates if c not in taken]
        devices.extend(free[: int(amount)])
    return devices


def _prepared_dra_devices(tx: Txn, node_name: str, pod: KubeObject, product: str) -> list[str]:
    """The GPUs and MIG devices NVIDIA's DRA kubelet plugin prepares for the pod (NodePrepareResources): those of
    its claims' allocations on this node, read from the claims the scheduler reserved for it."""
    namespace = pod["metadata"]["namespace"]
    generated = {e["name"]: e.get("resourceClaimName") for e in pod["status"].get("resourceClaimStatuses") or []}
    claims = tx.state.get("resourceclaims") or {}
    published = {
        d["name"]: d
        for s in (tx.state.get("resourceslices") or {}).values()
        if s["spec"].get("nodeName") == node_name and s["spec"]["driver"] == GPU_DRIVER
        for d in s["spec"].get("devices") or []
    }
    devices = []
    for pod_claim in pod["spec"].get("resourceClaims") or []:
        name = pod_claim.get("resourceClaimName") or generated.get(pod_claim["name"])
        allocation = ((claims.get(object_key(namespace, str(name))) or {}).get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            device = published.get(result["device"])
            if result["driver"] != GPU_DRIVER or result["pool"] != node_name or device is None:
                continue
            minor = int(result["device"].split("-")[1])
            profile = (device.get("attributes") or {}).get(PROFILE_ATTRIBUTE, {}).get("string")
            if not profile:
                devices.append(f"{minor}|{product}|")
                continue
            # The n-th instance of its profile on its GPU, in placement order (as dcgm-exporter numbers them).
            siblings = sorted(
                (int(other.rsplit("-", 1)[1]), other)
                for other, d in published.items()
                if other.startswith(f"gpu-{minor}-mig-")
                and (d.get("attributes") or {}).get(PROFILE_ATTRIBUTE, {}).get("string") == profile
            )
            slot = [other for _, other in siblings].index(result["device"])
            devices.append(f"{minor}|{product}|MIG {profile} Device {slot}")
    return devices


def _workload_behaviour(tx: Txn, pod: KubeObject) -> tuple[float | None, int]:
    """How long the container runs (None = until deleted) and its exit code, from the conventions."""
    annotations: dict[str, str] = {}
    sim = tx.state["podsim"].get(object_key(pod["metadata"]["namespace"], pod["metadata"]["name"])) or {}
    job = tx.state["jobs"].get(sim.get("job") or "")
    if job is not None:
        annotations.update(job["spec"]["template"].get("metadata", {}).get("annotations") or {})
        annotations.update(job["metadata"].get("annotations") or {})
    annotations.update(pod["metadata"].get("annotations") or {})
    duration: float | None = None
    container = pod["spec"]["containers"][0]
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if isinstance(e, dict)}
    words = " ".join(str(w) for w in (container.get("command") or []) + (container.get("args") or []))
    sleep = re.search(r"(?:^|[\s;&|])sleep\s+([0-9]+(?:\.[0-9]+)?)s?\s*[\"']?\s*$", words)
    for candidate in (
        annotations.get(DURATION_ANNOTATION),
        env.get(DURATION_ENV),
        sleep.group(1) if sleep else None,
    ):
        if candidate is None:
            continue
        with contextlib.suppress(ValueError):
            duration = max(0.0, float(candidate))
            break
    exit_code = 0
    with contextlib.suppress(ValueError, TypeError):
        exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, env.get(EXIT_CODE_ENV) or 0))
    if CUDA_CHECK_PROGRAM in words:
        hw = tx.state["hw"].get(pod["spec"].get("nodeName") or "") or {}
        return CUDA_CHECK_SECONDS, 1 if hw.get("cuda_fault") else exit_code
    if env.get(FAIL_RANK_ENV) not in (None, ""):
        # One rank of a distributed job fails (the others run as asked): SIM_EXIT_CODE is that rank's alone.
        if str(env[FAIL_RANK_ENV]).strip() != str(pod_rank(pod)):
            return duration, 0
        after = 30.0
        with contextlib.suppress(ValueError, TypeError):
            after = max(0.0, float(env.get(FAIL_AFTER_ENV) or 30))
        return (after if duration is None else min(duration, after)), exit_code or 1
    return duration, exit_code


def _container_statuses(pod: KubeObject, state: dict[str, Any], ready: bool, started: bool) -> list[dict[str, Any]]:
    statuses = []
    for index, container in enumerate(pod["spec"]["containers"]):
        image = str(container.get("image"))
        status: dict[str, Any] = {
            "name": container["name"],
            "image": image,
            "imageID": "",
            "lastState": {},
            "ready": ready,
            "restartCount": 0,
            "started": started,
            "state": copy.deepcopy(state),
        }
        if "running" in state or "terminated" in state:
            digest = stable_hex("image", _qualified_image(image))
            status["imageID"] = f"{_qualified_image(image).rsplit(':', 1)[0]}@sha256:{digest}"
            container_id = "containerd://" + stable_hex("container", pod["metadata"]["uid"], index)
            status["containerID"] = container_id
            if "terminated" in state:
                status["state"]["terminated"]["containerID"] = container_id
        statuses.append(status)
    return statuses


def _pod_conditions(
    pod: KubeObject,
    scheduled_at: float,
    ready_at: float | None,
    terminal: bool = False,
    not_ready_at: float | None = None,
) -> list[dict[str, Any]]:
    names = ",".join(c["name"] for c in pod["spec"]["containers"])
    stamp = timestamp(scheduled_at)

    def condition(kind: str, ok: bool, when: float, reason: str | None = None, message: str | None = None):
        item: dict[str, Any] = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": timestamp(when),
        }
        if reason:
            item["reason"] = reason
        if message:
            item["message"] = message
        return item

    if terminal:
        ready = [
            condition("Ready", False, not_ready_at or scheduled_at, "PodCompleted"),
            condition("ContainersReady", False, not_ready_at or scheduled_at, "PodCompleted"),
        ]
    elif ready_at is not None:
        ready = [condition("Ready", True, ready_at), condition("ContainersReady", True, ready_at)]
    else:
        message = f"containers with unready status: [{names.replace(',', ' ')}]"
        ready = [
            condition("Ready", False, scheduled_at, "ContainersNotReady", message),
            condition("ContainersReady", False, scheduled_at, "ContainersNotReady", message),
        ]
    initialized = condition("Initialized", True, scheduled_at, "PodCompleted" if terminal else None)
    scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
    return [initialized, *ready, scheduled]


# -- Secrets the pod uses, and registries that want credentials ------------------------------------------------


def _secret(tx: Txn, namespace: str, name: str) -> KubeObject | None:
    return (tx.state.get("secrets") or {}).get(object_key(namespace, name))


def _secret_volume_problem(tx: Txn, pod: KubeObject) -> str | None:
    """The FailedMount message for the first secret volume that cannot be set up (kubelet's secret volume plugin):
    its Secret is missing, or an item names a key the Secret does not have."""
    namespace = pod["metadata"]["namespace"]
    for volume in pod["spec"].get("volumes") or []:
        source = volume.get("secret")
        if source is None or source.get("optional"):
            continue
        secret = _secret(tx, namespace, str(source.get("secretName")))
        prefix = f'MountVolume.SetUp failed for volume "{volume.get("name")}" : '
        if secret is None:
            return prefix + f'secret "{source.get("secretName")}" not found'
        for item in source.get("items") or []:
            if item.get("key") not in (secret.get("data") or {}):
                return prefix + f"references non-existent secret key: {item.get('key')}"
    return None


def _secret_env_problem(tx: Txn, pod: KubeObject) -> str | None:
    """Why the kubelet cannot build a container's environment (makeEnvironmentVariables), in its words."""
    namespace = pod["metadata"]["namespace"]
    for container in pod["spec"]["containers"]:
        for item in container.get("env") or []:
            ref = (item.get("valueFrom") or {}).get("secretKeyRef") if isinstance(item, dict) else None
            if ref is None or ref.get("optional"):
                continue
            secret = _secret(tx, namespace, str(ref.get("name")))
            if secret is None:
                return f'secret "{ref.get("name")}" not found'
            if ref.get("key") not in (secret.get("data") or {}):
                return f"couldn't find key {ref.get('key')} in Secret {namespace}/{ref.get('name')}"
    return None


def _not_found(image: str) -> tuple[str, str]:
    reference = _qualified_image(image)
    return image, (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": failed to resolve '
        f'reference "{reference}": {reference}: not found'
    )


def _pull_credentials(tx: Txn, pod: KubeObject, host: str) -> list[tuple[str, str]]:
    """(user, password) pairs the pod's imagePullSecrets hold for ``host`` (the kubelet's keyring lookup)."""
    found: list[tuple[str, str]] = []
    namespace = pod["metadata"]["namespace"]
    for ref in pod["spec"].get("imagePullSecrets") or []:
        secret = _secret(tx, namespace, str((ref or {}).get("name")))
        if secret is None or secret.get("type") != DOCKERCONFIGJSON_SECRET_TYPE:
            continue
        try:
            config = json.loads(base64.b64decode((secret.get("data") or {}).get(DOCKERCONFIGJSON_ITEM, "")))
        except (ValueError, binascii.Error):
            continue
        for key, entry in ((config or {}).get("auths") or {}).items():
            if normalise_registry(key) != host or not isinstance(entry, dict):
                continue
            user, password = entry.get("username"), entry.get("password")
            if entry.get("auth") and not (user and password):
                with contextlib.suppress(ValueError, binascii.Error):
                    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            if user is not None and password is not None:
                found.append((str(user), str(password)))
    return found


def _pull_error(tx: Txn, pod: KubeObject) -> tuple[str, str] | None:
    """(image, containerd's error) for the first image the node cannot pull, or None when all can be pulled.

    The scenario's ``registries:`` say which registries want credentials (``private: true``, or a list of
    repository prefixes that do) and the accounts they accept; an image there is pulled only with a matching
    imagePullSecret. An image whose name holds IMAGE_PULL_FAILURE_MARKER does not exist anywhere."""
    registries = tx.state.get("registries") or {}
    for container in pod["spec"]["containers"]:
        image = str(container.get("image", ""))
        if IMAGE_PULL_FAILURE_MARKER in image:
            return _not_found(image)
        host = registry_of(image)
        registry = registries.get(host)
        if not registry:
            continue
        private = registry.get("private")
        repository = _qualified_image(image).split("/", 1)[1]
        if isinstance(private, list):
            private = any(repository.startswith(str(prefix)) for prefix in private)
        if not private:
            continue
        accepted = {(str(a.get("username")), str(a.get("password"))) for a in registry.get("accounts") or []}
        if accepted & set(_pull_credentials(tx, pod, host)):
            continue
        reference = _qualified_image(image)
        tag = reference.rsplit(":", 1)[-1] if "@" not in reference else reference.rsplit("@", 1)[-1]
        return image, (
            f'rpc error: code = Unknown desc = failed to pull and unpack image "{reference}": failed to resolve '
            f'reference "{reference}": pulling from host {host} failed with status code [manifests {tag}]: '
            "401 Unauthorized"
        )
    return None

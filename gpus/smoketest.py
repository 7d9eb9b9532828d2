"""The node smoke test: the quickest proof that a node can run GPU work, from one click or one API call.

An admin starts it; ``advance_smoke_tests`` (run with the node-operations task, kicked on request and by beat, once
per cluster with that cluster's backend) creates, in the node's own cluster, a Kubernetes Job in the portal's own
namespace whose single pod is pinned to the node (node affinity on its name, tolerating the node's taints), holds
one whole GPU or one MIG slice, and runs ``nvidia-smi`` and NVIDIA's vectorAdd CUDA sample. When the pod ends, its
log is kept on the run and the exit code decides passed or failed; a pod that cannot be scheduled or does not
finish within PORTAL_SMOKE_TEST_TIMEOUT fails with the cluster's reason. The node's diagnosis reads the latest
finished run (gpus.diagnosis).

Security: the pod is the portal's, not a user's: no privilege, no host namespaces or paths, all capabilities
dropped, no service-account token, and its only command is fixed here.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, ClusterBackend, ClusterError, NotFound
from core import audit
from vocab import names, pod_states

from .choices import InventoryAuditAction, SmokeTestState
from .diagnosis import ERROR, OK, Finding
from .models import Cluster, Node, NodeSmokeTest, settings_cluster_pk

log = logging.getLogger(__name__)

#: Label on the smoke test's Job and pod: which run they belong to.
SMOKE_TEST_LABEL = "gpu-portal.io/smoke-test"
COMMAND = ["sh", "-c", "nvidia-smi && /cuda-samples/vectorAdd"]
#: Lines of output kept on the run.
KEEP_LINES = 200


#: The node-operations task runs the smoke tests too (sent by name: gpus.tasks imports this module).
ADVANCE_TASK = "gpus.tasks.advance_node_config_operations"


def kick() -> None:
    try:
        current_app.send_task(ADVANCE_TASK, expires=60)
    except Exception:  # a broker outage must not fail the request; beat runs the task anyway
        log.warning("could not queue the smoke test; beat will start it", exc_info=True)


class SmokeTestRefused(Exception):
    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def pick_resource(node: Node) -> str | None:
    """One whole GPU where the node advertises any, else its first MIG slice resource (smallest name first)."""
    allocatable = {k: v for k, v in (node.allocatable or {}).items() if names.is_nvidia(k)}

    def amount(key: str) -> int:
        try:
            return int(str(allocatable.get(key, "0")))
        except ValueError:
            return 0

    if amount(names.GPU_RESOURCE) > 0:
        return names.GPU_RESOURCE
    for key in sorted(allocatable):
        if names.is_mig_resource(key) and amount(key) > 0:
            return key
    shared = names.shared_resource_name(names.GPU_RESOURCE)
    return shared if amount(shared) > 0 else None


def request_smoke_test(user, node: Node) -> NodeSmokeTest:
    errors = [problem] if (problem := node.operated_here()) else []
    resource = pick_resource(node)
    if resource is None:
        errors.append(
            f"{node.name} advertises no allocatable GPU or MIG slice, so no test pod can be scheduled there; "
            "its diagnosis says why."
        )
    if NodeSmokeTest.objects.filter(node=node, state__in=(SmokeTestState.PENDING, SmokeTestState.RUNNING)).exists():
        errors.append(f"A smoke test is already running on {node.name}; wait for its result.")
    if errors:
        raise SmokeTestRefused(errors)
    with transaction.atomic():
        run = NodeSmokeTest.objects.create(
            node=node, resource=resource, namespace=settings.PORTAL_SMOKE_TEST_NAMESPACE, requested_by=user
        )
        audit.record(user, InventoryAuditAction.NODE_SMOKE_TEST, run, after={"node": node.name, "resource": resource})
    transaction.on_commit(kick)
    return run


def render(run: NodeSmokeTest) -> dict:
    """The smoke test's batch/v1 Job."""
    node = run.node
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, SMOKE_TEST_LABEL: str(run.pk)}
    tolerations = [{"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": names.NO_SCHEDULE}]
    for taint in node.taints or []:
        wanted = {"key": taint.get("key"), "operator": "Exists", "effect": taint.get("effect")}
        if taint.get("key") and wanted not in tolerations:
            tolerations.append(wanted)
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": tolerations,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.name]}]}
                    ]
                }
            }
        },
        "containers": [
            {
                "name": "smoke-test",
                "image": settings.PORTAL_SMOKE_TEST_IMAGE,
                "command": list(COMMAND),
                # nvidia-smi is mounted by the NVIDIA container toolkit only with the "utility" capability.
                "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
                "resources": {
                    "limits": {run.resource: 1, "cpu": "1", "memory": "512Mi"},
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                },
                "securityContext": {
                    "privileged": False,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if settings.PORTAL_RUNTIME_CLASS:
        pod_spec["runtimeClassName"] = settings.PORTAL_RUNTIME_CLASS
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": run.workload_name or f"gpu-smoke-{run.pk}", "namespace": run.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.PORTAL_SMOKE_TEST_TIMEOUT,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _finish(run: NodeSmokeTest, state: str, output: str, reason: str = "") -> None:
    lines = output.splitlines()[-KEEP_LINES:]
    now = timezone.now()
    updated = NodeSmokeTest.objects.filter(
        pk=run.pk, state__in=(SmokeTestState.PENDING, SmokeTestState.RUNNING)
    ).update(state=state, output="\n".join(lines), reason=reason, finished_at=now)
    if updated:
        run.state, run.output, run.reason, run.finished_at = state, "\n".join(lines), reason, now


def _pod_reason(pod: dict) -> str:
    """Why the test pod has not run, in the words every workload's pod is said in (vocab.pod_states)."""
    reason, message = pod_states.waiting_reason(pod)
    if not reason:
        return ""
    image = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("image", "")
    subject = pod_states.Subject(namespace=pod["metadata"].get("namespace", ""), image=image)
    return pod_states.waiting(reason, message, subject).sentence


def advance_smoke_tests(backend: ClusterBackend, cluster: Cluster | None = None) -> dict:
    """Create the pod of every new run on the nodes of ``cluster`` (None: the cluster configured in settings), whose
    backend ``backend`` is, and collect the result of every finished one. Idempotent."""
    counts = {"started": 0, "finished": 0}
    cluster_id = cluster.pk if cluster is not None else settings_cluster_pk()
    runs = NodeSmokeTest.objects.filter(
        state__in=(SmokeTestState.PENDING, SmokeTestState.RUNNING), node__cluster_id=cluster_id
    ).select_related("node")
    for run in runs:
        try:
            _advance(backend, run, counts)
        except ClusterError as error:
            log.warning("smoke test %s: %s", run.pk, error)
    return counts


def _advance(backend: ClusterBackend, run: NodeSmokeTest, counts: dict) -> None:
    if run.state == SmokeTestState.PENDING:
        run.workload_name = f"gpu-smoke-{run.pk}"
        backend.ensure_namespace(run.namespace)
        backend.create_workload(render(run))  # idempotent: the name is the run's
        NodeSmokeTest.objects.filter(pk=run.pk, state=SmokeTestState.PENDING).update(
            state=SmokeTestState.RUNNING, workload_name=run.workload_name
        )
        run.state = SmokeTestState.RUNNING
        counts["started"] += 1
    pods = backend.list_pods(namespace=run.namespace, label_selector=f"{SMOKE_TEST_LABEL}={run.pk}")
    pod = pods[0] if pods else None
    if pod is not None:
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"]["name"] != run.pod_name:
            run.pod_name = pod["metadata"]["name"]
            NodeSmokeTest.objects.filter(pk=run.pk).update(pod_name=run.pod_name)
        if phase in ("Succeeded", "Failed"):
            try:
                output = backend.pod_logs(run.namespace, run.pod_name, tail_lines=KEEP_LINES)
            except NotFound:
                output = ""
            if phase == "Succeeded":
                _finish(run, SmokeTestState.PASSED, output)
            else:
                code = _exit_code(pod)
                last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
                _finish(run, SmokeTestState.FAILED, output, f"The check exited with code {code}: {last}".strip(": "))
            counts["finished"] += 1
            backend.delete_workload(run.namespace, run.workload_name)
            return
    if timezone.now() - run.created > timedelta(seconds=settings.PORTAL_SMOKE_TEST_TIMEOUT):
        why = (_pod_reason(pod) if pod else "") or "the test pod was not created"
        why += "" if why.endswith(".") else "."
        _finish(run, SmokeTestState.FAILED, "", f"No result after {settings.PORTAL_SMOKE_TEST_TIMEOUT} s: {why}")
        counts["finished"] += 1
        backend.delete_workload(run.namespace, run.workload_name)


def _exit_code(pod: dict) -> int | str:
    state, detail = pod_states.container_state(pod)
    return detail["exitCode"] if state == "terminated" and "exitCode" in detail else "?"


def latest_by_node(node_ids) -> dict[int, NodeSmokeTest]:
    """Node id → its latest finished run: two queries whose size is the number of nodes, not of runs ever made
    (the inventory reconcile calls this every interval; ids grow with creation, so the newest is the largest)."""
    newest = (
        NodeSmokeTest.objects.filter(
            node_id__in=list(node_ids), state__in=(SmokeTestState.PASSED, SmokeTestState.FAILED)
        )
        .values("node_id")
        .annotate(last=Max("id"))
        .values_list("last", flat=True)
    )
    return {run.node_id: run for run in NodeSmokeTest.objects.filter(pk__in=list(newest))}


def ran_and_failed(run: NodeSmokeTest | None) -> bool:
    """The check itself ran on a GPU and failed (not a pod that never got scheduled: that says nothing of the GPU)."""
    return run is not None and run.state == SmokeTestState.FAILED and bool(run.output)


def finding(run: NodeSmokeTest | None) -> Finding | None:
    """The diagnosis's "smoke test" layer from the latest finished run; None when the node never had one."""
    if run is None:
        return None
    when = f"{run.finished_at or run.created:%Y-%m-%d %H:%M} UTC"
    if run.state == SmokeTestState.PASSED:
        return Finding("smoke test", OK, f"Smoke test passed ({when})", "nvidia-smi and a CUDA program ran on one "
                       f"{run.resource}.")  # fmt: skip
    action = (
        "Look at the output on this page; drain the node and check the GPU (nvidia-smi -q, dmesg for Xid errors), "
        "then run the smoke test again: a passing run clears this."
    )
    if not ran_and_failed(run):
        return Finding("smoke test", "warning", f"Smoke test could not run ({when})", run.reason,
                       "A busy node has no free GPU for the test pod: run it again when one is free.")  # fmt: skip
    return Finding("smoke test", ERROR, f"Smoke test failed ({when})", run.reason, action)

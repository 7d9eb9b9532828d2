"""The Job controller (and the garbage collector's part for Jobs): batch/v1 Job -> Pods -> Job status.

Reads Jobs (with the ``jobsim`` record beside each: start time, when the next pod may be created, which
finished pods it has counted) and their Pods. Writes Pods (one at a time, with the API server's pod defaults:
``generateName`` suffix, owner reference, service account, DefaultTolerationSeconds), the Job's status
(``active``, ``succeeded``, ``failed``, ``Complete``/``Failed`` conditions, ``completionTime``), retries with
exponential backoff (``job_backoff_seconds`` doubling, capped at 360 s) up to ``backoffLimit``, fails a Job past
``activeDeadlineSeconds`` (deleting its running pods) and records the job-controller Events. Pods whose owning
Job no longer exists are deleted (background propagation), and so are Secrets whose owners were all Jobs that no
longer exist. Indexed Jobs (completionMode Indexed) get one pod per
completion index, run in parallel, with the index annotation, JOB_COMPLETION_INDEX and a ``<job>-<index>``
hostname. It learns that a pod ended only from the pod's
phase, which the kubelet writes.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from vocab.names import (
    JOB_COMPLETION_INDEX_ANNOTATION,
)

from ..base import KubeObject
from .constants import TERMINAL
from .events import kubelet_event, record_event
from .pod_resources import store_new_pod
from .store import Txn, bump_rv, delete_pod, new_metadata, object_key, owner_uid, timestamp, touch

#: The variable the Indexed Job controller sets in every container, from the completion-index annotation.
JOB_COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery utilrand.String
_RANDOM = random.Random()  # pod name suffixes only


def reconcile(tx: Txn) -> None:
    """One round: collect the pods of deleted Jobs, then bring every unfinished Job up to date."""
    _collect_orphans(tx)
    index = _pods_by_job(tx)
    _count_finished(tx, index)
    for key, sim in tx.state["jobsim"].items():
        if not sim.get("finished"):
            _reconcile_job(tx, key, index.get(key, []))


def _reconcile_job(tx: Txn, key: str, pods: list[tuple[str, KubeObject]] | None = None) -> None:
    job = tx.state["jobs"].get(key)
    sim = tx.state["jobsim"].get(key)
    if job is None or sim is None or sim.get("finished"):
        return
    if pods is None:
        pods = _job_pods(tx, key)
    spec, status = job["spec"], job["status"]
    if not spec.get("parallelism") or not spec.get("completions"):
        return
    if spec.get("completionMode") == "Indexed":
        _reconcile_indexed(tx, key, pods)
        return
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and tx.now >= sim["started"] + deadline:
        _fail_job(
            tx, key, sim["started"] + deadline, "DeadlineExceeded", "Job was active longer than specified deadline"
        )
        return
    active = [p for _, p in pods if p["status"].get("phase") not in TERMINAL]
    if status.get("succeeded", 0) >= spec["completions"] or active:
        _set_job_counts(tx, job, len(active))
        return
    if status.get("failed", 0) > spec.get("backoffLimit", 6):
        when = sim.get("last_failure_at", tx.now)
        _fail_job(tx, key, when, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return
    if tx.now >= sim.get("next_pod_at", tx.now):
        _create_pod(tx, key)
        _set_job_counts(tx, job, 1)
    else:
        _set_job_counts(tx, job, 0)


def _reconcile_indexed(tx: Txn, key: str, pods: list[tuple[str, KubeObject]]) -> None:
    """An Indexed Job (completionMode Indexed): one pod per completion index 0..completions-1, at most
    ``parallelism`` at once, each with its index in an annotation, JOB_COMPLETION_INDEX and the hostname
    ``<job>-<index>``. Past ``backoffLimit`` failed pods the Job fails at once and its running pods are deleted
    (backoffLimit 0: the first failed pod ends it), as the v1.24+ controller does."""
    job, sim = tx.state["jobs"][key], tx.state["jobsim"][key]
    spec, status = job["spec"], job["status"]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and tx.now >= sim["started"] + deadline:
        _fail_job(
            tx, key, sim["started"] + deadline, "DeadlineExceeded", "Job was active longer than specified deadline"
        )
        return
    if status.get("failed", 0) > spec.get("backoffLimit", 6):
        when = sim.get("last_failure_at", tx.now)
        _fail_job(tx, key, when, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        return
    active, done = set(), set()
    for _, pod in pods:
        index = _completion_index(pod)
        phase = pod["status"].get("phase")
        if phase == "Succeeded":
            done.add(index)
        elif phase not in TERMINAL:
            active.add(index)
    if done:
        completed = _index_ranges(sorted(done))
        if status.get("completedIndexes") != completed:
            status["completedIndexes"] = completed
            touch(tx, job)
    wanted = [i for i in range(int(spec["completions"])) if i not in done and i not in active]
    room = int(spec["parallelism"]) - len(active)
    if wanted and room > 0 and tx.now >= sim.get("next_pod_at", tx.now):
        for index in wanted[:room]:
            _create_pod(tx, key, index)
            active.add(index)
    _set_job_counts(tx, job, len(active))


def _completion_index(pod: KubeObject) -> int:
    try:
        return int((pod["metadata"].get("annotations") or {}).get(JOB_COMPLETION_INDEX_ANNOTATION, -1))
    except ValueError:
        return -1


def _expand_ranges(text: str) -> list[int]:
    """ "0-2,5" -> [0, 1, 2, 5]."""
    indexes: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        indexes.extend(range(int(first), int(last or first) + 1))
    return indexes


def _index_ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (status.completedIndexes)."""
    parts: list[str] = []
    start = prev = indexes[0]
    for index in [*indexes[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    return ",".join(parts)


def _set_job_counts(tx: Txn, job: KubeObject, active: int) -> None:
    status = job["status"]
    if status.get("active", 0) != active:
        if active:
            status["active"] = active
        else:
            status.pop("active", None)
        touch(tx, job)


def _job_condition(kind: str, when: float, reason: str | None = None, message: str | None = None) -> dict:
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True",
        "lastProbeTime": timestamp(when),
        "lastTransitionTime": timestamp(when),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _fail_job(tx: Txn, key: str, when: float, reason: str, message: str) -> None:
    job, sim = tx.state["jobs"][key], tx.state["jobsim"][key]
    status = job["status"]
    killed = 0
    for pod_key, pod in _job_pods(tx, key):
        if pod["status"].get("phase") not in TERMINAL:
            killed += 1
            record_event(
                tx,
                job,
                "Normal",
                "SuccessfulDelete",
                f"Deleted pod: {pod['metadata']['name']}",
                "job-controller",
                when=when,
            )
            delete_pod(tx, pod_key)
    if killed:
        status["failed"] = status.get("failed", 0) + killed
    status.pop("active", None)
    status.setdefault("conditions", []).append(_job_condition("Failed", when, reason, message))
    sim["finished"] = True
    record_event(tx, job, "Warning", reason, message, "job-controller", when=when)
    touch(tx, job)


def _on_pod_terminated(
    tx: Txn, job_key: str | None, when: float, succeeded: bool, pod: KubeObject | None = None
) -> None:
    job, sim = tx.state["jobs"].get(job_key or ""), tx.state["jobsim"].get(job_key or "")
    if job is None or sim is None or sim.get("finished"):
        return
    status = job["status"]
    status.pop("active", None)
    if succeeded:
        status["succeeded"] = status.get("succeeded", 0) + 1
        if pod is not None and job["spec"].get("completionMode") == "Indexed":
            done = {int(part) for part in _expand_ranges(status.get("completedIndexes", ""))}
            status["completedIndexes"] = _index_ranges(sorted(done | {_completion_index(pod)}))
        if status["succeeded"] >= job["spec"].get("completions", 1):
            status["completionTime"] = timestamp(when)
            status.setdefault("conditions", []).append(_job_condition("Complete", when))
            sim["finished"] = True
            record_event(tx, job, "Normal", "Completed", "Job completed", "job-controller", when=when)
    else:
        status["failed"] = status.get("failed", 0) + 1
        delay = min(tx.state["timing"]["job_backoff_seconds"] * 2 ** (status["failed"] - 1), 360.0)
        sim.update(next_pod_at=when + delay, last_failure_at=when)
    touch(tx, job)


def _create_pod(tx: Txn, job_key: str, index: int | None = None) -> KubeObject:
    job = tx.state["jobs"][job_key]
    job_meta = job["metadata"]
    namespace = job_meta["namespace"]
    template = copy.deepcopy(job["spec"]["template"])
    prefix = f"{job_meta['name']}-" if index is None else f"{job_meta['name']}-{index}-"
    while True:
        suffix = "".join(_RANDOM.choice(GENERATE_NAME_ALPHABET) for _ in range(5))
        name = f"{prefix}{suffix}"
        if object_key(namespace, name) not in tx.state["pods"]:
            break
    metadata = {"generateName": prefix, **new_metadata(tx, name, namespace)}
    metadata["labels"] = dict(template.get("metadata", {}).get("labels") or {})
    if template.get("metadata", {}).get("annotations"):
        metadata["annotations"] = dict(template["metadata"]["annotations"])
    if index is not None:
        # What the Indexed Job controller adds: the index, JOB_COMPLETION_INDEX from it, a stable hostname.
        metadata.setdefault("annotations", {})[JOB_COMPLETION_INDEX_ANNOTATION] = str(index)
        template["spec"]["hostname"] = f"{job_meta['name']}-{index}"
        field = f"metadata.annotations['{JOB_COMPLETION_INDEX_ANNOTATION}']"
        for container in template["spec"].get("containers") or []:
            container.setdefault("env", []).append(
                {"name": JOB_COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": field}}}
            )
    metadata["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job_meta["name"],
            "uid": job_meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod = store_new_pod(tx, namespace, name, metadata, template["spec"], {"job": job_key})
    record_event(tx, job, "Normal", "SuccessfulCreate", f"Created pod: {name}", "job-controller")
    return pod


def _job_pods(tx: Txn, job_key: str) -> list[tuple[str, KubeObject]]:
    return [
        (key, tx.state["pods"][key])
        for key, sim in tx.state["podsim"].items()
        if sim.get("job") == job_key and key in tx.state["pods"]
    ]


def _pods_by_job(tx: Txn) -> dict[str, list[tuple[str, KubeObject]]]:
    index: dict[str, list[tuple[str, KubeObject]]] = {}
    for key, sim in tx.state["podsim"].items():
        if key in tx.state["pods"]:
            index.setdefault(sim.get("job", ""), []).append((key, tx.state["pods"][key]))
    return index


def _collect_orphans(tx: Txn) -> None:
    """The garbage collector: a deleted Job's pods go with it. A running pod's containers are stopped by the
    kubelet, which says so with its Normal ``Killing`` Event ("Stopping container main") as a real kubelet does;
    the grace period (the preStop hook, SIGTERM, SIGKILL at ``terminationGracePeriodSeconds``) is not modelled:
    the pod goes at once."""
    live = {job["metadata"]["uid"] for job in tx.state["jobs"].values()}
    for pod_key, pod in list(tx.state["pods"].items()):
        uid = owner_uid(pod)
        if uid is not None and uid not in live and _owned_by_job(pod):
            if (pod.get("status") or {}).get("phase") == "Running":
                for container in pod["spec"]["containers"]:
                    name = container["name"]
                    kubelet_event(tx, pod, "Normal", "Killing", f"Stopping container {name}", tx.now, name)
            delete_pod(tx, pod_key)
    # Other objects Jobs own (a job's checkpoint-token Secret) go once every owner is gone, as the real collector
    # deletes a dependent whose owners all no longer exist.
    secrets = tx.state.get("secrets") or {}
    for key, secret in list(secrets.items()):
        owners = [o for o in secret["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"]
        if owners and not any(o.get("uid") in live for o in owners):
            del secrets[key]
            bump_rv(tx)


def _owned_by_job(pod: KubeObject) -> bool:
    """Pods of other controllers (ReplicaSets) are theirs to collect."""
    return any(o.get("controller") and o.get("kind") == "Job" for o in pod["metadata"].get("ownerReferences") or [])


def _count_finished(tx: Txn, index: dict[str, list[tuple[str, KubeObject]]]) -> None:
    """Count the pods of unfinished Jobs that reached Succeeded or Failed since the last round, by pod name."""
    fresh: list[tuple[str, str, KubeObject]] = []
    for job_key, sim in tx.state["jobsim"].items():
        if sim.get("finished"):
            continue
        finished = [(k, p) for k, p in index.get(job_key, []) if p["status"].get("phase") in TERMINAL]
        counted = sim.get("counted")
        if counted is None:
            # State written before this record existed: every pod that had ended was counted when it ended.
            sim["counted"] = [k for k, _ in finished]
            continue
        fresh.extend((k, job_key, p) for k, p in finished if k not in counted)
    for pod_key, job_key, pod in sorted(fresh, key=lambda item: item[0]):
        tx.state["jobsim"][job_key]["counted"].append(pod_key)
        when = tx.state["podsim"][pod_key].get("finished")
        _on_pod_terminated(tx, job_key, tx.now if when is None else when, pod["status"]["phase"] == "Succeeded", pod)


def next_due(tx: Txn) -> float | None:
    """The next deadline to enforce, or the next moment a Job without a running pod may create one."""
    state = tx.state
    times: list[float] = []
    active_jobs = {
        sim.get("job")
        for key, sim in state["podsim"].items()
        if key in state["pods"] and state["pods"][key]["status"].get("phase") not in TERMINAL
    }
    for key, sim in state["jobsim"].items():
        job = state["jobs"].get(key)
        if job is None or sim.get("finished"):
            continue
        deadline = job["spec"].get("activeDeadlineSeconds")
        if deadline is not None:
            times.append(sim["started"] + deadline)
        if key not in active_jobs and job["spec"].get("parallelism") and job["spec"].get("completions"):
            times.append(sim.get("next_pod_at", sim["started"]))
    return min(times) if times else None

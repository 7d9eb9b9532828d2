"""The kubelet's prober: readiness and liveness probes of running containers.

Reads running pods (the ``podsim`` record: stage ``running`` and when the container started) and their
containers' ``readinessProbe`` and ``livenessProbe``. Writes the containers' ``ready`` and ``restartCount``, the
pod's Ready and ContainersReady conditions, the ``podsim`` record (``ready_at``, the ``probe`` state) and the
kubelet's Unhealthy and Killing Events. Pods without probes are left as the kubelet set them (Ready when
Running).

* A container with a readiness probe is not ready when it starts; it becomes ready at its first successful
  probe, ``initialDelaySeconds + periodSeconds`` after the start (defaults 0 and 10).
* A container whose env sets ``SIM_READINESS_FAIL`` (to anything but "", "0" or "false") fails every readiness
  probe: never ready, with the kubelet's aggregated Event "Readiness probe failed: HTTP probe failed with
  statuscode: 503" (or the TCP dial error for a tcpSocket probe), counted up once per period.
* A container whose env sets ``SIM_LIVENESS_FAIL`` fails its liveness probe: after ``failureThreshold``
  (default 3) failed probes the kubelet kills it ("Container main failed liveness probe, will be restarted"),
  counts a restart (``lastState.terminated``, exit code 137) and starts it again at once; readiness starts over.
"""

from __future__ import annotations

from typing import Any

from ..base import KubeObject
from .constants import TERMINAL
from .events import bump_event_count, kubelet_event
from .store import Txn, mark_changed, timestamp, touch

READINESS_FAIL_ENV = "SIM_READINESS_FAIL"
LIVENESS_FAIL_ENV = "SIM_LIVENESS_FAIL"
#: What a killed container's runtime reports (128 + SIGKILL).
KILLED_EXIT_CODE = 137


def _switch(container: dict[str, Any], name: str) -> bool:
    for item in container.get("env") or []:
        if isinstance(item, dict) and item.get("name") == name:
            return str(item.get("value") or "").strip().lower() not in ("", "0", "false", "no")
    return False


def _timing(probe: dict[str, Any]) -> tuple[float, float, int]:
    delay = float(probe.get("initialDelaySeconds") or 0)
    period = float(probe.get("periodSeconds") or 10)
    threshold = int(probe.get("failureThreshold") or 3)
    return delay, max(1.0, period), max(1, threshold)


def _failure_words(kind: str, probe: dict[str, Any], pod: KubeObject, status_code: int) -> str:
    """The kubelet's message for a failed probe of the handler the probe uses."""
    if probe.get("tcpSocket"):
        port = probe["tcpSocket"].get("port")
        return f"{kind} probe failed: dial tcp {pod['status'].get('podIP', '')}:{port}: connect: connection refused"
    if probe.get("exec"):
        return f"{kind} probe failed: command exited with status 1"
    return f"{kind} probe failed: HTTP probe failed with statuscode: {status_code}"


def _probed(pod: KubeObject) -> bool:
    return any(c.get("readinessProbe") or c.get("livenessProbe") for c in pod["spec"]["containers"])


def reconcile(tx: Txn) -> None:
    for key in sorted(tx.state["pods"]):
        pod, sim = tx.state["pods"][key], tx.state["podsim"].get(key)
        if sim is None or sim.get("stage") != "running" or pod["status"].get("phase") in TERMINAL:
            continue
        if not _probed(pod):
            continue
        _liveness(tx, pod, sim)
        _readiness(tx, pod, sim)


def next_due(tx: Txn) -> float | None:
    times: list[float] = []
    for key, sim in tx.state["podsim"].items():
        probe = sim.get("probe")
        pod = tx.state["pods"].get(key)
        if probe is None or pod is None or sim.get("stage") != "running":
            continue
        if probe.get("ready_due") is not None and not probe.get("ready"):
            times.append(probe["ready_due"])
        if probe.get("kill_due") is not None:
            times.append(probe["kill_due"])
    return min(times) if times else None


def _start(sim: dict[str, Any]) -> float:
    return float(sim.get("restarted", sim.get("running", 0.0)))


def _readiness(tx: Txn, pod: KubeObject, sim: dict[str, Any]) -> None:
    start = _start(sim)
    probe = sim.get("probe") or {}
    if probe.get("start") != start:
        # A (re)started container: not ready until its readiness probes pass.
        due: float | None = start
        failing = False
        for container in pod["spec"]["containers"]:
            readiness = container.get("readinessProbe")
            if readiness:
                delay, period, _ = _timing(readiness)
                due = max(due or start, start + delay + period)
                failing = failing or _switch(container, READINESS_FAIL_ENV)
        probe = {"start": start, "ready_due": None if failing else due, "failing": failing, "ready": False,
                 "kill_due": _kill_due(pod, start)}  # fmt: skip
        sim["probe"] = probe
        sim.pop("ready_at", None)
        _set_ready(tx, pod, False, start)
        mark_changed(tx)
    if probe["failing"]:
        for container in pod["spec"]["containers"]:
            readiness = container.get("readinessProbe")
            if not readiness or not _switch(container, READINESS_FAIL_ENV):
                continue
            delay, period, _ = _timing(readiness)
            first = start + delay + period
            if tx.now < first:
                continue
            if probe.get("event") is None:
                words = _failure_words("Readiness", readiness, pod, 503)
                probe["event"] = kubelet_event(tx, pod, "Warning", "Unhealthy", words, first, container["name"])
            bump_event_count(tx, probe["event"], 1 + int((tx.now - first) // period), tx.now)
        return
    if not probe["ready"] and probe["ready_due"] is not None and tx.now >= probe["ready_due"]:
        probe["ready"] = True
        sim["ready_at"] = probe["ready_due"]
        _set_ready(tx, pod, True, probe["ready_due"])


def _kill_due(pod: KubeObject, start: float) -> float | None:
    times = []
    for container in pod["spec"]["containers"]:
        liveness = container.get("livenessProbe")
        if liveness and _switch(container, LIVENESS_FAIL_ENV):
            delay, period, threshold = _timing(liveness)
            times.append(start + delay + period * threshold)
    return min(times) if times else None


def _liveness(tx: Txn, pod: KubeObject, sim: dict[str, Any]) -> None:
    probe = sim.get("probe") or {}
    due = probe.get("kill_due")
    if due is None or tx.now < due or probe.get("start") != _start(sim):
        return
    statuses = pod["status"].get("containerStatuses") or []
    for index, container in enumerate(pod["spec"]["containers"]):
        liveness = container.get("livenessProbe")
        if not liveness or not _switch(container, LIVENESS_FAIL_ENV):
            continue
        _, _, threshold = _timing(liveness)
        event = kubelet_event(tx, pod, "Warning", "Unhealthy", _failure_words("Liveness", liveness, pod, 500), due,
                              container["name"])  # fmt: skip
        bump_event_count(tx, event, threshold, due)
        kubelet_event(tx, pod, "Normal", "Killing",
                      f"Container {container['name']} failed liveness probe, will be restarted", due,
                      container["name"])  # fmt: skip
        if index < len(statuses):
            status = statuses[index]
            started = (status.get("state") or {}).get("running", {}).get("startedAt", timestamp(_start(sim)))
            status["lastState"] = {"terminated": {"exitCode": KILLED_EXIT_CODE, "reason": "Error",
                                                  "startedAt": started, "finishedAt": timestamp(due),
                                                  "containerID": status.get("containerID", "")}}  # fmt: skip
            status["restartCount"] = int(status.get("restartCount") or 0) + 1
            status["state"] = {"running": {"startedAt": timestamp(due)}}
    sim["restarted"] = due
    sim["restarts"] = int(sim.get("restarts") or 0) + 1
    touch(tx, pod)


def _set_ready(tx: Txn, pod: KubeObject, ready: bool, when: float) -> None:
    statuses = pod["status"].get("containerStatuses") or []
    changed = False
    for status in statuses:
        if status.get("ready") != ready:
            status["ready"] = ready
            changed = True
    names = " ".join(c["name"] for c in pod["spec"]["containers"])
    for condition in pod["status"].get("conditions") or []:
        if condition.get("type") not in ("Ready", "ContainersReady"):
            continue
        wanted = "True" if ready else "False"
        if condition.get("status") == wanted:
            continue
        condition.update(status=wanted, lastTransitionTime=timestamp(when))
        if ready:
            condition.pop("reason", None)
            condition.pop("message", None)
        else:
            condition.update(reason="ContainersNotReady", message=f"containers with unready status: [{names}]")
        changed = True
    if changed:
        touch(tx, pod)

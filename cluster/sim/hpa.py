"""The horizontal pod autoscaler controller (autoscaling/v2 semantics, kube-controller-manager v1.20+), with the
metrics it reads: a metrics server's pod CPU and a custom/external metrics adapter's named metrics, both served
from the simulated request-rate curve (``traffic``).

Reads HorizontalPodAutoscalers, their scale target (a Deployment: its ``spec.replicas`` and its running pods)
and the traffic knobs. Writes the Deployment's ``spec.replicas`` (the scale subresource), the HPA's status
(currentReplicas, desiredReplicas, lastScaleTime, currentMetrics, conditions AbleToScale, ScalingActive,
ScalingLimited), the ``hpasim`` record beside each HPA (its recommendations) and the SuccessfulRescale Events.

Every ``hpa_sync_seconds`` (15, --horizontal-pod-autoscaler-sync-period) each HPA:

1. computes a replica count per metric: ``ceil(ratio × pods)`` with ``ratio = current / target``, or the current
   count when ``ratio`` is within the 10 % tolerance; an External metric with an AverageValue target is
   ``ceil(total / target)``. Resource ``cpu`` (Utilization or AverageValue) averages the ready pods; Pods
   metrics average the running pods. The largest proposal wins.
2. stabilises: the recommendation is the highest of the last ``behavior.scaleDown.stabilizationWindowSeconds``
   (default 300) when scaling down and the lowest of ``behavior.scaleUp.stabilizationWindowSeconds`` (default 0)
   when scaling up, so a dip does not shrink the service at once;
3. limits the rate (up by at most max(100 %, 4 pods) per sync, as the default scale-up policies) and bounds the
   count to ``[minReplicas, maxReplicas]``: lowering maxReplicas scales down at the next sync, whatever the
   window;
4. scales the Deployment when the result differs, with the Event ``New size: N; reason: ...``.
"""

from __future__ import annotations

import math
from typing import Any

from ..base import KubeObject
from .events import record_event
from .store import Txn, mark_changed, object_key, timestamp, touch
from .traffic import cpu_utilisation, request_rate

TOLERANCE = 0.1
DEFAULT_SYNC_SECONDS = 15.0
DEFAULT_DOWN_WINDOW = 300
DEFAULT_UP_WINDOW = 0


def hpas(state: dict[str, Any]) -> dict[str, KubeObject]:
    return state.setdefault("hpas", {})


def _sync_period(tx: Txn) -> float:
    return float(tx.state["timing"].get("hpa_sync_seconds", DEFAULT_SYNC_SECONDS))


def _record(tx: Txn, key: str) -> dict[str, Any]:
    return tx.state.setdefault("hpasim", {}).setdefault(key, {})


def reconcile(tx: Txn) -> None:
    for key in [k for k in tx.state.get("hpasim", {}) if k not in hpas(tx.state)]:
        del tx.state["hpasim"][key]
        mark_changed(tx)
    for key in sorted(hpas(tx.state)):
        record = _record(tx, key)
        if record.get("next_sync") is None:
            record["next_sync"] = tx.now  # a new HPA is looked at at once
        if tx.now >= record["next_sync"]:
            _sync(tx, key, hpas(tx.state)[key], record)
            record["next_sync"] = tx.now + _sync_period(tx)
            mark_changed(tx)


def next_due(tx: Txn) -> float | None:
    times = [r["next_sync"] for k, r in tx.state.get("hpasim", {}).items() if k in hpas(tx.state)
             and r.get("next_sync") is not None]  # fmt: skip
    return min(times) if times else None


def _quantity(value: float) -> str:
    """A metric value as the API writes a quantity: whole numbers plain, others in milli-units."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _parse_quantity(value: Any) -> float:
    text = str(value)
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    suffixes = {"k": 1e3, "M": 1e6, "G": 1e9}
    if text and text[-1] in suffixes:
        return float(text[:-1]) * suffixes[text[-1]]
    return float(text)


def _condition(kind: str, status: str, reason: str, message: str, now: float, previous: list[dict]) -> dict:
    before = next((c for c in previous if c.get("type") == kind), None)
    changed = before is None or before.get("status") != status
    return {"type": kind, "status": status, "lastTransitionTime": timestamp(now) if changed
            else before["lastTransitionTime"], "reason": reason, "message": message}  # fmt: skip


def _ratio_replicas(current_value: float, target: float, pods: int, replicas: int) -> int:
    if target <= 0 or pods <= 0:
        return replicas
    ratio = current_value / target
    if abs(ratio - 1.0) <= TOLERANCE:
        return replicas
    return math.ceil(ratio * pods)


def _metric_proposal(
    metric: dict[str, Any], deployment: KubeObject, rate: float, running: int, ready: int, replicas: int
) -> tuple[int, dict[str, Any], str]:
    """(replicas, the currentMetrics entry, the words for the Event) for one metric spec."""
    kind = metric.get("type")
    annotations = deployment["metadata"].get("annotations") or {}
    if kind == "Resource":
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        utilisation = cpu_utilisation(rate, ready, annotations)
        current: dict[str, Any] = {"averageUtilization": round(utilisation)}
        words = f"{resource.get('name', 'cpu')} resource utilization (percentage of request)"
        if target.get("type") == "AverageValue":
            request = _cpu_request(deployment)
            value = utilisation / 100 * request
            current = {"averageValue": _quantity(value)}
            proposal = _ratio_replicas(value, _parse_quantity(target.get("averageValue", 0)), ready, replicas)
            words = f"{resource.get('name', 'cpu')} resource"
        else:
            current["averageValue"] = _quantity(utilisation / 100 * _cpu_request(deployment))
            proposal = _ratio_replicas(utilisation, float(target.get("averageUtilization") or 80), ready, replicas)
        return (
            proposal,
            {"type": "Resource", "resource": {"name": resource.get("name", "cpu"), "current": current}},
            words,
        )
    if kind == "Pods":
        pods = metric.get("pods") or {}
        name = (pods.get("metric") or {}).get("name", "")
        value = rate / running if running else 0.0
        target = _parse_quantity((pods.get("target") or {}).get("averageValue", 0))
        proposal = _ratio_replicas(value, target, running, replicas)
        entry = {"type": "Pods", "pods": {"metric": {"name": name}, "current": {"averageValue": _quantity(value)}}}
        return proposal, entry, f"pods metric {name}"
    if kind == "External":
        external = metric.get("external") or {}
        name = (external.get("metric") or {}).get("name", "")
        target = external.get("target") or {}
        if target.get("type") == "AverageValue" or "averageValue" in target:
            wanted = _parse_quantity(target.get("averageValue", 0))
            proposal = replicas
            if wanted > 0 and abs(rate / (wanted * max(replicas, 1)) - 1.0) > TOLERANCE:
                proposal = math.ceil(rate / wanted)
            current = {"averageValue": _quantity(rate / replicas if replicas else rate)}
        else:
            proposal = _ratio_replicas(rate, _parse_quantity(target.get("value", 0)), running, replicas)
            current = {"value": _quantity(rate)}
        entry = {"type": "External", "external": {"metric": {"name": name}, "current": current}}
        return proposal, entry, f"external metric {name}(nil)"
    return replicas, {}, ""


def _cpu_request(deployment: KubeObject) -> float:
    total = 0.0
    for container in deployment["spec"]["template"]["spec"].get("containers") or []:
        value = ((container.get("resources") or {}).get("requests") or {}).get("cpu")
        if value is None:
            value = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
        if value is not None:
            total += _parse_quantity(value)
    return total


def _window(behavior: dict[str, Any], direction: str, default: int) -> int:
    rules = behavior.get(direction) or {}
    value = rules.get("stabilizationWindowSeconds")
    return default if value is None else int(value)


def _sync(tx: Txn, key: str, hpa: KubeObject, record: dict[str, Any]) -> None:
    spec = hpa["spec"]
    namespace = hpa["metadata"]["namespace"]
    target_ref = spec.get("scaleTargetRef") or {}
    previous = (hpa.get("status") or {}).get("conditions") or []
    deployment = tx.state.get("deployments", {}).get(object_key(namespace, str(target_ref.get("name"))))
    status: dict[str, Any] = dict(hpa.get("status") or {})
    if target_ref.get("kind") != "Deployment" or deployment is None:
        message = (f"the HPA controller was unable to get the target's current scale: deployments/scale.apps "
                   f'"{target_ref.get("name")}" not found')  # fmt: skip
        status.update(currentReplicas=0, desiredReplicas=0, conditions=[
            _condition("AbleToScale", "False", "FailedGetScale", message, tx.now, previous)])  # fmt: skip
        _write_status(tx, hpa, status)
        return
    replicas = int(deployment["spec"].get("replicas", 1))
    minimum, maximum = int(spec.get("minReplicas") or 1), int(spec["maxReplicas"])
    pods = _running_pods(tx, deployment)
    running = len(pods)
    ready = sum(
        1 for _, p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                  for c in p["status"].get("conditions") or [])
    )  # fmt: skip
    if replicas == 0 and minimum != 0:
        status.update(
            currentReplicas=0,
            desiredReplicas=0,
            conditions=[
                _condition(
                    "AbleToScale",
                    "True",
                    "SucceededGetScale",
                    "the HPA controller was able to get the target's current scale",
                    tx.now,
                    previous,
                ),
                _condition(
                    "ScalingActive",
                    "False",
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                    tx.now,
                    previous,
                ),
            ],
        )
        _write_status(tx, hpa, status)  # fmt: skip
        return
    rate = request_rate(tx.now, deployment["metadata"].get("annotations"), tx.state.get("scenario", {}).get("traffic"))
    proposals = [
        _metric_proposal(m, deployment, rate, running, ready, replicas) for m in spec.get("metrics") or
        [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    ]  # fmt: skip
    measurable = [p for p in proposals if p[1]]
    if not measurable or (ready == 0 and all(p[1].get("type") == "Resource" for p in measurable)):
        status.update(currentReplicas=replicas, desiredReplicas=replicas, conditions=[
            _condition("AbleToScale", "True", "SucceededGetScale",
                       "the HPA controller was able to get the target's current scale", tx.now, previous),
            _condition("ScalingActive", "False", "FailedGetResourceMetric",
                       "the HPA was unable to compute the replica count: did not receive metrics for any ready pods",
                       tx.now, previous)])  # fmt: skip
        _write_status(tx, hpa, status)
        return
    proposal, _, words = max(measurable, key=lambda p: p[0])
    # Stabilisation over the recent recommendations (recorded before the bounds are applied).
    behavior = spec.get("behavior") or {}
    up_window = _window(behavior, "scaleUp", DEFAULT_UP_WINDOW)
    down_window = _window(behavior, "scaleDown", DEFAULT_DOWN_WINDOW)
    history = [r for r in record.get("recommendations", []) if r[0] > tx.now - max(up_window, down_window)]
    up = min([proposal] + [r[1] for r in history if r[0] > tx.now - up_window])
    down = max([proposal] + [r[1] for r in history if r[0] > tx.now - down_window])
    record["recommendations"] = history + [[tx.now, proposal]]
    stabilised = min(max(replicas, up), down)
    # Rate limit (default scale-up policies), then the bounds.
    limit_up = max(2 * replicas, replicas + 4)
    desired, limited = stabilised, None
    if desired > limit_up:
        desired, limited = limit_up, ("ScaleUpLimit", "the desired replica count is increasing faster than the "
                                      "maximum scale rate")  # fmt: skip
    if desired > maximum:
        desired, limited = maximum, ("TooManyReplicas", "the desired replica count is more than the maximum replica "
                                     "count")  # fmt: skip
    elif desired < minimum:
        desired, limited = minimum, ("TooFewReplicas", "the desired replica count is less than the minimum replica "
                                     "count")  # fmt: skip
    if desired != replicas:
        deployment["spec"]["replicas"] = desired
        deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1
        touch(tx, deployment)
        reason = f"{words} above target" if desired > replicas else "All metrics below target"
        record_event(tx, hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}",
                     "horizontal-pod-autoscaler")  # fmt: skip
        status["lastScaleTime"] = timestamp(tx.now)
        able = ("SucceededRescale", f"the HPA controller was able to update the target scale to {desired}")
    elif stabilised != proposal and proposal < replicas:
        able = ("ScaleDownStabilized", "recent recommendations were higher than current one, applying the highest "
                "recent recommendation")  # fmt: skip
    else:
        able = ("ReadyForNewScale", "recommended size matches current size")
    metric_words = words.replace(" above target", "")
    conditions = [
        _condition("AbleToScale", "True", *able, tx.now, previous),
        _condition("ScalingActive", "True", "ValidMetricFound",
                   f"the HPA was able to successfully calculate a replica count from {metric_words}", tx.now, previous),
        _condition("ScalingLimited", "True" if limited else "False", *(limited or (
            "DesiredWithinRange", "the desired count is within the acceptable range")), tx.now, previous),
    ]  # fmt: skip
    status.update(
        currentReplicas=replicas,
        desiredReplicas=desired,
        currentMetrics=[p[1] for p in measurable],
        conditions=conditions,
    )
    status["observedGeneration"] = hpa["metadata"].get("generation", 1)
    _write_status(tx, hpa, status)


def _write_status(tx: Txn, hpa: KubeObject, status: dict[str, Any]) -> None:
    if hpa.get("status") != status:
        hpa["status"] = status
        touch(tx, hpa)


def _running_pods(tx: Txn, deployment: KubeObject) -> list[tuple[str, KubeObject]]:
    """The Running pods of the Deployment's ReplicaSets (what the metrics pipelines report on)."""
    uid = deployment["metadata"]["uid"]
    owned = {
        key
        for key, rs in tx.state.get("replicasets", {}).items()
        if any(o.get("uid") == uid and o.get("controller") for o in rs["metadata"].get("ownerReferences") or [])
    }
    return [
        (key, pod)
        for key, pod in tx.state["pods"].items()
        if (tx.state["podsim"].get(key) or {}).get("replicaset") in owned and pod["status"].get("phase") == "Running"
    ]

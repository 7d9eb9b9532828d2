"""core/v1 Event objects, as every component records them through the API server (and its --event-ttl).

Not a component: a helper each component uses to write the Events it emits into the store (the kubelet's with
``source.host`` and the container's ``fieldPath``), to count an aggregated Event up, and for the API server's
expiry of Events older than ``event_ttl_seconds``.
"""

from __future__ import annotations

from ..base import KubeObject
from .store import Txn, new_metadata, object_key, timestamp, touch


def record_event(
    tx: Txn,
    obj: KubeObject,
    kind: str,
    reason: str,
    message: str,
    component: str,
    when: float | None = None,
    host: str | None = None,
    field_path: str | None = None,
) -> KubeObject:
    when = tx.now if when is None else when
    metadata = obj["metadata"]
    namespace = metadata.get("namespace", "default")
    base = f"{metadata['name']}.{int(when * 1e9):x}"
    name, n = base, 0
    while object_key(namespace, name) in tx.state["events"]:
        n += 1
        name = f"{base}{n}"
    involved = {
        "kind": obj["kind"],
        "namespace": namespace,
        "name": metadata["name"],
        "uid": metadata["uid"],
        "apiVersion": obj["apiVersion"],
        "resourceVersion": metadata.get("resourceVersion", ""),
    }
    if field_path:
        involved["fieldPath"] = field_path
    source = {"component": component}
    if host:
        source["host"] = host
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": new_metadata(tx, name, namespace),
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": timestamp(when),
        "lastTimestamp": timestamp(when),
        "count": 1,
        "type": kind,
        "eventTime": None,
        "reportingComponent": "",
        "reportingInstance": "",
    }
    event["metadata"]["creationTimestamp"] = timestamp(when)
    tx.state["events"][object_key(namespace, name)] = event
    return event


def kubelet_event(
    tx: Txn, pod: KubeObject, kind: str, reason: str, message: str, when: float, container: str | None = None
) -> str:
    name = container or pod["spec"]["containers"][0]["name"]
    event = record_event(
        tx,
        pod,
        kind,
        reason,
        message,
        "kubelet",
        when=when,
        host=pod["spec"].get("nodeName"),
        field_path=f"spec.containers{{{name}}}",
    )
    return object_key(event["metadata"]["namespace"], event["metadata"]["name"])


def bump_event_count(tx: Txn, event_key: str | None, count: int, when: float) -> None:
    event = tx.state["events"].get(event_key or "")
    if event is not None and event["count"] < count:
        event["count"] = count
        event["lastTimestamp"] = timestamp(when)
        touch(tx, event)


def expire_events(tx: Txn) -> None:
    """kube-apiserver drops events after --event-ttl."""
    state = tx.state
    ttl = state["timing"]["event_ttl_seconds"]
    cutoff = timestamp(tx.now - ttl)
    stale = [key for key, event in state["events"].items() if event["lastTimestamp"] < cutoff]
    for key in stale:
        del state["events"][key]
    if stale:
        tx.dirty = True

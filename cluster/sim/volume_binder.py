"""The PersistentVolume controller of kube-controller-manager: binds claims to volumes, provisions, releases.

Reads PersistentVolumeClaims, PersistentVolumes and the scenario's storage classes; writes claim and volume
status, the volumes it provisions and the Events it emits. As the v1.20 controller
(pkg/controller/volume/persistentvolume/pv_controller.go):

- A claim with ``spec.volumeName`` (static binding, what an admin's pre-made PersistentVolume uses) is bound to
  that volume once it exists, is Available (or already reserved for this claim by its ``claimRef``), is large
  enough and offers every access mode the claim asks for; until then it stays Pending.
- A claim without a volume name first gets a matching Available volume of its class (smallest that fits);
  failing that, a class with a provisioner makes one after the class's ``provision_seconds`` (``pvc-<claim uid>``,
  the external provisioners' naming); a class that does not exist leaves the claim Pending with a
  ``ProvisioningFailed`` event, and ``storageClassName: ""`` with no volume to match leaves it Pending with
  ``FailedBinding``.
- A bound claim whose volume is gone becomes ``Lost``; a volume whose claim is gone is ``Released`` (policy
  Retain) or deleted (policy Delete, the default of provisioned volumes).

Storage classes are not API objects in this simulator (storage.k8s.io is not served); they come from the
scenario's ``storage_classes:`` section, with ``standard`` (a default class, instant provisioning) when it has none.
"""

from __future__ import annotations

from typing import Any

from vocab.names import PROVISIONED_BY_ANNOTATION

from ..base import KubeObject
from .events import record_event
from .pod_resources import decode_quantity
from .store import Txn, new_metadata, object_key, touch

COMPONENT = "persistentvolume-controller"
#: The simulator's own provisioner name for the default class (the project's ``sim.gpu-portal.io/`` names).
DEFAULT_PROVISIONER = "sim.gpu-portal.io/local-volume"
DEFAULT_STORAGE_CLASSES = {
    "standard": {"provisioner": DEFAULT_PROVISIONER, "default": True, "provision_seconds": 0, "reclaim": "Delete"}
}
#: What a claim that names no access modes gets (the API server requires at least one; the portal always sends).
_DEFAULT_MODES = ["ReadWriteOnce"]


def storage_classes(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The scenario's storage classes by name (or the simulator's default ``standard``)."""
    classes = (state.get("scenario") or {}).get("storage_classes")
    return classes if classes else DEFAULT_STORAGE_CLASSES


def default_class(state: dict[str, Any]) -> str | None:
    """The class a claim that leaves ``storageClassName`` out gets (DefaultStorageClass admission)."""
    return next((name for name, spec in sorted(storage_classes(state).items()) if spec.get("default")), None)


def _storage(obj: KubeObject, *path: str) -> Any:
    value: Any = obj
    for part in path:
        value = (value or {}).get(part)
    try:
        return decode_quantity(value)
    except (TypeError, ValueError):
        return 0


def _fits(volume: KubeObject, claim: KubeObject) -> bool:
    wanted_modes = set(claim["spec"].get("accessModes") or _DEFAULT_MODES)
    return wanted_modes <= set(volume["spec"].get("accessModes") or []) and _storage(
        volume, "spec", "capacity", "storage"
    ) >= _storage(claim, "spec", "resources", "requests", "storage")


def _bind(tx: Txn, claim: KubeObject, volume: KubeObject) -> None:
    meta = claim["metadata"]
    volume["spec"]["claimRef"] = {
        "kind": "PersistentVolumeClaim",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
        "apiVersion": "v1",
    }
    volume["status"] = {"phase": "Bound"}
    touch(tx, volume)
    claim["spec"]["volumeName"] = volume["metadata"]["name"]
    claim["status"] = {
        "phase": "Bound",
        "accessModes": list(volume["spec"].get("accessModes") or []),
        "capacity": {"storage": volume["spec"]["capacity"]["storage"]},
    }
    touch(tx, claim)


def _pending(tx: Txn, claim: KubeObject, reason: str, message: str, kind: str = "Normal") -> None:
    """Keep the claim Pending and say why, once per distinct reason (the controller's events are aggregated)."""
    sim = tx.state.setdefault("pvcsim", {}).setdefault(
        object_key(claim["metadata"]["namespace"], claim["metadata"]["name"]), {}
    )
    if sim.get("said") == message:
        return
    sim["said"] = message
    if (claim.get("status") or {}).get("phase") != "Pending":
        claim["status"] = {"phase": "Pending"}
        touch(tx, claim)
    record_event(tx, claim, kind, reason, message, COMPONENT)


def _provision(tx: Txn, claim: KubeObject, class_name: str, spec: dict[str, Any]) -> KubeObject:
    meta = claim["metadata"]
    name = f"pvc-{meta['uid']}"
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {**new_metadata(tx, name), "annotations": {PROVISIONED_BY_ANNOTATION: spec["provisioner"]}},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": list(claim["spec"].get("accessModes") or _DEFAULT_MODES),
            "persistentVolumeReclaimPolicy": spec.get("reclaim", "Delete"),
            "storageClassName": class_name,
            "volumeMode": claim["spec"].get("volumeMode", "Filesystem"),
            "csi": {"driver": spec["provisioner"], "volumeHandle": name},
        },
        "status": {"phase": "Available"},
    }
    tx.state.setdefault("pvs", {})[name] = volume
    record_event(
        tx,
        claim,
        "Normal",
        "ProvisioningSucceeded",
        f"Successfully provisioned volume {name} using {spec['provisioner']}",
        COMPONENT,
    )
    return volume


def reconcile(tx: Txn) -> None:
    claims: dict[str, KubeObject] = tx.state.setdefault("pvcs", {})
    volumes: dict[str, KubeObject] = tx.state.setdefault("pvs", {})
    classes = storage_classes(tx.state)
    sims = tx.state.setdefault("pvcsim", {})
    for key in list(sims):
        if key not in claims:
            del sims[key]
    # Volumes whose claim went away: released (Retain) or deleted (Delete).
    for name, volume in list(volumes.items()):
        ref = volume["spec"].get("claimRef")
        phase = (volume.get("status") or {}).get("phase")
        if not ref or phase != "Bound":
            continue
        claim = claims.get(object_key(ref["namespace"], ref["name"]))
        if claim is not None and claim["metadata"]["uid"] == ref.get("uid"):
            continue
        if volume["spec"].get("persistentVolumeReclaimPolicy", "Retain") == "Delete":
            del volumes[name]
            tx.dirty = True
            tx.changes += 1
        else:
            volume["status"] = {"phase": "Released"}
            touch(tx, volume)
    for key, claim in sorted(claims.items()):
        spec, status = claim["spec"], claim.get("status") or {}
        phase = status.get("phase")
        wanted = spec.get("volumeName")
        if phase == "Bound":
            if wanted not in volumes:
                claim["status"] = {**status, "phase": "Lost"}
                touch(tx, claim)
                record_event(
                    tx, claim, "Warning", "ClaimLost", "Bound claim has lost its PersistentVolume. Data on the volume "
                    "is lost!", COMPONENT,
                )  # fmt: skip
            continue
        if phase == "Lost":
            continue
        if wanted:
            volume = volumes.get(wanted)
            ref = (volume or {}).get("spec", {}).get("claimRef")
            if volume is None:
                _pending(tx, claim, "FailedBinding", f'volume "{wanted}" not found')
            elif ref and (ref.get("namespace"), ref.get("name")) != (
                claim["metadata"]["namespace"],
                claim["metadata"]["name"],
            ):
                _pending(
                    tx, claim, "FailedBinding", f'volume "{wanted}" already bound to a different claim.', "Warning"
                )
            elif not _fits(volume, claim):
                _pending(
                    tx, claim, "FailedBinding", f'volume "{wanted}" is too small or lacks the requested access modes',
                    "Warning",
                )  # fmt: skip
            else:
                _bind(tx, claim, volume)
            continue
        class_name = spec.get("storageClassName")
        candidates = [
            v
            for v in volumes.values()
            if (v.get("status") or {}).get("phase") == "Available"
            and not v["spec"].get("claimRef")
            and (v["spec"].get("storageClassName") or "") == (class_name or "")
            and _fits(v, claim)
        ]
        if candidates:
            _bind(
                tx,
                claim,
                min(candidates, key=lambda v: (_storage(v, "spec", "capacity", "storage"), v["metadata"]["name"])),
            )
            continue
        if not class_name:
            _pending(
                tx, claim, "FailedBinding", "no persistent volumes available for this claim and no storage class is set"
            )
            continue
        class_spec = classes.get(class_name)
        if class_spec is None or not class_spec.get("provisioner"):
            _pending(
                tx, claim, "ProvisioningFailed", f'storageclass.storage.k8s.io "{class_name}" not found', "Warning"
            )
            continue
        sim = sims.setdefault(key, {})
        due = sim.setdefault("provision_at", tx.now + float(class_spec.get("provision_seconds") or 0))
        if due <= tx.now:
            _bind(tx, claim, _provision(tx, claim, class_name, class_spec))
        else:
            _pending(
                tx, claim, "ExternalProvisioning",
                f'waiting for a volume to be created, either by external provisioner "{class_spec["provisioner"]}" '
                "or manually created by system administrator",
            )  # fmt: skip


def next_due(tx: Txn) -> float | None:
    """When the earliest pending provisioning completes."""
    times = [
        sim["provision_at"]
        for key, sim in (tx.state.get("pvcsim") or {}).items()
        if "provision_at" in sim
        and ((tx.state.get("pvcs") or {}).get(key) or {}).get("status", {}).get("phase") != "Bound"
    ]
    return min(times) if times else None

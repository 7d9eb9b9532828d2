"""kube-controller-manager's resourceclaim controller: a pod's claims from templates, and their release.

Reads pods with ``spec.resourceClaims``, ResourceClaimTemplates and ResourceClaims. Writes, as
pkg/controller/resourceclaim does:

* For each pod claim that names a ``resourceClaimTemplateName``, a ResourceClaim made from the template
  (``<pod>-<claim>-<random>``, its spec the template's ``spec.spec``, owned by the pod, annotated with the pod's
  claim name) and the pod's ``status.resourceClaimStatuses`` entry naming it. A template that does not exist
  leaves the pod waiting (the scheduler says so).
* ``status.reservedFor`` keeps only pods that exist and have not ended; a claim nobody holds any more is
  deallocated (``status.allocation`` cleared), which releases its devices and counters.
* A claim made for a pod that is gone is deleted (the garbage collector follows the owner reference).
"""

from __future__ import annotations

import random
import string

from vocab.dra import RESOURCE_API_VERSION, RESOURCE_CLAIM_KIND
from vocab.names import POD_CLAIM_NAME_ANNOTATION

from .constants import TERMINAL
from .store import Txn, bump_rv, clone, new_metadata, object_key, touch

_RANDOM = random.Random()
_ALPHABET = string.ascii_lowercase + string.digits


def reconcile(tx: Txn) -> None:
    state = tx.state
    claims = state.setdefault("resourceclaims", {})
    templates = state.setdefault("resourceclaimtemplates", {})
    pods = state["pods"]
    for pod in pods.values():
        pod_claims = pod["spec"].get("resourceClaims")
        if not pod_claims or pod["status"].get("phase") in TERMINAL:
            continue
        namespace = pod["metadata"]["namespace"]
        statuses = list(pod["status"].get("resourceClaimStatuses") or [])
        known = {entry["name"] for entry in statuses}
        added = False
        for pod_claim in pod_claims:
            template_name = pod_claim.get("resourceClaimTemplateName")
            if not template_name or pod_claim["name"] in known:
                continue
            template = templates.get(object_key(namespace, template_name))
            if template is None:
                continue
            claim = _claim_from_template(tx, pod, pod_claim["name"], template)
            claims[object_key(namespace, claim["metadata"]["name"])] = claim
            statuses.append({"name": pod_claim["name"], "resourceClaimName": claim["metadata"]["name"]})
            added = True
        if added:
            pod["status"]["resourceClaimStatuses"] = statuses
            touch(tx, pod)
    live = {
        pod["metadata"]["uid"]: pod["status"].get("phase") not in TERMINAL
        for pod in pods.values()
        if pod["spec"].get("resourceClaims")
    }
    for key in list(claims):
        claim = claims[key]
        owner = next(
            (
                o
                for o in claim["metadata"].get("ownerReferences") or []
                if o.get("kind") == "Pod" and o.get("controller")
            ),
            None,
        )
        if owner is not None and owner.get("uid") not in live:
            del claims[key]
            bump_rv(tx)
            continue
        status = claim.setdefault("status", {})
        reserved = status.get("reservedFor") or []
        kept = [entry for entry in reserved if live.get(entry.get("uid"))]
        if len(kept) != len(reserved) or (not kept and status.get("allocation")):
            if kept:
                status["reservedFor"] = kept
            else:
                status.pop("reservedFor", None)
                status.pop("allocation", None)  # deallocated: its devices are free again
            touch(tx, claim)


def next_due(tx: Txn) -> None:
    """The controller reacts to pods and claims; nothing is due by itself."""
    return None


def _claim_from_template(tx: Txn, pod: dict, claim_name: str, template: dict) -> dict:
    namespace = pod["metadata"]["namespace"]
    # The controller's generateName: "<pod>-<claim>-", shortened to leave room for the random suffix.
    prefix = f"{pod['metadata']['name'][:28]}-{claim_name[:28]}-"
    while True:
        name = prefix + "".join(_RANDOM.choice(_ALPHABET) for _ in range(5))
        if object_key(namespace, name) not in tx.state["resourceclaims"]:
            break
    metadata = {"generateName": prefix, **new_metadata(tx, name, namespace)}
    template_metadata = template["spec"].get("metadata") or {}
    if template_metadata.get("labels"):
        metadata["labels"] = dict(template_metadata["labels"])
    metadata["annotations"] = {**(template_metadata.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: claim_name}
    metadata["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": RESOURCE_CLAIM_KIND,
        "metadata": metadata,
        "spec": clone(template["spec"]["spec"]),
        "status": {},
    }

"""NVIDIA's ComputeDomain controller (cmd/compute-domain-controller in kubernetes-sigs/dra-driver-nvidia-gpu).

Reads ComputeDomains (``resource.nvidia.com/v1beta1``), ResourceClaims and Nodes. Writes:

* For each ComputeDomain, the workload's channel ResourceClaimTemplate named by
  ``spec.channel.resourceClaimTemplate.name`` in the domain's namespace (after
  templates/compute-domain-workload-claim-template.tmpl.yaml): one request ``channel`` of the class
  ``compute-domain-default-channel.nvidia.com`` with the opaque ``ComputeDomainChannelConfig`` carrying the domain's
  uid and channel allocation mode, labelled with the domain's uid and the Workload target, with the controller's
  finalizer.
* The domain's status: the nodes whose pods hold an allocated channel of this domain (name, IP address, clique,
  index, Ready), and ``Ready`` once ``numNodes`` of them joined (at once when ``numNodes`` is 0, the default the
  driver recommends).
* When a ComputeDomain is deleted, its template goes too.

The IMEX daemons the real controller runs per node (a DaemonSet) are not simulated: a channel is ready when it
is allocated.
"""

from __future__ import annotations

from vocab.dra import (
    COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND,
    COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS,
    COMPUTE_DOMAIN_CHANNEL_REQUEST,
    COMPUTE_DOMAIN_DRIVER,
    COMPUTE_DOMAIN_LABEL,
    COMPUTE_DOMAIN_NOT_READY,
    COMPUTE_DOMAIN_READY,
    COMPUTE_DOMAIN_TARGET_LABEL,
    COMPUTE_DOMAIN_TARGET_WORKLOAD,
    NVIDIA_CONFIG_API_VERSION,
    RESOURCE_API_VERSION,
    RESOURCE_CLAIM_TEMPLATE_KIND,
)
from vocab.names import GPU_CLIQUE_LABEL

from .store import Txn, bump_rv, new_metadata, object_key, touch


def channel_template(namespace: str, name: str, domain_uid: str, allocation_mode: str) -> dict:
    """The channel ResourceClaimTemplate of a domain (metadata without the store's stamp)."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": RESOURCE_CLAIM_TEMPLATE_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "finalizers": [COMPUTE_DOMAIN_LABEL],
            "labels": {COMPUTE_DOMAIN_LABEL: domain_uid, COMPUTE_DOMAIN_TARGET_LABEL: COMPUTE_DOMAIN_TARGET_WORKLOAD},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": COMPUTE_DOMAIN_CHANNEL_REQUEST,
                            "exactly": {"deviceClassName": COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS},
                        }
                    ],
                    "config": [
                        {
                            "requests": [COMPUTE_DOMAIN_CHANNEL_REQUEST],
                            "opaque": {
                                "driver": COMPUTE_DOMAIN_DRIVER,
                                "parameters": {
                                    "apiVersion": NVIDIA_CONFIG_API_VERSION,
                                    "kind": COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND,
                                    "domainID": domain_uid,
                                    "allocationMode": allocation_mode,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def reconcile(tx: Txn) -> None:
    state = tx.state
    domains = state.setdefault("computedomains", {})
    templates = state.setdefault("resourceclaimtemplates", {})
    uids = {domain["metadata"]["uid"] for domain in domains.values()}
    for key in [k for k, t in templates.items() if (t["metadata"].get("labels") or {}).get(COMPUTE_DOMAIN_LABEL)]:
        if templates[key]["metadata"]["labels"][COMPUTE_DOMAIN_LABEL] not in uids:
            del templates[key]  # the controller removes its finalizer and the template goes
            bump_rv(tx)
    for _, domain in sorted(domains.items()):
        namespace = domain["metadata"]["namespace"]
        channel = domain["spec"]["channel"]
        name = channel["resourceClaimTemplate"]["name"]
        if object_key(namespace, name) not in templates:
            template = channel_template(
                namespace, name, domain["metadata"]["uid"], channel.get("allocationMode") or "Single"
            )
            template["metadata"] = {**template["metadata"], **new_metadata(tx, name, namespace)}
            templates[object_key(namespace, name)] = template
        status = _status(tx, domain)
        if domain.get("status") != status:
            domain["status"] = status
            touch(tx, domain)


def next_due(tx: Txn) -> None:
    return None


def _status(tx: Txn, domain: dict) -> dict:
    uid = domain["metadata"]["uid"]
    joined: list[str] = []
    for claim in tx.state.get("resourceclaims", {}).values():
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for entry in (allocation.get("devices") or {}).get("config") or []:
            if (entry.get("opaque") or {}).get("parameters", {}).get("domainID") == uid:
                for result in allocation["devices"].get("results") or []:
                    if result["pool"] not in joined:
                        joined.append(result["pool"])
    nodes = []
    for index, node_name in enumerate(sorted(joined)):
        node = tx.state["nodes"].get(node_name)
        if node is None:
            continue
        address = next((a["address"] for a in node["status"].get("addresses") or [] if a["type"] == "InternalIP"), "")
        clique = (node["metadata"].get("labels") or {}).get(GPU_CLIQUE_LABEL, "")
        nodes.append({"name": node_name, "ipAddress": address, "cliqueID": clique, "index": index, "status": "Ready"})
    wanted = int(domain["spec"].get("numNodes") or 0)
    ready = len(nodes) >= wanted if wanted else True
    status: dict = {"status": COMPUTE_DOMAIN_READY if ready else COMPUTE_DOMAIN_NOT_READY}
    if nodes:
        status["nodes"] = nodes
    return status

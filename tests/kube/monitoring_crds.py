"""Stand-ins for the Prometheus Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule), so the apiserver
accepts deploy/monitoring/ in the same dry runs as every other manifest.

They check what an apiserver checks of any custom object (group, version, kind, names, namespace); their specs are
left open (x-kubernetes-preserve-unknown-fields), because the upstream schemas are not vendored here. What the
specs say is checked where it matters: tests/unit/test_metrics_deploy.py runs the rules through promtool and
matches each monitor's selector and port against the Service and Deployments it scrapes.
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP = "monitoring.coreos.com"
KINDS = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


def definition(kind: str, plural: str) -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


def install(api_client: client.ApiClient, timeout: float = 30.0) -> None:
    """Create the three CRDs (idempotent) and wait until the apiserver serves them."""
    extensions = client.ApiextensionsV1Api(api_client)
    for kind, plural in KINDS.items():
        try:
            extensions.create_custom_resource_definition(definition(kind, plural))
        except ApiException as error:
            if error.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for plural in KINDS.values():
        while True:
            crd = extensions.read_custom_resource_definition(f"{plural}.{GROUP}")
            conditions = {c.type: c.status for c in (crd.status.conditions or [])}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the CRD {plural}.{GROUP} was not established within {timeout:g} s")
            time.sleep(0.1)

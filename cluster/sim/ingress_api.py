"""The simulated API server's networking.k8s.io/v1 Ingresses (a service's external address, jobs/service/follow.py).

A part of ``SimulatedCluster`` (cluster/sim/api.py), as apps_api.py is. The group version is served from v1.19 (an
older server answers "no matches for kind", as kube-apiserver does). ``ingress_errors`` is kube-apiserver v1.20's
Ingress validation with its messages, every problem at once and in its order (metadata, default backend, rules,
TLS, ingress class): hosts are DNS names (a wildcard only as the first label, never an IP address), every path has
a pathType and Exact/Prefix paths are absolute, a backend is a Service (a DNS-1035 name and a port number or name)
or a resource. tests/kube/test_services.py holds these messages to the real server's. No ingress controller runs
here: status.loadBalancer stays empty, as on a cluster where no controller serves the ingress class.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from vocab.names import DNS1123_SUBDOMAIN

from ..base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, NETWORKING_V1, Conflict, Invalid, KubeObject, NotFound
from .apps_api import _minor
from .store import Store, bump_rv, clone, new_metadata, object_key, touch
from .validation import SUBDOMAIN_HELP

#: The first server version serving networking.k8s.io/v1 Ingresses.
INGRESS_V1_SINCE = (1, 19)
PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")

_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1035_HELP = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation "
    "is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_WILDCARD_HELP = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of "
    "lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', "
    "regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_PORT_NAME = re.compile(r"[-a-z0-9]+")


def _quoted(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _subdomain_problems(path: str, value: str) -> list[str]:
    problems = []
    if len(value) > 253:
        problems.append(f"{path}: Invalid value: {_quoted(value)}: must be no more than 253 characters")
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        problems.append(f"{path}: Invalid value: {_quoted(value)}: {SUBDOMAIN_HELP}")
    return problems


def _host_problems(path: str, host: str) -> list[str]:
    """A rule's or a TLS entry's host: a DNS name, a wildcard only as its whole first label."""
    if host.startswith("*."):
        if len(host) > 253 or not DNS1123_SUBDOMAIN.fullmatch(host[2:]):
            return [f"{path}: Invalid value: {_quoted(host)}: {_WILDCARD_HELP}"]
        return []
    if "*" in host:
        return [f"{path}: Invalid value: {_quoted(host)}: {_WILDCARD_HELP}"]
    return _subdomain_problems(path, host)


def _port_name_problems(path: str, name: str) -> list[str]:
    """kube-apiserver's IsValidPortName (an IANA service name)."""
    problems = []
    if len(name) > 15:
        problems.append("must be no more than 15 characters")
    if not _PORT_NAME.fullmatch(name):
        problems.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif not any(ch.isalpha() for ch in name):
        problems.append("must contain at least one letter (a-z)")
    if "--" in name:
        problems.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        problems.append("must not begin or end with a hyphen")
    return [f"{path}: Invalid value: {_quoted(name)}: {problem}" for problem in problems]


def _backend_problems(path: str, backend: dict) -> list[str]:
    service, resource = backend.get("service"), backend.get("resource")
    if service and resource:
        return [f'{path}: Invalid value: "": cannot set both resource and service backends']
    if resource:
        missing = [f for f in ("kind", "name") if not resource.get(f)]
        return [f"{path}.resource.{f}: Required value" for f in missing]
    if not service:
        return [f'{path}: Invalid value: "": resource or service backend is required']
    problems = []
    name = str(service.get("name") or "")
    if not name:
        problems.append(f"{path}.service.name: Required value")
    else:
        if len(name) > 63:
            problems.append(f"{path}.service.name: Invalid value: {_quoted(name)}: must be no more than 63 characters")
        if not _DNS1035_LABEL.fullmatch(name):
            problems.append(f"{path}.service.name: Invalid value: {_quoted(name)}: {_DNS1035_HELP}")
    port = service.get("port") or {}
    port_name, number = str(port.get("name") or ""), port.get("number") or 0
    if port_name and number:
        problems.append(f'{path}.service.port: Invalid value: "": cannot set both port name & port number')
    elif port_name:
        problems.extend(_port_name_problems(f"{path}.service.port.name", port_name))
    elif number:
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            problems.append(f"{path}.service.port.number: Invalid value: {number}: must be between 1 and 65535, "
                            "inclusive")  # fmt: skip
    else:
        problems.append(f"{path}: Required value: port name or number is required")
    return problems


def _rule_problems(index: int, rule: dict) -> list[str]:
    path = f"spec.rules[{index}]"
    problems = []
    host = str(rule.get("host") or "")
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            problems.extend(_host_problems(f"{path}.host", host))
        else:
            problems.append(f"{path}.host: Invalid value: {_quoted(host)}: must be a DNS name, not an IP address")
    http = rule.get("http")
    if http is None:
        return problems
    paths = http.get("paths") or []
    if not paths:
        problems.append(f"{path}.http.paths: Required value")
    for number, entry in enumerate(paths):
        at = f"{path}.http.paths[{number}]"
        path_type, value = entry.get("pathType"), str(entry.get("path") or "")
        if path_type is None:
            problems.append(f"{at}.pathType: Required value: pathType must be specified")
        elif path_type not in PATH_TYPES:
            supported = ", ".join(f'"{t}"' for t in PATH_TYPES)
            problems.append(f"{at}.pathType: Unsupported value: {_quoted(path_type)}: supported values: {supported}")
        elif (path_type != "ImplementationSpecific" or value) and not value.startswith("/"):
            problems.append(f"{at}.path: Invalid value: {_quoted(value)}: must be an absolute path")
        problems.extend(_backend_problems(f"{at}.backend", entry.get("backend") or {}))
    return problems


def ingress_errors(ingress: KubeObject) -> list[str]:
    """What kube-apiserver v1.20 says about an Ingress, in its order."""
    errors: list[str] = []
    name = str((ingress.get("metadata") or {}).get("name") or "")
    if not name:
        errors.append("metadata.name: Required value: name or generateName is required")
    else:
        errors.extend(_subdomain_problems("metadata.name", name))
    spec = ingress.get("spec") or {}
    rules = spec.get("rules") or []
    if spec.get("defaultBackend"):
        errors.extend(_backend_problems("spec.defaultBackend", spec["defaultBackend"]))
    elif not rules:
        errors.append("spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be "
                      "specified")  # fmt: skip
    for index, rule in enumerate(rules):
        errors.extend(_rule_problems(index, rule))
    for index, tls in enumerate(spec.get("tls") or []):
        for number, host in enumerate(tls.get("hosts") or []):
            errors.extend(_host_problems(f"spec.tls[{index}].hosts[{number}]", str(host)))
        if tls.get("secretName"):
            errors.extend(_subdomain_problems(f"spec.tls[{index}].secretName", str(tls["secretName"])))
    if spec.get("ingressClassName") is not None:
        errors.extend(_subdomain_problems("spec.ingressClassName", str(spec["ingressClassName"])))
    return errors


class IngressAPI:
    """networking.k8s.io/v1 Ingresses of the simulated API server (mixed into SimulatedCluster)."""

    _store: Store

    def apply_ingress(self, manifest: KubeObject) -> KubeObject:
        ingress = clone(manifest)
        metadata = ingress.setdefault("metadata", {})
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        with self._store.transaction() as tx:
            version = _minor(tx)
            if ingress.get("kind") != "Ingress" or ingress.get("apiVersion") != NETWORKING_V1 or (
                version < INGRESS_V1_SINCE
            ):  # fmt: skip
                raise NotFound(f'the server could not find the requested resource: no matches for kind '
                               f'"{ingress.get("kind")}" in version "{ingress.get("apiVersion")}"')  # fmt: skip
            errors = ingress_errors(ingress)
            if errors:
                # Until v1.22 the API server registered Ingress validation under the extensions group.
                kind = "Ingress.extensions" if version < (1, 22) else "Ingress.networking.k8s.io"
                detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
                raise Invalid(f'{kind} "{name}" is invalid: {detail}')
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            stored = tx.state.setdefault("ingresses", {})
            key = object_key(namespace, name)
            existing = stored.get(key)
            if existing is None:
                ingress["metadata"] = {**metadata, **new_metadata(tx, name, namespace), "generation": 1}
                ingress["status"] = {"loadBalancer": {}}
                stored[key] = ingress
                return clone(ingress)
            owner = (existing["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
            if owner != MANAGED_BY_VALUE:
                raise Conflict(f"Apply Ingress {namespace}/{name}: an Ingress of that name exists and is not managed "
                               f"by the portal ({MANAGED_BY_LABEL}={owner!r}). Delete or rename it.")  # fmt: skip
            existing["metadata"].update(labels=metadata.get("labels") or {},
                                        annotations=metadata.get("annotations") or {})  # fmt: skip
            if existing["spec"] != ingress["spec"]:
                existing["spec"] = ingress["spec"]
                existing["metadata"]["generation"] = existing["metadata"].get("generation", 1) + 1
            touch(tx, existing)
            return clone(existing)

    def get_ingress(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            ingress = tx.state.get("ingresses", {}).get(object_key(namespace, name))
            if ingress is None:
                raise NotFound(f'ingresses.networking.k8s.io "{name}" not found')
            return clone(ingress)

    def delete_ingress(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("ingresses", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            return True

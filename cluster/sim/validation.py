"""The API server's validation and admission for what the portal submits.

Not a component: it runs inside API calls, before anything is stored. Object names (RFC 1123), label keys and
values, Job manifests (restartPolicy, containers, resource quantities, extended resources such as
``nvidia.com/gpu`` as integers with requests equal to limits, parallelism/completions, activeDeadlineSeconds)
are checked with the v1.20 messages; ``admit_job`` stores a valid Job with the API server's defaults
(``controller-uid``/``job-name`` labels, selector, pod template defaults) and the Job's ``jobsim`` record.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

from vocab.names import DNS1123_LABEL, DNS1123_SUBDOMAIN, is_label_name, is_label_value
from vocab.quantity import InvalidQuantity

from ..base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, Invalid, KubeObject, WorkloadForms
from .constants import DEFAULT_SERVER_VERSION
from .pod_resources import decode_quantity, is_extended
from .store import Txn, clone, new_metadata, object_key, timestamp

SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def label_problem(key: str, value: Any) -> str | None:
    """Why the API server would refuse this label (None: it would not)."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f'Invalid value: "{key}": prefix part {SUBDOMAIN_HELP}'
    if not is_label_name(name):
        return (
            f"Invalid value: \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (at most 63 characters)"
        )
    if value is None:
        return None
    if not isinstance(value, str):
        return f"Invalid value: {value!r}: label values must be strings"
    if not is_label_value(value):
        return (
            f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)"
        )
    return None


def validated_job(manifest: KubeObject) -> KubeObject:
    if not isinstance(manifest, dict):
        raise Invalid("A workload manifest must be a batch/v1 Job object.")
    try:
        job = clone(manifest)
    except (TypeError, ValueError) as error:
        raise Invalid(f"The Job manifest is not plain JSON data: {error}.") from None
    metadata = job.setdefault("metadata", {})
    name = str(metadata.get("name") or "")
    metadata.setdefault("namespace", "default")
    errors: list[str] = []
    if job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
        raise Invalid(f"The simulated cluster creates batch/v1 Jobs, not {job.get('apiVersion')}/{job.get('kind')}.")
    if not name:
        errors.append("metadata.name: Required value: name or generateName is required")
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f'metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
    elif len(name) > 63:
        errors.append(f'spec.template.labels: Invalid value: "{name}": must be no more than 63 characters')
    spec = job.setdefault("spec", {})
    template = spec.setdefault("template", {})
    pod_spec = template.setdefault("spec", {})
    containers = pod_spec.get("containers") or []
    restart = pod_spec.get("restartPolicy") or "Always"
    if restart not in ("OnFailure", "Never"):
        errors.append(
            f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": supported values: "OnFailure", "Never"'
        )
    if not containers:
        errors.append("spec.template.spec.containers: Required value")
    seen: set[str] = set()
    for index, container in enumerate(containers):
        path = f"spec.template.spec.containers[{index}]"
        cname = str(container.get("name") or "")
        if not cname:
            errors.append(f"{path}.name: Required value")
        elif not DNS1123_LABEL.fullmatch(cname) or len(cname) > 63:
            errors.append(f'{path}.name: Invalid value: "{cname}": {LABEL_HELP}')
        elif cname in seen:
            errors.append(f'{path}.name: Duplicate value: "{cname}"')
        seen.add(cname)
        if not container.get("image"):
            errors.append(f"{path}.image: Required value")
        errors.extend(_resource_errors(path, container.get("resources") or {}))
    errors.extend(secret_reference_errors(pod_spec))
    errors.extend(node_field_selector_errors(pod_spec))
    errors.extend(resource_claim_errors(pod_spec))
    for field in ("parallelism", "completions"):
        value = spec.get(field, 1)
        if not isinstance(value, int) or value < 0:
            errors.append(f"spec.{field}: Invalid value: {value}: must be greater than or equal to 0")
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        errors.append(f'spec.completionMode: Unsupported value: "{mode}": supported values: "NonIndexed", "Indexed"')
    if mode == "Indexed" and spec.get("completions") is None:
        errors.append("spec.completions: Required value: when completion mode is Indexed")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        errors.append(f"spec.activeDeadlineSeconds: Invalid value: {deadline}: must be greater than 0")
    if errors:
        detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise Invalid(f'Job.batch "{name}" is invalid: {detail}')
    return job


def resource_claim_errors(pod_spec: dict[str, Any], path: str = "spec.template.spec") -> list[str]:
    """The API server's rules for a pod's DRA claims (``spec.resourceClaims``): unique DNS-label names, each with
    exactly one of resourceClaimName and resourceClaimTemplateName; a container's ``resources.claims`` names one."""
    errors = []
    names: set[str] = set()
    for index, pod_claim in enumerate(pod_spec.get("resourceClaims") or []):
        where = f"{path}.resourceClaims[{index}]"
        name = str(pod_claim.get("name") or "")
        if not name or len(name) > 63 or not DNS1123_LABEL.fullmatch(name):
            errors.append(f'{where}.name: Invalid value: "{name}": {LABEL_HELP}')
        elif name in names:
            errors.append(f'{where}.name: Duplicate value: "{name}"')
        names.add(name)
        if bool(pod_claim.get("resourceClaimName")) == bool(pod_claim.get("resourceClaimTemplateName")):
            errors.append(f"{where}: Invalid value: must specify one of: `resourceClaimName`, "
                          "`resourceClaimTemplateName`")  # fmt: skip
    for index, container in enumerate(pod_spec.get("containers") or []):
        for claim_index, claim in enumerate((container.get("resources") or {}).get("claims") or []):
            if claim.get("name") not in names:
                errors.append(f'{path}.containers[{index}].resources.claims[{claim_index}].name: Not found: '
                              f'"{claim.get("name")}"')  # fmt: skip
    return errors


def node_field_selector_errors(pod_spec: dict[str, Any]) -> list[str]:
    """The API server's rule for node field selectors (matchFields): In and NotIn take exactly one value."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    errors = []
    for t, term in enumerate(required.get("nodeSelectorTerms") or []):
        for f, expression in enumerate(term.get("matchFields") or []):
            if expression.get("operator") in ("In", "NotIn") and len(expression.get("values") or []) != 1:
                errors.append(
                    "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
                    f"nodeSelectorTerms[{t}].matchFields[{f}].values: Required value: must be only one value when "
                    "`operator` is 'In' or 'NotIn' for node field selector"
                )
    return errors


def _quantity_error(value: Any) -> str:
    """What kube-apiserver v1.20 says about a value that is not a quantity (resource.ErrFormatWrong)."""
    if isinstance(value, bool):
        return f"{value!r} is not a quantity"
    return "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def _resource_errors(path: str, resources: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    parsed: dict[str, dict[str, Fraction]] = {"limits": {}, "requests": {}}
    for section in ("limits", "requests"):
        for resource, value in (resources.get(section) or {}).items():
            try:
                quantity = decode_quantity(value)
            except InvalidQuantity:
                why = _quantity_error(value)
                errors.append(f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": {why}')
                continue
            if quantity < 0:
                errors.append(
                    f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": must be greater than or '
                    "equal to 0"
                )
            if is_extended(resource) and quantity.denominator != 1:
                errors.append(f'{path}.resources.{section}[{resource}]: Invalid value: "{value}": must be an integer')
            parsed[section][resource] = quantity
    limits, requests = parsed["limits"], parsed["requests"]
    for resource, quantity in requests.items():
        if is_extended(resource):
            if resource not in limits:
                errors.append(
                    f"{path}.resources.limits: Required value: Limit must be set for non overcommitable resources"
                )
            elif limits[resource] != quantity:
                errors.append(
                    f'{path}.resources.requests[{resource}]: Invalid value: "{resources["requests"][resource]}": '
                    f"must be equal to {resource} limit"
                )
        elif resource in limits and quantity > limits[resource]:
            errors.append(
                f'{path}.resources.requests[{resource}]: Invalid value: "{resources["requests"][resource]}": '
                f"must be less than or equal to {resource} limit"
            )
    return errors


def server_version(tx: Txn) -> str:
    """The version this API server reports (states written before the field existed report the default)."""
    return str(tx.state.get("server_version") or DEFAULT_SERVER_VERSION)


def admit_job(tx: Txn, job: KubeObject, forms: WorkloadForms | None = None) -> None:
    """Store the Job with the API server's defaults; the Job controller creates its pod when the clock runs.

    A server without Indexed Jobs (``forms``) drops ``completionMode`` as an unknown field, silently, as a real
    v1.20 does: the Job is then an ordinary NonIndexed one."""
    metadata = job["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    stamp = new_metadata(tx, name, namespace)
    uid = stamp["uid"]
    spec = job["spec"]
    template = spec["template"]
    template_metadata = template.setdefault("metadata", {})
    template_labels = template_metadata.setdefault("labels", {})
    template_labels.setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
    template_labels["controller-uid"] = uid
    template_labels["job-name"] = name
    labels = metadata.get("labels") or dict(template_labels)  # v1.20 defaults Job labels from the template
    labels.setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
    metadata.update(stamp)
    metadata["labels"] = labels
    metadata.pop("generateName", None)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    if forms is not None and not forms.indexed_jobs:
        spec.pop("completionMode", None)
    else:
        spec.setdefault("completionMode", "NonIndexed")
    spec["selector"] = {"matchLabels": {"controller-uid": uid}}
    pod_spec = template["spec"]
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")
    pod_spec.setdefault("securityContext", {})
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    for container in pod_spec.get("containers") or []:
        image = str(container.get("image"))
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        latest = not tagged or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        resources = container.setdefault("resources", {})
        # Requests default to limits where only limits are given (API defaulting).
        for resource, value in (resources.get("limits") or {}).items():
            resources.setdefault("requests", {}).setdefault(resource, value)
    job["status"] = {"startTime": timestamp(tx.now)}
    if not spec["parallelism"] or not spec["completions"]:
        job["status"].pop("startTime")
    key = object_key(namespace, name)
    tx.state["jobs"][key] = job
    tx.state["jobsim"][key] = {"next_pod_at": tx.now, "finished": False, "started": tx.now, "counted": []}


# -- Secrets ------------------------------------------------------------------------------------------------------
#: A Secret or ConfigMap key (IsConfigMapKey): alphanumerics, '-', '_' or '.', at most 253 characters.
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
#: The API server refuses a Secret whose data adds up to more than 1 MiB (MaxSecretSize).
MAX_SECRET_BYTES = 1024 * 1024


def secret_errors(name: str, data: dict[str, str], secret_type: str, docker_key: str, docker_type: str) -> list[str]:
    """What kube-apiserver's ValidateSecret would say about a Secret (empty: it would accept it)."""
    errors: list[str] = []
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f'metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
    total = 0
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 253 or not SECRET_KEY.match(key) or key in (".", ".."):
            errors.append(
                f'data[{key}]: Invalid value: "{key}": a valid config key must consist of alphanumeric characters, '
                "'-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
                "'[-._a-zA-Z0-9]+')"
            )
        if not isinstance(value, str):
            errors.append(f"data[{key}]: Invalid value: must be a string")
            continue
        total += len(value.encode())
    if total > MAX_SECRET_BYTES:
        errors.append(f"data: Too long: must have at most {MAX_SECRET_BYTES} bytes")
    if secret_type == docker_type:
        raw = data.get(docker_key)
        if raw is None:
            errors.append(f"data[{docker_key}]: Required value")
        else:
            try:
                json.loads(raw)
            except ValueError as error:
                errors.append(f'data[{docker_key}]: Invalid value: "<secret contents redacted>": {error}')
    return errors


def secret_reference_errors(pod_spec: dict[str, Any]) -> list[str]:
    """The v1.20 messages for malformed Secret references in a pod template: env secretKeyRef, secret volumes,
    volume mounts naming no volume, imagePullSecrets without a name."""
    errors: list[str] = []
    base = "spec.template.spec"
    volumes = pod_spec.get("volumes") or []
    names: set[str] = set()
    for index, volume in enumerate(volumes):
        vname = str(volume.get("name") or "")
        if not vname or len(vname) > 63 or not DNS1123_LABEL.fullmatch(vname):
            errors.append(f'{base}.volumes[{index}].name: Invalid value: "{vname}": {LABEL_HELP}')
        elif vname in names:
            errors.append(f'{base}.volumes[{index}].name: Duplicate value: "{vname}"')
        names.add(vname)
        secret = volume.get("secret")
        if secret is not None:
            secret_name = str(secret.get("secretName") or "")
            if not secret_name or len(secret_name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(secret_name):
                errors.append(f"{base}.volumes[{index}].secret.secretName: Required value")
            for item_index, item in enumerate(secret.get("items") or []):
                if not SECRET_KEY.match(str(item.get("key") or "")):
                    errors.append(f"{base}.volumes[{index}].secret.items[{item_index}].key: Required value")
                path = str(item.get("path") or "")
                if not path or path.startswith("/") or ".." in path.split("/"):
                    errors.append(
                        f'{base}.volumes[{index}].secret.items[{item_index}].path: Invalid value: "{path}": must be '
                        "a relative path without '..'"
                    )
    for c_index, container in enumerate(pod_spec.get("containers") or []):
        path = f"{base}.containers[{c_index}]"
        for e_index, item in enumerate(container.get("env") or []):
            ref = ((item.get("valueFrom") or {}).get("secretKeyRef")) if isinstance(item, dict) else None
            if ref is None:
                continue
            if not DNS1123_SUBDOMAIN.fullmatch(str(ref.get("name") or "")):
                errors.append(f"{path}.env[{e_index}].valueFrom.secretKeyRef.name: Required value")
            if not SECRET_KEY.match(str(ref.get("key") or "")):
                errors.append(f"{path}.env[{e_index}].valueFrom.secretKeyRef.key: Required value")
        mount_paths: set[str] = set()
        for m_index, mount in enumerate(container.get("volumeMounts") or []):
            mname, mpath = str(mount.get("name") or ""), str(mount.get("mountPath") or "")
            if mname not in names:
                errors.append(f'{path}.volumeMounts[{m_index}].name: Not found: "{mname}"')
            if not mpath:
                errors.append(f"{path}.volumeMounts[{m_index}].mountPath: Required value")
            elif mpath in mount_paths:
                errors.append(f'{path}.volumeMounts[{m_index}].mountPath: Invalid value: "{mpath}": must be unique')
            mount_paths.add(mpath)
    for index, ref in enumerate(pod_spec.get("imagePullSecrets") or []):
        if not DNS1123_SUBDOMAIN.fullmatch(str((ref or {}).get("name") or "")):
            errors.append(f"{base}.imagePullSecrets[{index}].name: Required value")
    return errors

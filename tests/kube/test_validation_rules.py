"""The portal's environment variable name rule is exactly the real kube-apiserver's (audit finding 7): every
name the portal accepts the apiserver accepts, and every name it refuses (a trailing newline, non-ASCII, "..")
the apiserver refuses too, so a refusal never waits until the workload is created."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from kubernetes import client

from jobs.validation import validate_env

NAMES = [
    "EPOCHS", "_x1", "my-var", "a.b", ".hidden", "-x", "MY_ENV.NAME", "..", ".", "..x", "FOO\n", "\nFOO", "F\u00d6O",
    "\u0661X", "A B", "1ABC", "a/b", "a=b",
]  # fmt: skip


def _portal_accepts(name: str) -> bool:
    try:
        validate_env([{"name": name, "value": "v"}])
    except ValidationError:
        return False
    return True


def _apiserver_accepts(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "env-check"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": name, "value": "v"}]}]},
    }
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except client.ApiException as error:
        if error.status == 422:
            return False
        raise
    return True


@pytest.mark.parametrize("name", NAMES)
def test_env_names_the_portal_accepts_are_those_the_apiserver_accepts(kube_core, kube_namespace, name):
    assert _portal_accepts(name) == _apiserver_accepts(kube_core, kube_namespace, name)

"""Rendered workloads: golden files for each kind of resource class, and the security invariants for any
input a user can send. Regenerate the golden files with UPDATE_GOLDEN=1 after an intended change and review
the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpus.models import ResourceClass
from jobs.models import Job
from jobs.render import render_job
from portal.models import Team

GOLDEN = Path(__file__).parent / "golden"


def _job(people, rc_key: str, **fields) -> Job:
    team = Team.objects.get(slug="vision")
    rc = ResourceClass.objects.get(key=rc_key)
    values = dict(
        name="resnet-train",
        image="nvcr.io/nvidia/pytorch:24.01-py3",
        command=["python", "train.py"],
        args=["--epochs", "10"],
        env=[{"name": "EPOCHS", "value": "10"}],
        count=2,
        cpu_millicores=8000,
        memory_mb=65536,
        max_runtime_seconds=7200,
        node_name="gpu-h100-03",
    )
    values.update(fields)
    job = Job.objects.create(team=team, owner=people["alice"], resource_class=rc, **values)
    job.workload_name = job.default_workload_name()
    return job


CASES = {
    "whole-h100": ("nvidia.com/gpu@NVIDIA-H100-80GB-HBM3", {}),
    "mig-3g40gb": (
        "nvidia.com/mig-3g.40gb@NVIDIA-A100-SXM4-80GB",
        {"count": 1, "node_name": "gpu-a100-mig-01", "cpu_millicores": 1500, "memory_mb": 16384},
    ),
    "time-sliced-a10": (
        "nvidia.com/gpu@NVIDIA-A10-SHARED",
        {"count": 1, "node_name": "gpu-a10-01", "command": [], "args": [], "env": []},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@override_settings(PORTAL_RUNTIME_CLASS="nvidia", PORTAL_PREEMPTION_GRACE=60)
def test_golden_manifests(inventory, people, case):
    key, fields = CASES[case]
    job = _job(people, key, **fields)
    rendered = render_job(job)
    # Ids differ between runs; the golden files use the placeholder 0.
    text = yaml.safe_dump(rendered, sort_keys=True).replace(f"gpj-{job.pk}-", "gpj-0-")
    text = text.replace(f"'{job.pk}'", "'0'")
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{case}: rendered manifest differs from {path}"


@override_settings(PORTAL_RUNTIME_CLASS="")
def test_no_runtime_class_when_not_configured(inventory, people):
    spec = render_job(_job(people, "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"))["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec


hostile_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=0, max_size=40
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.lists(hostile_text, max_size=4),
    env_values=st.lists(hostile_text, max_size=3),
)
def test_user_input_never_escapes_its_fields(inventory, people, command, env_values):
    payloads = command + [
        "privileged: true",
        '{"hostPath": {"path": "/"}}',
        "hostNetwork: true\nnamespace: kube-system",
    ]
    job = _job(
        people,
        "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3",
        command=payloads,
        args=payloads,
        env=[{"name": f"V{i}", "value": v} for i, v in enumerate(env_values + payloads)],
    )
    manifest = render_job(job)
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert manifest["metadata"]["namespace"] == "team-vision"
    assert set(pod) == {
        "restartPolicy", "automountServiceAccountToken", "enableServiceLinks", "hostNetwork", "hostPID", "hostIPC",
        "terminationGracePeriodSeconds", "securityContext", "tolerations", "affinity", "containers",
    } | ({"runtimeClassName"} if "runtimeClassName" in pod else set())  # fmt: skip
    assert pod["hostNetwork"] is pod["hostPID"] is pod["hostIPC"] is False
    assert "volumes" not in pod and "volumeMounts" not in container
    assert container["securityContext"] == {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["command"] == payloads and container["args"] == payloads
    assert [e["value"] for e in container["env"]] == env_values + payloads
    # Extended resources only in limits, as integers.
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    # The round trip through YAML (what kubectl would send) gives back the same object.
    assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest

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

from accounts.models import Team
from gpus.models import ResourceClass
from jobs.models import Job
from jobs.render import render_job
from tests.factories import placed_job

GOLDEN = Path(__file__).parent / "golden"


CASES = {
    "whole-h100": ("nvidia.com/gpu@NVIDIA-H100-80GB-HBM3", {}),
    "mig-3g40gb": (
        "nvidia.com/mig-3g.40gb@NVIDIA-A100-SXM4-80GB",
        {"count": 1, "node_name": "gpu-a100-mig-01", "cpu_millicores": 1500, "memory_mb": 16384},
    ),
    # A training job reading a dataset and writing checkpoints, with its own /dev/shm size.
    "volumes-shm-scratch": (
        "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3",
        {
            "volumes": [
                {"claim": "dataset-imagenet", "mount_path": "/data/imagenet", "read_only": True},
                {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
            ],
            "shm_mb": 16384,
        },
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
    job = placed_job(people["alice"], key, **fields)
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
    spec = render_job(placed_job(people["alice"], "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"))["spec"]["template"]["spec"]
    assert "runtimeClassName" not in spec


hostile_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=0, max_size=40
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)
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
    job = placed_job(
        people["alice"],
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
        "terminationGracePeriodSeconds", "securityContext", "tolerations", "affinity", "containers", "volumes",
    } | ({"runtimeClassName"} if "runtimeClassName" in pod else set())  # fmt: skip
    assert pod["hostNetwork"] is pod["hostPID"] is pod["hostIPC"] is False
    # No claims asked for: only the portal's own emptyDirs, /dev/shm in memory and /scratch on disk.
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "scratch"]
    assert all(set(v) == {"name", "emptyDir"} for v in pod["volumes"])
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/dev/shm", "/scratch"]
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


def _notebook_job(people, **fields):
    from jobs.choices import JobKind
    from jobs.models import Notebook

    team = Team.objects.get(slug="vision")
    rc = ResourceClass.objects.get(key="nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-80GB")
    values = dict(
        name="explore", image="quay.io/jupyter/pytorch-notebook:cuda12-2024-09-30", count=1, cpu_millicores=4000,
        memory_mb=16384, ttl_seconds=8 * 3600, idle_timeout_seconds=3600, token_hash="sha256:0123456789ab:" + "f" * 64,
    ) | fields  # fmt: skip
    notebook = Notebook.objects.create(team=team, owner=people["alice"], resource_class=rc, **values)
    job = Job.objects.create(
        team=team, owner=people["alice"], resource_class=rc, kind=JobKind.NOTEBOOK, notebook=notebook,
        name=notebook.name, image=notebook.image, env=notebook.env, count=1, cpu_millicores=4000, memory_mb=16384,
        max_runtime_seconds=25 * 3600, node_name="gpu-a100-mig-01",
    )  # fmt: skip
    job.workload_name = job.default_workload_name()
    return notebook, job


@override_settings(PORTAL_RUNTIME_CLASS="nvidia", PORTAL_PREEMPTION_GRACE=60, PORTAL_NOTEBOOK_STORAGE_CLASS="fast")
def test_golden_notebook(inventory, people):
    from jobs.render import render_notebook_service, render_notebook_volume

    notebook, job = _notebook_job(people)
    objects = [render_notebook_volume(notebook), render_notebook_service(notebook), render_job(job)]
    text = yaml.safe_dump_all(objects, sort_keys=True)
    text = text.replace(f"nb-{notebook.pk}-", "nb-0-").replace(f"gpj-{job.pk}-", "gpj-0-").replace(f"'{job.pk}'", "'0'")
    path = GOLDEN / "notebook-mig-1g10gb.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"rendered notebook differs from {path}"


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(env_values=st.lists(hostile_text, max_size=3))
def test_a_notebook_adds_only_its_own_volume_and_runs_as_non_root(inventory, people, env_values):
    from jobs.models import Notebook

    Notebook.objects.all().delete()
    notebook, job = _notebook_job(
        people,
        image="privileged: true",
        env=[{"name": f"V{i}", "value": v} for i, v in enumerate([*env_values, '{"hostPath": {"path": "/"}}'])],
    )
    manifest = render_job(job)
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert manifest["metadata"]["namespace"] == "team-vision"
    assert pod["volumes"][0] == {"name": "home", "persistentVolumeClaim": {"claimName": notebook.volume_name}}
    assert [v["name"] for v in pod["volumes"]] == ["home", "dshm", "scratch"]
    assert container["volumeMounts"][0] == {"name": "home", "mountPath": "/home/jovyan"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["hostNetwork"] is pod["hostPID"] is pod["hostIPC"] is False
    assert "hostPath" not in yaml.safe_dump(pod).replace('{"hostPath": {"path": "/"}}', "")

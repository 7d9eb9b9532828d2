"""Rendering a job that uses team secrets: a golden file (secret env + secret file + pull secret), and the safety
invariants for hostile secret names, keys and mount paths (hypothesis): whatever is sent, either validation
refuses it or the rendered pod has only Secret volumes of the team's namespace, mounted read-only, no host access.
Regenerate the golden file with UPDATE_GOLDEN=1 after an intended change and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.render import render_job
from jobs.storage.mounts import secret_env_problems, secret_file_problems
from tests.factories import placed_job
from tests.sim_objects import H100

GOLDEN = Path(__file__).parent / "golden"


@override_settings(PORTAL_RUNTIME_CLASS="nvidia", PORTAL_PREEMPTION_GRACE=60)
def test_golden_job_with_secrets_and_a_pull_secret(inventory, people):
    job = placed_job(
        people["alice"],
        H100,
        image="registry.example.com/vision/train:1.4",
        secret_env=[{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}],
        secret_files=[
            {"secret": "gcs", "path": "/secrets/gcs", "keys": ["key.json"]},
            {"secret": "hf", "path": "/secrets/hf", "keys": []},
        ],
    )
    rendered = render_job(job, ["portal-registry-registry.example.com"])
    text = yaml.safe_dump(rendered, sort_keys=True).replace(f"gpj-{job.pk}-", "gpj-0-").replace(f"'{job.pk}'", "'0'")
    path = GOLDEN / "secrets-pull-h100.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"rendered manifest differs from {path}"


hostile = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
paths = st.one_of(
    hostile,
    st.sampled_from(
        [
            "/",
            "/proc",
            "/proc/1",
            "/dev/shm",
            "/etc",
            "/etc/passwd",
            "/var/run/docker.sock",
            "/usr/lib",
            "/sys/fs",
            "/data/../proc",
            "//data",
            "/data/",
            "/data/./x",
            "/a b",
            "C:\\x",
            "/data:ro",
            "/var/lib/kubelet",
            "/run/secrets",
        ]
    ),  # fmt: skip
    st.builds(lambda parts: "/" + "/".join(parts), st.lists(hostile, min_size=1, max_size=3)),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(
    secret=hostile,
    key=hostile,
    name=hostile,
    path=paths,
    second_path=paths,
)
def test_hostile_secret_refs_are_refused_or_rendered_safely(inventory, people, secret, key, name, path, second_path):
    env = [{"name": name, "secret": secret, "key": key}]
    files = [{"secret": secret, "path": path, "keys": [key]}, {"secret": secret, "path": second_path, "keys": []}]
    env_ok = not secret_env_problems(env, [])
    files_ok = not secret_file_problems(files)
    if files_ok:
        # What validation lets through: plain absolute paths outside the system's directories, all different.
        for mount in (path, second_path):
            assert mount.startswith("/") and ".." not in mount.split("/") and "//" not in mount
            assert not mount.startswith(("/proc", "/sys", "/dev", "/usr", "/bin", "/lib", "/run", "/var/lib"))
            assert mount not in ("/", "/etc", "/var", "/etc/passwd", "/etc/hosts")
        assert path != second_path
    job = placed_job(
        people["alice"],
        H100,
        secret_env=env if env_ok else [],
        secret_files=files if files_ok else [],
    )
    manifest = render_job(job, ["portal-registry-nvcr.io"])
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert manifest["metadata"]["namespace"] == "team-vision"
    assert pod["hostNetwork"] is pod["hostPID"] is pod["hostIPC"] is False
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    portal_own = {"dshm", "scratch"}  # the portal's emptyDirs (/dev/shm and /scratch) on every workload
    for volume in pod.get("volumes", []):
        if volume["name"] in portal_own:
            assert set(volume) == {"name", "emptyDir"}
            continue
        assert set(volume) == {"name", "secret"}  # only Secret volumes, never hostPath or another source
        assert volume["name"].startswith("secret-file-")
    for mount in container.get("volumeMounts", []):
        assert mount["name"] in portal_own or mount["readOnly"] is True
    assert pod["imagePullSecrets"] == [{"name": "portal-registry-nvcr.io"}]
    assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest

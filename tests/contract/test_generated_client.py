"""Issue 18: the schema is a contract a standard generator can build a client from. The test reads /api/schema/
from the live portal, generates a Python client with openapi-python-client (pinned in requirements-dev.txt;
offline), imports it and, with a bearer token, lists, submits, reads, cancels and resubmits jobs and lists,
launches, stops and starts notebooks: every answer must parse into the generated models (a schema that says
"string" where the API answers null, or an enum without a value the API sends, fails here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import requests

from cluster import get_backend
from jobs.cycle.run import run_cycle

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
PACKAGE = "portal_api_client"
#: The operations the issue names (every other one must be generated too).
NEEDED = [
    "v1_jobs_list", "v1_jobs_create", "v1_jobs_retrieve", "v1_jobs_cancel_create", "v1_jobs_resubmit_create",
    "v1_notebooks_list", "v1_notebooks_create", "v1_notebooks_retrieve", "v1_notebooks_stop_create",
    "v1_notebooks_start_create",
]  # fmt: skip


def generate(live_portal, where: Path):
    """The client package generated from the live portal's schema, imported."""
    schema = requests.get(
        f"{live_portal.url}/api/schema/?format=json", headers=live_portal.headers("member"), timeout=30
    )
    assert schema.status_code == 200, schema.text[:300]
    (where / "schema.json").write_text(schema.text)
    (where / "config.yaml").write_text(f"package_name_override: {PACKAGE}\nproject_name_override: portal-api-client\n")
    generator = Path(sys.executable).parent / "openapi-python-client"
    run = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            "schema.json",
            "--meta",
            "none",
            "--config",
            "config.yaml",
            "--output-path",
            PACKAGE,
        ],  # fmt: skip
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    # Every operation of the schema is built (the generator skips, with a warning, one it cannot express).
    operations = {
        op["operationId"] for item in schema.json()["paths"].values() for op in item.values() if "operationId" in op
    }
    built = {p.stem for p in (where / PACKAGE / "api").glob("*/v1_*.py")}
    assert set(NEEDED) <= operations and len(operations) >= 78
    assert operations <= built, f"not generated: {sorted(operations - built)}\n{run.stdout[-3000:]}"
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where))


def test_a_generated_client_drives_jobs_and_notebooks(live_portal, tmp_path):
    generate(live_portal, tmp_path)
    # The generator makes a module per tag: the schema's areas (settings.SPECTACULAR_SETTINGS["TAGS"]).
    from portal_api_client import AuthenticatedClient
    from portal_api_client.api.jobs import (
        v1_jobs_cancel_create,
        v1_jobs_create,
        v1_jobs_list,
        v1_jobs_resubmit_create,
        v1_jobs_retrieve,
    )
    from portal_api_client.api.notebooks import (
        v1_notebooks_create,
        v1_notebooks_list,
        v1_notebooks_retrieve,
        v1_notebooks_start_create,
        v1_notebooks_stop_create,
    )
    from portal_api_client.models import Job, JobRequest, Notebook, NotebookRequest, PatchedJobRequest

    client = AuthenticatedClient(
        base_url=live_portal.url, token=live_portal.tokens["member"], raise_on_unexpected_status=True
    )
    with client:
        # Jobs: the seeded one runs (its wait_reason is blank now), a new one queues.
        listed = v1_jobs_list.sync(client=client)
        assert listed.count >= 1 and all(isinstance(job, Job) for job in listed.results)
        job = v1_jobs_create.sync(
            client=client,
            body=JobRequest(
                name="generated",
                image="nvcr.io/nvidia/pytorch:24.01-py3",
                resource_class=H100,
                team="vision",
                command=["python", "train.py"],
                count=1,
            ),  # fmt: skip
        )
        assert isinstance(job, Job), job
        run_cycle(get_backend())
        read = v1_jobs_retrieve.sync(id=job.id, client=client)
        assert isinstance(read, Job) and read.name == "generated" and read.team == "vision"
        cancelled = v1_jobs_cancel_create.sync(id=job.id, client=client)
        assert isinstance(cancelled, Job) and str(cancelled.state) in ("cancelled", "JobStateEnum.CANCELLED"), cancelled
        again = v1_jobs_resubmit_create.sync(id=job.id, client=client, body=PatchedJobRequest(count=2))
        assert isinstance(again, Job) and again.id != job.id and again.count == 2
        assert {j.id for j in v1_jobs_list.sync(client=client).results} >= {job.id, again.id}

        # Notebooks: the seeded one and a new one; stop and start again (a new token, once).
        launched = v1_notebooks_create.sync(
            client=client, body=NotebookRequest(team="vision", name="generated", resource_class=H100)
        )
        assert isinstance(launched, Notebook), launched
        for _ in range(2):
            run_cycle(get_backend())
        notebooks = v1_notebooks_list.sync(client=client)
        assert {n.id for n in notebooks.results} >= {launched.id}
        assert all(isinstance(n, Notebook) for n in notebooks.results)
        stopped = v1_notebooks_stop_create.sync(id=launched.id, client=client)
        assert isinstance(stopped, Notebook) and stopped.stop_reason, stopped
        started = v1_notebooks_start_create.sync(id=launched.id, client=client)
        assert isinstance(started, Notebook), started
        assert isinstance(v1_notebooks_retrieve.sync(id=launched.id, client=client), Notebook)

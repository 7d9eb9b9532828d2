"""Volume rows on the job and notebook forms (each row's problem next to it, every problem at once), the admins'
Datasets pages (publish, change teams, unpublish after a confirmation; audited; 404 for members), the datasets a
member sees on the Volumes page, and the wait message of a job whose claim is not bound.

Kubernetes facts relied on: kube-scheduler places a pod only once every claim it mounts exists and is bound
(https://kubernetes.io/docs/concepts/storage/persistent-volumes/#binding); a claim with ``storageClassName: ""``
and no matching volume stays Pending (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#class-1).
"""

from __future__ import annotations

import re

import pytest

from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from jobs import actions, pod_states
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Dataset, Job, Notebook, TeamVolume
from jobs.storage import volumes
from jobs.storage.mounts import volume_mount_problems
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO, H100, claim
from vocab.pod_states import Verdict

# The demo cluster with team volumes: claims reconciled into TeamVolume rows.
pytestmark = pytest.mark.cluster(claims=[claim("checkpoints"), claim("corpus", "team-nlp")])


def job_form(**overrides) -> dict:
    rc = ResourceClass.objects.get(key=H100)
    data = {
        "team": rc.quotas.get(team__slug="vision").team_id,
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": "python train.py",
        "resource_class": rc.pk, "count": 1, "cpu": "2", "memory_mb": 16384, "priority": 50,
        "max_runtime_hours": "1", "idempotency_key": "k1",
    }  # fmt: skip
    return data | overrides


def row_errors(html: str) -> dict[int, str]:
    """Row index → the text of the error list right under that row."""
    found = re.findall(r'<ul class="errorlist" id="volume-errors-(\d+)"[^>]*>(.*?)</ul>', html, re.S)
    return {int(index): re.sub(r"<[^>]+>", " ", text) for index, text in found}


# -- volume_mount_problems --------------------------------------------------------------------------------------


def test_problems_name_the_mount_they_are_about(cluster, people):
    mounts = [
        {"claim": "checkpoints", "mount_path": "/data"},
        {"claim": "corpus", "mount_path": "/etc/x"},
        {"claim": "checkpoints", "mount_path": "/data"},
    ]
    problems = volume_mount_problems(people["vision"], mounts)
    by_index = {}
    for index, text in problems:
        by_index.setdefault(index, []).append(text)
    assert sorted(by_index) == [1, 2]
    assert any("has no volume 'corpus'" in t for t in by_index[1]) and any("inside /etc" in t for t in by_index[1])
    assert by_index[2] == ["'/data' is used by an earlier mount too; give each volume its own path."]
    too_many = volume_mount_problems(
        people["vision"], [{"claim": "checkpoints", "mount_path": f"/d{i}"} for i in range(17)]
    )
    assert (None, "At most 16 volumes per job; this one has 17.") in too_many


# -- the job form -------------------------------------------------------------------------------------------------


def test_job_form_puts_each_volume_problem_next_to_its_row(cluster, people, client):
    client.force_login(people["alice"])
    response = client.post(
        "/jobs/new/",
        job_form(
            # Row 1 is blank (ignored); rows 0, 2 and 3 each have their own problem.
            volume_claim=["corpus", "", "checkpoints", "checkpoints"],
            volume_path=["/data", "", "/proc/x", "/ok"],
            volume_read_only=["3"],
        ),
    )
    assert response.status_code == 200 and not Job.objects.exists()
    html = response.content.decode()
    errors = row_errors(html)
    assert sorted(errors) == [0, 2]
    assert "has no volume &#x27;corpus&#x27;" in errors[0] and errors[0].strip().startswith("Team")
    assert "inside /proc" in errors[2]
    # The summary says which rows; the rows' own sentences are not repeated at the top of the form.
    assert "Correct volume rows 1 and 3: the problem is shown next to each." in html
    top = html.split('data-testid="form-errors"', 1)[1].split("</div>", 1)[0]
    assert "correct the fields marked below" in top and "corpus" not in top
    # The rows come back as typed, the read-only tick on its row, and the inputs say they are invalid.
    assert 'id="volume-claim-3" name="volume_claim" value="checkpoints"' in html
    assert re.search(r'id="volume-ro-3" name="volume_read_only" value="3" checked', html)
    assert re.search(r'id="volume-path-2"[^>]*aria-invalid="true" aria-describedby="volume-errors-2"', html)


def test_job_form_queues_good_rows(cluster, people, client):
    client.force_login(people["alice"])
    response = client.post(
        "/jobs/new/",
        job_form(volume_claim=["", "checkpoints"], volume_path=["", "/checkpoints"], volume_read_only=[]),
    )
    assert response.status_code == 302
    assert Job.objects.get().volumes == [{"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False}]


# -- the notebook form --------------------------------------------------------------------------------------------


def notebook_form(people, **overrides) -> dict:
    rc = ResourceClass.objects.get(key=H100)
    data = {
        "team": people["vision"].pk, "name": "explore", "image": "jupyter/base-notebook:latest",
        "resource_class": rc.pk, "count": 1, "cpu": 4, "memory_gib": 16, "volume_gib": 10,
    }  # fmt: skip
    return data | overrides


def test_notebook_form_offers_volume_rows_and_checks_them_like_a_launch(cluster, people, client):
    client.force_login(people["alice"])
    page = client.get("/notebooks/").content.decode()
    assert 'data-testid="volume-rows"' in page and 'id="add-volume-row"' in page
    assert '<option value="checkpoints">' in page and '<option value="corpus">' not in page
    bad = client.post(
        "/notebooks/",
        notebook_form(people, volume_claim=["checkpoints", "corpus"], volume_path=["/home/jovyan/ck", "/data"]),
    )
    assert bad.status_code == 200 and not Notebook.objects.exists()
    errors = row_errors(bad.content.decode())
    assert sorted(errors) == [0, 1]
    assert "inside /home/jovyan, which belongs to the portal" in errors[0]
    assert "has no volume &#x27;corpus&#x27;" in errors[1]
    good = client.post("/notebooks/", notebook_form(people, volume_claim=["checkpoints"], volume_path=["/checkpoints"]))
    assert good.status_code == 302, good.content.decode()[:3000]
    notebook = Notebook.objects.get()
    assert notebook.volumes == [{"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False}]


# -- datasets (admins) --------------------------------------------------------------------------------------------


def dataset_form(*teams, **overrides) -> dict:
    return {
        "name": "imagenet", "description": "ILSVRC 2012", "source": "nfs", "server": "nfs.example.internal",
        "path": "/exports/imagenet", "capacity_gib": 150, "teams": [t.pk for t in teams],
        "clusters": [settings_cluster_pk()],
    } | overrides  # fmt: skip


def test_dataset_pages_are_for_admins_only(cluster, people, client):
    dataset = Dataset.objects.create(name="wiki", server="nfs.example.internal", path="/exports/wiki")
    client.force_login(people["alice"])
    for url in ("/datasets/", f"/datasets/{dataset.pk}/", f"/datasets/{dataset.pk}/unpublish/"):
        assert client.get(url).status_code == 404
        assert client.post(url, dataset_form(people["vision"])).status_code == 404
    assert Dataset.objects.get().teams.count() == 0 and Dataset.objects.count() == 1
    assert 'href="/datasets/"' not in client.get("/volumes/").content.decode()
    client.force_login(people["admin"])
    assert 'href="/datasets/"' in client.get("/volumes/").content.decode()


def test_admin_publishes_changes_and_unpublishes_a_dataset(cluster, people, client):
    admin, vision, nlp = people["admin"], people["vision"], people["nlp"]
    client.force_login(admin)
    bad = client.post("/datasets/", dataset_form(vision, name="Bad Name", path="relative", capacity_gib=0))
    assert bad.status_code == 200 and not Dataset.objects.exists()
    html = bad.content.decode()
    assert html.count('class="field has-error"') == 3  # name, path and size, all at once

    response = client.post("/datasets/", dataset_form(vision))
    assert response.status_code == 302
    dataset = Dataset.objects.get()
    assert list(dataset.teams.all()) == [vision] and dataset.created_by == admin
    assert AuditEvent.objects.filter(action="dataset.publish").count() == 1
    volumes.reconcile_volumes(cluster)
    listing = client.get("/datasets/").content.decode()
    row = listing.split('data-dataset="imagenet"', 1)[1].split("</tr>", 1)[0]
    phase = TeamVolume.objects.get(team=vision, name="dataset-imagenet").phase
    assert f'data-team="{vision.slug}"' in row and f">{phase}</span>" in row and nlp.name not in row

    # Change its teams: publish to nlp as well, unpublish from vision.
    edit = client.get(f"/datasets/{dataset.pk}/").content.decode()
    assert 'value="imagenet"' in edit and re.search(rf'value="{vision.pk}"[^>]*checked', edit)
    assert client.post(f"/datasets/{dataset.pk}/", dataset_form(nlp)).status_code == 302
    assert list(dataset.teams.all()) == [nlp]
    change = AuditEvent.objects.get(action="dataset.change")
    assert change.before["teams"] == ["vision"] and change.after["teams"] == ["nlp"]
    renamed = client.post(f"/datasets/{dataset.pk}/", dataset_form(nlp, name="imagenet2"))
    assert "Unpublish the dataset from every team before renaming it." in renamed.content.decode()
    assert Dataset.objects.get().name == "imagenet"

    # Unpublishing asks first and names what goes, then removes it.
    confirm = client.get(f"/datasets/{dataset.pk}/unpublish/").content.decode()
    assert "dataset-imagenet" in confirm and nlp.name in confirm and Dataset.objects.exists()
    assert client.post(f"/datasets/{dataset.pk}/unpublish/").status_code == 302
    assert not Dataset.objects.exists()
    assert AuditEvent.objects.filter(action="dataset.delete").count() == 1
    volumes.reconcile_volumes(cluster)
    assert not TeamVolume.objects.filter(name="dataset-imagenet").exists()


def test_members_see_the_datasets_of_their_teams_on_the_volumes_page(cluster, people, client):
    mine = volumes.save_dataset(people["admin"], _fields("imagenet"), [people["vision"]])
    volumes.save_dataset(people["admin"], _fields("wiki"), [people["nlp"]])
    client.force_login(people["alice"])
    page = client.get("/volumes/").content.decode()
    section = page.split('data-testid="team-datasets"', 1)[1]
    assert f'data-dataset="{mine.name}"' in section and "dataset-imagenet" in section
    assert 'data-dataset="wiki"' not in section and "Manage datasets" not in section


def _fields(name: str) -> dict:
    form = dataset_form(name=name)
    return {key: form[key] for key in ("name", "description", "source", "server", "path", "capacity_gib")}


# -- a job waiting on its claim -----------------------------------------------------------------------------------


def test_a_pod_waiting_on_its_claims_is_said_from_the_schedulers_message(cluster, people):
    job = Job(team=people["vision"], volumes=[{"claim": "checkpoints", "mount_path": "/c", "read_only": False}])
    TeamVolume.objects.filter(name="checkpoints").update(phase="Pending")

    def said(message):
        return pod_states.why_waiting(job, "Unschedulable", message)

    unbound = "0/4 nodes are available: 4 pod has unbound immediate PersistentVolumeClaims."
    text = said(unbound).sentence
    assert text.startswith("Waiting for volume checkpoints to be bound") and text.endswith(f"Kubernetes: {unbound}")
    missing = said('0/4 nodes are available: persistentvolumeclaim "gone" not found.')
    assert missing.sentence.startswith("Waiting for volume gone: the claim does not exist in namespace team-vision")
    assert missing.verdict == Verdict.EXPLAIN
    full = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    other = said(full)
    assert other.verdict == Verdict.WAIT and other.sentence == f"Pending in the cluster: Unschedulable: {full}"


def test_a_job_on_an_unbound_claim_says_so_on_its_page(db, tmp_path, people, client):
    clock = SimClock()
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=clock)
    sync_inventory(sim)
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 8, 16)
    sim.ensure_namespace("team-vision")
    # No storage class and no volume to match: the PV controller leaves the claim Pending (FailedBinding).
    sim.ensure_pvc(claim("scratch-data", storageClassName=""))
    volumes.reconcile_volumes(sim)
    assert TeamVolume.objects.get(name="scratch-data").phase == "Pending"
    fields = dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
        count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=3600,
        volumes=[{"claim": "scratch-data", "mount_path": "/data", "read_only": False}],
    )  # fmt: skip
    job = actions.submit_job(people["alice"], people["vision"], ResourceClass.objects.get(key=H100), fields).job
    for _ in range(4):
        clock.advance(5)
        run_cycle(sim, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert job.wait_message.startswith("Waiting for volume scratch-data to be bound"), job.wait_message
    assert "unbound immediate PersistentVolumeClaims" in job.wait_message
    assert job.events.filter(message=job.wait_message).count() == 1
    client.force_login(people["alice"])
    page = client.get(job.get_absolute_url()).content.decode()
    assert "Waiting for volume scratch-data to be bound" in page.split('data-testid="wait-box"', 1)[1]

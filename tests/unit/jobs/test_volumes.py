"""Team volumes: the inventory reconciled from the cluster, admin-published datasets, mounts in the job and
notebook specs with their validation, the rendered volumes (only claims of the team's namespace and the portal's
emptyDirs), and who may see what.

Kubernetes facts relied on: a pod can only mount claims of its own namespace
(https://kubernetes.io/docs/concepts/storage/persistent-volumes/#claims-as-volumes); a PersistentVolume can be
pre-bound to one claim with ``claimRef`` (https://kubernetes.io/docs/concepts/storage/persistent-volumes/#reserving-a-persistentvolume);
a memory-backed emptyDir counts against the container's memory limit
(https://kubernetes.io/docs/concepts/storage/volumes/#emptydir).
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Dataset, Job, TeamVolume
from jobs.render import RENDERED_VOLUME_SOURCES, render_job
from jobs.storage import volumes
from jobs.storage.mounts import SYSTEM_DIRECTORIES, check_mount_paths, check_volume_mounts
from tests.sim_objects import H100, claim

# The demo cluster with team volumes: claims reconciled into TeamVolume rows.
pytestmark = pytest.mark.cluster(
    claims=[claim("checkpoints"), claim("corpus", "team-nlp"), claim("reference", modes=("ReadOnlyMany",))]
)


def fields(**overrides) -> dict:
    return dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
        count=1, cpu_millicores=4000, memory_mb=16384, priority=50, preemptible=False, max_runtime_seconds=3600,
    ) | overrides  # fmt: skip


# -- check_mount_paths (pure) -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/data", "/data/imagenet", "/checkpoints", "/home/me/runs", "/mnt/a_b-c.d", "/devices"]
)
def test_plain_absolute_paths_of_ones_own_are_accepted(path):
    assert check_mount_paths([path]) == []


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("data", "relative"),
        ("./data", "relative"),
        ("/", "root"),
        ("/data/../etc", "'..'"),
        ("/data//x", "empty"),
        ("/data/", "trailing"),
        ("/data/./x", "'.'"),
        ("/proc", "/proc"),
        ("/proc/self", "inside /proc"),
        ("/sys/fs", "/sys"),
        ("/dev", "/dev"),
        ("/dev/shm", "inside /dev"),
        ("/etc", "/etc"),
        ("/usr/lib/x", "/usr"),
        ("/bin", "/bin"),
        ("/lib64", "/lib64"),
        ("/var/run/docker.sock", "/var/run"),
        ("/scratch", "belongs to the portal"),
        ("/data/has space", "characters"),
        ("/data/a:b", "characters"),
        ("/data/$HOME", "characters"),
        ("/data/.hidden", "characters"),
        ("", "give the path"),
        ("/" + "a" * 300, "longer"),
    ],
)
def test_hostile_or_system_paths_are_refused_with_what_to_do(path, words):
    [problem] = check_mount_paths([path])
    assert words in problem
    assert problem.startswith("Mount 1:")


def test_two_mounts_on_one_path_and_every_problem_at_once():
    problems = check_mount_paths(["/data", "/etc", "/data", "rel"])
    assert [p.split(":")[0] for p in problems] == ["Mount 2", "Mount 3", "Mount 4"]
    assert "earlier mount" in problems[1]


def test_reserved_paths_are_the_portals():
    [problem] = check_mount_paths(["/home/jovyan/data"], reserved=("/home/jovyan",))
    assert "belongs to the portal" in problem


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="/.-_ a:$\\\n\x00eEtcdvprosuh*~", max_size=30))
def test_no_accepted_path_is_relative_traversing_or_over_a_system_directory(path):
    if check_mount_paths([path]):
        return
    assert path.startswith("/") and path != "/"
    parts = path[1:].split("/")
    assert all(part not in ("", ".", "..") for part in parts)
    assert not any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRECTORIES)
    assert all(ch.isalnum() or ch in "/._-" for ch in path)


# -- check_volume_mounts (inventory) ------------------------------------------------------------------------------


def test_only_the_teams_own_claims_may_be_mounted(cluster, people):
    vision = people["vision"]
    ok = [{"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False}]
    assert check_volume_mounts(vision, ok) == []
    problems = check_volume_mounts(
        vision,
        [
            {"claim": "corpus", "mount_path": "/a", "read_only": True},  # nlp's claim
            {"claim": "team-nlp/corpus", "mount_path": "/b", "read_only": True},
            {"claim": "x", "mount_path": "/c", "hostPath": {"path": "/"}},
            {"claim": "Bad_Name", "mount_path": "/d"},
            {"claim": "reference", "mount_path": "/e", "read_only": False},  # ReadOnlyMany only
            {"claim": "checkpoints", "mount_path": "/etc"},
        ],
    )
    text = "\n".join(problems)
    assert "Mount 1: team Computer Vision has no volume 'corpus' in namespace team-vision" in text
    assert "Mount 2: 'team-nlp/corpus' is not a claim name" in text and "own team's namespace" in text
    assert "Mount 3: hostPath is not allowed" in text
    assert "Mount 4: 'Bad_Name' is not a Kubernetes claim name" in text
    assert "Mount 5: 'reference' is offered ReadOnlyMany only; mount it read-only." in text
    assert "Mount 6: '/etc' is /etc" in text


def test_submission_refuses_bad_mounts_and_stores_nothing(cluster, people):
    before = Job.objects.count()
    with pytest.raises(Exception) as caught:  # noqa: PT011 - django's ValidationError, checked below
        actions.submit_job(
            people["alice"], people["vision"], ResourceClass.objects.get(key=H100),
            fields(volumes=[{"claim": "nope", "mount_path": "/proc", "read_only": False}], shm_mb=10),
        )  # fmt: skip
    errors = caught.value.message_dict
    assert len(errors["volumes"]) == 2 and "nope" in errors["volumes"][0] and "/proc" in errors["volumes"][1]
    assert "64 MiB to 8192 MiB" in errors["shm_mb"][0]
    assert Job.objects.count() == before


# -- render ---------------------------------------------------------------------------------------------------


def test_a_job_mounts_its_claims_and_gets_shm_from_its_memory(cluster, people, settings):
    settings.PORTAL_SHM_FRACTION = 0.25
    job = actions.submit_job(
        people["alice"], people["vision"], ResourceClass.objects.get(key=H100),
        fields(volumes=[{"claim": "reference", "mount_path": "/data", "read_only": True},
                        {"claim": "checkpoints", "mount_path": "/ckpt", "read_only": False}]),
    ).job  # fmt: skip
    job.node_name = "gpu-h100-01"
    pod = render_job(job)["spec"]["template"]["spec"]
    assert pod["volumes"][:2] == [
        {"name": "vol-0", "persistentVolumeClaim": {"claimName": "reference", "readOnly": True}},
        {"name": "vol-1", "persistentVolumeClaim": {"claimName": "checkpoints"}},
    ]
    assert pod["volumes"][2] == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "4096Mi"}}
    mounts = pod["containers"][0]["volumeMounts"]
    assert mounts[0] == {"name": "vol-0", "mountPath": "/data", "readOnly": True}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in mounts and {
        "name": "scratch",
        "mountPath": "/scratch",
    } in mounts


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(
    names=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=3),
    paths=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=3),
)
def test_hostile_mounts_never_reach_a_rendered_spec_unchecked(cluster, people, names, paths):
    """Whatever is sent, a submission either is refused or renders only the team's claims at checked paths."""
    mounts = [{"claim": n, "mount_path": p, "read_only": False} for n, p in zip(names, paths, strict=False)]
    try:
        job = actions.submit_job(
            people["alice"], people["vision"], ResourceClass.objects.get(key=H100), fields(volumes=mounts)
        ).job
    except Exception as error:  # noqa: BLE001 - refused: that is an allowed outcome
        assert hasattr(error, "message_dict") and "volumes" in error.message_dict
        return
    job.node_name = "gpu-h100-01"
    manifest = render_job(job)
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["metadata"]["namespace"] == "team-vision"
    known = set(TeamVolume.objects.filter(team=people["vision"]).values_list("name", flat=True))
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= RENDERED_VOLUME_SOURCES
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["claimName"] in known
    assert "hostPath" not in yaml.safe_dump(pod)
    assert not check_mount_paths([m["mountPath"] for m in pod["containers"][0]["volumeMounts"][: len(mounts)]])


# -- inventory ----------------------------------------------------------------------------------------------


def test_reconcile_lists_each_teams_claims_with_size_modes_and_phase(cluster, people):
    rows = {v.name: v for v in TeamVolume.objects.filter(team=people["vision"])}
    assert set(rows) == {"checkpoints", "reference"}
    assert rows["checkpoints"].phase == "Bound" and rows["checkpoints"].capacity == "500Gi"
    assert rows["checkpoints"].capacity_bytes == 500 * 2**30
    assert rows["checkpoints"].access_modes == ["ReadWriteMany"] and rows["checkpoints"].storage_class == "standard"
    assert rows["reference"].read_only_only and not rows["checkpoints"].read_only_only
    # Idempotent, and a claim removed in the cluster leaves the inventory.
    assert volumes.reconcile_volumes(cluster)["created"] == 0
    cluster.delete_pvc("team-vision", "reference")
    assert volumes.reconcile_volumes(cluster)["gone"] == 1
    assert not TeamVolume.objects.filter(name="reference").exists()


def test_a_notebook_home_appears_as_a_team_volume(cluster, people):
    from jobs.notebook.sessions import launch_notebook

    rc = ResourceClass.objects.get(key=H100)
    nb = launch_notebook(
        people["alice"], people["vision"], rc,
        {"name": "lab", "count": 1, "cpu_millicores": 2000, "memory_mb": 8192,
         "volumes": [{"claim": "checkpoints", "mount_path": "/work", "read_only": False}]},
    ).notebook  # fmt: skip
    cluster.ensure_pvc({**claim(nb.volume_name, storage="20Gi", modes=("ReadWriteOnce",))})
    volumes.reconcile_volumes(cluster)
    home = TeamVolume.objects.get(team=people["vision"], name=nb.volume_name)
    assert home.notebook_id == nb.pk
    users = volumes.volume_users(people["vision"])
    assert [u["path"] for u in users[nb.volume_name]] == ["/home/jovyan"]
    assert [u["path"] for u in users["checkpoints"]] == ["/work"]


def test_a_notebook_may_not_mount_over_its_home(cluster, people):
    from jobs.notebook.sessions import launch_notebook

    with pytest.raises(Exception) as caught:  # noqa: PT011
        launch_notebook(
            people["alice"], people["vision"], ResourceClass.objects.get(key=H100),
            {"name": "lab", "count": 1, "cpu_millicores": 2000, "memory_mb": 8192,
             "volumes": [{"claim": "checkpoints", "mount_path": "/home/jovyan", "read_only": False}]},
        )  # fmt: skip
    assert "belongs to the portal" in caught.value.message_dict["volumes"][0]


# -- datasets -------------------------------------------------------------------------------------------------


def test_publishing_a_dataset_makes_a_read_only_pair_per_team_and_unpublishing_removes_it(cluster, people):
    dataset = volumes.save_dataset(
        people["admin"],
        {"name": "imagenet", "source": "nfs", "server": "nfs.example.internal", "path": "/exports/imagenet",
         "capacity_gib": 150},
        [people["vision"], people["nlp"]],
    )  # fmt: skip
    volumes.reconcile_volumes(cluster)
    pv = {v["metadata"]["name"]: v for v in cluster.list_pvs()}
    assert set(pv) >= {"ds-imagenet-vision", "ds-imagenet-nlp"}
    vision_pv = pv["ds-imagenet-vision"]
    assert vision_pv["spec"]["accessModes"] == ["ReadOnlyMany"] and vision_pv["spec"]["nfs"]["readOnly"] is True
    assert vision_pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert vision_pv["spec"]["claimRef"]["namespace"] == "team-vision"
    assert cluster.get_pvc("team-vision", "dataset-imagenet")["status"]["phase"] == "Bound"
    row = TeamVolume.objects.get(team=people["vision"], name="dataset-imagenet")
    assert row.dataset_id == dataset.pk and row.read_only_only and row.capacity == "150Gi"
    # Mounting it read-write is refused; read-only is fine.
    [problem] = check_volume_mounts(people["vision"], [{"claim": "dataset-imagenet", "mount_path": "/data"}])
    assert "published dataset; mount it read-only" in problem
    assert AuditEvent.objects.filter(action="dataset.publish").count() == 1

    volumes.save_dataset(people["admin"], {f: getattr(dataset, f) for f in volumes.AUDIT_FIELDS}, [people["nlp"]],
                         dataset)  # fmt: skip
    volumes.reconcile_volumes(cluster)
    assert "ds-imagenet-vision" not in {v["metadata"]["name"] for v in cluster.list_pvs()}
    assert not TeamVolume.objects.filter(team=people["vision"], name="dataset-imagenet").exists()
    assert TeamVolume.objects.filter(team=people["nlp"], name="dataset-imagenet").exists()
    assert AuditEvent.objects.filter(action="dataset.change").count() == 1


def test_only_admins_publish_and_every_problem_is_named(cluster, people):
    from django.core.exceptions import PermissionDenied, ValidationError

    with pytest.raises(PermissionDenied):
        volumes.save_dataset(people["alice"], {"name": "x"}, [])
    with pytest.raises(ValidationError) as caught:
        volumes.save_dataset(people["admin"], {"name": "Bad", "source": "nfs", "server": "", "path": "rel",
                                               "capacity_gib": 0}, [])  # fmt: skip
    assert set(caught.value.message_dict) == {"name", "server", "path", "capacity_gib"}
    assert not Dataset.objects.exists()


# -- API ------------------------------------------------------------------------------------------------------


def test_the_api_lists_a_members_own_team_volumes_only(cluster, people, api_client):
    api_client.force_login(people["alice"])  # vision
    names = {v["name"] for v in api_client.get("/api/v1/volumes/").json()["results"]}
    assert names == {"checkpoints", "reference"}
    api_client.force_login(people["admin"])
    assert {v["team"] for v in api_client.get("/api/v1/volumes/").json()["results"]} == {"vision", "nlp"}


def test_the_api_submits_mounts_and_reports_every_problem(cluster, people, api_client):
    api_client.force_login(people["alice"])
    body = {
        "team": "vision", "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["python"],
        "resource_class": H100, "count": 1, "memory_mb": 16384,
    }  # fmt: skip
    bad = api_client.post(
        "/api/v1/jobs/",
        {**body, "volumes": [{"claim": "corpus", "mount_path": "/data"}, {"claim": "x", "mount_path": "/sys"}],
         "shm_mb": 999999},
        format="json",
    )  # fmt: skip
    assert bad.status_code == 400
    assert len(bad.json()["volumes"]) == 3 and "shm_mb" in bad.json()
    good = api_client.post(
        "/api/v1/jobs/",
        {**body, "volumes": [{"claim": "checkpoints", "mount_path": "/ckpt"}], "shm_mb": 4096},
        format="json",
    )
    assert good.status_code == 201, good.json()
    assert good.json()["volumes"] == [{"claim": "checkpoints", "mount_path": "/ckpt", "read_only": False}]
    assert good.json()["shm_mb"] == 4096


def test_datasets_api_is_admin_only_for_changes(cluster, people, api_client):
    payload = {"name": "coco", "source": "nfs", "server": "nfs.example.internal", "path": "/exports/coco",
               "capacity_gib": 20, "teams": ["vision"]}  # fmt: skip
    api_client.force_login(people["alice"])
    assert api_client.post("/api/v1/datasets/", payload, format="json").status_code == 403
    api_client.force_login(people["admin"])
    made = api_client.post("/api/v1/datasets/", payload, format="json")
    assert made.status_code == 201 and made.json()["claim_name"] == "dataset-coco"
    api_client.force_login(people["bob"])  # nlp: not published there
    assert api_client.get("/api/v1/datasets/").json()["results"] == []
    api_client.force_login(people["admin"])
    assert api_client.delete(f"/api/v1/datasets/{made.json()['id']}/").status_code == 204
    assert AuditEvent.objects.filter(action="dataset.delete").exists()


# -- pages ------------------------------------------------------------------------------------------------------


def _form(**overrides) -> dict:
    from jobs.models import Quota

    rc = Quota.objects.filter(team__slug="vision").first().resource_class
    data = {
        "team": rc.quotas.get(team__slug="vision").team_id,
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": "python train.py",
        "resource_class": rc.pk, "count": 1, "cpu": "2", "memory_mb": 16384, "priority": 50,
        "max_runtime_hours": "1", "idempotency_key": "k1",
    }  # fmt: skip
    return data | overrides


def test_the_form_shows_every_volume_problem_and_queues_good_rows(cluster, people, client):
    client.force_login(people["alice"])
    page = client.get("/jobs/new/")
    assert b'id="add-volume-row"' in page.content and b'<option value="checkpoints">' in page.content
    bad = client.post(
        "/jobs/new/",
        _form(volume_claim=["corpus", "checkpoints"], volume_path=["/data", "/proc"], shm_mb="10"),
    )
    assert bad.status_code == 200
    text = bad.content.decode()
    assert "has no volume &#x27;corpus&#x27;" in text and "/proc" in text and "inside /proc" not in text
    assert 'value="corpus"' in text  # the rows come back as typed
    assert not Job.objects.exists()
    good = client.post(
        "/jobs/new/",
        _form(volume_claim=["reference", ""], volume_path=["/data", ""], volume_read_only=["0"], shm_mb="4096"),
    )
    assert good.status_code == 302, good.content.decode()[:2000]
    job = Job.objects.get()
    assert job.volumes == [{"claim": "reference", "mount_path": "/data", "read_only": True}] and job.shm_mb == 4096


def test_volume_pages_show_a_members_own_team_only(cluster, people, client):
    client.force_login(people["alice"])
    page = client.get("/volumes/").content.decode()
    assert 'data-volume="checkpoints"' in page and 'data-volume="corpus"' not in page
    team_page = client.get("/teams/vision/").content.decode()
    assert 'data-testid="team-volumes"' in team_page and 'data-volume="reference"' in team_page
    assert client.get("/teams/nlp/").status_code == 404


def test_the_demo_has_a_dataset_a_checkpoint_claim_and_a_job_that_uses_both(inventory, people):
    from jobs.cycle.run import run_cycle
    from jobs.demo import seed_quotas_and_jobs, seed_volumes

    seed_quotas_and_jobs()
    assert seed_volumes(inventory) == 1
    assert seed_volumes(inventory) == 0  # idempotent
    rows = {v.name: v for v in TeamVolume.objects.filter(team=people["vision"])}
    assert rows["dataset-imagenet"].phase == "Bound" and rows["dataset-imagenet"].read_only_only
    assert rows["checkpoints"].phase == "Bound" and rows["checkpoints"].access_modes == ["ReadWriteMany"]
    job = Job.objects.get(name="resnet50-imagenet")
    run_cycle(inventory)
    job.refresh_from_db()
    [workload] = [w for w in inventory.list_workloads("team-vision") if w["metadata"]["name"] == job.workload_name]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in workload["spec"]["template"]["spec"]["volumes"]
              if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == ["dataset-imagenet", "checkpoints"]

"""A distributed job's rendered objects: golden files for a 2 × 2 gang in both shapes (an Indexed Job on
Kubernetes ≥ 1.24, one Job per rank on older servers), torchrun's environment and the pinning rules, and the
security invariants of single jobs carried to every rank. Regenerate with UPDATE_GOLDEN=1 and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from django.test import override_settings

from cluster.base import forms_for
from jobs import kinds
from jobs.choices import JobKind
from jobs.distributed.render import MASTER_PORT, gang_base, render_gang
from jobs.models import Job
from jobs.render import JOB_ID_LABEL
from tests.factories import placed_job
from tests.sim_objects import H100

GOLDEN = Path(__file__).parent / "golden"
NODES = ["gpu-h100-03", "gpu-h100-05"]


#: The gang of the golden files: 2 ranks of 2 H100s with every kind of input a rank carries (placed_job's other
#: defaults do not reach it: each is set here).
GANG = dict(
    kind=JobKind.DISTRIBUTED,
    name="llama-ft",
    image="nvcr.io/nvidia/pytorch:24.01-py3",
    command=["torchrun", "train.py"],
    args=["--epochs", "3"],
    env=[{"name": "EPOCHS", "value": "3"}],
    secret_env=[{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}],
    volumes=[{"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False}],
    labels={"project": "llama"},
    working_dir="/workspace",
    count=2,
    workers=2,
    cpu_millicores=8000,
    memory_mb=65536,
    max_runtime_seconds=7200,
    node_name=NODES[0],
    node_names=NODES,
)


def _gang(people, **fields) -> Job:
    return placed_job(people["alice"], H100, **(GANG | fields))


def _text(job: Job, objects: list[dict]) -> str:
    # The row's id differs between databases (PostgreSQL's sequence is not reset): only the job-id label's value
    # and the names carry it. A blanket replace of "'<id>'" would also rewrite a rank's '1' when the id is 1.
    text = yaml.safe_dump_all(objects, sort_keys=True).replace(f"gpj-{job.pk}-", "gpj-0-")
    return text.replace(f"{JOB_ID_LABEL}: '{job.pk}'", f"{JOB_ID_LABEL}: '0'")


@pytest.mark.parametrize(("case", "indexed"), [("gang-2x2-indexed", True), ("gang-2x2-per-rank", False)])
@override_settings(PORTAL_RUNTIME_CLASS="nvidia", PORTAL_PREEMPTION_GRACE=60)
def test_golden_gang(inventory, people, case, indexed):
    job = _gang(people)
    text = _text(job, render_gang(job, ["ngc-pull"], indexed=indexed))
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{case}: rendered objects differ from {path}"


def test_the_kind_renders_what_the_server_supports(inventory, people):
    job = _gang(people)
    modern = kinds.for_job(job).render(job, forms_for("v1.29.0"))
    old = kinds.for_job(job).render(job, forms_for("v1.20.2"))
    assert [m["kind"] for m in modern] == ["Service", "Job"]
    assert modern[1]["spec"]["completionMode"] == "Indexed"
    assert [m["kind"] for m in old] == ["Service", "Job", "Job"]
    assert all("completionMode" not in m["spec"] for m in old[1:])
    assert kinds.for_job(job).demand(job).total_units == 4 and kinds.for_job(job).demand(job).pods == 2


def test_every_rank_is_pinned_to_its_node_and_finds_rank_0(inventory, people):
    job = _gang(people, workers=3, node_names=["gpu-h100-01", "gpu-h100-02", "gpu-h100-04"])
    service, *ranks = render_gang(job, indexed=False)
    base = gang_base(job)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == MASTER_PORT and service["metadata"]["name"] == base
    for rank, manifest in enumerate(ranks):
        pod = manifest["spec"]["template"]["spec"]
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms[0]["matchFields"][0]["values"] == [job.node_names[rank]]
        assert (pod["hostname"], pod["subdomain"]) == (f"{base}-{rank}", base)
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["NODE_RANK"] == env["PET_NODE_RANK"] == str(rank)
        assert env["MASTER_ADDR"] == f"{base}-0.{base}.team-vision.svc"
        assert (env["WORLD_SIZE"], env["NPROC_PER_NODE"], env["PORTAL_WORLD_SIZE_GPUS"]) == ("3", "2", "6")
        assert manifest["metadata"]["name"] == f"{base}-{rank}"


def test_indexed_form_keeps_one_rank_per_chosen_node(inventory, people):
    job = _gang(people)
    _, manifest = render_gang(job, indexed=True)
    spec = manifest["spec"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (2, 2, 0)
    pod = spec["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    # One term per chosen node (terms are ORed; a node field selector takes exactly one value), each keeping the
    # product expression.
    assert [term["matchFields"] for term in terms] == [
        [{"key": "metadata.name", "operator": "In", "values": [node]}] for node in NODES
    ]
    assert all(term["matchExpressions"] == terms[0]["matchExpressions"] for term in terms)
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"] == {"gpu-portal.io/job-id": str(job.pk)}
    rank = next(e for e in pod["containers"][0]["env"] if e["name"] == "NODE_RANK")
    assert "job-completion-index" in rank["valueFrom"]["fieldRef"]["fieldPath"]


@pytest.mark.parametrize("indexed", [True, False])
def test_no_rank_escalates(inventory, people, indexed):
    job = _gang(people)
    for manifest in render_gang(job, indexed=indexed)[1:]:
        assert manifest["metadata"]["namespace"] == "team-vision"
        pod = manifest["spec"]["template"]["spec"]
        assert (pod["hostNetwork"], pod["hostIPC"], pod["hostPID"]) == (False, False, False)
        assert pod["containers"][0]["securityContext"]["privileged"] is False
        assert all("hostPath" not in volume for volume in pod["volumes"])
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"


def test_long_names_stay_dns_labels_and_attempts_never_share_one(inventory, people):
    job = _gang(people, name="x" * 40, workers=16, node_names=[f"n{i}" for i in range(16)])
    job.workload_name = "gpj-1234567-" + "x" * 40 + "-r12"
    first = gang_base(job)
    assert len(f"{first}-15") <= 63
    job.workload_name = "gpj-1234567-" + "x" * 40 + "-r13"
    assert gang_base(job) != first and len(f"{gang_base(job)}-15") <= 63

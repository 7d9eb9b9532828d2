"""Forcing a node's drain covers every kind of work the portal runs (issue 31, item 12): a batch job, a distributed
gang with a rank on the node, a notebook and an inference service's replicas are each stopped and requeued, their
owner told the admin's reason, and the drain then ends. Each runs on the demo cluster's H100s (the simulated
cluster on its clock); the carve asked is time-slicing of the node the work runs on."""

from __future__ import annotations

import pytest

from accounts.models import Team
from core.models import Notification
from gpus.choices import NodeConfigState
from gpus.models import Node, ResourceClass
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_control import force_drain
from gpus.nodeconfig_plan import plan_mig, plan_time_slicing
from jobs import actions
from jobs.choices import EventKind, JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from tests.factories import H100, inference_service, notebook_session, submit_gang
from tests.unit.gpus.nodeconfig_kit import step, submit

REASON = "the H100s are time-sliced for the course"


@pytest.fixture
def h100_quota(sim, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], Team.objects.get(slug="vision"), rc, 16, 16)
    return rc


def nodes_of(job: Job) -> list[str]:
    """The nodes the job's pods run on (a service's replicas are noted as its ranks)."""
    return list(dict.fromkeys(n for n in [job.node_name, *job.node_names, *(r["node"] for r in job.ranks)] if n))


def _until_running(sim, clock, job: Job) -> Job:
    for _ in range(15):
        clock.advance(6)
        run_cycle(sim, now=clock.now)
        job.refresh_from_db()
        if job.state == JobState.RUNNING:
            return job
    raise AssertionError(f"{job} stayed {job.state}")


def _gpu_pods_on(sim, node: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in sim.list_pods()
        if p["spec"].get("nodeName") == node
        and p["status"].get("phase") not in ("Succeeded", "Failed")
        and any(
            "nvidia.com/" in r for c in p["spec"]["containers"] for r in (c.get("resources") or {}).get("limits", {})
        )
    ]


def _force_and_drain(sim, clock, people, job: Job):
    """Carve the node ``job`` runs on, force its drain, and cycle until the drain ends; returns the job, the node
    and the operation."""
    node_name = nodes_of(job)[0]
    assert _gpu_pods_on(sim, node_name)
    node = Node.objects.get(name=node_name)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=2, rename=False))
    step(sim, clock)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING
    force_drain(people["admin"], op, REASON)
    for _ in range(8):
        clock.advance(10)
        run_cycle(sim, now=clock.now)
        step(sim, clock)
        op.refresh_from_db()
        if op.state != NodeConfigState.DRAINING:
            break
    job.refresh_from_db()
    return job, node_name, op


def _assert_stopped_and_told(job: Job, node_name: str, op, owner, noun: str):
    assert op.state != NodeConfigState.DRAINING, op.log[-1]["message"]
    notice = job.events.filter(kind=EventKind.PREEMPT_NOTICE).latest("pk")
    assert f"forced the drain of {node_name}" in notice.message and REASON in notice.message
    assert f"This {noun} is stopped now and requeued" in notice.message
    requeued = job.events.filter(kind=EventKind.REQUEUED).latest("pk")
    assert f"an admin forced the drain of {node_name}" in requeued.message
    assert "borrowed capacity" not in requeued.message
    bell = Notification.objects.filter(user=owner).latest("pk")
    words, url = job.owner_words()  # a notebook's session is named by the notebook's own id (issue 31, item 15)
    assert REASON in bell.body and words in bell.title and bell.url == url


def test_forcing_stops_a_batch_job(sim, clock, people, h100_quota):
    job = _until_running(sim, clock, submit(people["alice"], "vision", h100_quota, name="train", count=8))
    job, node, op = _force_and_drain(sim, clock, people, job)
    _assert_stopped_and_told(job, node, op, people["alice"], "batch job")
    assert not _gpu_pods_on(sim, node)


def test_forcing_stops_a_distributed_gang_with_a_rank_on_the_node(sim, clock, people, h100_quota):
    gang = submit_gang(people["alice"], "vision", h100_quota, count=8, command=["sleep", "3600"])
    gang = _until_running(sim, clock, gang)
    assert len(nodes_of(gang)) == 2
    gang, node, op = _force_and_drain(sim, clock, people, gang)
    _assert_stopped_and_told(gang, node, op, people["alice"], "distributed training")
    assert not _gpu_pods_on(sim, node)


def test_forcing_stops_a_notebook(sim, clock, people, h100_quota):
    notebook = notebook_session(people["alice"], "vision", h100_quota, count=8).notebook
    job = _until_running(sim, clock, notebook.session)
    job, node, op = _force_and_drain(sim, clock, people, job)
    _assert_stopped_and_told(job, node, op, people["alice"], "notebook")
    assert not _gpu_pods_on(sim, node)


def test_forcing_moves_a_services_replicas_off_the_node(sim, clock, people, h100_quota):
    service = inference_service(people["alice"], "vision", h100_quota, count=8, preemptible=False, min_replicas=2)
    job = _until_running(sim, clock, service.job)
    assert len(nodes_of(job)) == 2
    job, node, op = _force_and_drain(sim, clock, people, job)
    _assert_stopped_and_told(job, node, op, people["alice"], "inference service")
    assert not _gpu_pods_on(sim, node)


def test_a_services_replicas_on_the_node_are_one_holder_with_their_count(sim, clock, people, mig_quota):
    """ux-walk 2, Top-10 #3: the holder list named #3089 ux-llm four times, once per replica."""
    from gpus.api.serializers import DrainPreviewSerializer
    from gpus.nodeconfig_control import drain_preview
    from tests.sim_objects import MIG_NODE

    service = inference_service(people["alice"], "vision", mig_quota, preemptible=False)
    job = _until_running(sim, clock, service.job)
    # Three replicas, as its autoscaler may run: 1g.10gb is on this node only, so all three run here.
    hpa = sim.get_hpa("team-vision", service.name)
    hpa["spec"] |= {"minReplicas": 3, "maxReplicas": 3}
    sim.apply_hpa(hpa)
    sim.scale_deployment("team-vision", service.name, 3)
    clock.advance(10)
    assert len(_gpu_pods_on(sim, MIG_NODE)) == 3
    node = Node.objects.get(name=MIG_NODE)
    preview = drain_preview(sim, node)
    assert [(w.label, w.pods) for w in preview.blocking] == [(f"#{job.pk} llm (inference service)", 3)]
    assert DrainPreviewSerializer(preview).data["blocking"][0]["pods"] == 3  # the API's dry run says the same
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    op.refresh_from_db()
    assert op.log[-1]["message"] == f"Waiting for 1 workload(s) to finish: #{job.pk} llm × 3 pods."

"""Node operations an admin can trust (issue 16): the preview lists what a drain requeues and what holds it up,
Apply asks first, a drain can be aborted or forced (the owners told why), a finished operation reverted; the node
smoke test runs nvidia-smi and a CUDA check in a pod pinned to the node and feeds the diagnosis; the node page says
who holds what. All on the simulated cluster with its injectable clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent, Notification
from gpus import fleet
from gpus.choices import InventoryAuditAction, NodeConfigState, SmokeTestState
from gpus.models import Node, NodeSmokeTest
from gpus.nodeconfig import reconfiguring_nodes, request_operation, request_revert
from gpus.nodeconfig_control import abort_operation, drain_preview, force_drain
from gpus.nodeconfig_plan import ConfigRefused, plan_mig
from gpus.reconcile import sync_inventory
from gpus.smoketest import SmokeTestRefused, advance_smoke_tests, render, request_smoke_test
from jobs.choices import EventKind, JobState
from jobs.cycle.run import run_cycle
from telemetry.models import GpuSample
from tests.clock import SimClock
from tests.factories import simulated_cluster
from tests.sim_objects import MIG_NODE
from tests.unit.gpus.nodeconfig_kit import step, submit

SCENARIO = """
nodes:
  - names: [gpu-ok-01]
    gpu: {product: NVIDIA A10, count: 2}
  - names: [gpu-bad-01]
    gpu: {product: NVIDIA A10, count: 2}
    cuda_fault: "Xid 79: GPU has fallen off the bus"
"""


def _running(sim, clock, *jobs):
    run_cycle(sim, now=clock.now)
    clock.advance(6)
    run_cycle(sim, now=clock.now)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.node_name == MIG_NODE


def test_the_preview_sorts_the_work_a_drain_requeues_from_the_work_that_holds_it_up(sim, clock, people, mig_quota):
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    spare = submit(people["bob"], "nlp", mig_quota, name="spare", preemptible=True)
    _running(sim, clock, keeps, spare)
    preview = drain_preview(sim, Node.objects.get(name=MIG_NODE))
    assert [w.label for w in preview.requeued] == [f"#{spare.pk} spare (batch job)"]
    assert [w.label for w in preview.blocking] == [f"#{keeps.pk} keeps (batch job)"]
    assert preview.blocking[0].owner == "alice" and preview.blocking[0].url == keeps.get_absolute_url()


def test_apply_asks_for_confirmation_under_the_preview(client, sim, clock, people, mig_quota, monkeypatch):
    monkeypatch.setattr(fleet, "get_backend", lambda: sim)
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    _running(sim, clock, keeps)
    client.force_login(people["admin"])
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    form = {"kind": "mig", "preset": "all-3g.40gb"}
    page = client.post(url, {**form, "preview": "1"}).content.decode()
    assert 'data-testid="drain-blocking"' in page and f"#{keeps.pk} keeps" in page
    page = client.post(url, {**form, "apply": "1"}).content.decode()
    assert "Tick “I understand what this drain does”" in page
    assert not Node.objects.get(name=MIG_NODE).config_operations.exists()
    response = client.post(url, {**form, "apply": "1", "confirm": "1"})
    assert response.status_code == 302
    assert Node.objects.get(name=MIG_NODE).config_operations.count() == 1


def test_a_draining_operation_can_be_aborted_and_the_node_takes_work_again(sim, clock, people, mig_quota):
    _running(sim, clock, submit(people["alice"], "vision", mig_quota, name="keeps"))
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING and MIG_NODE in {name for _, name in reconfiguring_nodes()}
    abort_operation(people["admin"], op, "wrong node")
    op.refresh_from_db()
    assert op.state == NodeConfigState.ABORTED and "wrong node" in op.reason
    assert MIG_NODE not in {name for _, name in reconfiguring_nodes()}
    assert sim.get_node(MIG_NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
    assert AuditEvent.objects.filter(action=InventoryAuditAction.NODE_CONFIG_ABORT, object_id=str(op.pk)).exists()
    with pytest.raises(ConfigRefused, match="only a pending or draining operation"):
        abort_operation(people["admin"], op)
    # The progress bar shows where it stopped.
    assert [s["status"] for s in op.steps][:2] == ["done", "failed"]


def test_the_operation_page_links_the_work_holding_the_drain_up(client, sim, clock, people, mig_quota, monkeypatch):
    monkeypatch.setattr(fleet, "get_backend", lambda: sim)
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    _running(sim, clock, keeps)
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    client.force_login(people["admin"])
    page = client.get(op.get_absolute_url()).content.decode()
    assert 'data-testid="op-blocking"' in page and f'href="{keeps.get_absolute_url()}"' in page
    assert 'data-testid="abort"' in page and 'data-testid="force"' in page


def test_a_node_with_mig_off_on_every_gpu_draws_no_mig_card(client, sim, people):
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:node-detail", args=["gpu-h100-01"])).content.decode()
    assert Node.objects.get(name="gpu-h100-01").mig_capable
    assert 'data-testid="mig-layout"' not in page and 'data-testid="node-holders"' in page
    page = client.get(reverse("gpus:node-detail", args=[MIG_NODE])).content.decode()
    assert 'data-testid="mig-layout"' in page


def test_forcing_a_drain_stops_non_preemptible_work_and_tells_the_owner_why(sim, clock, people, mig_quota):
    people["alice"].email = "alice@example.org"
    people["alice"].save()
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    _running(sim, clock, keeps)
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    op.refresh_from_db()
    with pytest.raises(ConfigRefused, match="Say why"):
        force_drain(people["admin"], op, "now")
    force_drain(people["admin"], op, "the A100s are carved for Monday's course")
    run_cycle(sim, now=clock.now)
    keeps.refresh_from_db()
    notice = keeps.events.get(kind=EventKind.PREEMPT_NOTICE)
    assert "forced the drain" in notice.message and "Monday's course" in notice.message
    assert keeps.state in (JobState.PREEMPTING, JobState.QUEUED)
    bell = Notification.objects.get(user=people["alice"])
    assert "Monday's course" in bell.body and bell.url == keeps.get_absolute_url()
    assert mail.outbox and "Monday's course" in mail.outbox[-1].body
    clock.advance(40)
    run_cycle(sim, now=clock.now)
    step(sim, clock, 5)
    op.refresh_from_db()
    assert op.state in (NodeConfigState.APPLYING, NodeConfigState.WAITING, NodeConfigState.REFRESHING)
    stopped = AuditEvent.objects.get(action="job.preempt", object_id=str(keeps.pk))
    assert stopped.actor == people["admin"] and "Monday" in stopped.after["reason"]
    forced = AuditEvent.objects.get(action=InventoryAuditAction.NODE_CONFIG_FORCE, object_id=str(op.pk))
    assert "Monday" in forced.after["reason"] and forced.actor == people["admin"]


def test_the_latest_finished_operation_can_be_reverted_but_not_an_older_one(sim, clock, people):
    node = Node.objects.get(name=MIG_NODE)
    first = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    for _ in range(4):
        step(sim, clock, 40)
    first.refresh_from_db()
    assert first.state == NodeConfigState.DONE and first.can_revert
    back = request_revert(people["admin"], first)
    for _ in range(4):
        step(sim, clock, 40)
    back.refresh_from_db()
    assert back.state == NodeConfigState.DONE
    assert sim.get_node(MIG_NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
    first.refresh_from_db()
    assert not first.can_revert
    with pytest.raises(ConfigRefused, match="latest reconfiguration"):
        request_revert(people["admin"], first)


@pytest.fixture
def small(db, tmp_path, people):
    clock = SimClock()
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    return simulated_cluster(tmp_path / "sim.json", clock, scenario=scenario), clock


def _run_smoke(cluster, clock, run) -> NodeSmokeTest:
    advance_smoke_tests(cluster)
    for _ in range(4):
        clock.advance(5)
        advance_smoke_tests(cluster)
    run.refresh_from_db()
    return run


def test_the_smoke_test_passes_on_a_good_node_and_keeps_the_output(small, people):
    cluster, clock = small
    run = request_smoke_test(people["admin"], Node.objects.get(name="gpu-ok-01"))
    assert run.resource == "nvidia.com/gpu"
    run = _run_smoke(cluster, clock, run)
    assert run.state == SmokeTestState.PASSED, run.reason
    assert "NVIDIA-SMI" in run.output and "Test PASSED" in run.output and "NVIDIA A10" in run.output
    assert cluster.list_workloads(namespace=run.namespace) == []  # cleaned up
    sync_inventory(cluster)
    node = Node.objects.get(name="gpu-ok-01")
    assert any(f["layer"] == "smoke test" and f["severity"] == "ok" for f in node.diagnosis)
    assert node.blocked_reason == ""


def test_a_failing_cuda_check_fails_the_test_and_keeps_new_work_off_the_node(small, people):
    cluster, clock = small
    node = Node.objects.get(name="gpu-bad-01")
    run = _run_smoke(cluster, clock, request_smoke_test(people["admin"], node))
    assert run.state == SmokeTestState.FAILED
    assert "exited with code 1" in run.reason and "Xid 79" in run.reason
    sync_inventory(cluster)
    node.refresh_from_db()
    finding = next(f for f in node.diagnosis if f["layer"] == "smoke test")
    assert finding["severity"] == "error" and "Xid 79" in finding["detail"]
    assert node.blocked_reason == "its latest smoke test failed"
    assert AuditEvent.objects.filter(action=InventoryAuditAction.NODE_SMOKE_TEST, object_id=str(run.pk)).exists()


def test_a_smoke_test_pod_that_never_runs_says_why_as_any_pod_is_said(small, people, settings):
    settings.PORTAL_SMOKE_TEST_IMAGE = "registry.example.com/doesnotexist:1"
    cluster, clock = small
    run = request_smoke_test(people["admin"], Node.objects.get(name="gpu-ok-01"))
    advance_smoke_tests(cluster)
    clock.advance(30)  # the simulated kubelet: ErrImagePull, then ImagePullBackOff
    old = timezone.now() - timedelta(seconds=settings.PORTAL_SMOKE_TEST_TIMEOUT + 1)
    NodeSmokeTest.objects.filter(pk=run.pk).update(created=old)
    advance_smoke_tests(cluster)
    run.refresh_from_db()
    # The one table's sentence (vocab.pod_states), as a job's pod in the same state would read.
    assert run.state == SmokeTestState.FAILED
    assert run.reason == (
        f"No result after {settings.PORTAL_SMOKE_TEST_TIMEOUT} s: The image registry.example.com/doesnotexist:1 "
        "cannot be pulled from registry.example.com (ImagePullBackOff): Back-off pulling image "
        '"registry.example.com/doesnotexist:1".'
    )


def test_one_smoke_test_at_a_time_and_only_where_a_gpu_is_advertised(small, people):
    node = Node.objects.get(name="gpu-ok-01")
    request_smoke_test(people["admin"], node)
    with pytest.raises(SmokeTestRefused, match="already running"):
        request_smoke_test(people["admin"], node)
    node.allocatable = {"cpu": "8"}
    with pytest.raises(SmokeTestRefused) as refused:
        request_smoke_test(people["admin"], node)
    assert len(refused.value.errors) == 2  # every problem at once


def test_the_smoke_test_pod_is_pinned_tolerant_and_unprivileged(small, people):
    run = request_smoke_test(people["admin"], Node.objects.get(name="gpu-ok-01"))
    pod = render(run)["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-ok-01"]}]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["securityContext"]["privileged"] is False and container["securityContext"]["capabilities"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "volumes"))
    assert pod["automountServiceAccountToken"] is False


def test_the_smoke_test_from_the_page_and_the_api_is_admin_only(small, client, api_client, people):
    url = reverse("api:node-smoke-tests", args=["gpu-ok-01"])
    api_client.force_authenticate(people["alice"])
    assert api_client.post(url).status_code in (403, 404)
    api_client.force_authenticate(people["admin"])
    created = api_client.post(url)
    assert created.status_code == 201 and created.json()["state"] == "pending"
    assert [r["id"] for r in api_client.get(url).json()] == [created.json()["id"]]
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:node-detail", args=["gpu-ok-01"])).content.decode()
    assert 'data-testid="smoke-run"' in page and 'data-testid="run-smoke-test"' in page
    client.force_login(people["alice"])
    assert client.post(reverse("gpus:node-smoke-test", args=["gpu-ok-01"])).status_code == 404


def test_the_node_page_says_who_holds_what_and_hides_other_teams_work(client, sim, clock, people, mig_quota):
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    theirs = submit(people["bob"], "nlp", mig_quota, name="theirs")
    _running(sim, clock, keeps, theirs)
    url = reverse("gpus:node-detail", args=[MIG_NODE])
    client.force_login(people["admin"])
    page = client.get(url).content.decode()
    assert f"#{keeps.pk} keeps" in page and f"#{theirs.pk} theirs" in page and "1 × nvidia.com/mig-1g.10gb" in page
    client.force_login(people["alice"])
    page = client.get(url).content.decode()
    if 'data-testid="holders-table"' in page:  # alice may see this node: her job by name, bob's only as taken
        assert f"#{keeps.pk} keeps" in page and "theirs" not in page and "another team's batch job" in page
    else:
        pytest.fail("alice's job runs on the node, so she sees the node page with its holders")


def test_telemetry_attribution_draws_holders_on_gpus_and_mig_slices(client, sim, clock, people, mig_quota):
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    theirs = submit(people["bob"], "nlp", mig_quota, name="theirs")
    _running(sim, clock, keeps, theirs)
    node = Node.objects.get(name=MIG_NODE)
    gpu = node.gpus.get(index=0)
    gpu.uuid = gpu.uuid or "GPU-0000-test"
    gpu.save()
    now = timezone.now()
    for job, gi in ((keeps, 7), (theirs, 8)):
        GpuSample.objects.create(ts=now, cluster_id=node.cluster_id, node_name=MIG_NODE, gpu_uuid=gpu.uuid,
                                 gpu_index=0, gpu_instance_id=gi,
                                 mig_profile="1g.10gb", job_id=job.pk, team=job.team, source="dcgm")  # fmt: skip
    url = reverse("gpus:node-detail", args=[MIG_NODE])
    client.force_login(people["alice"])
    page = client.get(url).content.decode()
    holder = page[page.index('data-testid="mig-holder"') :][:400]
    assert f"#{keeps.pk}" in holder and "taken" in holder and f"#{theirs.pk}" not in holder
    client.force_login(people["admin"])
    holder = client.get(url).content.decode().split('data-testid="mig-holder"')[1][:400]
    assert f"#{keeps.pk}" in holder and f"#{theirs.pk}" in holder


def test_the_diagnosis_reads_each_nodes_latest_run_in_two_queries_however_many_runs(
    small, people, django_assert_num_queries
):
    from gpus.smoketest import latest_by_node

    ok, bad = Node.objects.get(name="gpu-ok-01"), Node.objects.get(name="gpu-bad-01")
    for state in (SmokeTestState.FAILED, SmokeTestState.PASSED, SmokeTestState.FAILED, SmokeTestState.PASSED):
        NodeSmokeTest.objects.create(node=ok, state=state, resource="nvidia.com/gpu", namespace="gpu-portal")
    NodeSmokeTest.objects.create(node=bad, state=SmokeTestState.FAILED, resource="nvidia.com/gpu", namespace="x")
    NodeSmokeTest.objects.create(node=bad, state=SmokeTestState.RUNNING, resource="nvidia.com/gpu", namespace="x")
    with django_assert_num_queries(2):
        latest = latest_by_node([ok.pk, bad.pk])
    assert latest[ok.pk].state == SmokeTestState.PASSED and latest[ok.pk] == ok.smoke_tests.order_by("-id").first()
    assert latest[bad.pk].state == SmokeTestState.FAILED  # a running one is not a result yet


def test_abort_and_force_from_the_page_and_the_api(client, api_client, sim, clock, people, mig_quota):
    _running(sim, clock, submit(people["alice"], "vision", mig_quota, name="keeps"))
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    api_client.force_authenticate(people["admin"])
    refused = api_client.post(reverse("api:nodeconfigoperation-force", args=[op.pk]), {"reason": "no"})
    assert refused.status_code == 400 and "Say why" in refused.json()["reason"][0]
    forced = api_client.post(reverse("api:nodeconfigoperation-force", args=[op.pk]), {"reason": "course on Monday"})
    assert forced.status_code == 200 and forced.json()["force_reason"] == "course on Monday"
    client.force_login(people["admin"])
    response = client.post(reverse("gpus:nodeconfig-abort", args=[op.pk]), {"reason": "wrong node"}, follow=True)
    assert "aborted" in response.content.decode()
    op.refresh_from_db()
    assert op.state == NodeConfigState.ABORTED
    again = api_client.post(reverse("api:nodeconfigoperation-abort", args=[op.pk]), {})
    assert again.status_code == 400 and "only a pending or draining" in again.json()["detail"][0]

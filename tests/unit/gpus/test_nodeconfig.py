"""Carving GPUs end to end on the simulated cluster: a request is checked, the node drained, the mig-parted /
device-plugin config written and labelled, MIG Manager followed through pending/rebooting/success (or failed),
and the inventory refreshed. Time is the simulated cluster's injectable clock, passed to every step."""

from __future__ import annotations

import pytest
import yaml

from core.models import AuditEvent
from gpus import nodeconfig, nodeconfig_plan
from gpus.choices import NodeConfigState
from gpus.models import Node, NodeConfigOperation, ResourceClass
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_plan import ConfigRefused, plan_mig, plan_time_slicing
from gpus.reconcile import sync_inventory
from jobs.choices import EventKind, JobAuditAction, JobState
from jobs.cycle.admit import build_snapshot
from jobs.cycle.result import CycleResult
from jobs.cycle.run import preempt_draining, run_cycle
from jobs.models import Job
from tests.sim_objects import MIG_NODE
from tests.unit.gpus.nodeconfig_kit import step, submit
from vocab.mig import parse_mig_parted

SINGLE_NODE = "gpu-a100-40g-01"  # 4x A100 40GB, single strategy, all-1g.5gb
A10_NODE = "gpu-a10-01"  # 4x A10 time-sliced x4
MIG_1G = "nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-80GB"


def labels(sim, name):
    return sim.get_node(name)["metadata"]["labels"]


def states(op) -> list[str]:
    op.refresh_from_db()
    return [entry["state"] for entry in op.log]


def test_a_preset_is_drained_written_labelled_followed_and_refreshed(sim, clock, people):
    node = Node.objects.get(name=SINGLE_NODE)
    plan = plan_mig(node, preset="all-3g.20gb")
    assert plan.expected_resources == {"nvidia.com/gpu": 8}
    assert plan.expected_product_label == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    op = request_operation(people["admin"], node, plan)
    assert op.previous["config"] == "all-1g.5gb" and op.previous["gpus"] == [{"1g.5gb": 7}] * 4

    step(sim, clock)
    op.refresh_from_db()
    # No GPU work on the node: pending -> draining -> applying -> waiting in one run.
    assert op.state == NodeConfigState.WAITING
    assert labels(sim, SINGLE_NODE)["nvidia.com/mig.config"] == "all-3g.20gb"
    assert labels(sim, SINGLE_NODE)["nvidia.com/mig.config.state"] == "pending"
    config_map = sim.get_config_map("gpu-operator", "gpu-portal-mig-parted-config")
    configs = parse_mig_parted(config_map["data"]["config.yaml"])
    entry = next(e for e in configs["all-3g.20gb"] if "0x20B010DE" in e["device_filter"])
    assert entry["mig_devices"] == {"3g.20gb": 2} and entry["devices"] == "all"
    assert "all-disabled" in configs

    step(sim, clock, 10)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING and op.cluster_state == "pending"

    step(sim, clock, 25)  # MIG Manager's 30 s are over
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    assert states(op) == ["pending", "draining", "applying", "waiting", "waiting", "waiting", "refreshing", "done"]
    node.refresh_from_db()
    assert node.mig_config == "all-3g.20gb" and node.mig_config_state == "success"
    assert node.allocatable["nvidia.com/gpu"] == "8"
    assert node.product_label == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-A100-SXM4-40GB-MIG-3g.20gb").total == 8
    assert not ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-A100-SXM4-40GB-MIG-1g.5gb").present
    actions = list(AuditEvent.objects.filter(object_id=str(op.pk)).order_by("pk").values_list("action", flat=True))
    assert actions == ["node.config.request", "node.config.drain", "node.config.apply", "node.config.done"]


def test_a_custom_layout_turns_mig_off_on_one_gpu_through_a_reboot(sim, clock, people):
    node = Node.objects.get(name=MIG_NODE)
    balanced = [("1g.10gb", 0), ("1g.10gb", 1), ("2g.20gb", 2), ("3g.40gb", 4)]
    layout = [[]] + [[("3g.40gb", 0), ("3g.40gb", 4)]] + [balanced] * 6
    plan = plan_mig(node, placements=layout)
    assert plan.expected_resources == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.10gb": 12,
        "nvidia.com/mig-2g.20gb": 6,
        "nvidia.com/mig-3g.40gb": 8,
    }
    op = request_operation(people["admin"], node, plan)
    assert op.requested["config"] == f"custom-{MIG_NODE}-{op.pk}"
    step(sim, clock)
    configs = parse_mig_parted(
        sim.get_config_map("gpu-operator", "gpu-portal-mig-parted-config")["data"]["config.yaml"]
    )
    assert [(e["devices"], e["enabled"]) for e in configs[op.requested["config"]]] == [
        ([0], False),
        ([1], True),
        ([2, 3, 4, 5, 6, 7], True),
    ]
    step(sim, clock, 16)  # half-way: MIG mode changes on GPU 0, so MIG Manager reboots the node
    op.refresh_from_db()
    assert op.cluster_state == "rebooting" and op.state == NodeConfigState.WAITING
    step(sim, clock, 16)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    seen = [e["message"] for e in op.log if e["message"].startswith("nvidia.com/mig.config.state=")]
    assert seen == [
        "nvidia.com/mig.config.state=pending",
        "nvidia.com/mig.config.state=rebooting",
        "nvidia.com/mig.config.state=success",
    ]
    node.refresh_from_db()
    assert node.allocatable["nvidia.com/gpu"] == "1" and node.allocatable["nvidia.com/mig-3g.40gb"] == "8"
    # Labels only give node-wide counts; the inventory takes the per-GPU slots from the operation that applied
    # the node's current config.
    assert op.requested["placements"][0] == [] and op.requested["placements"][1] == [["3g.40gb", 0], ["3g.40gb", 4]]
    assert not node.gpus.get(index=0).mig_enabled
    assert [(p.profile, p.start) for p in node.gpus.get(index=1).mig_partitions.order_by("start")] == [
        ("3g.40gb", 0),
        ("3g.40gb", 4),
    ]
    sync_inventory(sim)  # and the next reconcile keeps them
    assert not node.gpus.get(index=0).mig_enabled and node.gpus.get(index=7).mig_partitions.count() == 4


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        ([[("3g.40gb", 2)]] + [[]] * 7, "GPU 0: 3g.40gb cannot start at slot 2; it may start at 0, 4."),
        ([[("4g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 6)]] + [[]] * 7, "compute slices"),
        ([[("1g.5gb", 0)]] + [[]] * 7, "has no MIG profile 1g.5gb"),
        ([[]] * 3, "has 8 GPUs"),
    ],
)
def test_invalid_layouts_are_refused_before_anything_reaches_the_cluster(sim, clock, layout, words):
    node = Node.objects.get(name=MIG_NODE)
    before = sim.get_node(MIG_NODE)
    with pytest.raises(ConfigRefused) as refused:
        plan_mig(node, placements=layout)
    assert any(words in error for error in refused.value.errors), refused.value.errors
    assert sim.get_node(MIG_NODE)["metadata"]["labels"] == before["metadata"]["labels"]
    assert not NodeConfigOperation.objects.exists()


def test_a_mixed_layout_is_refused_on_a_single_strategy_node_and_presets_are_checked(sim):
    node = Node.objects.get(name=SINGLE_NODE)
    with pytest.raises(ConfigRefused, match="single MIG strategy"):
        plan_mig(node, preset="all-balanced")
    with pytest.raises(ConfigRefused, match="not a GPU Operator preset for A100-40GB"):
        plan_mig(node, preset="all-3g.40gb")
    with pytest.raises(ConfigRefused, match="cannot be partitioned with MIG"):
        plan_mig(Node.objects.get(name=A10_NODE), preset="all-balanced")


def test_a_failed_apply_ends_failed_with_the_reason_and_reverts(sim, clock, people):
    node = Node.objects.get(name=MIG_NODE)
    sim.fail_next_mig_reconfiguration(MIG_NODE, "nvidia-smi: Insufficient Resources")
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-1g.10gb"))
    step(sim, clock)
    step(sim, clock, 31)
    op.refresh_from_db()
    assert op.state == NodeConfigState.FAILED
    assert "MIG Manager could not apply all-1g.10gb on gpu-a100-mig-01" in op.reason
    assert op.cluster_state == "failed" and op.can_revert
    assert [s["status"] for s in op.steps] == ["done", "done", "done", "failed", "todo", "todo"]
    assert labels(sim, MIG_NODE)["nvidia.com/mig.config.state"] == "failed"
    assert sim.mig_failure(MIG_NODE) == "nvidia-smi: Insufficient Resources"
    assert AuditEvent.objects.filter(action="node.config.fail", object_id=str(op.pk)).exists()
    # While it is failed the node is no longer blocked; the revert is a new operation back to all-balanced.
    assert MIG_NODE not in {name for _, name in nodeconfig.reconfiguring_nodes()}
    revert = nodeconfig.request_revert(people["admin"], op)
    assert revert.requested["config"] == "all-balanced" and revert.revert_of_id == op.pk
    step(sim, clock)
    revert.refresh_from_db()
    assert revert.state in (NodeConfigState.WAITING, NodeConfigState.DONE)
    step(sim, clock, 1)
    revert.refresh_from_db()
    assert revert.state == NodeConfigState.DONE, revert.log
    assert labels(sim, MIG_NODE)["nvidia.com/mig.config"] == "all-balanced"
    assert labels(sim, MIG_NODE)["nvidia.com/mig.config.state"] == "success"
    assert Node.objects.get(name=MIG_NODE).allocatable["nvidia.com/mig-3g.40gb"] == "8"
    assert AuditEvent.objects.filter(action="node.config.revert", object_id=str(revert.pk)).exists()
    with pytest.raises(ConfigRefused, match="Only the node's latest reconfiguration"):
        nodeconfig.request_revert(people["admin"], op)  # the node has moved on since: its revert is the latest


def test_an_operator_that_never_finishes_times_out(sim, clock, people, settings):
    settings.PORTAL_NODE_CONFIG_APPLY_TIMEOUT = 20  # shorter than MIG Manager's 30 s in the simulator
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-7g.80gb"))
    step(sim, clock)
    step(sim, clock, 21)
    op.refresh_from_db()
    assert op.state == NodeConfigState.FAILED
    assert "did not finish within 20 s" in op.reason and "nvidia.com/mig.config.state=pending" in op.reason


def test_one_operation_per_node_and_running_it_twice_changes_nothing(sim, clock, people):
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-2g.20gb"))
    with pytest.raises(ConfigRefused, match="already being reconfigured"):
        request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    first = step(sim, clock)
    op.refresh_from_db()
    log_after_first = list(op.log)
    second = step(sim, clock)  # same moment again: nothing new happens, nothing is written twice
    op.refresh_from_db()
    assert first.advanced == 3 and second.advanced == 0
    assert op.log == log_after_first
    assert op.state == NodeConfigState.WAITING


def test_draining_waits_then_requeues_preemptible_work_and_places_nothing_new(sim, clock, people, mig_quota):
    keeps = submit(people["alice"], "vision", mig_quota, name="short", command=["sleep", "90"])
    spare = submit(people["bob"], "nlp", mig_quota, name="spare", preemptible=True)
    run_cycle(sim, now=clock.now)
    clock.advance(6)
    run_cycle(sim, now=clock.now)
    assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}
    assert set(Job.objects.values_list("node_name", flat=True)) == {MIG_NODE}

    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    # From now on the job cycle places nothing on the node.
    snapshot, _ = build_snapshot(clock.now)
    assert not snapshot.nodes[MIG_NODE].schedulable
    late = submit(people["alice"], "vision", mig_quota, name="late")
    step(sim, clock)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING and "Waiting for 2 workload(s)" in op.log[-1]["message"]
    run_cycle(sim, now=clock.now)
    late.refresh_from_db()
    assert late.state == JobState.QUEUED and late.node_name == ""

    # After the grace period the preemptible job is preempted and requeued; the other one may finish. The
    # inventory only publishes that the node drains; the job cycle does the preempting (gpus never imports jobs).
    step(sim, clock, 61)
    spare.refresh_from_db()
    assert spare.state == JobState.RUNNING
    run_cycle(sim, now=clock.now)
    spare.refresh_from_db()
    assert spare.events.filter(kind=EventKind.PREEMPT_NOTICE, data__node_config_operation=op.pk).exists()
    assert spare.state == JobState.QUEUED and spare.events.filter(kind=EventKind.REQUEUED).exists()
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING  # "short" is not preemptible: it runs to its end
    clock.advance(30)
    run_cycle(sim, now=clock.now)
    keeps.refresh_from_db()
    assert keeps.state == JobState.SUCCEEDED
    step(sim, clock, 5)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING
    step(sim, clock, 31)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE
    # The 1g.10gb class is gone with the layout: the quotas on it are flagged to admins.
    assert any("no longer offered by any node" in w and "2 quota(s)" in w for w in op.warnings), op.warnings
    assert nodeconfig_plan.quota_problems()


def test_the_plan_warns_about_classes_that_disappear_with_their_quotas(sim, people, mig_quota):
    node = Node.objects.get(name=MIG_NODE)
    plan = plan_mig(node, preset="all-7g.80gb")
    gone = [w for w in plan.warnings if "1g.10gb" in w]
    assert gone and "Quotas of Computer Vision, Language Models refer to it" in gone[0]


def test_a_draining_node_with_non_preemptible_work_fails_at_the_timeout(sim, clock, people, mig_quota, settings):
    settings.PORTAL_NODE_CONFIG_DRAIN_TIMEOUT = 120
    job = submit(people["alice"], "vision", mig_quota, name="long")
    run_cycle(sim, now=clock.now)
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    step(sim, clock, 121)
    op.refresh_from_db()
    assert op.state == NodeConfigState.FAILED
    assert f"#{job.pk} long" in op.reason and "nothing was changed on the node" in op.reason
    assert labels(sim, MIG_NODE)["nvidia.com/mig.config"] == "all-balanced"


def test_time_slicing_is_written_to_the_device_plugin_config_and_selected_by_label(sim, clock, people):
    node = Node.objects.get(name=A10_NODE)
    plan = plan_time_slicing(node, replicas=8, rename=True)
    assert plan.expected_resources == {"nvidia.com/gpu.shared": 32}
    assert any("no memory isolation" in w for w in plan.warnings)
    op = request_operation(people["admin"], node, plan)
    assert op.previous == {"config": "nvidia-a10", "replicas": 4, "rename": False, "strategy": "none"}
    step(sim, clock)
    step(sim, clock, 1)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    assert labels(sim, A10_NODE)["nvidia.com/device-plugin.config"] == "portal-ts8-renamed-none"
    text = sim.get_config_map("gpu-operator", "time-slicing-config")["data"]["portal-ts8-renamed-none"]
    assert yaml.safe_load(text)["sharing"]["timeSlicing"] == {
        "renameByDefault": True,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 8}],
    }
    node.refresh_from_db()
    assert node.allocatable["nvidia.com/gpu.shared"] == "32" and node.allocatable["nvidia.com/gpu"] == "0"
    shared = ResourceClass.objects.get(key="nvidia.com/gpu.shared@NVIDIA-A10")
    assert shared.kind == "shared" and shared.replicas == 8 and shared.total == 32

    # And back to whole GPUs.
    op2 = request_operation(people["admin"], node, plan_time_slicing(node, replicas=1, rename=False))
    step(sim, clock)
    step(sim, clock, 1)
    op2.refresh_from_db()
    assert op2.state == NodeConfigState.DONE, op2.log
    node.refresh_from_db()
    assert node.allocatable["nvidia.com/gpu"] == "4" and node.product_label == "NVIDIA-A10"


def test_reverting_after_a_custom_layout_restores_exactly_that_layout(sim, clock, people):
    node = Node.objects.get(name=MIG_NODE)
    layout = [[]] + [[("7g.80gb", 0)]] * 7
    first = request_operation(people["admin"], node, plan_mig(node, placements=layout))
    step(sim, clock)
    step(sim, clock, 31)
    first.refresh_from_db()
    assert first.state == NodeConfigState.DONE
    node.refresh_from_db()
    sim.fail_next_mig_reconfiguration(MIG_NODE, "injected")
    failed = request_operation(people["admin"], node, plan_mig(node, preset="all-1g.10gb"))
    # The inventory only has node-wide counts; the previous layout is the one the admin applied, GPU by GPU.
    assert failed.previous == first.requested
    step(sim, clock)
    step(sim, clock, 31)
    failed.refresh_from_db()
    assert failed.state == NodeConfigState.FAILED, failed.log
    revert = nodeconfig.request_revert(people["admin"], failed)
    assert revert.requested["config"] == first.requested["config"]
    assert revert.requested["gpus"] == [None] + [{"7g.80gb": 1}] * 7
    step(sim, clock)
    revert.refresh_from_db()
    assert revert.state == NodeConfigState.DONE, revert.log
    assert labels(sim, MIG_NODE)["nvidia.com/mig.config"] == first.requested["config"]
    assert Node.objects.get(name=MIG_NODE).allocatable["nvidia.com/mig-7g.80gb"] == "7"


def test_beat_advances_operations_through_the_celery_task(sim, clock, people, settings, monkeypatch):
    from django.conf import settings as live_settings

    from gpus import tasks

    entry = live_settings.CELERY_BEAT_SCHEDULE["node-config"]
    assert entry["task"] == "gpus.tasks.advance_node_config_operations" == tasks.advance_node_config_operations.name
    monkeypatch.setattr(tasks, "get_backend", lambda: sim)
    node = Node.objects.get(name=SINGLE_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-7g.40gb"))
    result = tasks.advance_node_config_operations.apply().get()
    assert result["advanced"] == 3 and result["errors"] == []
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING


def test_two_workers_moving_the_same_operation_at_once_move_it_once(sim, clock, people):
    from gpus.nodeconfig import _move

    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    mine, theirs = NodeConfigOperation.objects.get(pk=op.pk), NodeConfigOperation.objects.get(pk=op.pk)
    assert _move(mine, NodeConfigState.PENDING, NodeConfigState.DRAINING, clock.now, "worker 1")
    assert not _move(theirs, NodeConfigState.PENDING, NodeConfigState.DRAINING, clock.now, "worker 2")
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING
    assert [e["message"] for e in op.log][-1] == "worker 1" and len(op.log) == 2


def test_the_job_cycle_drains_a_node_past_its_grace_period_through_the_lifecycle(sim, clock, people, mig_quota):
    spare = submit(people["bob"], "nlp", mig_quota, name="spare", preemptible=True)
    keeps = submit(people["alice"], "vision", mig_quota, name="keeps")
    run_cycle(sim, now=clock.now)
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    # Within the grace period the node is reconfiguring but not yet drained: nothing is preempted.
    assert nodeconfig.nodes_draining(clock.now) == {}
    result = CycleResult()
    preempt_draining(result, clock.now)
    assert result.preempted == 0
    clock.advance(61)
    assert nodeconfig.nodes_draining(clock.now) == {(node.cluster_id, MIG_NODE): op.pk}
    result = run_cycle(sim, now=clock.now)
    assert result.preempted == 1 and result.requeued == 1
    spare.refresh_from_db()
    keeps.refresh_from_db()
    assert spare.state == JobState.QUEUED and keeps.state == JobState.RUNNING
    (notice,) = spare.events.filter(kind=EventKind.PREEMPT_NOTICE)
    assert notice.message.startswith(f"An admin is reconfiguring the GPUs of {MIG_NODE} (operation #{op.pk}).")
    assert AuditEvent.objects.filter(action=JobAuditAction.JOB_PREEMPT, object_id=str(spare.pk)).count() == 1
    # Level-triggered: the next cycle finds nothing more to do, and the drain step names what still runs.
    assert run_cycle(sim, now=clock.now).preempted == 0
    step(sim, clock)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DRAINING and f"#{keeps.pk} keeps" in op.log[-1]["message"]

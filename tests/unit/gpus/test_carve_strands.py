"""A carve that takes a resource class out of the fleet (issue 31, item 11): the preview names the work it would
strand; work stopped by the drain is told plainly that it cannot run again as it is (not "elsewhere or here once
the node is back"); its timeline names the drain as the cause; and once the layout is applied, work still asking
for the class waits with ``class_gone`` and a resubmit to a class that exists. The demo's A100 MIG node is the only
one offering 1g.10gb slices; all-3g.40gb takes them away."""

from __future__ import annotations

from django.urls import reverse

from core.models import Notification
from gpus.choices import NodeConfigState
from gpus.models import Node, ResourceClass
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_control import force_drain
from gpus.nodeconfig_plan import plan_mig
from jobs.choices import EventKind, JobState
from jobs.cycle.run import run_cycle
from tests.sim_objects import MIG_NODE
from tests.unit.gpus.nodeconfig_kit import step, submit


def _running(sim, clock, *jobs):
    run_cycle(sim, now=clock.now)
    clock.advance(6)
    run_cycle(sim, now=clock.now)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.node_name == MIG_NODE


def test_the_preview_names_the_work_a_layout_strands(sim, clock, people, mig_quota):
    running = submit(people["alice"], "vision", mig_quota, name="keeps")
    _running(sim, clock, running)
    queued = submit(people["bob"], "nlp", mig_quota, name="later", count=16)  # more than is free: stays queued
    node = Node.objects.get(name=MIG_NODE)
    warning = next(w for w in plan_mig(node, preset="all-3g.40gb").warnings if "1g.10gb" in w)
    assert "strands 2 workload(s)" in warning
    assert f"#{running.pk} keeps (batch job, alice)" in warning and f"#{queued.pk} later (batch job, bob)" in warning
    # A layout that keeps the class strands nobody.
    assert not any("strands" in w for w in plan_mig(node, preset="all-balanced").warnings)


def test_forced_work_whose_class_goes_is_told_so_and_waits_with_class_gone(client, sim, clock, people, mig_quota):
    job = submit(people["alice"], "vision", mig_quota, name="keeps")
    _running(sim, clock, job)
    node = Node.objects.get(name=MIG_NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    step(sim, clock)
    force_drain(people["admin"], op, "the A100s are carved for Monday's course")
    run_cycle(sim, now=clock.now)
    job.refresh_from_db()
    notice = job.events.filter(kind=EventKind.PREEMPT_NOTICE).latest("pk")
    assert "no other node offers it" in notice.message and "elsewhere or here" not in notice.message
    requeued = job.events.filter(kind=EventKind.REQUEUED).latest("pk")
    assert f"forced the drain of {MIG_NODE}" in requeued.message and "no other node offers it" in requeued.message
    assert "borrowed capacity" not in requeued.message
    bell = Notification.objects.filter(user=people["alice"]).latest("pk")
    assert "its class is gone" in bell.title and "submit it again with a class that exists" in bell.body

    for _ in range(6):
        step(sim, clock, 40)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE
    assert not ResourceClass.objects.get(pk=mig_quota.pk).present
    run_cycle(sim, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.wait_reason == "class_gone"
    assert "No node offers" in job.wait_message and "submit it again with a class that exists" in job.wait_message
    client.force_login(people["alice"])
    page = client.get(job.get_absolute_url()).content.decode()
    assert 'data-testid="resubmit-other-class"' in page
    assert f"{reverse('jobs:job-new')}?from={job.pk}" in page

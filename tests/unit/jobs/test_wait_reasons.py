"""The wait reasons' one home (vocab.waits.WaitReason): the Django choices of ``Job.wait_reason`` are built from it,
and admission's gates answer with its members."""

from __future__ import annotations

from jobs.choices import WaitReason as WaitReasonChoices
from jobs.models import Job
from jobs.scheduling import gates
from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import ClassView, JobView, NodeView, QuotaView, Snapshot
from vocab.waits import WaitReason

H100 = ClassView(1, "nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3", 1.0, "H100")


def test_the_django_choices_have_the_enums_names_values_and_labels():
    assert [(c.name, c.value, c.label) for c in WaitReasonChoices] == [(r.name, r.value, r.label) for r in WaitReason]
    assert Job._meta.get_field("wait_reason").choices == [(r.value, r.label) for r in WaitReason]
    assert WaitReasonChoices.QUOTA == WaitReason.QUOTA == "quota"
    assert WaitReason.NEVER_FITS.label == "No node can ever hold it"


def test_each_gate_answers_with_a_member_and_decide_passes_it_on():
    node = NodeView(
        "h1", H100.product_label, None, True, {H100.resource_name: 8}, {H100.resource_name: 2}, 64_000, 512_000,
        64_000, 512_000,
    )  # fmt: skip

    def job(id, team, class_id=H100.id, count=1, **kw):
        return JobView(id, team, class_id, count, 1000, 1000, 50, False, float(id), **kw)

    queued = [
        job(1, 1, class_id=9),  # its class is gone
        job(2, 2),  # team 2 has no quota
        job(3, 1, count=4),  # over team 1's limit of 3
        job(4, 1, group=7),  # its array is at its cap
        job(5, 1, count=2),  # fits
        job(6, 1, count=1, cuda=(13, 0)),  # no node has a driver new enough
    ]
    snap = Snapshot(
        now=100.0, nodes={"h1": node}, classes={H100.id: H100}, quotas={(1, H100.id): QuotaView(3, 3)},
        queued=queued, active=[], team_names={1: "vision", 2: "nlp"}, group_caps={7: 0},
    )  # fmt: skip
    node.cuda = (12, 4)
    decisions = decide(snap)
    assert decisions.admit == {5: ("h1", False)}
    reasons = {job_id: wait.reason for job_id, wait in decisions.wait.items()}
    assert reasons == {
        1: WaitReason.NEVER_FITS,
        2: WaitReason.QUOTA,
        3: WaitReason.QUOTA,
        4: WaitReason.ARRAY,
        6: WaitReason.CUDA,
    }
    assert all(type(reason) is WaitReason for reason in reasons.values())
    assert decisions.wait[2].message == "Team nlp has no quota for H100; an admin must grant one."
    # The stages hold every gate once, in the order decide asks them.
    stages = (*gates.ENTRY, *gates.QUOTA, *gates.NODES, *gates.NO_ROOM, gates.no_room)
    assert len(set(stages)) == len(stages) == 16


def test_work_for_a_class_no_node_offers_waits_with_class_gone_and_says_what_to_do():
    """Issue 31, item 11: after a carve took the class out of the fleet, its work is told so plainly, not that it
    waits "until such a node is back"."""
    gone = ClassView(2, "nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB", 1 / 7, "A100 · MIG 1g.10gb", offered=False)
    node = NodeView(
        "h1", H100.product_label, None, True, {H100.resource_name: 8}, {H100.resource_name: 8}, 64_000, 512_000,
        64_000, 512_000,
    )  # fmt: skip
    waiting = JobView(1, 1, gone.id, 1, 1000, 1000, 50, False, 1.0)
    snap = Snapshot(
        now=100.0, nodes={"h1": node}, classes={H100.id: H100, gone.id: gone},
        quotas={(1, gone.id): QuotaView(8, 16)}, queued=[waiting], active=[], team_names={1: "vision"},
    )  # fmt: skip
    wait = decide(snap).wait[1]
    assert wait.reason == WaitReason.CLASS_GONE == "class_gone"
    assert wait.message.startswith("No node offers A100 · MIG 1g.10gb any more")
    assert "submit it again with a class that exists" in wait.message and "is back" not in wait.message

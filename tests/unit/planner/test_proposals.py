"""Proposals: every problem at once, applied to a copy (the input never changes), MIG and time-slicing advertised
as the portal's carving would, new classes with negative ids and the portal's names, and the JSON form."""

from __future__ import annotations

import copy

import pytest

from jobs.scheduling.snapshot import QuotaView
from planner import model, proposals
from vocab.names import GPU_RESOURCE, mig_resource_name

from .engine_cases import a10_cluster, a100_mig_cluster, h100_cluster


def test_every_problem_of_a_proposal_is_reported_at_once():
    cluster = h100_cluster(2)
    cluster.shapes["h1"].mig_capable = False
    bad = model.Proposal(
        "bad",
        [
            model.MigChange(("h0", "ghost"), preset="all-3g.40gb"),
            model.MigChange(("h1",), preset="all-3g.40gb"),
            model.MigChange(("h0",), per_gpu=({"3g.40gb": 2, "1g.10gb": 1},)),
            model.MigChange(("h0",), per_gpu=({"9g.1tb": 1}, {}, {})),
            model.MigChange(("h0",), preset="all-3g.40gb", per_gpu=({"3g.40gb": 2},)),
            model.TimeSlicingChange(("h0",), 0),
            model.QuotaChange(team=9, class_id=77, guaranteed=5, limit=2),
            model.QuotaChange(team=1, class_id=1, guaranteed=-1, limit=2),
            model.AddNodes("nowhere", 1001),
            model.RemoveNodes(("h0", "h0")),
            model.RemoveNodes(()),
        ],
    )
    assert proposals.validate(cluster, bad) == [
        "Change 1 (mig): no node named ghost in the cluster.",
        "Change 2 (mig): h1 has NVIDIA-H100-80GB-HBM3, which cannot be partitioned with MIG.",
        "Change 3 (mig): h0: 2×3g.40gb, 1×1g.10gb do not fit together on one H100-80GB: its 8 memory slices cannot "
        "hold them at the slots each profile may start at.",
        "Change 4 (mig): h0 has 8 GPUs; give one layout for all of them or one per GPU (3 given).",
        "Change 5 (mig): give either a preset for the nodes or a layout per GPU (per_gpu), not both or neither.",
        "Change 6 (time_slicing): replicas must be between 1 (no sharing) and 64 per GPU; got 0.",
        "Change 7 (quota): no team with id 9.",
        "Change 7 (quota): no resource class with id 77 (a class a change creates has a negative id).",
        "Change 7 (quota): the guarantee (5) cannot be above the limit (2).",
        "Change 8 (quota): guaranteed and limit must be 0 or more.",
        "Change 9 (add_nodes): no node named 'nowhere' in the cluster to copy.",
        "Change 9 (add_nodes): count must be between 1 and 1000; got 1001.",
        "Change 10 (remove_nodes): a node is named twice.",
        "Change 11 (remove_nodes): name at least one node.",
    ]
    with pytest.raises(proposals.Invalid) as raised:
        proposals.apply(cluster, bad)
    assert len(raised.value.problems) == 14


def test_a_layout_the_geometry_refuses_is_refused_per_gpu():
    cluster = a100_mig_cluster()
    layouts = [{"3g.40gb": 2}] * 7 + [{"1g.10gb": 8}]
    problems = proposals.validate(cluster, model.Proposal("p", [model.MigChange(("a0",), per_gpu=tuple(layouts))]))
    # Every rule it breaks, in the carve form's words (vocab.mig.count_problems): the instance limit and the
    # compute slices the eight instances would need.
    assert problems == [
        "Change 1 (mig): a0 GPU 7: At most 7 × 1g.10gb fit on one A100-80GB; 8 were asked for.",
        "Change 1 (mig): a0 GPU 7: The instances need 8 compute slices; a A100-80GB has 7, so at most 7 × 1g.10gb.",
    ]
    unknown = model.Proposal("p", [model.MigChange(("a0",), preset="all-9g")])
    assert proposals.validate(cluster, unknown)[0].startswith(
        "Change 1 (mig): all-9g is not a GPU Operator preset for A100-80GB (a0); choose one of all-disabled, "
    )


def test_apply_returns_a_new_cluster_and_leaves_the_input_alone():
    cluster = a100_mig_cluster()
    before = copy.deepcopy(cluster)
    after = proposals.apply(
        cluster,
        model.Proposal(
            "p",
            [
                model.MigChange(("a0",), preset="all-balanced"),
                model.AddNodes("a1", 2),
                model.RemoveNodes(("a1",)),
                model.QuotaChange(team=1, class_id=2, guaranteed=4, limit=8),
            ],
        ),
    )
    assert cluster == before
    assert sorted(after.nodes) == ["a0", "a1-new-1", "a1-new-2"]
    a0 = after.nodes["a0"]
    # all-balanced on an A100 80GB: 2 × 1g.10gb, 1 × 2g.20gb and 1 × 3g.40gb per GPU, under the mixed strategy.
    assert a0.allocatable == {
        mig_resource_name("1g.10gb"): 16, mig_resource_name("2g.20gb"): 8, mig_resource_name("3g.40gb"): 8
    }  # fmt: skip
    assert a0.free == a0.allocatable and a0.product_label == "NVIDIA-A100-SXM4-80GB"
    assert after.nodes["a1-new-1"].allocatable == {mig_resource_name("3g.40gb"): 16}
    assert after.shapes["a1-new-2"].product == "NVIDIA-A100-SXM4-80GB"
    # The 2g.20gb class is new: a negative id, the portal's default name, 2/7 of a GPU.
    new = {c.id: c for c in after.classes.values() if c.id < 0}
    assert list(new) == [-1]
    assert (new[-1].resource_name, new[-1].name, new[-1].gpu_fraction) == (
        mig_resource_name("2g.20gb"), "A100 SXM4 80GB · MIG 2g.20gb", pytest.approx(2 / 7)
    )  # fmt: skip
    assert after.quotas[(1, 2)] == QuotaView(4, 8)
    assert after.classes[1] == cluster.classes[1]


def test_mig_off_brings_back_the_whole_gpu_and_time_slicing_needs_it_off():
    cluster = a100_mig_cluster()
    refused = model.Proposal("ts on mig", [model.TimeSlicingChange(("a0",), 2)])
    assert proposals.validate(cluster, refused) == [
        "Change 1 (time_slicing): a0 has MIG enabled; time-slicing here would share MIG devices. Apply all-disabled "
        "first (a mig change before this one), then share the whole GPUs."
    ]
    ok = model.Proposal("off then shared", [model.MigChange(("a0",), preset="all-disabled"),
                                            model.TimeSlicingChange(("a0",), 3)])  # fmt: skip
    after = proposals.apply(cluster, ok)
    a0 = after.nodes["a0"]
    assert a0.allocatable == {GPU_RESOURCE: 24} and a0.product_label == "NVIDIA-A100-SXM4-80GB-SHARED"
    shared = [c for c in after.classes.values() if c.product_label.endswith("-SHARED")]
    assert [(c.id, c.name, c.gpu_fraction) for c in shared] == [(-1, "A100 SXM4 80GB · 1/3 time-sliced", 1 / 3)]


def test_time_slicing_changes_an_existing_shared_class_share():
    after = proposals.apply(a10_cluster(4), model.Proposal("x2", [model.TimeSlicingChange(("t0",), 2)]))
    assert after.nodes["t0"].allocatable == {GPU_RESOURCE: 8}
    assert [(c.id, c.gpu_fraction, c.name) for c in after.classes.values()] == [(1, 0.5, "A10 · 1/2 time-sliced")]
    whole = proposals.apply(a10_cluster(4), model.Proposal("off", [model.TimeSlicingChange(("t0",), 1)]))
    assert whole.nodes["t0"].product_label == "NVIDIA-A10"
    assert [(c.id, c.name) for c in whole.classes.values() if c.id < 0] == [(-1, "A10")]


def test_json_round_trip_and_every_problem_of_bad_json():
    proposal = model.Proposal(
        "mixed",
        [
            model.MigChange(("a0",), per_gpu=({"3g.40gb": 2}, None)),
            model.MigChange(("a1",), preset="all-1g.10gb"),
            model.TimeSlicingChange(("t0",), 2),
            model.QuotaChange(1, -1, 2, 4),
            model.AddNodes("a0", 3),
            model.RemoveNodes(("t0",)),
        ],
    )
    data = proposals.to_json(proposal)
    assert data["changes"][0] == {"type": "mig", "nodes": ["a0"], "preset": "", "per_gpu": [{"3g.40gb": 2}, None]}
    assert data["changes"][3] == {"type": "quota", "team": 1, "class_id": -1, "guaranteed": 2, "limit": 4}
    assert proposals.from_json(data) == proposal
    with pytest.raises(proposals.Invalid) as raised:
        proposals.from_json(
            {
                "name": " ",
                "changes": [
                    {"type": "carve"},
                    {"type": "quota", "team": "1", "class_id": 1, "guaranteed": True, "limit": 2},
                    {"type": "add_nodes", "like": "a0"},
                    {"type": "mig", "nodes": "a0", "per_gpu": [{"3g.40gb": "2"}], "colour": "red"},
                    7,
                ],
            }
        )
    assert raised.value.problems == [
        "Give the proposal a name.",
        "Change 1: unknown type 'carve'; use one of mig, time_slicing, quota, add_nodes, remove_nodes.",
        "Change 2 (quota): team must be a whole number; got '1'.",
        "Change 2 (quota): guaranteed must be a whole number; got True.",
        "Change 3 (add_nodes): missing count.",
        "Change 4 (mig): unknown field(s) colour; it takes nodes, per_gpu, preset, type.",
        "Change 4 (mig): per_gpu[0]['3g.40gb'] must be a whole number; got '2'.",
        "Change 4 (mig): nodes must be a list of node names.",
        'Change 5 must be an object with a "type".',
    ]

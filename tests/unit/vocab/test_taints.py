"""vocab.taints: the taint syntax (every problem at once), Kubernetes' toleration rule, the pool labels, and which
taints keep general work off GPU nodes by the GPU Operator's, GKE's, EKS's and AKS's conventions."""

import pytest

from vocab.taints import (
    Taint,
    convention_of,
    gpu_keeping,
    parse_taint,
    parse_taints,
    pool_of,
    repelling,
    tolerates,
    tolerations_for,
)

NS, NE, PNS = "NoSchedule", "NoExecute", "PreferNoSchedule"


@pytest.mark.parametrize(
    ("taint", "gpu"),
    [
        (Taint("nvidia.com/gpu", "present", NS), True),  # GPU Operator, GKE
        (Taint("nvidia.com/gpu", "", NS), True),  # EKS node groups / Karpenter GPU pools
        (Taint("nvidia.com/gpu", "true", NE), True),
        (Taint("sku", "gpu", NS), True),  # AKS GPU pools
        (Taint("sku", "cpu", NS), False),  # another value of AKS's key is not the GPU convention
        (Taint("nvidia.com/gpu", "present", PNS), False),  # only steers: keeps nothing off
        (Taint("dedicated", "gpu", NS), False),
        (Taint("kubernetes.azure.com/scalesetpriority", "spot", NS), False),
    ],
)
def test_gpu_conventions(taint, gpu):
    assert (convention_of(taint) is not None) == gpu
    assert gpu_keeping([taint]) == ([taint] if gpu else [])


def test_pool_labels_of_each_provider():
    assert pool_of({"cloud.google.com/gke-nodepool": "a3-pool"}) == "a3-pool"
    assert pool_of({"eks.amazonaws.com/nodegroup": "p5"}) == "p5"
    assert pool_of({"kubernetes.azure.com/agentpool": "gpunp", "agentpool": "gpunp"}) == "gpunp"
    assert pool_of({"agentpool": "legacy"}) == "legacy"
    assert pool_of({"kubernetes.io/hostname": "gpu-1"}) == ""


def test_the_controllers_condition_taints_are_not_repelling_pool_taints():
    taints = [
        Taint("node.kubernetes.io/unschedulable", "", NS),
        Taint("node.kubernetes.io/not-ready", "", NE),
        Taint("node.kubernetes.io/disk-pressure", "", NS),
        Taint("dedicated", "infra", NS),
        Taint("soft", "x", PNS),
    ]
    assert repelling(taints) == [Taint("dedicated", "infra", NS)]


def test_tolerations_are_exact_and_never_blanket():
    tolerations = tolerations_for(
        [Taint("sku", "gpu", NS), Taint("nvidia.com/gpu", "present", NS), Taint("sku", "gpu", NS)]
    )
    assert tolerations == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": NS},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": NS},
    ]
    assert all(t["key"] and t["operator"] == "Equal" and t["effect"] for t in tolerations)
    # Exact: the same key with another value or effect is not tolerated.
    assert not any(tolerates(t, Taint("sku", "cpu", NS)) for t in tolerations)
    assert not any(tolerates(t, Taint("sku", "gpu", NE)) for t in tolerations)
    assert tolerations_for([]) == []


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, Taint("any", "x", NE), True),  # empty key + Exists: everything
        ({"key": "sku", "operator": "Exists"}, Taint("sku", "gpu", NS), True),
        ({"key": "sku", "value": "gpu"}, Taint("sku", "gpu", NS), True),  # Equal is the default operator
        ({"key": "sku", "value": "gpu", "effect": NE}, Taint("sku", "gpu", NS), False),
        ({"key": "sku", "operator": "Equal", "value": ""}, Taint("sku", "gpu", NS), False),
        (
            {"key": "nvidia.com/gpu", "operator": "Equal", "value": "", "effect": NS},
            Taint("nvidia.com/gpu", "", NS),
            True,
        ),
        ({"key": "", "operator": "Equal"}, Taint("sku", "gpu", NS), False),
    ],
)
def test_kubernetes_toleration_rule(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


def test_parse_taint_in_kubectls_spelling():
    assert parse_taint("sku=gpu:NoSchedule") == (Taint("sku", "gpu", NS), [])
    assert parse_taint(" nvidia.com/gpu:NoExecute ") == (Taint("nvidia.com/gpu", "", NE), [])
    assert str(Taint("sku", "gpu", NS)) == "sku=gpu:NoSchedule"
    assert str(Taint("nvidia.com/gpu", "", NS)) == "nvidia.com/gpu:NoSchedule"


def test_every_problem_of_every_line_is_reported_at_once():
    taints, problems = parse_taints(
        [
            "sku=gpu:NoSchedule",
            "",
            "bad key!=x:NoSchedule",  # key
            "dedicated=-bad-:Sometimes",  # value and effect on one line
            "no-effect",
            "=gpu:NoSchedule",
            "sku=gpu:NoSchedule",  # a repeat is kept once
        ]
    )
    assert taints == [Taint("sku", "gpu", NS)]
    assert len(problems) == 5, problems
    assert problems[0].startswith("Line 3:") and "qualified name" in problems[0]
    assert problems[1].startswith("Line 4:") and "value '-bad-'" in problems[1]
    assert problems[2].startswith("Line 4:") and "NoSchedule, PreferNoSchedule, NoExecute" in problems[2]
    assert problems[3].startswith("Line 5:") and "no effect" in problems[3]
    assert problems[4].startswith("Line 6:") and "no key" in problems[4]

"""The taint gate of placement (jobs.scheduling.node_trust): the portal never places work on a node with a NoSchedule
or NoExecute taint the pod it renders there would not tolerate, and the wait says which taint and what to do. Pure
Python over taints and tolerations, as rendering produces them (jobs.render.gpu_tolerations)."""

from jobs.render import gpu_tolerations
from jobs.scheduling.node_trust import kept_off_sentence, taint_reason, untolerated
from vocab.taints import Taint

NS, NE, PNS = "NoSchedule", "NoExecute", "PreferNoSchedule"
SKU = Taint("sku", "gpu", NS)
GPU = Taint("nvidia.com/gpu", "present", NS)
SPOT = Taint("kubernetes.azure.com/scalesetpriority", "spot", NS)


def test_a_node_whose_pool_taints_are_all_tolerated_passes():
    assert untolerated([SKU], gpu_tolerations([SKU])) == []
    assert untolerated([GPU, Taint("soft", "x", PNS)], gpu_tolerations([GPU])) == []


def test_an_untolerated_noschedule_or_noexecute_taint_stops_it():
    assert untolerated([SKU, SPOT], gpu_tolerations([SKU])) == [SPOT]
    evict = Taint("maintenance", "", NE)
    assert untolerated([GPU, evict], gpu_tolerations([GPU])) == [evict]
    # The pool's GPU taint of another pool does not help, nor another value of a tolerated key.
    assert untolerated([SKU], gpu_tolerations([GPU])) == [SKU]
    assert untolerated([Taint("sku", "cpu", NS)], gpu_tolerations([SKU])) == [Taint("sku", "cpu", NS)]


def test_the_controllers_taints_are_left_to_the_nodes_conditions():
    cordon = Taint("node.kubernetes.io/unschedulable", "", NS)
    assert untolerated([GPU, cordon], gpu_tolerations([GPU])) == []


def test_the_wait_says_which_taint_and_where_to_declare_it():
    reason = taint_reason([SPOT], "spotgpu")
    assert "kubernetes.azure.com/scalesetpriority=spot:NoSchedule" in reason
    assert "do not tolerate" in reason and "node pool spotgpu" in reason
    assert "nodes without a pool label" in taint_reason([SPOT], "")
    assert taint_reason([], "spotgpu") == ""
    sentence = kept_off_sentence({reason: ["aks-spot-0"]})
    assert sentence.startswith(" The portal keeps work off aks-spot-0: it has the taint ")

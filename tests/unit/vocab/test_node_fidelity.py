"""MIG arithmetic from the catalogue, GFD label spellings old and new, managed node pools (vocab.cloud)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.realdata import node_from_labels, real_json
from vocab.cloud import AKS_INSTANCE_TYPES, EKS_INSTANCE_TYPES, GKE_ACCELERATORS, cloud_gpu, provider_of
from vocab.gfd import parse_node
from vocab.mig import CATALOGUE
from vocab.names import is_label_value, mig_product

#: (catalogue entry, GFD product name, profile) for every profile of every product in the catalogue.
EVERY_PROFILE = [
    (entry, product, profile) for entry in CATALOGUE for product in entry.products for profile in entry.profiles
]


def single_strategy_node(product: str, profile: str, devices: int) -> dict:
    """The labels GFD publishes under the single strategy (k8s-device-plugin docs/gpu-feature-discovery: the
    product gets -MIG-<profile>, gpu.count counts MIG devices) and the device plugin's capacity."""
    value = mig_product(product, profile)
    if not is_label_value(value):
        value = value.replace("+", ".")  # a label value cannot hold '+'; the resource-name spelling
    labels = {
        "nvidia.com/gpu.product": value,
        "nvidia.com/gpu.count": str(devices),
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mig.capable": "true",
    }
    return node_from_labels(labels, {"nvidia.com/gpu": str(devices)})


def test_the_catalogue_has_media_extension_and_memory_slice_profiles():
    names = {profile.name for _, _, profile in EVERY_PROFILE}
    assert any(n.endswith("+me") for n in names)  # media extensions: one per GPU
    assert any(p.size > p.compute for _, _, p in EVERY_PROFILE)  # 1g.20gb: 1 compute slice, 2 memory slices


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EVERY_PROFILE), st.integers(1, 8))
def test_single_strategy_physical_count_comes_from_the_catalogue(case, gpus):
    entry, product, profile = case
    facts = parse_node(single_strategy_node(product, profile.name, gpus * profile.max_instances))
    assert facts.mig_strategy == "single"
    assert facts.single_mig_profile == profile.name
    assert facts.gpu_count == gpus
    assert facts.mig_count_known


@pytest.mark.parametrize(
    ("product", "profile", "devices", "gpus"),
    [
        # A formula (7 // compute slices) would say 7 per GPU for each of these; the hardware holds fewer.
        ("NVIDIA-H100-80GB-HBM3", "1g.20gb", 8, 2),  # 4 per GPU: 2 memory slices each
        ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", 2, 2),  # 1 per GPU: one media-extension instance
        ("NVIDIA-A30", "1g.6gb", 8, 2),  # 4 per GPU on a 4-slice A30
        ("NVIDIA-A30", "2g.12gb", 4, 2),  # 2 per GPU
        ("NVIDIA-A100-SXM4-40GB", "1g.5gb", 28, 4),  # fixture 10's demo shape: 7 per GPU
        # Issue 31 item 17: Hopper and Blackwell of the GPU Operator's default mig-parted config.
        ("NVIDIA-B200", "1g.23gb", 56, 8),  # 7 per GPU
        ("NVIDIA-B200", "1g.45gb", 32, 8),  # 4 per GPU
        ("NVIDIA-GB200", "2g.47gb", 12, 4),  # 3 per GPU
        ("NVIDIA-H200", "1g.18gb", 56, 8),
        ("NVIDIA-GH200-144G-HBM3e", "3g.72gb", 2, 1),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb", 16, 4),  # 4 per GPU: 4 memory slices
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb.gfx", 8, 2),  # the label spelling of +gfx
    ],
)
def test_single_strategy_examples(product, profile, devices, gpus):
    assert parse_node(single_strategy_node(product, profile, devices)).gpu_count == gpus


def test_uncatalogued_product_counts_devices_and_says_so():
    # RTX PRO 5000 Blackwell has MIG (MIG User Guide "Supported GPUs") but no entry in the GPU Operator's config.
    facts = parse_node(single_strategy_node("NVIDIA-RTX-PRO-5000-Blackwell", "1g.24gb", 14))
    assert (facts.gpu_count, facts.mig_count_known) == (14, False)


H100 = real_json("02")
OLD_ONLY = {k: v for k, v in H100.items() if "-version" not in k}
NEW_ONLY = {k: v for k, v in H100.items() if not k.startswith(("nvidia.com/cuda.driver.", "nvidia.com/cuda.runtime."))}
NEW_WITHOUT_FULL = {k: v for k, v in NEW_ONLY.items() if not k.endswith(".full")}


@pytest.mark.parametrize("labels", [H100, OLD_ONLY, NEW_ONLY, NEW_WITHOUT_FULL], ids=["both", "old", "new", "parts"])
def test_old_and_new_gfd_spellings(labels):
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "1"}))
    assert facts.driver_version == "550.54.15"
    assert facts.cuda_version == "12.4"
    assert facts.compute_capability == "9.0"
    assert facts.gpu_memory_mb == 81559


def test_old_gfd_spelling_sets_are_really_disjoint():
    assert not any("-version" in k for k in OLD_ONLY)
    assert not any(k.startswith("nvidia.com/cuda.driver.") for k in NEW_ONLY)


@pytest.mark.parametrize(
    ("labels", "provider_id", "provider"),
    [
        ({"cloud.google.com/gke-nodepool": "p"}, "", "gke"),
        ({"eks.amazonaws.com/nodegroup": "g"}, "", "eks"),
        ({"kubernetes.azure.com/agentpool": "a"}, "", "aks"),
        ({}, "aws:///us-east-1a/i-0abc", "eks"),
        ({}, "azure:///subscriptions/x", "aks"),
        ({}, "gce://p/z/n", "gke"),
        ({}, "", ""),
    ],
)
def test_provider_detection(labels, provider_id, provider):
    assert provider_of(labels, provider_id) == provider


def test_instance_tables_name_real_products_and_counts():
    for table in (EKS_INSTANCE_TYPES, AKS_INSTANCE_TYPES):
        for name, gpu in table.items():
            assert gpu.count >= 1 and is_label_value(gpu.product), name
    assert EKS_INSTANCE_TYPES["p5.48xlarge"].count == 8
    assert all(gpu.count == 0 for gpu in GKE_ACCELERATORS.values())  # GKE: the count is the node's capacity
    gpu, source = cloud_gpu("aks", {"node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5"})
    assert (gpu.product, gpu.count, source) == (
        "NVIDIA-H100-80GB-HBM3",
        8,
        "node.kubernetes.io/instance-type=Standard_ND96isr_H100_v5",
    )


def test_unknown_managed_instance_type_is_still_counted():
    node = node_from_labels(
        {"eks.amazonaws.com/nodegroup": "x", "node.kubernetes.io/instance-type": "z9.huge"}, {"nvidia.com/gpu": "2"}
    )
    facts = parse_node(node)
    assert (facts.provider, facts.product, facts.gpu_count, facts.product_source) == ("eks", "", 2, "")
    assert facts.gpus_advertised

"""vocab.names: the names are well formed, spelled once, and the helpers build what NVIDIA's components do."""

import subprocess
import sys
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vocab import names
from vocab.names import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    NFD_PREFIX,
    NVIDIA_PREFIX,
    SHARED_GPU_RESOURCE,
    gpu_deploy_label,
    is_label_value,
    is_mig_resource,
    is_nvidia,
    is_qualified_name,
    mig_label,
    mig_product,
    mig_profile_of_resource,
    mig_resource_name,
    nvidia,
    shared_product,
    shared_resource_name,
    sharing_strategy,
    time_sliced_resource_name,
    unshared_resource_name,
)

CONSTANTS = {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}
#: Label, annotation and taint keys and resource names.
KEYS = {
    k: v
    for k, v in CONSTANTS.items()
    if k.endswith(("_LABEL", "_ANNOTATION", "_KEY", "_RESOURCE")) and k != "MIG_PARTED_CONFIG_KEY"
}
#: Beginnings of keys, completed by a suffix.
PREFIXES = {k: v for k, v in CONSTANTS.items() if k.endswith("_PREFIX") and "/" in v}
#: Label values and taint values.
VALUES = {
    k: v for k, v in CONSTANTS.items() if k.startswith(("SHARING_", "MIG_STRATEGY_", "DEPLOY_")) and k not in KEYS
} | {
    k: CONSTANTS[k]
    for k in ("GPU_TAINT_VALUE", "MIG_CONFIG_PENDING", "MIG_CONFIG_REBOOTING", "MIG_CONFIG_SUCCESS")
    + ("MIG_CONFIG_FAILED", "GPU_OPERATOR_NAMESPACE", "TIME_SLICING_CONFIG_MAP", "MIG_INVALID_PROFILE")
    + ("DRIVER_UPGRADE_DONE", "DRIVER_UPGRADE_REQUIRED", "DRIVER_UPGRADE_FAILED", "DEPLOY_OPERANDS_SWITCH")
    + ("TRUE_VALUE", "FALSE_VALUE", "GKE_TIME_SHARING", "AKS_GPU_TAINT_VALUE")
    # nvidia.com/gpu.workload.config values, and the GPU DRA driver's name (a ResourceSlice's spec.driver).
    + ("WORKLOAD_CONTAINER", "WORKLOAD_VM_PASSTHROUGH", "WORKLOAD_VM_VGPU", "NVIDIA_GPU_DRA_DRIVER")
    # Node condition types (Kubernetes node status); valid label values too.
    + ("READY_CONDITION", "MEMORY_PRESSURE_CONDITION", "DISK_PRESSURE_CONDITION", "PID_PRESSURE_CONDITION")
    + ("NETWORK_UNAVAILABLE_CONDITION",)
}
#: What follows a resource name in a GFD MIG label.
ATTRIBUTES = {k: v for k, v in CONSTANTS.items() if k.startswith("MIG_ATTRIBUTE_")}

# A MIG profile as nvidia-smi / mig-parted name it: [<c>c.]<g>g.<gb>gb[+me|+me.all|+gfx|-me]
mig_profiles = st.builds(
    lambda c, g, gb, ext: (f"{c}c." if c else "") + f"{g}g.{gb}gb{ext}",
    st.sampled_from([None, 1, 2, 3, 4]),
    st.integers(1, 8),
    st.integers(1, 192),
    st.sampled_from(["", "+me", "+me.all", "+gfx"]),
)


def test_there_are_names():
    assert len(KEYS) > 45
    # every constant is classified by some test below
    others = {
        "SHARED_SUFFIX",
        "SHARED_PRODUCT_SUFFIX",
        "MIG_PRODUCT_INFIX",
        "MIG_PARTED_CONFIG_KEY",
        "MIG_PARTED_CONFIGS",
    }
    others |= {"NO_SCHEDULE", "NO_EXECUTE", "PREFER_NO_SCHEDULE", "HUGEPAGES_RESOURCE_PREFIX"}
    # Secret types and docker-config names (checked in tests/unit/jobs/test_secrets.py).
    others |= {"OPAQUE_SECRET_TYPE", "DOCKERCONFIGJSON_SECRET_TYPE", "DOCKERCONFIGJSON_ITEM", "DOCKER_HUB_AUTH_ENTRY"}
    others |= {"DOCKER_HUB_REGISTRY", "NGC_REGISTRY", "NGC_API_KEY_USERNAME"}
    assert set(CONSTANTS) == set(KEYS) | set(PREFIXES) | set(VALUES) | set(ATTRIBUTES) | others


@pytest.mark.parametrize("name", sorted(KEYS))
def test_every_key_is_a_kubernetes_qualified_name(name):
    assert is_qualified_name(KEYS[name]), KEYS[name]


@pytest.mark.parametrize("name", sorted(PREFIXES))
def test_every_prefix_makes_qualified_names(name):
    assert is_qualified_name(PREFIXES[name] + "x1"), PREFIXES[name]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_value_is_a_valid_label_value(name):
    assert is_label_value(VALUES[name]) and VALUES[name], VALUES[name]


@pytest.mark.parametrize("name", sorted(ATTRIBUTES))
def test_every_mig_attribute_makes_qualified_names(name):
    attribute = ATTRIBUTES[name] + ("copy" if name.endswith("_PREFIX") else "")
    assert is_qualified_name(mig_label("nvidia.com/mig-1g.10gb", attribute))


def test_product_fragments_make_label_values():
    assert is_label_value(shared_product(mig_product("NVIDIA-A100-SXM4-40GB", "1g.5gb"), 2, False))
    assert is_label_value("x" + names.SHARED_SUFFIX)


def test_config_map_key():
    assert names.MIG_PARTED_CONFIG_KEY == "config.yaml"


def test_mig_parted_configs_mapping():
    assert names.MIG_PARTED_CONFIGS == "mig-configs"


def test_hugepages_resources_are_qualified_names():
    for size in ("2Mi", "1Gi"):
        assert is_qualified_name(names.HUGEPAGES_RESOURCE_PREFIX + size)


def test_driver_upgrade_done():
    assert names.DRIVER_UPGRADE_DONE == "upgrade-done"


def test_taint_effects():
    assert (names.NO_SCHEDULE, names.NO_EXECUTE, names.PREFER_NO_SCHEDULE) == (
        "NoSchedule",
        "NoExecute",
        "PreferNoSchedule",
    )


def test_each_name_is_spelled_once():
    by_value = defaultdict(list)
    for key, value in CONSTANTS.items():
        by_value[value].append(key)
    shared = {value: sorted(keys) for value, keys in by_value.items() if len(keys) > 1}
    # Intended aliases: the GPU taint reuses the resource name; "none" is a value of two different labels;
    # the MIG attribute "memory" is spelled like the core resource.
    assert shared == {
        "nvidia.com/gpu": ["GPU_RESOURCE", "GPU_TAINT_KEY"],
        "none": ["MIG_STRATEGY_NONE", "SHARING_NONE"],
        "memory": ["MEMORY_RESOURCE", "MIG_ATTRIBUTE_MEMORY"],
    }


def test_nvidia_and_nfd_names_carry_their_prefix():
    for key, value in KEYS.items():
        if key.startswith(("GPU_", "MIG_", "MPS_", "GFD_", "CUDA_", "DEVICE_PLUGIN_")) and key != "GPU_TAINT_VALUE":
            assert value.startswith(NVIDIA_PREFIX), key
        if key.startswith("NFD_"):
            assert value.startswith(NFD_PREFIX), key


def test_names_module_has_no_django_and_no_io():
    code = (
        "import sys, vocab.names, vocab.quantity; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('django', 'requests', 'kubernetes', 'yaml')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- qualified-name check --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["cpu", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb.me", "a/b", "feature.node.kubernetes.io/system-os_release.ID"],
)
def test_qualified_names(name):
    assert is_qualified_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/gpu",
        "nvidia.com/",
        "Nvidia.com/gpu",  # prefix must be lower-case
        "nvidia.com/mig-1g.10gb+me",  # '+' is not allowed: why the device plugin writes '.'
        "nvidia.com/-gpu",
        "nvidia.com/gpu-",
        "a/b/c",
        "nvidia..com/gpu",
        "x" * 64,
        "a" * 254 + "/b",
        "nvidia.com/gpu shared",
    ],
)
def test_not_qualified_names(name):
    assert not is_qualified_name(name)


def test_label_values():
    assert is_label_value("") and is_label_value("NVIDIA-A100-SXM4-80GB") and is_label_value("1g.10gb")
    assert not is_label_value("1g.10gb+me") and not is_label_value("x" * 64) and not is_label_value("-a")


# -- helpers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("3g.40gb", "nvidia.com/mig-3g.40gb"),
        ("7g.80gb", "nvidia.com/mig-7g.80gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
        ("1g.20gb+me.all", "nvidia.com/mig-1g.20gb.me.all"),
        ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"),
        ("1c.3g.40gb", "nvidia.com/mig-1c.3g.40gb"),
    ],
)
def test_mig_resource_name(profile, resource):
    assert mig_resource_name(profile) == resource
    assert mig_profile_of_resource(resource) == profile
    assert is_mig_resource(resource) and is_nvidia(resource)


@given(mig_profiles)
def test_mig_resource_names_round_trip_and_are_qualified(profile):
    resource = mig_resource_name(profile)
    assert resource.startswith(MIG_RESOURCE_PREFIX)
    assert is_qualified_name(resource)
    assert mig_profile_of_resource(resource) == profile
    assert is_qualified_name(mig_label(resource, "count"))
    assert is_qualified_name(shared_resource_name(resource))


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig-", "mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_mig_profile_of_resource_refuses_other_resources(resource):
    with pytest.raises(ValueError, match="not a MIG resource"):
        mig_profile_of_resource(resource)


def test_shared_names():
    assert shared_resource_name(GPU_RESOURCE) == SHARED_GPU_RESOURCE == "nvidia.com/gpu.shared"
    assert shared_resource_name("nvidia.com/mig-1g.10gb") == "nvidia.com/mig-1g.10gb.shared"
    assert unshared_resource_name(SHARED_GPU_RESOURCE) == GPU_RESOURCE
    assert unshared_resource_name(GPU_RESOURCE) == GPU_RESOURCE


@pytest.mark.parametrize(
    ("replicas", "rename", "resource", "product", "strategy"),
    [
        (1, False, "nvidia.com/gpu", "NVIDIA-A10", "none"),
        (1, True, "nvidia.com/gpu", "NVIDIA-A10", "none"),
        (4, False, "nvidia.com/gpu", "NVIDIA-A10-SHARED", "time-slicing"),
        (4, True, "nvidia.com/gpu.shared", "NVIDIA-A10", "time-slicing"),
    ],
)
def test_time_slicing_names(replicas, rename, resource, product, strategy):
    assert time_sliced_resource_name(GPU_RESOURCE, replicas, rename) == resource
    assert shared_product("NVIDIA-A10", replicas, rename) == product
    assert sharing_strategy(replicas) == strategy


def test_label_builders():
    assert nvidia("gpu.product") == names.GPU_PRODUCT_LABEL
    assert mig_label("nvidia.com/mig-1g.10gb", names.MIG_ATTRIBUTE_COUNT) == "nvidia.com/mig-1g.10gb.count"
    assert mig_label(GPU_RESOURCE, names.MIG_ATTRIBUTE_GI_SLICES) == "nvidia.com/gpu.slices.gi"
    assert mig_label(GPU_RESOURCE, names.MIG_ATTRIBUTE_ENGINES_PREFIX + "copy") == "nvidia.com/gpu.engines.copy"
    assert gpu_deploy_label("device-plugin") == "nvidia.com/gpu.deploy.device-plugin"
    assert mig_product("NVIDIA-A100-SXM4-40GB", "1g.5gb") == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert mig_product("NVIDIA-A100-SXM4-40GB", names.MIG_INVALID_PROFILE) == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert not is_nvidia("kubernetes.io/hostname") and is_nvidia(names.MIG_CONFIG_LABEL)


@given(st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True))
def test_deploy_labels_are_qualified(operand):
    assert is_qualified_name(gpu_deploy_label(operand))


def test_standard_resources():
    assert {"cpu", "memory", "ephemeral-storage", "pods"} == names.STANDARD_RESOURCES

"""vocab.dra: the device and counter names NVIDIA's DRA driver announces (kubernetes-sigs/dra-driver-nvidia-gpu
v0.4.1, cmd/gpu-kubelet-plugin/{deviceinfo,mig,partitions}.go)."""

import pytest

from vocab.dra import (
    EXCLUSIVE_GATES,
    channel_device_name,
    counter_name,
    counter_set_name,
    gpu_device_name,
    memory_slice_counter,
    mig_device_name,
)


def test_gpu_and_channel_names():
    assert gpu_device_name(3) == "gpu-3"
    assert channel_device_name(0) == "channel-0"
    assert counter_set_name(3) == "gpu-3-counter-set"
    assert memory_slice_counter(7) == "memory-slice-7"


@pytest.mark.parametrize(
    ("profile", "profile_id", "start", "name"),
    [
        ("1g.10gb", 19, 6, "gpu-0-mig-1g10gb-19-6"),
        ("1g.10gb+me", 20, 0, "gpu-0-mig-1g10gb-me-20-0"),
        ("7g.80gb", 0, 0, "gpu-0-mig-7g80gb-0-0"),
    ],
)
def test_mig_device_names_drop_dots_and_make_the_rest_a_dns_label(profile, profile_id, start, name):
    assert mig_device_name(0, profile, profile_id, start) == name


@pytest.mark.parametrize(
    ("capacity", "counter"),
    [("multiprocessors", "multiprocessors"), ("copyEngines", "copy-engines"), ("ofaEngines", "ofa-engines")],
)
def test_counter_names_are_capacities_in_dns_form(capacity, counter):
    assert counter_name(capacity) == counter


def test_dynamic_mig_excludes_mps():
    assert ("DynamicMIG", "MPSSupport") in EXCLUSIVE_GATES

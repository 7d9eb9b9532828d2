"""The simulated NVIDIA DRA driver: the DeviceClasses and ResourceSlices it publishes, checked against Kubernetes
1.37's schemas, and the API that serves them only where a real cluster would."""

import pytest

from cluster.base import Invalid, NotFound
from cluster.sim import SimulatedCluster
from tests.dra_objects import DRA_SMALL
from tests.k8s_schema import assert_valid, schema_problems


@pytest.fixture
def cluster(clock):
    return SimulatedCluster(scenario=DRA_SMALL, clock=clock)


def _devices(cluster, node, driver="gpu.nvidia.com"):
    slices = cluster.list_resource_slices(node_name=node, driver=driver)
    return {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}


def test_every_published_slice_and_class_is_valid_against_kubernetes_1_37(cluster, clock):
    slices = cluster.list_resource_slices()
    classes = cluster.list_device_classes()
    assert_valid(*slices, *classes)
    demo = SimulatedCluster(scenario="dra", clock=clock)
    assert_valid(*demo.list_resource_slices(), *demo.list_device_classes())
    assert {s["spec"]["nodeName"] for s in demo.list_resource_slices()} == {
        "dra-h100-01",
        "dra-h100-02",
        "dra-a100-01",
        "dra-l4-01",
    }


def test_the_schema_check_refuses_an_unknown_field():
    # The harness itself must be able to fail: a misspelt field of a published device is caught.
    bad = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "x"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "capacities": {}}],
        },
    }
    assert schema_problems(bad) == [
        "ResourceSlice/x: spec.devices.0: Additional properties are not allowed ('capacities' was unexpected)"
    ]


def test_the_driver_installs_the_chart_device_classes(cluster):
    classes = {c["metadata"]["name"]: c["spec"] for c in cluster.list_device_classes()}
    assert set(classes) == {
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
        "compute-domain-daemon.nvidia.com",
    }
    assert classes["gpu.nvidia.com"]["selectors"] == [
        {
            "cel": {
                "expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
            }
        }
    ]
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"


def test_whole_gpus_carry_the_driver_attributes_and_memory(cluster):
    devices = _devices(cluster, "dra-h100")
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    gpu = devices["gpu-0"]
    assert gpu["attributes"]["type"] == {"string": "gpu"}
    assert gpu["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu["attributes"]["architecture"] == {"string": "Hopper"}
    assert gpu["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu["attributes"]["uuid"]["string"].startswith("GPU-")
    assert gpu["capacity"]["memory"] == {"value": str(81559 * 2**20)}
    assert devices["gpu-0"]["attributes"]["uuid"] != devices["gpu-1"]["attributes"]["uuid"]
    # The ComputeDomain plugin's slice: the default IMEX channel and the daemon device.
    assert sorted(_devices(cluster, "dra-h100", "compute-domain.nvidia.com")) == ["channel-0", "daemon-0"]


def test_a_dra_node_advertises_no_device_plugin_gpus(cluster):
    node = cluster.get_node("dra-h100")
    assert not [r for r in node["status"]["allocatable"] if r.startswith("nvidia.com/")]


def test_dynamic_mig_advertises_every_placement_with_a_counter_set_per_gpu(cluster):
    slices = cluster.list_resource_slices(node_name="dra-a100", driver="gpu.nvidia.com")
    counters = [s for s in slices if s["spec"].get("sharedCounters")]
    assert len(counters) == 1 and all(s["spec"]["pool"]["resourceSliceCount"] == len(slices) for s in slices)
    counter_set = counters[0]["spec"]["sharedCounters"][0]
    assert counter_set["name"] == "gpu-0-counter-set"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(counter_set["counters"])
    devices = _devices(cluster, "dra-a100")
    # A100 40GB: 7 + 7 (+me) 1g.5gb, 4 1g.10gb, 3 2g.10gb, 2 3g.20gb, 1 4g.20gb, 1 7g.40gb, and the whole GPU.
    assert len(devices) == 26
    seven = devices["gpu-0-mig-7g40gb-0-0"]
    assert seven["attributes"]["profile"] == {"string": "7g.40gb"}
    assert seven["attributes"]["parentUUID"] == devices["gpu-0"]["attributes"]["uuid"]
    consumed = seven["consumesCounters"][0]
    assert consumed["counterSet"] == "gpu-0-counter-set"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(consumed["counters"])
    one = devices["gpu-0-mig-1g5gb-19-6"]
    assert {k for k in one["consumesCounters"][0]["counters"] if k.startswith("memory-slice")} == {"memory-slice-6"}


def test_static_mig_announces_the_layout_with_parent_and_profile(clock):
    scenario = {
        "server_version": "v1.34.1",
        "nodes": [
            {
                "name": "mig",
                "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1},
                "mig": {"strategy": "mixed", "layout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}},
                "dra": {
                    "mig": "static",
                    "taints": [
                        {
                            "device": "gpu-0-mig-1g5gb-19-1",
                            "key": "example.com/xid",
                            "value": "79",
                            "effect": "NoSchedule",
                        }
                    ],
                },
            },
        ],
    }
    cluster = SimulatedCluster(scenario=scenario, clock=clock)
    slices = cluster.list_resource_slices()
    assert_valid(*slices)
    devices = _devices(cluster, "mig")
    assert sorted(devices) == ["gpu-0-mig-1g5gb-19-1", "gpu-0-mig-2g10gb-14-2", "gpu-0-mig-3g20gb-9-4"]
    three = devices["gpu-0-mig-3g20gb-9-4"]
    assert three["attributes"]["type"] == {"string": "mig"}
    assert three["attributes"]["uuid"]["string"].startswith("MIG-")
    assert [k for k in three["capacity"] if k.startswith("memorySlice")] == [f"memorySlice{i}" for i in range(4, 8)]
    assert devices["gpu-0-mig-1g5gb-19-1"]["taints"] == [
        {"key": "example.com/xid", "value": "79", "effect": "NoSchedule"}
    ]


def test_removing_a_node_withdraws_its_slices(cluster):
    cluster.remove_node("dra-l4")
    assert cluster.list_resource_slices(node_name="dra-l4") == []
    assert cluster.list_resource_slices(node_name="dra-h100")


def test_a_server_before_1_34_does_not_serve_resource_k8s_io(clock):
    cluster = SimulatedCluster(scenario={**DRA_SMALL, "server_version": "v1.33.5"}, clock=clock)
    with pytest.raises(NotFound, match='no matches for kind "DeviceClass" in version "resource.k8s.io/v1"'):
        cluster.get_device_class("gpu.nvidia.com")
    # The ClusterBackend contract: lists answer empty, and resource_api_versions says the API is not served.
    assert cluster.list_resource_slices() == []
    assert cluster.list_device_classes() == []
    assert cluster.list_resource_claims() == []
    assert "resource.k8s.io" not in cluster.api_groups()
    assert cluster.resource_api_versions() == []


def test_the_scenario_refuses_gates_the_driver_refuses_together(clock):
    node = {
        "name": "n",
        "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1},
        "mig": {"strategy": "mixed"},
        "dra": {"mig": "dynamic", "feature_gates": ["MPSSupport"]},
    }
    with pytest.raises(Invalid, match="refuses feature gates DynamicMIG and MPSSupport together"):
        SimulatedCluster(scenario={"server_version": "v1.34.1", "nodes": [node]}, clock=clock)

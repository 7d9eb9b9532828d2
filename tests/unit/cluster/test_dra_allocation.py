"""The simulated scheduler allocates ResourceClaims the way kube-scheduler's DynamicResources plugin does: claims
from templates per pod, CEL selectors, counts, prioritized alternatives, shared counters of partitionable devices,
device taints, and release when the pods end. Every object involved is checked against Kubernetes 1.37's schemas."""

import pytest

from cluster.base import Invalid
from cluster.sim import SimulatedCluster
from tests.dra_objects import (
    DRA_SMALL,
    claim_spec,
    claim_template,
    dra_job,
    exactly,
    resource_claim,
    time_slicing,
)
from tests.k8s_schema import assert_valid
from tests.sim_objects import pod_of, scheduled_condition

MORE_THAN_40GI = "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))"


@pytest.fixture
def cluster(clock):
    return SimulatedCluster(scenario=DRA_SMALL, clock=clock)


def _claim_of(cluster, pod):
    (status,) = pod["status"]["resourceClaimStatuses"]
    return cluster.get_resource_claim("team-a", status["resourceClaimName"])


def _devices(claim):
    return [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]


def test_a_memory_selector_gets_only_h100s_and_a_third_pod_waits_with_the_scheduler_message(cluster):
    cluster.apply_resource_claim_template(
        claim_template("big", claim_spec(("gpu", exactly("gpu.nvidia.com", None, MORE_THAN_40GI))))
    )
    for name in ("a", "b", "c"):
        cluster.create_workload(dra_job(name, {"gpu": "big"}))
    allocated = sorted(_devices(_claim_of(cluster, pod_of(cluster, name)))[0] for name in ("a", "b"))
    assert allocated == [("dra-h100", "gpu-0"), ("dra-h100", "gpu-1")]
    waiting = pod_of(cluster, "c")
    assert waiting["spec"].get("nodeName") is None
    message = "0/3 nodes are available: 3 cannot allocate all claims."
    assert scheduled_condition(waiting)["message"] == message
    events = cluster.pod_events("team-a", waiting["metadata"]["name"])
    assert [(e["reason"], e["message"]) for e in events] == [("FailedScheduling", message)]
    assert _claim_of(cluster, waiting)["status"] == {}
    claim = _claim_of(cluster, pod_of(cluster, "a"))
    assert claim["status"]["reservedFor"] == [
        {
            "resource": "pods",
            "name": pod_of(cluster, "a")["metadata"]["name"],
            "uid": pod_of(cluster, "a")["metadata"]["uid"],
        }
    ]
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert_valid(
        cluster.get_resource_claim_template("team-a", "big"), claim, pod_of(cluster, "a"), pod_of(cluster, "c")
    )
    assert_valid(dra_job("a", {"gpu": "big"}))


def test_count_two_gets_two_distinct_devices_of_one_node(cluster):
    cluster.apply_resource_claim_template(claim_template("pair", claim_spec(("gpus", exactly("gpu.nvidia.com", 2)))))
    cluster.create_workload(dra_job("pair", {"gpu": "pair"}))
    devices = _devices(_claim_of(cluster, pod_of(cluster, "pair")))
    assert len(devices) == 2 and len(set(devices)) == 2 and len({pool for pool, _ in devices}) == 1


def test_all_mode_takes_every_matching_device_of_the_node(cluster):
    product = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'"
    spec = claim_spec(("gpus", exactly("gpu.nvidia.com", None, product, allocationMode="All")))
    cluster.apply_resource_claim_template(claim_template("every-l4", spec))
    cluster.create_workload(dra_job("all", {"gpu": "every-l4"}))
    assert _devices(_claim_of(cluster, pod_of(cluster, "all"))) == [("dra-l4", "gpu-0"), ("dra-l4", "gpu-1")]


def test_release_on_pod_end_hands_the_device_to_the_waiting_pod(cluster, clock):
    spec = claim_spec(("gpu", exactly("gpu.nvidia.com", 2, MORE_THAN_40GI)))
    cluster.apply_resource_claim_template(claim_template("both-h100", spec))
    cluster.create_workload(dra_job("first", {"gpu": "both-h100"}, seconds=60))
    cluster.create_workload(dra_job("second", {"gpu": "both-h100"}))
    assert pod_of(cluster, "second")["spec"].get("nodeName") is None
    clock.advance(90)
    first = pod_of(cluster, "first")
    assert first["status"]["phase"] == "Succeeded"
    assert _claim_of(cluster, first)["status"] == {}  # deallocated: nobody holds it
    second = pod_of(cluster, "second")
    assert second["spec"]["nodeName"] == "dra-h100"
    assert sorted(_devices(_claim_of(cluster, second))) == [("dra-h100", "gpu-0"), ("dra-h100", "gpu-1")]
    # Deleting the Job deletes its pods, and the claims made for them go with them.
    name = _claim_of(cluster, second)["metadata"]["name"]
    cluster.delete_workload("team-a", "second")
    assert name not in [c["metadata"]["name"] for c in cluster.list_resource_claims("team-a")]


def test_first_available_falls_back_to_the_second_alternative(cluster):
    four_h100 = exactly("gpu.nvidia.com", 4, MORE_THAN_40GI)
    four_h100["name"] = "h100"
    one_l4 = exactly("gpu.nvidia.com", 1, "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L4'")
    one_l4["name"] = "l4"
    spec = claim_spec(first_available={"gpu": [four_h100, one_l4]})
    cluster.apply_resource_claim_template(claim_template("h100-else-l4", spec))
    cluster.create_workload(dra_job("fallback", {"gpu": "h100-else-l4"}))
    claim = _claim_of(cluster, pod_of(cluster, "fallback"))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["request"], result["pool"]) == ("gpu/l4", "dra-l4")
    assert_valid(cluster.get_resource_claim_template("team-a", "h100-else-l4"), claim)


def test_first_available_takes_the_first_alternative_when_it_fits(cluster):
    one_h100 = exactly("gpu.nvidia.com", 1, MORE_THAN_40GI)
    one_h100["name"] = "h100"
    any_gpu = exactly("gpu.nvidia.com")
    any_gpu["name"] = "any"
    cluster.apply_resource_claim_template(
        claim_template("prefer", claim_spec(first_available={"gpu": [one_h100, any_gpu]}))
    )
    cluster.create_workload(dra_job("prefer", {"gpu": "prefer"}))
    (result,) = _claim_of(cluster, pod_of(cluster, "prefer"))["status"]["allocation"]["devices"]["results"]
    assert (result["request"], result["pool"]) == ("gpu/h100", "dra-h100")


def test_dynamic_mig_a_7g_partition_leaves_no_room_for_a_1g_on_the_same_gpu(cluster, clock):
    def profile(name):
        return exactly("mig.nvidia.com", None, f"device.attributes['gpu.nvidia.com'].profile == '{name}'")

    cluster.apply_resource_claim_template(claim_template("seven", claim_spec(("mig", profile("7g.40gb")))))
    cluster.apply_resource_claim_template(claim_template("one", claim_spec(("mig", profile("1g.5gb")))))
    cluster.apply_resource_claim_template(
        claim_template(
            "whole-a100",
            claim_spec(
                (
                    "gpu",
                    exactly(
                        "gpu.nvidia.com",
                        None,
                        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'",
                    ),
                )
            ),
        )
    )
    cluster.create_workload(dra_job("big-slice", {"mig": "seven"}, seconds=60))
    assert _devices(_claim_of(cluster, pod_of(cluster, "big-slice"))) == [("dra-a100", "gpu-0-mig-7g40gb-0-0")]
    cluster.create_workload(dra_job("small-slice", {"mig": "one"}))
    cluster.create_workload(dra_job("whole", {"gpu": "whole-a100"}))
    for name in ("small-slice", "whole"):
        assert scheduled_condition(pod_of(cluster, name))["message"] == (
            "0/3 nodes are available: 3 cannot allocate all claims."
        )
    clock.advance(90)  # the 7g pod ends: its counters are free again; the 1g goes first (created first)
    assert _devices(_claim_of(cluster, pod_of(cluster, "small-slice")))[0][0] == "dra-a100"
    # With one memory slice taken the whole GPU still cannot be had.
    assert pod_of(cluster, "whole")["spec"].get("nodeName") is None


def test_dynamic_mig_packs_partitions_until_the_counters_run_out(cluster):
    spec = claim_spec(("mig", exactly("mig.nvidia.com", 3, "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'")))
    cluster.apply_resource_claim_template(claim_template("three-2g", spec))
    cluster.create_workload(dra_job("three", {"mig": "three-2g"}))
    devices = _devices(_claim_of(cluster, pod_of(cluster, "three")))
    assert sorted(d for _, d in devices) == ["gpu-0-mig-2g10gb-14-0", "gpu-0-mig-2g10gb-14-2", "gpu-0-mig-2g10gb-14-4"]
    cluster.create_workload(dra_job("fourth", {"mig": "three-2g"}))
    assert pod_of(cluster, "fourth")["spec"].get("nodeName") is None


def test_a_claims_gpu_config_is_carried_into_the_allocation(cluster):
    spec = claim_spec(("gpu", exactly("gpu.nvidia.com", None, MORE_THAN_40GI)), config=[time_slicing("Long")])
    cluster.apply_resource_claim_template(claim_template("shared", spec))
    cluster.create_workload(dra_job("shared", {"gpu": "shared"}))
    claim = _claim_of(cluster, pod_of(cluster, "shared"))
    (config,) = claim["status"]["allocation"]["devices"]["config"]
    assert config["source"] == "FromClaim"
    assert config["opaque"]["parameters"]["sharing"] == {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"interval": "Long"},
    }
    assert_valid(claim)


def test_a_tainted_device_is_skipped_unless_the_request_tolerates_it(clock):
    scenario = {
        **DRA_SMALL,
        "nodes": [
            {
                "name": "one",
                "gpu": {"product": "NVIDIA L4", "count": 1},
                "dra": {
                    "taints": [{"device": "gpu-0", "key": "example.com/xid", "value": "79", "effect": "NoSchedule"}]
                },
            }
        ],
    }
    cluster = SimulatedCluster(scenario=scenario, clock=clock)
    cluster.apply_resource_claim_template(claim_template("plain", claim_spec(("gpu", exactly()))))
    tolerant = exactly(tolerations=[{"key": "example.com/xid", "operator": "Exists", "effect": "NoSchedule"}])
    cluster.apply_resource_claim_template(claim_template("tolerant", claim_spec(("gpu", tolerant))))
    cluster.create_workload(dra_job("plain", {"gpu": "plain"}))
    assert scheduled_condition(pod_of(cluster, "plain"))["message"] == (
        "0/1 nodes are available: 1 cannot allocate all claims."
    )
    cluster.create_workload(dra_job("tolerant", {"gpu": "tolerant"}))
    assert _devices(_claim_of(cluster, pod_of(cluster, "tolerant"))) == [("one", "gpu-0")]
    assert_valid(cluster.get_resource_claim_template("team-a", "tolerant"))


def test_a_shared_claim_by_name_is_allocated_once_and_reserved_for_each_pod(cluster):
    cluster.apply_resource_claim(
        resource_claim("shared-gpu", claim_spec(("gpu", exactly("gpu.nvidia.com", None, MORE_THAN_40GI))))
    )
    cluster.create_workload(dra_job("one", {}, claims={"gpu": "shared-gpu"}))
    cluster.create_workload(dra_job("two", {}, claims={"gpu": "shared-gpu"}))
    claim = cluster.get_resource_claim("team-a", "shared-gpu")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
    assert len(claim["status"]["reservedFor"]) == 2
    assert pod_of(cluster, "one")["spec"]["nodeName"] == pod_of(cluster, "two")["spec"]["nodeName"] == "dra-h100"
    assert_valid(claim)


def test_a_pod_whose_template_does_not_exist_waits_and_says_which(cluster):
    cluster.create_workload(dra_job("orphan", {"gpu": "missing"}))
    assert scheduled_condition(pod_of(cluster, "orphan"))["message"] == (
        '0/3 nodes are available: resourceclaimtemplate "missing" not found.'
    )
    cluster.apply_resource_claim_template(claim_template("missing", claim_spec(("gpu", exactly()))))
    assert pod_of(cluster, "orphan")["spec"].get("nodeName")


def test_a_selector_that_fails_at_run_time_keeps_the_pod_pending_with_the_reason(cluster):
    spec = claim_spec(("gpu", exactly("gpu.nvidia.com", None, "device.attributes['gpu.nvidia.com'].profile == 'x'")))
    cluster.apply_resource_claim_template(claim_template("broken", spec))
    cluster.create_workload(dra_job("broken", {"gpu": "broken"}))
    message = scheduled_condition(pod_of(cluster, "broken"))["message"]
    assert message.startswith("0/3 nodes are available: claim team-a/broken-")
    assert "request gpu: CEL runtime error: no such member in mapping: 'profile'" in message


def test_claims_that_do_not_validate_are_refused_with_every_problem(cluster):
    bad = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 0,
                        "selectors": [{"cel": {"expression": "device.driver =="}}],
                    },
                },
                {"name": "gpu", "exactly": {"deviceClassName": "", "allocationMode": "Some"}},
            ],
            "config": [{"requests": ["nope"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {}}}],
        }
    }
    with pytest.raises(Invalid) as refused:
        cluster.apply_resource_claim_template(claim_template("bad", bad))
    text = str(refused.value)
    for part in (
        "spec.spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero",
        "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value",
        "compilation failed",
        'spec.spec.devices.requests[1].name: Duplicate value: "gpu"',
        "spec.spec.devices.requests[1].exactly.deviceClassName: Required value",
        'spec.spec.devices.requests[1].exactly.allocationMode: Unsupported value: "Some"',
        'spec.spec.devices.config[0].requests: Invalid value: "nope"',
    ):
        assert part in text
    assert cluster.list_resource_claim_templates("team-a") == []


def test_a_job_whose_container_names_an_unknown_claim_is_refused(cluster):
    job = dra_job("typo", {"gpu": "big"})
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    with pytest.raises(Invalid, match=r'containers\[0\].resources.claims\[0\].name: Not found: "gpus"'):
        cluster.create_workload(job)


def test_a_request_for_a_class_that_does_not_exist_waits_and_says_which(cluster):
    assert cluster.delete_device_class("mig.nvidia.com")
    cluster.apply_resource_claim_template(claim_template("mig", claim_spec(("mig", exactly("mig.nvidia.com")))))
    cluster.create_workload(dra_job("no-class", {"mig": "mig"}))
    message = scheduled_condition(pod_of(cluster, "no-class"))["message"]
    assert message.startswith("0/3 nodes are available: claim team-a/no-class-")
    assert message.endswith(': request mig: device class "mig.nvidia.com" does not exist.')


def test_the_kubelet_prepares_the_allocated_gpus_and_the_exporter_reports_the_pod_on_them(cluster, clock):
    cluster.apply_resource_claim_template(
        claim_template("pair", claim_spec(("gpus", exactly("gpu.nvidia.com", 2, MORE_THAN_40GI))))
    )
    cluster.create_workload(dra_job("watched", {"gpu": "pair"}))
    clock.advance(30)
    pod = pod_of(cluster, "watched")
    assert pod["status"]["phase"] == "Running"
    text = cluster.dcgm_metrics()["dra-h100"]
    held = {
        line.split('gpu="')[1].split('"')[0] for line in text.splitlines() if f'pod="{pod["metadata"]["name"]}"' in line
    }
    assert held == {"0", "1"}


def test_each_replica_of_a_deployment_gets_its_own_claim_and_they_go_with_the_deployment(cluster):
    cluster.apply_resource_claim_template(
        claim_template("shared", claim_spec(("gpu", exactly()), config=[time_slicing()]))
    )
    template = dra_job("unused", {"gpu": "shared"})["spec"]["template"]
    template["spec"]["restartPolicy"] = "Always"
    template["metadata"]["labels"]["app"] = "chat"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": "team-a", "labels": dict(template["metadata"]["labels"])},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}}, "template": template},
    }
    assert_valid(deployment)
    cluster.apply_deployment(deployment)
    pods = cluster.list_pods("team-a", label_selector="app=chat")
    names = {p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] for p in pods}
    assert len(pods) == 2 and len(names) == 2 and all(p["spec"].get("nodeName") for p in pods)
    cluster.delete_deployment("team-a", "chat")
    assert cluster.list_resource_claims("team-a") == []

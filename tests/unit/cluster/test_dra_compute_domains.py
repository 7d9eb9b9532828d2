"""The simulated ComputeDomain controller: a domain gets its channel ResourceClaimTemplate, the pods that use it
get the node's IMEX channel, the domain's status follows them, and the template goes with the domain."""

import pytest

from cluster.base import Invalid, NotFound
from cluster.sim import SimulatedCluster
from tests.dra_objects import DRA_SMALL, compute_domain, dra_job
from tests.k8s_schema import assert_valid, schema_problems
from tests.sim_objects import pod_of


@pytest.fixture
def cluster(clock):
    return SimulatedCluster(scenario=DRA_SMALL, clock=clock)


def test_a_compute_domain_gets_its_channel_template(cluster):
    domain = cluster.apply_compute_domain(compute_domain("nvl", "nvl-channel"))
    assert domain["spec"]["channel"]["allocationMode"] == "Single"  # the CRD's default
    template = cluster.get_resource_claim_template("team-a", "nvl-channel")
    assert template["metadata"]["labels"] == {
        "resource.nvidia.com/computeDomain": domain["metadata"]["uid"],
        "resource.nvidia.com/computeDomainTarget": "Workload",
    }
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request == {"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}
    (config,) = template["spec"]["spec"]["devices"]["config"]
    assert config["opaque"] == {
        "driver": "compute-domain.nvidia.com",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig",
            "domainID": domain["metadata"]["uid"],
            "allocationMode": "Single",
        },
    }
    assert_valid(template, cluster.get_compute_domain("team-a", "nvl"))


def test_a_pod_with_the_channel_claim_gets_the_channel_and_the_domain_turns_ready(cluster):
    cluster.apply_compute_domain(compute_domain("nvl", "nvl-channel", nodes=1))
    assert cluster.get_compute_domain("team-a", "nvl")["status"] == {"status": "NotReady"}
    cluster.create_workload(dra_job("rank-0", {"channel": "nvl-channel"}))
    pod = pod_of(cluster, "rank-0")
    assert pod["spec"]["nodeName"] == "dra-h100"  # the only node running the ComputeDomain plugin
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim = cluster.get_resource_claim("team-a", status["resourceClaimName"])
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["device"]) == ("compute-domain.nvidia.com", "channel-0")
    domain = cluster.get_compute_domain("team-a", "nvl")
    assert domain["status"]["status"] == "Ready"
    assert [(n["name"], n["cliqueID"], n["status"]) for n in domain["status"]["nodes"]] == [
        ("dra-h100", "c0ffee00-0000-4000-8000-000000000001.1", "Ready")
    ]
    assert_valid(domain, claim, pod)


def test_deleting_the_domain_deletes_its_template(cluster):
    cluster.apply_compute_domain(compute_domain("nvl", "nvl-channel"))
    assert cluster.delete_compute_domain("team-a", "nvl")
    with pytest.raises(NotFound):
        cluster.get_resource_claim_template("team-a", "nvl-channel")


def test_a_domain_without_a_channel_template_name_is_refused(cluster):
    bad = compute_domain("nvl", "")
    with pytest.raises(Invalid, match="spec.channel.resourceClaimTemplate.name: Required value"):
        cluster.apply_compute_domain(bad)
    assert schema_problems({**bad, "spec": {"numNodes": -1}}) == [
        "ComputeDomain/nvl: spec: 'channel' is a required property",
        "ComputeDomain/nvl: spec.numNodes: -1 is less than the minimum of 0",
    ]


def test_compute_domains_are_served_only_where_the_driver_is_installed(clock):
    cluster = SimulatedCluster(
        scenario={"server_version": "v1.34.1", "namespaces": ["team-a"], "nodes": []}, clock=clock
    )
    with pytest.raises(NotFound, match='no matches for kind "ComputeDomain"'):
        cluster.apply_compute_domain(compute_domain("nvl", "nvl-channel"))

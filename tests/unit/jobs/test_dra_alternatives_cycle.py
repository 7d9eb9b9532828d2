"""A DRA class's alternatives end to end on a simulated DRA cluster (issue 33, item 3): an admin lists them (every
problem refused at once, audited); the prioritized list renders as ``firstAvailable`` valid against Kubernetes 1.37's
schema and the simulated scheduler allocates it as kube-scheduler does; through the job cycle a job whose own class
has no room runs on its second choice, its pod asking exactly that class, that class's quota charged and said so; and
a requeued job tries its first choice again."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.models import AuditEvent
from gpus import fleet
from gpus.class_admin import alternative_keys, update_class
from gpus.models import Cluster, ResourceClass
from jobs import actions, kinds, lifecycle
from jobs.choices import EventKind, JobState, WaitReason
from jobs.cycle.run import run_cycle
from jobs.dra_claims import render_claim_template
from jobs.models import Job, JobEvent
from tests.dra_objects import DRA_SMALL, dra_job
from tests.factories import JOB_REQUEST
from tests.k8s_schema import assert_valid
from tests.sim_objects import pod_of

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
A100_WHOLE = "dra:gpu.nvidia.com@NVIDIA-A100-SXM4-40GB"
A100_3G = "dra:mig.nvidia.com/3g.20gb@NVIDIA-A100-SXM4-40GB"
A100_4G = "dra:mig.nvidia.com/4g.20gb@NVIDIA-A100-SXM4-40GB"
A100_1G = "dra:mig.nvidia.com/1g.5gb@NVIDIA-A100-SXM4-40GB"

#: Two H100s and one A100 with dynamic MIG, through NVIDIA's DRA driver.
LAB = {
    **DRA_SMALL,
    "namespaces": ["team-vision", "team-nlp"],
    "nodes": [
        {"name": "lab-h100", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 2}, "dra": {}},
        {"name": "lab-a100", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1}, "mig": {"strategy": "mixed"},
         "dra": {"mig": "dynamic"}},
    ],
}  # fmt: skip

pytestmark = pytest.mark.cluster(scenario=LAB, quotas=None)


def rc(key: str) -> ResourceClass:
    return ResourceClass.objects.get(key=key)


@pytest.fixture
def quotas(cluster, people):
    for key in (H100, A100_3G, A100_4G, A100_WHOLE):
        actions.set_quota(people["admin"], people["vision"], rc(key), 4, 4)


def test_an_admin_lists_alternatives_in_order_audited(cluster, people):
    four = update_class(people["admin"], rc(A100_4G), alternatives=[A100_3G, A100_1G])
    assert alternative_keys(four) == [A100_3G, A100_1G]
    assert four.alternatives == [rc(A100_3G).pk, rc(A100_1G).pk]
    event = AuditEvent.objects.filter(object_repr=A100_4G).latest("pk")
    assert event.before == {"alias": "", "description": "", "hidden": False, "alternatives": []}
    assert event.after["alternatives"] == [A100_3G, A100_1G]
    # Nobody else may.
    with pytest.raises(Exception, match="Only admins"):
        update_class(people["alice"], rc(A100_4G), alternatives=[])


def test_every_problem_with_the_alternatives_is_refused_at_once(cluster, people):
    update_class(people["admin"], rc(A100_3G), alternatives=[A100_4G])
    device_plugin = ResourceClass.objects.create(
        key="nvidia.com/gpu@NVIDIA-L4", kind="gpu", resource_name="nvidia.com/gpu", product="NVIDIA L4",
        product_label="NVIDIA-L4",
    )  # fmt: skip
    keys = [A100_4G, A100_WHOLE, A100_WHOLE, "dra:nothing", A100_3G, device_plugin.key]
    with pytest.raises(ValidationError) as raised:
        update_class(people["admin"], rc(A100_4G), alternatives=keys)
    problems = raised.value.message_dict["alternatives"]
    assert [p.split(" ", 1)[0] for p in problems] == [
        A100_4G, "A100", A100_WHOLE, "No", "NVIDIA", A100_3G,
    ]  # fmt: skip
    assert problems[0].startswith(f"{A100_4G} is the class itself")
    assert "same kind of unit" in problems[1] and A100_WHOLE in problems[1]
    assert problems[2] == f"{A100_WHOLE} is listed twice; list each alternative once, in the order to try them."
    assert problems[3].startswith("No resource class dra:nothing.")
    assert "is a device-plugin class; an alternative must be a DRA class" in problems[4]
    assert problems[5].startswith(f"{A100_3G} leads back to {A100_4G}")
    assert rc(A100_4G).alternatives == []  # nothing saved
    # A device-plugin class allows none.
    with pytest.raises(ValidationError, match="only a DRA class can allow alternatives"):
        update_class(people["admin"], device_plugin, alternatives=[A100_3G])


def test_the_admins_page_edits_a_dra_class_s_alternatives(cluster, people, client):
    client.force_login(people["admin"])
    page = client.get("/resource-classes/manage/").content.decode()
    four, h100 = rc(A100_4G), rc(H100)
    assert f'name="rc-{four.pk}-alternatives"' in page
    form = {f"rc-{four.pk}-alias": "", f"rc-{four.pk}-description": "", f"rc-{four.pk}-cluster": ""}
    response = client.post(f"/resource-classes/{four.pk}/manage/", form | {f"rc-{four.pk}-alternatives": H100})
    assert response.status_code == 400 and "same kind of unit" in response.content.decode()
    response = client.post(
        f"/resource-classes/{four.pk}/manage/", form | {f"rc-{four.pk}-alternatives": f"{A100_3G}, {A100_1G}"}
    )
    assert response.status_code == 302
    assert rc(A100_4G).alternatives == [rc(A100_3G).pk, rc(A100_1G).pk]
    assert f'value="{A100_3G}, {A100_1G}"' in client.get("/resource-classes/manage/").content.decode()
    assert h100.alternatives == []


def test_the_api_reads_and_writes_alternatives_as_keys(cluster, people, client):
    client.force_login(people["admin"])
    url = f"/api/v1/resource-classes/{rc(H100).pk}/"
    response = client.patch(url, {"alternatives": [A100_WHOLE]}, content_type="application/json")
    assert response.status_code == 200, response.json()
    assert response.json()["alternatives"] == [A100_WHOLE]
    bad = client.patch(url, {"alternatives": [A100_3G, "dra:none"]}, content_type="application/json")
    assert bad.status_code == 400 and len(bad.json()["alternatives"]) == 2
    client.force_login(people["alice"])
    assert client.patch(url, {"alternatives": []}, content_type="application/json").status_code == 403


def test_the_prioritized_list_is_valid_and_allocated_as_the_scheduler_does(cluster, clock):
    four, three = rc(A100_4G), rc(A100_3G)
    template = render_claim_template(four, 1, "four-else-three", "team-vision", {}, alternatives=[three])
    assert_valid(template)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert "exactly" not in request
    assert [(s["name"], s["deviceClassName"], s["allocationMode"], s["count"]) for s in request["firstAvailable"]] == [
        ("choice-1", "mig.nvidia.com", "ExactCount", 1),
        ("choice-2", "mig.nvidia.com", "ExactCount", 1),
    ]
    assert request["firstAvailable"][1]["selectors"][1]["cel"]["expression"].endswith('.profile == "3g.20gb"')
    cluster.apply_resource_claim_template(template)
    results = []
    for name in ("first", "second", "third"):
        cluster.create_workload(dra_job(name, {"gpus": "four-else-three"}, namespace="team-vision"))
        pod = pod_of(cluster, name, "team-vision")
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        claim = cluster.get_resource_claim("team-vision", statuses[0]["resourceClaimName"]) if statuses else {}
        allocation = (claim.get("status") or {}).get("allocation")
        results.append([r["request"] for r in allocation["devices"]["results"]] if allocation else None)
    # The 4g.20gb fits first; then only a 3g.20gb beside it; then nothing.
    assert results == [["gpus/choice-1"], ["gpus/choice-2"], None]


def test_the_sharing_configuration_applies_to_whichever_subrequest_is_allocated(cluster):
    def shared(key: str) -> ResourceClass:
        found = rc(key)
        found.sharing_strategy = "time-slicing"
        return found

    template = render_claim_template(
        shared(H100), 1, "h100-else-a100", "team-vision", {}, alternatives=[shared(A100_WHOLE)]
    )
    assert_valid(template)
    assert template["spec"]["spec"]["devices"]["config"][0]["requests"] == ["gpus"]
    cluster.apply_resource_claim_template(template)
    got = []
    for name in ("one", "two", "three"):
        cluster.create_workload(dra_job(name, {"gpus": "h100-else-a100"}, namespace="team-vision"))
        (status,) = pod_of(cluster, name, "team-vision")["status"]["resourceClaimStatuses"]
        allocation = cluster.get_resource_claim("team-vision", status["resourceClaimName"])["status"]["allocation"]
        (result,) = allocation["devices"]["results"]
        (config,) = allocation["devices"]["config"]
        got.append((result["request"], result["pool"], config["source"], config["requests"]))
    assert got == [
        ("gpus/choice-1", "lab-h100", "FromClaim", ["gpus"]),
        ("gpus/choice-1", "lab-h100", "FromClaim", ["gpus"]),
        ("gpus/choice-2", "lab-a100", "FromClaim", ["gpus"]),
    ]


def test_a_job_runs_on_its_second_choice_charged_to_that_class(cluster, clock, people, quotas, monkeypatch, client):
    monkeypatch.setattr(fleet, "get_backend", lambda: cluster)
    fleet.sync(Cluster.objects.get(name="default"))  # what the inventory task records: resource.k8s.io/v1 is served
    update_class(people["admin"], rc(A100_4G), alternatives=[A100_3G])
    spec = JOB_REQUEST | {"command": ["sleep", "3600"], "cpu_millicores": 2000, "memory_mb": 8192}
    jobs = []
    # One after another, as the cluster allocates them: the 4g.20gb's counters are taken, and the inventory task
    # has seen where, before the others come.
    for i in range(3):
        jobs.append(
            actions.submit_job(people["alice"], people["vision"], rc(A100_4G), spec | {"name": f"four-{i}"}).job
        )
        for _ in range(3):
            clock.advance(6)
            run_cycle(cluster, now=clock.now, fleet=[])
        fleet.sync(Cluster.objects.get(name="default"))
    for job in jobs:
        job.refresh_from_db()
    first, second, third = jobs
    assert (first.state, first.resource_class.key) == (JobState.RUNNING, A100_4G), first.wait_message
    assert (second.state, second.resource_class.key) == (JobState.RUNNING, A100_3G), second.wait_message
    admitted = JobEvent.objects.get(job=second, kind=EventKind.ADMITTED)
    assert "It runs on A100 SXM4 40GB · MIG 3g.20gb · DRA, the second choice" in admitted.message
    assert "so A100 SXM4 40GB · MIG 3g.20gb · DRA's quota and devices are charged" in admitted.message
    assert admitted.data | {"requested_class": rc(A100_4G).pk, "choice": 2} == admitted.data
    # Its pod asks exactly the class admission chose, on the node it chose.
    (template,) = [obj for obj in kinds.for_job(second).render(second) if obj["kind"] == "ResourceClaimTemplate"]
    assert_valid(template)
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["selectors"][1]["cel"]["expression"].endswith('.profile == "3g.20gb"')
    claims = [c for c in cluster.list_resource_claims("team-vision") if (c.get("status") or {}).get("allocation")]
    assert sorted(r["pool"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]) == [
        "lab-a100", "lab-a100",
    ]  # fmt: skip
    # The third: no room for its class nor its alternative, and it says so.
    assert (third.state, third.wait_reason) == (JobState.QUEUED, WaitReason.CAPACITY)
    assert third.wait_message.endswith(
        "Its alternatives could not serve it either (A100 SXM4 40GB · MIG 3g.20gb · DRA: no room on any node now)."
    )
    # Its page says so beside its resources.
    client.force_login(people["alice"])
    page = client.get(f"/jobs/{second.pk}/").content.decode()
    assert (
        '<span class="muted" data-role="served-by">Runs on A100 SXM4 40GB · MIG 3g.20gb · DRA, the second choice: '
        "A100 SXM4 40GB · MIG 4g.20gb · DRA could not take it then; A100 SXM4 40GB · MIG 3g.20gb · DRA&#x27;s quota is "
        "charged.</span>"
    ) in page
    assert 'data-role="served-by"' not in client.get(f"/jobs/{first.pk}/").content.decode()
    # The waiting one lists its alternatives' reasons with the numbers behind its wait.
    assert "Alternative: A100 SXM4 40GB · MIG 3g.20gb · DRA" in client.get(f"/jobs/{third.pk}/").content.decode()
    # Resubmitted once it ended (as if), the new job asks for its first choice.
    Job.objects.filter(pk=second.pk).update(state=JobState.CANCELLED)
    assert actions.resubmit_job(people["alice"], Job.objects.get(pk=second.pk)).resource_class.key == A100_4G
    Job.objects.filter(pk=second.pk).update(state=second.state)
    # Restarted, it asks for its first choice again.
    assert lifecycle.restart(second, clock.now, "Its node was lost.")
    second.refresh_from_db()
    assert (second.state, second.resource_class.key) == (JobState.QUEUED, A100_4G)


def test_a_service_keeps_its_own_class(cluster, people):
    from jobs.service.kind import ServiceKind

    update_class(people["admin"], rc(H100), alternatives=[A100_WHOLE])
    demand = ServiceKind().demand(
        type("Row", (), {"resource_class_id": rc(H100).pk, "count": 1, "cpu_millicores": 1, "memory_mb": 1,
                         "workers": 1})()
    )  # fmt: skip
    assert demand.alternatives is False


def test_admission_reads_only_dra_alternatives_of_the_class_s_own_scope(cluster, people):
    from jobs.cycle.admit import class_views

    plugin = ResourceClass.objects.create(
        key="nvidia.com/gpu@NVIDIA-L4", kind="gpu", resource_name="nvidia.com/gpu", product="NVIDIA L4",
        product_label="NVIDIA-L4",
    )  # fmt: skip
    elsewhere = ResourceClass.objects.create(
        key=f"{A100_1G}@other", kind="mig", resource_name="mig.nvidia.com", product="NVIDIA A100-SXM4-40GB",
        product_label="NVIDIA-A100-SXM4-40GB", profile="1g.5gb", cluster=Cluster.objects.create(name="other"),
    )  # fmt: skip
    # Written behind the admins' check's back (a class rescoped since, a row edited by hand).
    ResourceClass.objects.filter(key=A100_4G).update(alternatives=[plugin.pk, elsewhere.pk, rc(A100_3G).pk, 0])
    ResourceClass.objects.filter(pk=plugin.pk).update(alternatives=[rc(A100_3G).pk])
    views = class_views()
    assert views[rc(A100_4G).pk].alternatives == (rc(A100_3G).pk,)
    assert views[plugin.pk].alternatives == ()


def test_bad_sharing_and_bad_alternatives_are_refused_together_and_nothing_is_saved(cluster, people):
    # Time-slicing on a MIG class (the driver offers MPS only there) and an alternative that does not exist.
    with pytest.raises(ValidationError) as raised:
        update_class(
            people["admin"], rc(A100_4G), sharing_strategy="time-slicing", replicas=2, alternatives=["dra:nothing"]
        )
    assert set(raised.value.message_dict) == {"sharing_strategy", "alternatives"}
    four = rc(A100_4G)
    assert (four.sharing_strategy, four.replicas, four.alternatives) == ("none", 1, [])

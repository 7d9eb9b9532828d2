"""The one table of what a pod or container state means (vocab.pod_states): each reason kubelet or kube-scheduler
gives, in the words they give it, to its verdict and the sentence a person reads. Pure: no database, no cluster."""

from __future__ import annotations

from datetime import datetime

import pytest

from vocab.pod_states import (
    ENDED,
    WAITING,
    RegistryLogin,
    Subject,
    Verdict,
    container_state,
    ended,
    needs_event,
    waiting,
    waiting_reason,
)

JOB = Subject(
    namespace="team-vision", team="Computer Vision", image="registry.example.com/vision/train:1", memory_mb=16384,
    max_runtime_seconds=7200, unbound_claims=lambda: ["checkpoints"],
)  # fmt: skip
LOGIN = RegistryLogin("bot", datetime(2026, 11, 2, 9, 30))
NOT_FOUND = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "registry.example.com/vision/train:1": '
    "failed to resolve reference: not found"
)
REFUSED = "pulling from host registry.example.com failed with status code [manifests 1]: 401 Unauthorized"


@pytest.mark.parametrize(
    "reason, message, subject, verdict, sentence",
    [
        # kubelet's makeEnvironmentVariables: an env var's secretKeyRef whose Secret or key is missing.
        ("CreateContainerConfigError", 'secret "wandb" not found', JOB, Verdict.EXPLAIN,
         "Waiting: the pod cannot start because secret wandb does not exist in namespace team-vision. A lead of "
         "team Computer Vision can create it on the team's Secrets page; the job starts when it exists. "
         'Kubernetes: secret "wandb" not found'),
        ("CreateContainerConfigError", "couldn't find key token in Secret team-vision/wandb", JOB, Verdict.EXPLAIN,
         "Waiting: the pod cannot start because key token is missing from the secret wandb. A lead can rotate the "
         "secret with that key included; the job starts when it is there. Kubernetes: couldn't find key token in "
         "Secret team-vision/wandb"),
        ("CreateContainerConfigError", 'configmap "settings" not found', JOB, Verdict.EXPLAIN,
         "Waiting: the pod cannot start because config map settings does not exist in namespace team-vision. An "
         'admin can restore it; the job starts when it exists. Kubernetes: configmap "settings" not found'),
        # The secret volume plugin, in a FailedMount event (the container stays ContainerCreating).
        ("FailedMount", 'MountVolume.SetUp failed for volume "secret-file-0" : secret "wandb" not found', JOB,
         Verdict.EXPLAIN,
         "Waiting: the pod cannot start because secret wandb does not exist in namespace team-vision. A lead of "
         "team Computer Vision can create it on the team's Secrets page; the job starts when it exists. "
         'Kubernetes: MountVolume.SetUp failed for volume "secret-file-0" : secret "wandb" not found'),
        ("FailedMount", 'MountVolume.SetUp failed for volume "s" : references non-existent secret key: token', JOB,
         Verdict.EXPLAIN,
         "Waiting: the pod cannot start because key token is missing from the secret it uses. A lead can rotate "
         "the secret with that key included; the job starts when it is there. Kubernetes: MountVolume.SetUp failed "
         'for volume "s" : references non-existent secret key: token'),
        # Image pulls: the first failure explains, the back-off and a name that can never be pulled fail.
        ("ErrImagePull", NOT_FOUND, JOB, Verdict.EXPLAIN,
         "The registry registry.example.com has no image registry.example.com/vision/train:1 (ErrImagePull): check "
         f"the repository name and tag. Kubernetes: {NOT_FOUND}"),
        ("ImagePullBackOff", REFUSED, JOB, Verdict.FAIL,
         "The registry registry.example.com refused to let this job pull registry.example.com/vision/train:1 "
         "(ImagePullBackOff). Team Computer Vision has no registry credential for registry.example.com: a lead can "
         f"add one on the team's Registry credentials page. Kubernetes: {REFUSED}"),
        ("ImagePullBackOff", REFUSED, Subject(team="Computer Vision", image=JOB.image, login=lambda host: LOGIN),
         Verdict.FAIL,
         "The registry registry.example.com refused to let this job pull registry.example.com/vision/train:1 "
         "(ImagePullBackOff). The team's credential for registry.example.com (user bot, set 2026-11-02 09:30 UTC) "
         "was sent and refused: check that the token is still valid and may pull this repository, then rotate it. "
         f"Kubernetes: {REFUSED}"),
        ("ErrImagePull", "401 Unauthorized", Subject(team="Computer Vision", image="nvcr.io/acme/model:1"),
         Verdict.EXPLAIN,
         "The registry nvcr.io refused to let this job pull nvcr.io/acme/model:1 (ErrImagePull). Team Computer "
         "Vision has no registry credential for nvcr.io: a lead can add one on the team's Registry credentials page "
         "(user $oauthtoken, password an NGC API key). Kubernetes: 401 Unauthorized"),
        ("InvalidImageName", 'Failed to apply default image tag "Bad:Name": invalid reference format',
         Subject(image="Bad:Name"), Verdict.FAIL,
         'The image Bad:Name cannot be pulled from docker.io (InvalidImageName): Failed to apply default image tag '
         '"Bad:Name": invalid reference format'),
        # A pod with no team behind it (the node smoke test) is told where to look without one.
        ("ImagePullBackOff", REFUSED, Subject(image="nvcr.io/nvidia/k8s/cuda-sample:vectoradd"), Verdict.FAIL,
         "The registry nvcr.io refused to let this job pull nvcr.io/nvidia/k8s/cuda-sample:vectoradd "
         f"(ImagePullBackOff). Check the pull secret the pod uses for nvcr.io. Kubernetes: {REFUSED}"),
        # A replica that keeps exiting (batch pods never restart).
        ("CrashLoopBackOff", "back-off 5m0s restarting failed container=llm pod=llm-7d9c", JOB, Verdict.EXPLAIN,
         "The container keeps exiting and Kubernetes waits longer before each restart (CrashLoopBackOff); its log "
         "says why. Kubernetes: back-off 5m0s restarting failed container=llm pod=llm-7d9c"),
        # kube-scheduler: no room yet keeps waiting in its words; a claim is said in words.
        ("Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", JOB, Verdict.WAIT,
         "Pending in the cluster: Unschedulable: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."),
        ("Unschedulable", '0/4 nodes are available: persistentvolumeclaim "gone" not found.', JOB, Verdict.EXPLAIN,
         "Waiting for volume gone: the claim does not exist in namespace team-vision, so Kubernetes cannot place "
         "the pod. Ask an admin to restore it, or cancel this job and submit it without that volume. Kubernetes: "
         '0/4 nodes are available: persistentvolumeclaim "gone" not found.'),
        ("Unschedulable", "0/4 nodes are available: 4 pod has unbound immediate PersistentVolumeClaims.", JOB,
         Verdict.WAIT,
         "Waiting for volume checkpoints to be bound: a claim it mounts is not bound to a volume yet (Pending), and "
         "Kubernetes places the pod only once it is. The job starts by itself when the claim binds; the Volumes page "
         "shows each claim's phase, and an admin can check why it is not bound (no matching volume or storage "
         "class). Kubernetes: 0/4 nodes are available: 4 pod has unbound immediate PersistentVolumeClaims."),
        ("SchedulingGated", "", JOB, Verdict.WAIT, "Pending in the cluster: SchedulingGated"),
        ("ContainerCreating", "", JOB, Verdict.WAIT, "Pending in the cluster: ContainerCreating"),
        ("PodInitializing", "", JOB, Verdict.WAIT, "Pending in the cluster: PodInitializing"),
        # A reason the table does not know keeps waiting, in the cluster's words.
        ("SomethingNew", "it says so", JOB, Verdict.WAIT, "Pending in the cluster: SomethingNew: it says so"),
    ],
)  # fmt: skip
def test_a_waiting_reason_has_its_verdict_and_sentence(reason, message, subject, verdict, sentence):
    meaning = waiting(reason, message, subject)
    assert (meaning.reason, meaning.verdict, meaning.sentence) == (reason, verdict, sentence)


def test_every_reason_in_the_table_is_said_without_a_subject():
    for reason in WAITING:
        assert waiting(reason, "why").sentence
    for reason in ENDED:
        assert ended(reason, None).verdict == Verdict.FAIL


def test_the_lookups_are_asked_only_when_the_reason_needs_them():
    asked = []
    subject = Subject(login=lambda host: asked.append(host), unbound_claims=lambda: asked.append("claims") or [])
    waiting("CreateContainerConfigError", 'secret "x" not found', subject)
    waiting("Unschedulable", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.", subject)
    waiting("ErrImagePull", NOT_FOUND, subject)
    assert asked == []
    waiting("ErrImagePull", REFUSED, subject)
    waiting("Unschedulable", "1 pod has unbound immediate PersistentVolumeClaims", subject)
    assert asked == ["docker.io", "claims"]


@pytest.mark.parametrize(
    "reason, exit_code, condition_message, sentence",
    [
        ("OOMKilled", 137, "", "Killed for running out of memory (limit 16384 MiB); ask for more memory."),
        ("DeadlineExceeded", None, "Job was active longer than specified deadline",
         "Stopped by Kubernetes after its maximum runtime of 120 minutes (activeDeadlineSeconds)."),
        ("Error", 3, "", "Failed with exit code 3."),
        ("Error", 1, "Job has reached the specified backoff limit",
         "Failed with exit code 1. Kubernetes: Job has reached the specified backoff limit"),
        ("", None, "", "Failed."),
    ],
)  # fmt: skip
def test_an_ended_container_fails_with_its_sentence(reason, exit_code, condition_message, sentence):
    meaning = ended(reason, exit_code, condition_message, JOB)
    assert meaning.verdict == Verdict.FAIL and meaning.sentence == sentence


def test_the_events_that_tell_more_than_a_reason():
    assert needs_event("ImagePullBackOff") == ("Failed", ("Failed to pull",))
    assert needs_event("ContainerCreating") == ("FailedMount", ("MountVolume.SetUp failed", "secret"))
    assert needs_event("ErrImagePull") is None


def pod(state: dict | None = None, last: dict | None = None, scheduled: dict | None = None) -> dict:
    status: dict = {"phase": "Pending"}
    if state is not None or last is not None:
        status["containerStatuses"] = [{"name": "main", "state": state or {}, "lastState": last or {}}]
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", **scheduled}]
    return {"metadata": {"name": "p"}, "status": status}


@pytest.mark.parametrize(
    "obj, state, reason",
    [
        (None, "", ("", "")),
        (pod(), "", ("", "")),
        (pod({"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "x" not found'}}), "waiting",
         ("CreateContainerConfigError", 'secret "x" not found')),
        (pod({"waiting": {"reason": "ContainerCreating"}}), "waiting", ("ContainerCreating", "")),
        (pod({"running": {"startedAt": "2026-11-02T09:30:00Z"}}), "running", ("", "")),
        (pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), "terminated", ("", "")),
        (pod({}, last={"terminated": {"exitCode": 1, "reason": "Error"}}), "terminated", ("", "")),
        (pod(scheduled={"status": "False", "reason": "Unschedulable", "message": "0/4 nodes are available"}), "",
         ("Unschedulable", "0/4 nodes are available")),
        (pod(scheduled={"status": "True"}), "", ("", "")),
    ],
)  # fmt: skip
def test_a_pod_is_read_one_way(obj, state, reason):
    assert container_state(obj)[0] == state
    assert waiting_reason(obj) == reason

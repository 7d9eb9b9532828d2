"""Quotas and a few jobs for the embedded demo, so its pages show running, queued and finished work."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError

from accounts.models import Team
from gpus.class_admin import update_class
from gpus.demo import DEMO_CLOUD
from gpus.dra_inventory import class_key as dra_class_key
from gpus.models import Cluster, ResourceClass
from gpus.resources import class_key
from jobs import actions, workload_templates
from jobs.choices import JobKind, Priority, TemplateKind
from jobs.models import Dataset, Job, NotebookPolicy, Quota, RegistryCredential, TeamSecret, WorkloadTemplate
from jobs.notebook.sessions import launch_notebook
from jobs.service import ops as service_ops
from jobs.storage import secrets, volumes
from vocab.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from vocab.names import GPU_RESOURCE, mig_resource_name

H100 = class_key(GPU_RESOURCE, "NVIDIA-H100-80GB-HBM3")
A100_3G = class_key(mig_resource_name("3g.40gb"), "NVIDIA-A100-SXM4-80GB")
A100_2G = class_key(mig_resource_name("2g.20gb"), "NVIDIA-A100-SXM4-80GB")
A100_1G = class_key(mig_resource_name("1g.10gb"), "NVIDIA-A100-SXM4-80GB")
#: A time-sliced A10 (4 replicas, renamed product) and a single-strategy MIG A100 40GB: both advertise nvidia.com/gpu.
A10_SHARED = class_key(GPU_RESOURCE, "NVIDIA-A10-SHARED")
A100_40_1G = class_key(GPU_RESOURCE, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
#: L4s: one EKS node on the demo cluster (3 of its 4 healthy) and sixteen in the cloud cluster's GKE pool.
L4 = class_key(GPU_RESOURCE, "NVIDIA-L4")
#: The lab cluster's GPUs, offered by NVIDIA's DRA driver: whole H100s and dynamic-MIG A100 40GB slices.
DRA_H100 = dra_class_key(GPU_DEVICE_CLASS, "NVIDIA-H100-80GB-HBM3")
DRA_A100_3G = dra_class_key(MIG_DEVICE_CLASS, "NVIDIA-A100-SXM4-40GB", "3g.20gb")
#: The lab's L4s, which the demo's admin shares among 4 users a GPU by time-slicing (DEMO_DRA_SHARING).
DRA_L4 = dra_class_key(GPU_DEVICE_CLASS, "NVIDIA-L4")
DEMO_DRA_SHARING = {DRA_L4: ("time-slicing", 4)}
#: team → [(resource class key, guaranteed, limit, monthly GPU-hours or None)]
DEMO_QUOTAS = {
    "vision": [
        (H100, 16, 24, 5000),
        (A100_3G, 2, 4, None),
        (A100_1G, 4, 8, None),
        (A10_SHARED, 4, 8, None),
        (DRA_H100, 8, 16, None),
    ],
    # nlp's H100 guarantee is llama-finetune's 8 and chat-llm's minimum of 1; its limit lets the service borrow
    # 3 more while the fine-tune runs (the demo's service stops there) and up to its maximum of 6 after.
    "nlp": [
        (H100, 9, 12, None),
        (A100_40_1G, 7, 14, None),
        (A100_2G, 2, 4, None),
        (L4, 4, 8, None),
        (DRA_A100_3G, 2, 4, None),
        (DRA_L4, 4, 8, None),  # quarter-L4 units: the embed-small service's 4 replicas share one L4
    ],
    "platform": [(A10_SHARED, 2, 4, None)],
}
#: owner, team, name, class, count, seconds it runs, preemptible, how it uses its GPUs (cluster.sim.dcgm_exporter)
DEMO_JOBS = [
    ("alice", "vision", "resnet50-train", H100, 8, 5400, False, "train"),
    ("bob", "nlp", "llama-finetune", H100, 8, 7200, False, "train"),
    ("bob", "nlp", "llama-eval", H100, 4, 1800, False, "train"),  # waits: nlp holds its whole guarantee
    ("alice", "vision", "augment-sweep", A100_3G, 1, 90, False, "train"),
    # Holds a GPU and does nothing: the idle detector flags it and tells bob.
    ("bob", "nlp", "debug-session", A100_2G, 1, 4 * 3600, False, "idle"),
    # Busy in bursts for 15 minutes, then idle (like a notebook left open).
    ("alice", "vision", "feature-explore", A100_1G, 1, 3 * 3600, False,
     "bursty"),
    # On the lab cluster, through NVIDIA's DRA driver: a ResourceClaimTemplate each, allocated by the scheduler.
    ("alice", "vision", "vit-pretrain-dra", DRA_H100, 4, 5400, False, "train"),
    ("bob", "nlp", "bert-eval-mig", DRA_A100_3G, 1, 3600, False, "train"),
]  # fmt: skip


#: team → (maximum age, its ceiling, idle timeout, its ceiling), seconds: short enough to watch in the demo.
DEMO_NOTEBOOK_POLICIES = {"vision": (4 * 3600, 8 * 3600, 20 * 60, 3600), "nlp": (2 * 3600, 4 * 3600, 10 * 60, 3600)}
#: owner, team, name, class, load: alice's notebook works in bursts (its countdowns move and reset); bob's sits
#: idle from the start, so the culler warns him and stops it about ten minutes after it starts.
DEMO_NOTEBOOKS = [
    ("alice", "vision", "explore", A100_1G, "bursty"),
    ("bob", "nlp", "forgotten", A100_40_1G, "idle"),
]


def seed_notebooks(classes) -> int:
    User = get_user_model()
    for slug, (ttl, max_ttl, idle, max_idle) in DEMO_NOTEBOOK_POLICIES.items():
        team = Team.objects.filter(slug=slug).first()
        if team is not None:
            NotebookPolicy.objects.get_or_create(
                team=team,
                defaults={"ttl_seconds": ttl, "max_ttl_seconds": max_ttl, "idle_timeout_seconds": idle,
                          "max_idle_timeout_seconds": max_idle},
            )  # fmt: skip
    made = 0
    for username, slug, name, key, load in DEMO_NOTEBOOKS:
        user, team, rc = User.objects.filter(username=username).first(), Team.objects.get(slug=slug), classes.get(key)
        if user is None or rc is None:
            continue
        fields = {"name": name, "count": 1, "cpu_millicores": 4000, "memory_mb": 16384,
                  "env": [{"name": "SIM_GPU_LOAD", "value": load}]}  # fmt: skip
        launch_notebook(user, team, rc, fields)
        made += 1
    return made


def seed_array(classes) -> int:
    """A small hyper-parameter sweep as a job array: 4 tasks on A100 3g.40gb slices, at most 2 at once; each
    task picks its learning rate by PORTAL_ARRAY_INDEX. Preemptible, so the second task may borrow above the
    team's guarantee."""
    user = get_user_model().objects.filter(username="alice").first()
    team, rc = Team.objects.filter(slug="vision").first(), classes.get(A100_3G)
    if user is None or team is None or rc is None:
        return 0
    rates = "0.1 0.03 0.01 0.003"
    fields = {
        "name": "lr-sweep",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": ["bash", "-c", f"rates=({rates}); python sweep.py --lr ${{rates[$PORTAL_ARRAY_INDEX]}}; sleep 600"],
        "count": 1,
        "cpu_millicores": 4000,
        "memory_mb": 16384,
        "priority": Priority.NORMAL,
        "preemptible": True,
        "max_runtime_seconds": 1800,
        "labels": {"pipeline": "demo", "sweep": "lr"},
    }
    try:
        actions.submit_array(user, team, rc, fields, size=4, parallelism=2)
    except (ValidationError, PermissionDenied):  # the demo's quotas differ: no sweep then
        return 0
    return 4


#: Distributed training in the demo: name, workers, GPUs each, seconds it runs, retries, extra env. The second
#: one's rank 1 fails after three minutes (the simulated cluster's SIM_FAIL_RANK switch): the portal stops every
#: rank, restarts the whole job once, and after the second failure marks it failed naming rank 1 and its log.
FAIL_RANK_1 = [
    {"name": "SIM_FAIL_RANK", "value": "1"},
    {"name": "SIM_FAIL_AFTER_SECONDS", "value": "180"},
    {"name": "SIM_EXIT_CODE", "value": "3"},
]
DEMO_GANGS = [
    ("ddp-pretrain", 2, 2, 7200, 0, []),
    ("ddp-flaky", 2, 1, 3600, 1, FAIL_RANK_1),
]


def seed_gangs(classes) -> int:
    """Two distributed jobs of team vision on H100s (torchrun's command reads the environment the portal sets)."""
    user = get_user_model().objects.filter(username="alice").first()
    team, rc = Team.objects.filter(slug="vision").first(), classes.get(H100)
    if user is None or team is None or rc is None:
        return 0
    made = 0
    for name, workers, count, seconds, retries, env in DEMO_GANGS:
        torchrun = (
            "torchrun --nnodes=$WORLD_SIZE --node_rank=$NODE_RANK --nproc_per_node=$NPROC_PER_NODE "
            "--master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py"
        )
        fields = {
            "name": name, "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "command": ["bash", "-c", f"{torchrun}; sleep {seconds}"], "args": [], "env": env,
            "count": count, "cpu_millicores": 8000 * count, "memory_mb": 65536 * count, "priority": Priority.NORMAL,
            "preemptible": False, "max_runtime_seconds": seconds * 2, "labels": {"pipeline": "demo"},
            "kind": JobKind.DISTRIBUTED, "workers": workers, "max_retries": retries,
        }  # fmt: skip
        try:
            actions.submit_job(user, team, rc, fields)
        except (ValidationError, PermissionDenied):  # the demo's quotas differ: no gang then
            continue
        made += 1
    return made


#: The demo's inference service: team nlp's chat model, one H100 per replica, 1 to 6 replicas on the per-replica
#: request rate (10 per second each). The demo cluster's traffic curve (cluster/scenarios/demo.yaml ``traffic:``)
#: peaks at 60 requests per second at 15:00 UTC and falls to 3 at night, so the autoscaler wants 6 replicas in the
#: afternoon and 1 at night; what it gets is what nlp's H100 quota leaves it (docs/design.md, "Inference services").
DEMO_SERVICE = {
    "name": "chat-llm", "image": "vllm/vllm-openai:v0.4.2",
    "command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama-3-8b-instruct",
                "--port", "8000"],
    "count": 1, "cpu_millicores": 8000, "memory_mb": 65536, "preemptible": False,
    "labels": {"pipeline": "demo", "app": "chat"},
}  # fmt: skip
DEMO_SERVICE_SCALING = {
    "port": 8000, "readiness": {"type": "http", "path": "/health", "port": 8000, "period_seconds": 5},
    "min_replicas": 1, "max_replicas": 6, "metric": "pods", "metric_name": "requests_per_second",
    "metric_target": 10.0,
}  # fmt: skip


def share_dra_classes(admin, classes) -> int:
    """The admin shares the lab's L4 class by time-slicing, 4 users a GPU (DEMO_DRA_SHARING), as on the classes page;
    ``classes`` (key → class) gets the shared rows. Once: a class already shared is left as it is."""
    shared = 0
    for key, (strategy, replicas) in DEMO_DRA_SHARING.items():
        rc = classes.get(key)
        if admin is None or rc is None or rc.replicas > 1:
            continue
        classes[key] = update_class(admin, rc, sharing_strategy=strategy, replicas=replicas)
        shared += 1
    return shared


#: Team nlp's small embedding service on the lab's shared L4s: its replicas share one GPU through one claim.
DEMO_DRA_SERVICE = {
    "name": "embed-small", "image": "ghcr.io/huggingface/text-embeddings-inference:1.5",
    "command": ["text-embeddings-router", "--model-id", "/models/bge-small-en-v1.5", "--port", "8080"],
    "count": 1, "cpu_millicores": 4000, "memory_mb": 16384, "preemptible": False,
    "labels": {"pipeline": "demo", "app": "embed"},
}  # fmt: skip
DEMO_DRA_SERVICE_SCALING = {
    "port": 8080, "readiness": {"type": "http", "path": "/health", "port": 8080, "period_seconds": 5},
    "min_replicas": 2, "max_replicas": 4, "metric": "pods", "metric_name": "requests_per_second",
    "metric_target": 50.0,
}  # fmt: skip


def seed_service(classes) -> int:
    """Team nlp's chat-llm service (bob's)."""
    user = get_user_model().objects.filter(username="bob").first()
    team, rc = Team.objects.filter(slug="nlp").first(), classes.get(H100)
    if user is None or team is None or rc is None:
        return 0
    try:
        service_ops.create_service(user, team, rc, DEMO_SERVICE, DEMO_SERVICE_SCALING)
    except (ValidationError, PermissionDenied):  # the demo's quotas differ: no service then
        return 0
    shared = classes.get(DRA_L4)
    if shared is not None and shared.replicas > 1:
        try:
            service_ops.create_service(user, team, shared, DEMO_DRA_SERVICE, DEMO_DRA_SERVICE_SCALING)
        except (ValidationError, PermissionDenied):  # no lab cluster, or no quota for it: no embed-small then
            return 1
        return 2
    return 1


def seed_fleet_job(classes) -> int:
    """bob's transcription job asks for 4 L4s on the demo cluster first, then the cloud: the demo cluster's L4 node
    has 3 healthy GPUs, so it spills to the cloud cluster (shown on its page and timeline)."""
    User = get_user_model()
    bob, rc = User.objects.filter(username="bob").first(), classes.get(L4)
    if bob is None or rc is None or not Cluster.objects.filter(name=DEMO_CLOUD).exists():
        return 0
    actions.submit_job(
        bob,
        Team.objects.get(slug="nlp"),
        rc,
        {
            "name": "whisper-transcribe", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "command": ["bash", "-c", "python transcribe.py --shard all; sleep 3600"], "args": [], "env": [],
            "count": 4, "cpu_millicores": 16000, "memory_mb": 65536, "priority": Priority.NORMAL,
            "preemptible": False, "max_runtime_seconds": 7200, "labels": {"pipeline": "demo"},
            "clusters": ["default", DEMO_CLOUD],
        },
    )  # fmt: skip
    return 1


def seed_quotas_and_jobs() -> tuple[int, int]:
    """Create the demo quotas that are missing and, on a portal with no jobs yet, the demo jobs."""
    User = get_user_model()
    admin = User.objects.filter(is_staff=True).order_by("pk").first()
    classes = {rc.key: rc for rc in ResourceClass.objects.filter(present=True)}
    quotas = 0
    share_dra_classes(admin, classes)
    for slug, rows in DEMO_QUOTAS.items():
        team = Team.objects.filter(slug=slug).first()
        for key, guaranteed, limit, budget in rows:
            rc = classes.get(key)
            if team is None or rc is None or Quota.objects.filter(team=team, resource_class=rc).exists():
                continue
            # A limit no larger than what the fleet offers (and a guarantee within it): the L4s are mostly in the
            # cloud cluster, which a portal without it lacks.
            cap = min(limit, rc.allocatable) or limit
            actions.set_quota(admin, team, rc, min(guaranteed, cap), cap, budget)
            quotas += 1
    jobs = 0
    if Job.objects.exists():
        return quotas, jobs
    for username, slug, name, key, count, seconds, preemptible, load in DEMO_JOBS:
        user, team, rc = User.objects.filter(username=username).first(), Team.objects.get(slug=slug), classes.get(key)
        if user is None or rc is None:
            continue
        actions.submit_job(
            user,
            team,
            rc,
            {
                "name": name,
                "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "command": ["bash", "-c", f"python train.py --config {name}.yaml; sleep {seconds}"]
                if load == "train"
                else ["bash", "-c", f"sleep {seconds}"],
                "args": [],
                "env": [{"name": "WANDB_MODE", "value": "offline"}]
                + ([{"name": "SIM_GPU_LOAD", "value": load}] if load == "bursty" else []),
                "count": count,
                "cpu_millicores": 8000 * count if rc.kind == "gpu" else 4000,
                "memory_mb": 65536 * count if rc.kind == "gpu" else 16384,
                "priority": Priority.NORMAL,
                "preemptible": preemptible,
                "max_runtime_seconds": seconds * 2,
                # What a pipeline would tag its runs with; the job list filters by them (?label=pipeline=demo).
                "labels": {"pipeline": "demo", "git-sha": "3f9c2e1"},
                "working_dir": "/workspace",
                # A preemptible demo job checkpoints on SIGUSR1 and gets two minutes to do it when preempted.
                **({"checkpoint": {"signal": "SIGUSR1", "grace_seconds": 120}} if preemptible else {}),
            },
        )
        jobs += 1
    jobs += seed_fleet_job(classes)
    jobs += seed_array(classes)
    jobs += seed_gangs(classes)
    jobs += seed_service(classes)
    jobs += seed_notebooks(classes)
    seed_templates()
    seed_session_templates()
    return quotas, jobs


def seed_templates() -> int:
    """alice, lead of vision, keeps her ResNet-50 run as the team's template ``resnet50-train`` (version 1 from the
    job; version 2 asks for 4 GPUs), so "New job from it" and `gpuportal submit --template` have something to use."""
    job = (
        Job.objects.filter(name="resnet50-train", team__slug="vision").select_related("owner", "resource_class").first()
    )
    if job is None or WorkloadTemplate.objects.filter(team=job.team, name=job.name).exists():
        return 0
    spec = {
        "name": job.name, "image": job.image, "command": job.command, "args": job.args,
        "env": {e["name"]: e["value"] for e in job.env}, "resource_class": job.resource_class.key,
        "count": job.count, "cpu": job.cpu_millicores / 1000, "memory_mb": job.memory_mb,
        "max_runtime_seconds": job.max_runtime_seconds, "labels": job.labels, "working_dir": job.working_dir,
    }  # fmt: skip
    text = "ResNet-50 on ImageNet, the team's baseline"
    workload_templates.save(job.owner, job.team, job.name, spec, text, source_job=job)
    workload_templates.save(job.owner, job.team, job.name, {**spec, "count": 4, "cpu": 32, "memory_mb": 262144}, text)
    return 1


def seed_session_templates() -> int:
    """A notebook template of team vision (alice's, an A100 1g.10gb slice for exploring) and a service template of
    team nlp (the chat-llm service, kept by the admin: nlp has no lead), so "New … from template" has one of each."""
    User = get_user_model()
    alice, admin = User.objects.filter(username="alice").first(), User.objects.filter(is_staff=True).first()
    vision, nlp = Team.objects.filter(slug="vision").first(), Team.objects.filter(slug="nlp").first()
    made = 0
    if alice and vision and not WorkloadTemplate.objects.filter(team=vision, name="explore-1g").exists():
        spec = {"name": "explore-1g", "resource_class": A100_1G, "count": 1, "cpu": 4, "memory_mb": 16384}
        workload_templates.save(
            alice, vision, "explore-1g", spec, "A notebook on a 1g.10gb slice", kind=TemplateKind.NOTEBOOK
        )
        made += 1
    if admin and nlp and not WorkloadTemplate.objects.filter(team=nlp, name="chat-llm").exists():
        spec = {**DEMO_SERVICE, **DEMO_SERVICE_SCALING, "resource_class": H100, "cpu": 8}
        for internal in ("cpu_millicores", "preemptible"):  # the model's names; a service is never preemptible
            spec.pop(internal)
        workload_templates.save(admin, nlp, "chat-llm", spec, "vLLM serving Llama 3 8B", kind=TemplateKind.SERVICE)
        made += 1
    return made


#: The demo's team data: a dataset the admin publishes read-only to both teams (an NFS export, described only:
#: the simulated cluster mounts nothing) and a read-write claim for checkpoints in team vision's namespace.
DEMO_DATASET = {"name": "imagenet", "description": "ImageNet-1k (ILSVRC 2012), train and val", "source": "nfs",
                "server": "nfs.datasets.internal", "path": "/exports/imagenet", "capacity_gib": 150}  # fmt: skip
DEMO_CHECKPOINT_CLAIM = "checkpoints"


def seed_volumes(backend) -> int:
    """The demo's dataset and checkpoint claim, reconciled into the inventory, and on a portal whose demo job
    list has no such job yet, a training job that reads the dataset and writes checkpoints. Returns jobs made."""
    User = get_user_model()
    admin = User.objects.filter(is_staff=True).order_by("pk").first()
    teams = list(Team.objects.filter(slug__in=("vision", "nlp")))
    vision = next((t for t in teams if t.slug == "vision"), None)
    if admin is None or vision is None:
        return 0
    if not Dataset.objects.filter(name=DEMO_DATASET["name"]).exists():
        volumes.save_dataset(admin, DEMO_DATASET, teams)
    backend.ensure_namespace(vision.namespace)
    backend.ensure_pvc(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": DEMO_CHECKPOINT_CLAIM, "namespace": vision.namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "500Gi"}}},
        }
    )
    volumes.reconcile_volumes(backend)
    rc = ResourceClass.objects.filter(present=True, key=class_key(GPU_RESOURCE, "NVIDIA-H100-80GB-HBM3")).first()
    user = User.objects.filter(username="alice").first()
    if rc is None or user is None or Job.objects.filter(name="resnet50-imagenet").exists():
        return 0
    actions.submit_job(
        user,
        vision,
        rc,
        {
            "name": "resnet50-imagenet", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "command": ["bash", "-c", "python train.py --data /data/imagenet --checkpoints /checkpoints/resnet50 "
                        "--workers 8; sleep 5400"],
            "args": [], "env": [{"name": "WANDB_MODE", "value": "offline"}], "count": 2, "cpu_millicores": 16000,
            "memory_mb": 131072, "priority": Priority.NORMAL, "preemptible": False, "max_runtime_seconds": 4 * 3600,
            "volumes": [
                {"claim": f"dataset-{DEMO_DATASET['name']}", "mount_path": "/data/imagenet", "read_only": True},
                {"claim": DEMO_CHECKPOINT_CLAIM, "mount_path": "/checkpoints", "read_only": False},
            ],
            "shm_mb": 32768,
        },
    )  # fmt: skip
    return 1


#: The demo's private registry (cluster/scenarios/demo.yaml ``registries:`` accepts this account) and a team secret.
DEMO_REGISTRY = ("vision", "registry.example.com", "ci-bot", "demo-registry-token")
DEMO_SECRET = ("vision", "wandb", {"token": "demo-wandb-token"}, "Weights & Biases login for training runs")


def seed_secrets(backend=None) -> int:
    """Vision's registry credential for the demo's private registry, its ``wandb`` secret, and a job that pulls
    from that registry and reads the secret (once: nothing is made again when they exist)."""
    User = get_user_model()
    admin = User.objects.filter(is_staff=True).order_by("pk").first()
    slug, registry, username, token = DEMO_REGISTRY
    team = Team.objects.filter(slug=slug).first()
    if admin is None or team is None:
        return 0
    made = 0
    try:
        if not RegistryCredential.objects.filter(team=team, registry=registry).exists():
            secrets.create_registry_credential(admin, team, registry, username, token, backend=backend)
            made += 1
        _, name, data, description = DEMO_SECRET
        if not TeamSecret.objects.filter(team=team, name=name).exists():
            secrets.create_secret(admin, team, name, data, description, backend=backend)
            made += 1
    except secrets.ClusterUnavailable:
        return made
    alice, rc = User.objects.filter(username="alice").first(), ResourceClass.objects.filter(key=A100_3G).first()
    if alice is not None and rc is not None and not Job.objects.filter(name="private-train").exists():
        actions.submit_job(
            alice,
            team,
            rc,
            {
                "name": "private-train", "image": f"{registry}/vision/detector:2.1",
                "command": ["bash", "-c", "python train.py --data /data --checkpoints /checkpoints; sleep 2400"],
                "args": [], "env": [{"name": "SIM_GPU_LOAD", "value": "train"}],
                "secret_env": [{"name": "WANDB_API_KEY", "secret": name, "key": "token"}],
                "secret_files": [{"secret": name, "path": "/secrets/wandb", "keys": []}],
                "count": 1, "cpu_millicores": 4000, "memory_mb": 16384, "priority": Priority.NORMAL,
                "preemptible": True, "max_runtime_seconds": 4800,  # borrows above vision's MIG guarantee
            },
        )  # fmt: skip
        made += 1
    return made

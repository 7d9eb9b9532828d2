"""Every NVIDIA and Kubernetes label, annotation, taint, resource and ConfigMap key name the portal spells.

Each name is written here once. Sources: NVIDIA k8s-device-plugin README (resource names, time-slicing
config, GPU Feature Discovery labels), NVIDIA GPU Operator docs (``nvidia.com/gpu.deploy.*``, MIG Manager's
``nvidia.com/mig.config`` / ``mig.config.state``, ``nvidia.com/device-plugin.config``), NVIDIA mig-parted, and
the Kubernetes "Well-Known Labels, Annotations and Taints" reference. The portal's own ``gpu-portal.io/`` names
are not vocabulary and stay with the code that owns them.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

import re

# -- prefixes ----------------------------------------------------------------------------------------------------

#: Prefix of every NVIDIA label and extended resource (device plugin, GFD, GPU Operator).
NVIDIA_PREFIX = "nvidia.com/"
#: Prefix reserved for Kubernetes' own labels, annotations and resource names (kubernetes.io/hostname, ...).
KUBERNETES_IO_PREFIX = "kubernetes.io/"
#: Prefix of Node Feature Discovery labels (NFD, which the GPU Operator deploys).
NFD_PREFIX = "feature.node.kubernetes.io/"

# -- Kubernetes core resources -----------------------------------------------------------------------------------

#: CPU, in cores (quantity; "500m" is half a core).
CPU_RESOURCE = "cpu"
#: Memory, in bytes (quantity; "64Gi").
MEMORY_RESOURCE = "memory"
#: Local ephemeral storage, in bytes.
EPHEMERAL_STORAGE_RESOURCE = "ephemeral-storage"
#: How many pods a node may run (node capacity/allocatable only).
PODS_RESOURCE = "pods"
#: Prefix of the huge-page resources, completed by the page size: hugepages-2Mi, hugepages-1Gi.
HUGEPAGES_RESOURCE_PREFIX = "hugepages-"
#: The resources every node advertises that are not extended resources.
STANDARD_RESOURCES = frozenset({CPU_RESOURCE, MEMORY_RESOURCE, EPHEMERAL_STORAGE_RESOURCE, PODS_RESOURCE})

# -- NVIDIA extended resources (k8s-device-plugin README) --------------------------------------------------------

#: A whole GPU, or under the MIG "single" strategy one MIG device, or a time-slice when not renamed.
GPU_RESOURCE = "nvidia.com/gpu"
#: Suffix the device plugin appends to a time-sliced resource when ``renameByDefault: true``.
SHARED_SUFFIX = ".shared"
#: A time-sliced GPU under ``renameByDefault: true``.
SHARED_GPU_RESOURCE = GPU_RESOURCE + SHARED_SUFFIX
#: Prefix of a MIG device resource under the "mixed" strategy: nvidia.com/mig-1g.10gb.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# -- taints ------------------------------------------------------------------------------------------------------

#: Taint the GPU Operator docs recommend on GPU nodes (nvidia.com/gpu=present:NoSchedule); GPU pods tolerate it.
GPU_TAINT_KEY = GPU_RESOURCE
#: The conventional value of the GPU taint.
GPU_TAINT_VALUE = "present"
#: AKS: the taint Microsoft's docs put on a GPU node pool (``az aks nodepool add --node-taints sku=gpu:NoSchedule``;
#: "Use GPUs on AKS" and "Best practices for advanced scheduler features", https://learn.microsoft.com/azure/aks/
#: operator-best-practices-advanced-scheduler). AKS itself adds no GPU taint: it is the convention its docs teach.
AKS_GPU_TAINT_KEY = "sku"
AKS_GPU_TAINT_VALUE = "gpu"
#: Taint effect: new pods that do not tolerate it are not scheduled.
NO_SCHEDULE = "NoSchedule"
#: Taint effect: running pods that do not tolerate it are evicted too.
NO_EXECUTE = "NoExecute"
#: Taint effect: the scheduler avoids the node if it can.
PREFER_NO_SCHEDULE = "PreferNoSchedule"
#: Taint the node controller adds to a cordoned node (spec.unschedulable).
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
#: Taint the node controller adds while the Ready condition is False.
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
#: Taint the node controller adds while the Ready condition is Unknown (kubelet silent).
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"

#: Taints the node lifecycle controller adds for node conditions (TaintNodesByCondition; Kubernetes "Taints and
#: Tolerations" reference): NoSchedule while the condition holds.
MEMORY_PRESSURE_TAINT_KEY = "node.kubernetes.io/memory-pressure"
DISK_PRESSURE_TAINT_KEY = "node.kubernetes.io/disk-pressure"
PID_PRESSURE_TAINT_KEY = "node.kubernetes.io/pid-pressure"
NETWORK_UNAVAILABLE_TAINT_KEY = "node.kubernetes.io/network-unavailable"

# -- node conditions (Kubernetes "Nodes" concept page, status.conditions) ---------------------------------------

READY_CONDITION = "Ready"
MEMORY_PRESSURE_CONDITION = "MemoryPressure"
DISK_PRESSURE_CONDITION = "DiskPressure"
PID_PRESSURE_CONDITION = "PIDPressure"
NETWORK_UNAVAILABLE_CONDITION = "NetworkUnavailable"
#: Each condition that is bad when "True", with the taint the node lifecycle controller adds for it.
PRESSURE_CONDITION_TAINTS = {
    MEMORY_PRESSURE_CONDITION: MEMORY_PRESSURE_TAINT_KEY,
    DISK_PRESSURE_CONDITION: DISK_PRESSURE_TAINT_KEY,
    PID_PRESSURE_CONDITION: PID_PRESSURE_TAINT_KEY,
    NETWORK_UNAVAILABLE_CONDITION: NETWORK_UNAVAILABLE_TAINT_KEY,
}

# -- GPU Feature Discovery labels (k8s-device-plugin docs/gpu-feature-discovery) ---------------------------------

#: GPU model, sanitised ("NVIDIA-A100-SXM4-80GB"); "-SHARED" / "-MIG-<profile>" appended as below.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Number of GPUs (or MIG devices under the single strategy) on the node.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: Memory of one GPU (or MIG device under the single strategy), in MiB.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
#: Time-slicing replicas per GPU ("1" when not shared).
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
#: How GPUs are shared: "none", "time-slicing" or "mps" (newer GFD only).
GPU_SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
#: Architecture family ("ampere", "hopper").
GPU_FAMILY_LABEL = "nvidia.com/gpu.family"
#: Machine type from DMI, sanitised like the product.
GPU_MACHINE_LABEL = "nvidia.com/gpu.machine"
#: "true" on nodes with an NVIDIA GPU (set by the GPU Operator / NFD rules).
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
#: CUDA compute capability, major part ("8" for 8.0).
GPU_COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
#: CUDA compute capability, minor part.
GPU_COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
#: "true" when the GPUs support MIG.
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
#: The device plugin's MIG strategy: "none", "single" or "mixed" (absent on old GFD).
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
#: "true" when MPS sharing is possible.
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"
#: Unix time of GFD's last labelling pass.
GFD_TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"
#: Driver version, full ("535.104.05").
CUDA_DRIVER_VERSION_FULL_LABEL = "nvidia.com/cuda.driver-version.full"
#: Driver version, major part.
CUDA_DRIVER_VERSION_MAJOR_LABEL = "nvidia.com/cuda.driver-version.major"
#: Driver version, minor part.
CUDA_DRIVER_VERSION_MINOR_LABEL = "nvidia.com/cuda.driver-version.minor"
#: Driver version, revision part.
CUDA_DRIVER_VERSION_REVISION_LABEL = "nvidia.com/cuda.driver-version.revision"
#: Driver version, major part (deprecated spelling; the only one on old GFD).
CUDA_DRIVER_MAJOR_LABEL = "nvidia.com/cuda.driver.major"
#: Driver version, minor part (deprecated spelling).
CUDA_DRIVER_MINOR_LABEL = "nvidia.com/cuda.driver.minor"
#: Driver version, revision part (deprecated spelling).
CUDA_DRIVER_REV_LABEL = "nvidia.com/cuda.driver.rev"
#: Highest CUDA version the driver supports, "major.minor".
CUDA_RUNTIME_VERSION_FULL_LABEL = "nvidia.com/cuda.runtime-version.full"
#: Highest CUDA version, major part.
CUDA_RUNTIME_VERSION_MAJOR_LABEL = "nvidia.com/cuda.runtime-version.major"
#: Highest CUDA version, minor part.
CUDA_RUNTIME_VERSION_MINOR_LABEL = "nvidia.com/cuda.runtime-version.minor"
#: Highest CUDA version, major part (deprecated spelling; the only one on old GFD).
CUDA_RUNTIME_MAJOR_LABEL = "nvidia.com/cuda.runtime.major"
#: Highest CUDA version, minor part (deprecated spelling).
CUDA_RUNTIME_MINOR_LABEL = "nvidia.com/cuda.runtime.minor"

#: The NVLink domain (clique) of the node's GPUs, "<cluster uuid>.<clique id>"; GFD publishes it on multi-node
#: NVLink systems (GB200 NVL72) (k8s-device-plugin gpu-feature-discovery, "imex" labeler).
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"

#: Suffixes GFD puts after a MIG resource name (mixed) or after nvidia.com/gpu (single): nvidia.com/mig-1g.10gb.count.
MIG_ATTRIBUTE_COUNT = "count"
MIG_ATTRIBUTE_PRODUCT = "product"
MIG_ATTRIBUTE_REPLICAS = "replicas"
MIG_ATTRIBUTE_SHARING_STRATEGY = "sharing-strategy"
MIG_ATTRIBUTE_MEMORY = "memory"
MIG_ATTRIBUTE_MULTIPROCESSORS = "multiprocessors"
MIG_ATTRIBUTE_GI_SLICES = "slices.gi"
MIG_ATTRIBUTE_CI_SLICES = "slices.ci"
#: Prefix of the per-engine counts: engines.copy, engines.decoder, engines.encoder, engines.jpeg, engines.ofa.
MIG_ATTRIBUTE_ENGINES_PREFIX = "engines."

#: Values of nvidia.com/gpu.sharing-strategy.
SHARING_NONE = "none"
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
#: Values of nvidia.com/mig.strategy (and the device plugin's ``flags.migStrategy``).
MIG_STRATEGY_NONE = "none"
MIG_STRATEGY_SINGLE = "single"
MIG_STRATEGY_MIXED = "mixed"
#: What GFD appends to the product of a time-sliced, not renamed, resource.
SHARED_PRODUCT_SUFFIX = "-SHARED"
#: What GFD puts between product and profile under the single strategy: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.
MIG_PRODUCT_INFIX = "-MIG-"
#: The profile GFD writes when the single strategy cannot describe the node (mixed or no MIG devices).
MIG_INVALID_PROFILE = "INVALID"

# -- GPU Operator labels -----------------------------------------------------------------------------------------

#: The mig-parted config MIG Manager should apply (a key of the ``mig-configs`` mapping, e.g. "all-1g.10gb").
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
#: MIG Manager's progress: "pending", "rebooting", "success" or "failed".
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_CONFIG_PENDING = "pending"
MIG_CONFIG_REBOOTING = "rebooting"
MIG_CONFIG_SUCCESS = "success"
MIG_CONFIG_FAILED = "failed"
#: The key of the device plugin ConfigMap this node's device plugin uses (GPU Operator time-slicing docs).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: Prefix of the per-operand switches: nvidia.com/gpu.deploy.device-plugin = "true" | "false" | "paused-...".
GPU_DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
#: The value MIG Manager sets on gpu.deploy.* of the operands it stops while repartitioning.
DEPLOY_PAUSED_FOR_MIG = "paused-for-mig-change"
#: The driver upgrade controller's state ("upgrade-done", ...).
GPU_DRIVER_UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
#: The value of nvidia.com/gpu-driver-upgrade-state on a node whose driver is up to date.
DRIVER_UPGRADE_DONE = "upgrade-done"

#: Every value the upgrade controller writes (NVIDIA/k8s-operator-libs pkg/upgrade consts.go), in its order.
DRIVER_UPGRADE_REQUIRED = "upgrade-required"
DRIVER_UPGRADE_FAILED = "upgrade-failed"
#: The states between "upgrade-required" and "upgrade-done": the node is cordoned, drained and its driver reloaded.
DRIVER_UPGRADE_IN_PROGRESS_STATES = (
    "cordon-required",
    "wait-for-jobs-required",
    "pod-deletion-required",
    "drain-required",
    "node-maintenance-required",
    "post-maintenance-required",
    "pod-restart-required",
    "validation-required",
    "uncordon-required",
)
#: Operands of the GPU Operator that have a nvidia.com/gpu.deploy.<operand> switch (GPU Operator docs,
#: "Common chart customization options" / per-node operand labels); "operands" switches all of them off.
DEPLOY_OPERANDS_SWITCH = "operands"
#: The value of nvidia.com/mps.capable, and of the GPU Operator's per-node operand switches, when on.
TRUE_VALUE = "true"
FALSE_VALUE = "false"

#: What the GPU Operator runs on a GPU node: "container" (driver, toolkit, device plugin, GFD …), or, with sandbox
#: workloads on, "vm-passthrough" or "vm-vgpu" (the GPUs go to virtual machines: no driver on the node by design).
#: NVIDIA/gpu-operator controllers/state_manager.go @ a22dbf671f2e26f9a1e342f8eea28e196235e110.
GPU_WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
WORKLOAD_CONTAINER = "container"
WORKLOAD_VM_PASSTHROUGH = "vm-passthrough"
WORKLOAD_VM_VGPU = "vm-vgpu"
#: The name NVIDIA's GPU DRA driver registers (the ``driver`` of its ResourceSlices and DeviceClasses
#: gpu.nvidia.com / mig.nvidia.com): kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/main.go
#: ``DriverName`` @ 95932046683719c43b6a0dd9613c2e5aad5d6703.
NVIDIA_GPU_DRA_DRIVER = "gpu.nvidia.com"

#: The GPU Operator's default namespace (its Helm chart's).
GPU_OPERATOR_NAMESPACE = "gpu-operator"
#: The ConfigMap name NVIDIA's time-slicing docs use for the device plugin config.
TIME_SLICING_CONFIG_MAP = "time-slicing-config"
#: The key under which a mig-parted ConfigMap holds its YAML (MIG Manager's ``config.yaml``).
MIG_PARTED_CONFIG_KEY = "config.yaml"
#: The mapping of config names to entries in a mig-parted config (``version: v1`` + ``mig-configs:``).
MIG_PARTED_CONFIGS = "mig-configs"

# -- Kubernetes well-known labels and annotations ---------------------------------------------------------------

#: The node's hostname (kubelet).
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The index of a pod of an Indexed Job (completionMode Indexed, Kubernetes >= 1.21 alpha, GA in 1.24), put on its
#: pods by the Job controller; the controller also sets JOB_COMPLETION_INDEX in their containers from it.
JOB_COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: The node's OS ("linux") (kubelet).
OS_LABEL = "kubernetes.io/os"
#: The node's CPU architecture ("amd64") (kubelet).
ARCH_LABEL = "kubernetes.io/arch"
#: Deprecated spelling of kubernetes.io/os, still set by kubelets up to 1.2x.
BETA_OS_LABEL = "beta.kubernetes.io/os"
#: Deprecated spelling of kubernetes.io/arch.
BETA_ARCH_LABEL = "beta.kubernetes.io/arch"
#: A namespace's own name (NamespaceDefaultLabelName, Kubernetes >= 1.21).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: Label key prefixes reserved for Kubernetes core components, subdomains included ("Labels and Selectors":
#: "The kubernetes.io/ and k8s.io/ prefixes are reserved for Kubernetes core components"). A job's own labels
#: may not use them.
KUBERNETES_RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io")
#: The tool that manages an object (recommended labels); the portal's objects carry "gpu-portal".
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: The component within the application (recommended labels): "web", "worker".
COMPONENT_LABEL = "app.kubernetes.io/component"
#: The application's name (recommended labels): "gpu-portal" on every deploy/ manifest.
APP_NAME_LABEL = "app.kubernetes.io/name"
#: The cloud instance type (cloud provider's node controller): "p4d.24xlarge", "Standard_NC24ads_A100_v4".
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: Deprecated spelling of node.kubernetes.io/instance-type.
BETA_INSTANCE_TYPE_LABEL = "beta.kubernetes.io/instance-type"
#: The node's failure zone (cloud provider / admin).
ZONE_LABEL = "topology.kubernetes.io/zone"
#: Namespace label: the Pod Security Standard level enforced ("restricted").
POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
#: Namespace label: the Kubernetes version of that standard ("latest").
POD_SECURITY_ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
#: Node annotation the TTL controller sets (seconds kubelets may cache objects).
NODE_TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
#: Node annotation: the attach/detach controller, not the kubelet, handles volumes.
CONTROLLER_MANAGED_ATTACH_DETACH_ANNOTATION = "volumes.kubernetes.io/controller-managed-attach-detach"

# -- managed node pools (GKE, EKS, AKS) -------------------------------------------------------------------------

#: GKE: the accelerator type of a GPU node pool ("nvidia-l4", "nvidia-tesla-a100"). Source: GKE "About GPUs in GKE"
#: (https://cloud.google.com/kubernetes-engine/docs/concepts/gpus); used as a node selector throughout
#: GoogleCloudPlatform/container-engine-accelerators (daemonset.yaml, gpudirect-*/nccl-test-*.yaml).
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
#: GKE: the node pool (GKE "About node pools"; not re-checked against a stored copy in this pass).
GKE_NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
#: GKE: which driver GKE installs ("default", "latest"; "disabled" = the user installs it). Source:
#: container-engine-accelerators nvidia-driver-installer/cos/daemonset-preloaded.yaml (node affinity on this key)
#: and gpudirect-tcpx/nccl-test-latest-autopilot.yaml (value "latest").
GKE_GPU_DRIVER_VERSION_LABEL = "cloud.google.com/gke-gpu-driver-version"
#: GKE: GPU sharing ("time-sharing" or "mps") and the clients per GPU. Source: GKE "Time-sharing GPUs on GKE"
#: (https://cloud.google.com/kubernetes-engine/docs/concepts/timesharing-gpus: both labels, value "time-sharing")
#: and "Share GPUs with multiple workloads using NVIDIA MPS" (https://cloud.google.com/kubernetes-engine/docs/how-to/
#: nvidia-mps-gpus: value "mps"); the strategy names are container-engine-accelerators
#: pkg/gpu/nvidia/gpusharing/gpusharing.go's.
GKE_GPU_SHARING_STRATEGY_LABEL = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_MAX_SHARED_CLIENTS_LABEL = "cloud.google.com/gke-max-shared-clients-per-gpu"
GKE_TIME_SHARING = "time-sharing"
#: (GKE's MPS value is the device plugin's: SHARING_MPS.)
#: GKE: the MIG profile every GPU of the pool is cut into ("1g.5gb"). Source: GKE "Running multi-instance GPUs"
#: (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus-multi; the [compute]g.[memory]gb syntax); the
#: label key itself was not found in a stored copy of that page in this pass (recorded as unconfirmed in
#: docs/design.md).
GKE_GPU_PARTITION_SIZE_LABEL = "cloud.google.com/gke-gpu-partition-size"
#: EKS managed node groups label their nodes with the group (EKS "Managed node groups",
#: https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html; seen on real nodes in public code).
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
#: EKS: "ON_DEMAND", "SPOT" or "CAPACITY_BLOCK" (the managed node group's capacityType: AWS CDK aws-eks CapacityType,
#: https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_eks.CapacityType.html).
EKS_CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
#: AKS: the node pool; and "nvidia" on GPU node pools. Source: AKS "Use labels in an AKS cluster"
#: (https://learn.microsoft.com/azure/aks/use-labels: kubernetes.azure.com/accelerator = nvidia) and a real
#: `kubectl describe node` of an AKS GPU node (kubernetes.azure.com/accelerator=nvidia, .../agentpool=gpunp).
AKS_AGENTPOOL_LABEL = "kubernetes.azure.com/agentpool"
#: AKS: the older spelling of the node pool label, still on AKS nodes beside kubernetes.azure.com/agentpool.
AKS_LEGACY_AGENTPOOL_LABEL = "agentpool"
AKS_ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
#: spec.providerID prefixes the cloud node controllers write (gce://, aws://, azure://).
PROVIDER_ID_PREFIXES = {"gce://": "gke", "aws://": "eks", "azure://": "aks"}

# -- Secrets (Kubernetes "Secrets" concept page, secret types) ---------------------------------------------------
#: An arbitrary user-defined Secret: ``data`` holds any keys.
OPAQUE_SECRET_TYPE = "Opaque"
#: A registry credential in the ~/.docker/config.json format; its one key is ``.dockerconfigjson``.
DOCKERCONFIGJSON_SECRET_TYPE = "kubernetes.io/dockerconfigjson"
#: The key of a kubernetes.io/dockerconfigjson Secret.
DOCKERCONFIGJSON_ITEM = ".dockerconfigjson"
#: The key Docker Hub's credentials are stored under in a docker config (what ``kubectl create secret
#: docker-registry`` writes when no --docker-server is given); the kubelet's keyring maps docker.io to it.
DOCKER_HUB_AUTH_ENTRY = "https://index.docker.io/v1/"
#: The registry an image reference without a registry part is pulled from (the distribution reference grammar).
DOCKER_HUB_REGISTRY = "docker.io"
#: NVIDIA NGC's registry; its user name for an NGC API key is the literal ``$oauthtoken``.
NGC_REGISTRY = "nvcr.io"
NGC_API_KEY_USERNAME = "$oauthtoken"

# -- Node Feature Discovery labels -------------------------------------------------------------------------------

#: "true" when a PCI device of vendor 0x10de (NVIDIA) is present; the GPU Operator's node selector.
NFD_NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
#: The NFD labels by which the GPU Operator decides a node has an NVIDIA GPU (any of them "true"): the vendor, and
#: the vendor with PCI class 0302 (3D controller) or 0300 (VGA controller). NVIDIA/gpu-operator
#: controllers/state_manager.go ``gpuNodeLabels`` @ a22dbf671f2e26f9a1e342f8eea28e196235e110; the DRA driver's
#: Helm chart selects nodes by the same labels (kubernetes-sigs/dra-driver-nvidia-gpu
#: deployments/helm/dra-driver-nvidia-gpu/values.yaml @ 95932046683719c43b6a0dd9613c2e5aad5d6703).
NFD_NVIDIA_GPU_LABELS = (
    NFD_NVIDIA_PCI_LABEL,
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
#: Full kernel version.
NFD_KERNEL_VERSION_LABEL = "feature.node.kubernetes.io/kernel-version.full"
#: OS distribution id from /etc/os-release ("ubuntu").
NFD_OS_RELEASE_ID_LABEL = "feature.node.kubernetes.io/system-os_release.ID"
#: OS version from /etc/os-release ("22.04").
NFD_OS_RELEASE_VERSION_ID_LABEL = "feature.node.kubernetes.io/system-os_release.VERSION_ID"

# -- helpers -----------------------------------------------------------------------------------------------------

_MIG_SUFFIX_IN_RESOURCE = re.compile(r"gb\.(me(?:\.all)?|gfx)$")
#: Kubernetes object-name grammar (apimachinery's IsDNS1123Label / IsDNS1123Subdomain). Unanchored: match it with
#: ``fullmatch`` (a pattern ending in '$' used with ``re.match`` lets a trailing newline through), or better, ask
#: is_dns1123_label / is_dns1123_subdomain, which also hold the lengths.
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def is_nvidia(name: str) -> bool:
    """Whether a label or resource name is NVIDIA's (``nvidia.com/...``)."""
    return name.startswith(NVIDIA_PREFIX)


def nvidia(suffix: str) -> str:
    """The NVIDIA name with this suffix: ``nvidia("gpu.product")`` -> ``nvidia.com/gpu.product``."""
    return NVIDIA_PREFIX + suffix


def mig_resource_name(profile: str) -> str:
    """The device plugin's resource for a MIG profile: "1g.10gb" -> nvidia.com/mig-1g.10gb; the '+' of a
    media-extension profile becomes '.' ("1g.10gb+me" -> nvidia.com/mig-1g.10gb.me)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def mig_profile_of_resource(resource: str) -> str:
    """The MIG profile a resource name stands for (inverse of ``mig_resource_name``); raises ValueError when
    the resource is not a MIG resource."""
    if not resource.startswith(MIG_RESOURCE_PREFIX) or len(resource) == len(MIG_RESOURCE_PREFIX):
        raise ValueError(f"{resource!r} is not a MIG resource name (they look like {MIG_RESOURCE_PREFIX}1g.10gb)")
    return _MIG_SUFFIX_IN_RESOURCE.sub(r"gb+\1", resource[len(MIG_RESOURCE_PREFIX) :])


def is_mig_resource(name: str) -> bool:
    """Whether a resource is a MIG device of the mixed strategy (``nvidia.com/mig-...``)."""
    return name.startswith(MIG_RESOURCE_PREFIX)


def shared_resource_name(resource: str) -> str:
    """The renamed time-sliced resource: nvidia.com/gpu -> nvidia.com/gpu.shared."""
    return resource + SHARED_SUFFIX


def time_sliced_resource_name(resource: str, replicas: int, rename: bool) -> str:
    """What the device plugin advertises ``resource`` as with this many replicas: the ``.shared`` name only when
    shared (replicas > 1) and ``renameByDefault`` is on."""
    return shared_resource_name(resource) if replicas > 1 and rename else resource


def unshared_resource_name(resource: str) -> str:
    """The underlying resource of a renamed time-sliced one: nvidia.com/gpu.shared -> nvidia.com/gpu."""
    return resource.removesuffix(SHARED_SUFFIX)


def sharing_strategy(replicas: int) -> str:
    """The nvidia.com/gpu.sharing-strategy GFD writes for this many time-slicing replicas."""
    return SHARING_TIME_SLICING if replicas > 1 else SHARING_NONE


def shared_product(product: str, replicas: int, rename: bool) -> str:
    """The product label GFD writes for a time-sliced resource: "-SHARED" appended when shared and not renamed."""
    return product + SHARED_PRODUCT_SUFFIX if replicas > 1 and not rename else product


def mig_product(product: str, profile: str) -> str:
    """The product label under the single strategy: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb."""
    return product + MIG_PRODUCT_INFIX + profile


def class_default_name(product: str, kind: str, profile: str = "", replicas: int = 1, mps: bool = False) -> str:
    """A resource class's name before an admin gives it one: "A100 SXM4 80GB · MIG 3g.40gb", "A10 · 1/4
    time-sliced", "H100 80GB HBM3". ``kind`` is the class kind ("gpu", "mig", "shared", "mps")."""
    name = product.removeprefix("NVIDIA-").replace("-", " ")
    if kind == "mig":
        return f"{name} · MIG {profile}"
    if kind in ("shared", "mps"):
        return f"{name} · 1/{replicas} {'MPS share' if mps else 'time-sliced'}"
    return name


def mig_label(resource: str, attribute: str) -> str:
    """A GFD MIG attribute label: ``mig_label("nvidia.com/mig-1g.10gb", "count")`` -> nvidia.com/mig-1g.10gb.count.
    ``resource`` is a MIG resource (mixed strategy) or nvidia.com/gpu (single strategy)."""
    return f"{resource}.{attribute}"


def gpu_deploy_label(operand: str) -> str:
    """The GPU Operator's switch for one operand: "device-plugin" -> nvidia.com/gpu.deploy.device-plugin."""
    return GPU_DEPLOY_LABEL_PREFIX + operand


def normalise_profile(profile: str) -> str:
    """A MIG profile as the catalogue spells it: the '.' a label or resource name uses for the '+' of a
    media-extension profile becomes '+' again ("1g.10gb.me" -> "1g.10gb+me")."""
    return _MIG_SUFFIX_IN_RESOURCE.sub(r"gb+\1", profile)


def is_dns1123_label(name: str) -> bool:
    """An RFC 1123 label, as Kubernetes names namespaces, containers and Services: at most 63 lowercase letters,
    digits and '-', starting and ending with a letter or digit."""
    return isinstance(name, str) and len(name) <= 63 and DNS1123_LABEL.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    """An RFC 1123 subdomain, as Kubernetes names most objects (claims, Secrets, label-key prefixes): at most 253
    characters of dot-separated labels."""
    return isinstance(name, str) and len(name) <= 253 and DNS1123_SUBDOMAIN.fullmatch(name) is not None


def is_label_name(part: str) -> bool:
    """The name part of a qualified name (or a non-empty label value): at most 63 letters, digits, '-', '_' and
    '.', starting and ending with a letter or digit."""
    return isinstance(part, str) and len(part) <= 63 and _NAME_PART.fullmatch(part) is not None


def is_qualified_name(name: str) -> bool:
    """Whether ``name`` is a Kubernetes qualified name (label, annotation or taint key; extended resource name):
    an optional DNS-1123 subdomain prefix (<= 253 characters) and '/', then a name part of at most 63
    alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric."""
    prefix, slash, part = name.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):
        return False
    return is_label_name(part)


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value: empty, or a name part as in ``is_qualified_name``."""
    return value == "" or is_label_name(value)


# Volumes ---------------------------------------------------------------------------------------------------------
#: Annotation the PersistentVolume controller (and external provisioners) put on a volume they made.
PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"

# Deployments, ReplicaSets and autoscaling (apps/v1, autoscaling/v2) ------------------------------------------------
#: The label the deployment controller puts on a ReplicaSet and its pods: the hash of the pod template.
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
#: A Deployment's and its ReplicaSets' rollout revision (deployment controller).
DEPLOYMENT_REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
#: On a ReplicaSet: the Deployment's replicas, and replicas + maxSurge, when the controller last scaled it.
DEPLOYMENT_DESIRED_REPLICAS_ANNOTATION = "deployment.kubernetes.io/desired-replicas"
DEPLOYMENT_MAX_REPLICAS_ANNOTATION = "deployment.kubernetes.io/max-replicas"

# -- Dynamic Resource Allocation (k8s.io/api resource/v1; the rest of DRA's vocabulary is vocab.dra's) ---------------

#: Prefix of the standard device attributes (k8s.io/dynamic-resource-allocation/deviceattribute/attribute.go).
DRA_STANDARD_ATTRIBUTE_PREFIX = "resource.kubernetes.io/"
#: The annotation the resourceclaim controller puts on a claim it made from a pod's template: the pod's claim name
#: (pkg/controller/resourceclaim/controller.go).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

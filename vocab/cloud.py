"""GPU nodes of managed Kubernetes (GKE, EKS, AKS): which provider runs a node, and which GPUs it has.

On a managed GPU node pool the provider installs the driver and runs a device plugin that advertises
``nvidia.com/gpu``, but GPU Feature Discovery is not part of that stack, so the node carries none of GFD's
labels. The GPU model then comes from the provider: GKE labels the node with its accelerator type
(``cloud.google.com/gke-accelerator``), EKS and AKS only with the instance type
(``node.kubernetes.io/instance-type``), which the tables below turn into a model and a count.

Sources, and how far each was confirmed (docs/design.md "Node shapes" has the same per row):
- Labels: see vocab/names.py, where each key carries its source.
- GKE accelerator values: nvidia-h100-80gb, nvidia-h100-mega-80gb, nvidia-h200-141gb, nvidia-b200 and nvidia-gb300
  are used as node selectors in Google's own GoogleCloudPlatform/container-engine-accelerators (gpudirect-tcpx/,
  gpudirect-tcpxo/, gpudirect-rdma/ nccl-test manifests); nvidia-tesla-a100, nvidia-a100-80gb and nvidia-gb200
  appear as node selectors in many public manifests but were not confirmed in a Google page or repo here;
  nvidia-tesla-t4, nvidia-l4, nvidia-tesla-v100, nvidia-tesla-p100 and nvidia-tesla-p4 are written from GKE's
  "About GPUs in GKE" as remembered, not re-confirmed in this pass.
- Instance and VM size tables (GPU model and count per type): written from AWS "Amazon EC2 accelerated computing
  instances" and Azure "Sizes for virtual machines" as remembered, NOT confirmed against a stored copy in this
  pass (public manifests corroborate g6.2xlarge = L4, Standard_NC24ads_A100_v4 = 1x A100 80GB,
  Standard_NC96ads_A100_v4 = 4x A100 80GB, Standard_ND96isr_H100_v5 = 8x H100). A wrong row gives a wrong model
  or count on the node page; the device plugin's capacity still decides what is scheduled.
- Product names are GFD's sanitised spellings of what nvidia-smi prints on those machines (same caveat).
- GKE's MPS needs hostIPC in the pod: see GKE_MPS_NEEDS_HOST_IPC below.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from vocab.names import (
    AKS_ACCELERATOR_LABEL,
    AKS_AGENTPOOL_LABEL,
    BETA_INSTANCE_TYPE_LABEL,
    EKS_NODEGROUP_LABEL,
    GKE_ACCELERATOR_LABEL,
    GKE_NODEPOOL_LABEL,
    GPU_PRODUCT_LABEL,
    INSTANCE_TYPE_LABEL,
    PROVIDER_ID_PREFIXES,
)

GKE, EKS, AKS = "gke", "eks", "aks"
PROVIDER_NAMES = {GKE: "GKE", EKS: "EKS", AKS: "AKS"}
AMD64, ARM64 = "amd64", "arm64"


@dataclass(frozen=True)
class CloudGpu:
    """What one accelerator type or instance type holds."""

    product: str  # GFD's sanitised product name ("NVIDIA-A100-SXM4-40GB")
    count: int  # GPUs per instance (0: not fixed by the type, e.g. a GKE accelerator type)
    architecture: str = AMD64  # the instance's CPU architecture


#: GKE accelerator types (``cloud.google.com/gke-accelerator``). The count comes from the node's capacity.
GKE_ACCELERATORS: dict[str, CloudGpu] = {
    "nvidia-tesla-t4": CloudGpu("Tesla-T4", 0),
    "nvidia-tesla-v100": CloudGpu("Tesla-V100-SXM2-16GB", 0),
    "nvidia-tesla-p100": CloudGpu("Tesla-P100-PCIE-16GB", 0),
    "nvidia-tesla-p4": CloudGpu("Tesla-P4", 0),
    "nvidia-l4": CloudGpu("NVIDIA-L4", 0),
    "nvidia-tesla-a100": CloudGpu("NVIDIA-A100-SXM4-40GB", 0),
    "nvidia-a100-80gb": CloudGpu("NVIDIA-A100-SXM4-80GB", 0),
    "nvidia-h100-80gb": CloudGpu("NVIDIA-H100-80GB-HBM3", 0),
    "nvidia-h100-mega-80gb": CloudGpu("NVIDIA-H100-80GB-HBM3", 0),
    "nvidia-h200-141gb": CloudGpu("NVIDIA-H200", 0),
    "nvidia-b200": CloudGpu("NVIDIA-B200", 0),
    "nvidia-gb200": CloudGpu("NVIDIA-GB200", 0, ARM64),
    # A4X Max (Grace Blackwell Ultra, arm64); the product spelling is assumed from GB200's.
    "nvidia-gb300": CloudGpu("NVIDIA-GB300", 0, ARM64),
}

#: EC2 instance types (``node.kubernetes.io/instance-type``) with NVIDIA GPUs.
EKS_INSTANCE_TYPES: dict[str, CloudGpu] = {
    **{f"g4dn.{size}": CloudGpu("Tesla-T4", 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g4dn.12xlarge": CloudGpu("Tesla-T4", 4),
    "g4dn.metal": CloudGpu("Tesla-T4", 8),
    **{f"g5.{size}": CloudGpu("NVIDIA-A10G", 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g5.12xlarge": CloudGpu("NVIDIA-A10G", 4),
    "g5.24xlarge": CloudGpu("NVIDIA-A10G", 4),
    "g5.48xlarge": CloudGpu("NVIDIA-A10G", 8),
    **{f"g6.{size}": CloudGpu("NVIDIA-L4", 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g6.12xlarge": CloudGpu("NVIDIA-L4", 4),
    "g6.24xlarge": CloudGpu("NVIDIA-L4", 4),
    "g6.48xlarge": CloudGpu("NVIDIA-L4", 8),
    **{f"g6e.{size}": CloudGpu("NVIDIA-L40S", 1) for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    "g6e.12xlarge": CloudGpu("NVIDIA-L40S", 4),
    "g6e.24xlarge": CloudGpu("NVIDIA-L40S", 4),
    "g6e.48xlarge": CloudGpu("NVIDIA-L40S", 8),
    "p3.2xlarge": CloudGpu("Tesla-V100-SXM2-16GB", 1),
    "p3.8xlarge": CloudGpu("Tesla-V100-SXM2-16GB", 4),
    "p3.16xlarge": CloudGpu("Tesla-V100-SXM2-16GB", 8),
    "p4d.24xlarge": CloudGpu("NVIDIA-A100-SXM4-40GB", 8),
    "p4de.24xlarge": CloudGpu("NVIDIA-A100-SXM4-80GB", 8),
    "p5.48xlarge": CloudGpu("NVIDIA-H100-80GB-HBM3", 8),
    "p5e.48xlarge": CloudGpu("NVIDIA-H200", 8),
    "p5en.48xlarge": CloudGpu("NVIDIA-H200", 8),
    "g5g.xlarge": CloudGpu("NVIDIA-T4G", 1, ARM64),
    "g5g.16xlarge": CloudGpu("NVIDIA-T4G", 2, ARM64),
    "p6e-gb200.36xlarge": CloudGpu("NVIDIA-GB200", 4, ARM64),
}

#: Azure VM sizes (``node.kubernetes.io/instance-type``) with NVIDIA GPUs (whole GPUs only; fractional NVadsA10
#: sizes are vGPU and carry no ``nvidia.com/gpu``).
AKS_INSTANCE_TYPES: dict[str, CloudGpu] = {
    "Standard_NC4as_T4_v3": CloudGpu("Tesla-T4", 1),
    "Standard_NC8as_T4_v3": CloudGpu("Tesla-T4", 1),
    "Standard_NC16as_T4_v3": CloudGpu("Tesla-T4", 1),
    "Standard_NC64as_T4_v3": CloudGpu("Tesla-T4", 4),
    "Standard_NC6s_v3": CloudGpu("Tesla-V100-PCIE-16GB", 1),
    "Standard_NC12s_v3": CloudGpu("Tesla-V100-PCIE-16GB", 2),
    "Standard_NC24s_v3": CloudGpu("Tesla-V100-PCIE-16GB", 4),
    "Standard_NV36ads_A10_v5": CloudGpu("NVIDIA-A10", 1),
    "Standard_NV72ads_A10_v5": CloudGpu("NVIDIA-A10", 2),
    "Standard_NC24ads_A100_v4": CloudGpu("NVIDIA-A100-80GB-PCIe", 1),
    "Standard_NC48ads_A100_v4": CloudGpu("NVIDIA-A100-80GB-PCIe", 2),
    "Standard_NC96ads_A100_v4": CloudGpu("NVIDIA-A100-80GB-PCIe", 4),
    "Standard_ND96asr_v4": CloudGpu("NVIDIA-A100-SXM4-40GB", 8),
    "Standard_ND96amsr_A100_v4": CloudGpu("NVIDIA-A100-SXM4-80GB", 8),
    "Standard_NC40ads_H100_v5": CloudGpu("NVIDIA-H100-NVL", 1),
    "Standard_NC80adis_H100_v5": CloudGpu("NVIDIA-H100-NVL", 2),
    "Standard_ND96isr_H100_v5": CloudGpu("NVIDIA-H100-80GB-HBM3", 8),
    "Standard_ND96isr_H200_v5": CloudGpu("NVIDIA-H200", 8),
}

#: What each provider runs on a GPU node of a managed pool (for the diagnosis).
PROVIDER_STACKS = {
    GKE: "GKE installs the NVIDIA driver itself (or leaves it to you when gke-gpu-driver-version=disabled) and "
    "runs its own device plugin (the nvidia-gpu-device-plugin DaemonSet in kube-system); GPU Feature Discovery "
    "is not part of it, so the model comes from the node pool's accelerator label.",
    EKS: "The EKS-optimised accelerated AMI ships the NVIDIA driver and container toolkit and the NVIDIA device "
    "plugin DaemonSet advertises the GPUs; without GPU Feature Discovery the model comes from the instance type.",
    AKS: "AKS installs the NVIDIA driver on GPU node pools and the NVIDIA device plugin advertises the GPUs; "
    "without GPU Feature Discovery the model comes from the VM size.",
}


#: Why the portal keeps its jobs off a GKE node pool shared through MPS. GKE's device plugin gives MPS clients the
#: control daemon's pipe directory (/tmp/nvidia-mps, GoogleCloudPlatform/container-engine-accelerators
#: pkg/gpu/nvidia/manager.go), and GKE's guide requires ``hostIPC: true`` in every pod that uses it ("Share GPUs
#: with multiple workloads using NVIDIA MPS", https://cloud.google.com/kubernetes-engine/docs/how-to/nvidia-mps-gpus).
#: The portal never renders host namespaces. NVIDIA's own device plugin is different: it mounts the daemon's pipe
#: directory and a private /dev/shm into the container (NVIDIA/k8s-device-plugin internal/plugin/mps.go), so its
#: MPS shares need no hostIPC and portal jobs can use them.
GKE_MPS_NEEDS_HOST_IPC = (
    "GKE shares these GPUs through NVIDIA MPS, and GKE's MPS needs every pod that uses it to share the host's IPC "
    "namespace (hostIPC: true) to reach the MPS control daemon. The portal never gives its jobs host namespaces, "
    "so it keeps its jobs off this node."
)


def provider_of(labels: dict[str, str], provider_id: str = "") -> str:
    """ "gke", "eks", "aks" or "" (not a managed node pool we know), from the provider's own node labels or,
    failing those, the node's spec.providerID."""
    if GKE_NODEPOOL_LABEL in labels or GKE_ACCELERATOR_LABEL in labels:
        return GKE
    if EKS_NODEGROUP_LABEL in labels:
        return EKS
    if AKS_AGENTPOOL_LABEL in labels or AKS_ACCELERATOR_LABEL in labels:
        return AKS
    for prefix, provider in PROVIDER_ID_PREFIXES.items():
        if provider_id.startswith(prefix):
            return provider
    return ""


def instance_type_of(labels: dict[str, str]) -> str:
    return labels.get(INSTANCE_TYPE_LABEL) or labels.get(BETA_INSTANCE_TYPE_LABEL) or ""


def cloud_gpu(provider: str, labels: dict[str, str]) -> tuple[CloudGpu | None, str]:
    """The GPU of a managed node and where that answer came from ("<label>=<value>"), or (None, "")."""
    if provider == GKE and labels.get(GKE_ACCELERATOR_LABEL):
        value = labels[GKE_ACCELERATOR_LABEL]
        gpu = GKE_ACCELERATORS.get(value)
        if gpu is not None:
            return gpu, f"{GKE_ACCELERATOR_LABEL}={value}"
    instance_type = instance_type_of(labels)
    table = {EKS: EKS_INSTANCE_TYPES, AKS: AKS_INSTANCE_TYPES}.get(provider)
    if table is None and provider == GKE:
        table = {}
    for candidates in [table] if table is not None else [EKS_INSTANCE_TYPES, AKS_INSTANCE_TYPES]:
        if instance_type in candidates:
            return candidates[instance_type], f"{INSTANCE_TYPE_LABEL}={instance_type}"
    return None, ""


def labels_naming(product: str) -> list[tuple[str, list[str]]]:
    """The node labels, each with its values, by which a node says it has GPUs of ``product`` (GFD's spelling):
    GFD's product label where GFD runs, else the managed pool's own (GKE's accelerator type; EKS and AKS instance
    types with that GPU), as ``cloud_gpu`` reads them. Work the scheduler places (a service's replicas) matches any
    of them, so it finds its GPUs on a managed pool too."""
    found = [(GPU_PRODUCT_LABEL, [product])]
    accelerators = sorted(value for value, gpu in GKE_ACCELERATORS.items() if gpu.product == product)
    if accelerators:
        found.append((GKE_ACCELERATOR_LABEL, accelerators))
    types = sorted(t for table in (EKS_INSTANCE_TYPES, AKS_INSTANCE_TYPES) for t, gpu in table.items()
                   if gpu.product == product)  # fmt: skip
    if types:
        found.append((INSTANCE_TYPE_LABEL, types))
    return found

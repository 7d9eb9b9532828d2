"""Node objects of the GPU stacks real clusters run, one function per shape, and what the portal makes of each
(EXPECTED), shared by the unit tests (parsed as dicts) and the kube tests (created as Node objects in a real
kube-apiserver and read back through KubernetesBackend).

Every label and value is from its owner's documentation or code:
- GFD / device plugin: NVIDIA k8s-device-plugin README ("Shared Access to GPUs": timeSlicing and mps, the
  ``-SHARED`` product suffix, ``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/mps.capable``) and
  docs/gpu-feature-discovery (label list, old ``cuda.driver.*`` / ``cuda.runtime.*`` and new
  ``cuda.driver-version.*`` / ``cuda.runtime-version.*`` spellings, ``nvidia.com/gpu.clique``).
- GPU Operator: the per-node ``nvidia.com/gpu.deploy.<operand>`` switches ("GPU Operator: Common chart
  customization options" / operand labels), MIG Manager's ``nvidia.com/mig.config.state`` (pending, rebooting,
  success, failed), the driver upgrade controller's ``nvidia.com/gpu-driver-upgrade-state``
  (NVIDIA/k8s-operator-libs pkg/upgrade consts: upgrade-required, cordon-required, wait-for-jobs-required,
  pod-deletion-required, drain-required, pod-restart-required, validation-required, uncordon-required,
  upgrade-done, upgrade-failed).
- Kubernetes: node conditions and the taints the node lifecycle controller adds for them (``Taints and
  Tolerations``: node.kubernetes.io/memory-pressure, disk-pressure, pid-pressure, network-unavailable), the
  kubelet's condition reasons (pkg/kubelet/nodestatus/setters.go), well-known labels kubernetes.io/arch and
  node.kubernetes.io/instance-type.
- GKE: "About GPUs in GKE", "Run multi-instance GPUs" (cloud.google.com/gke-gpu-partition-size), "Share GPUs
  ... time-sharing / NVIDIA MPS" (gke-gpu-sharing-strategy, gke-max-shared-clients-per-gpu: the node advertises
  nvidia.com/gpu = GPUs x clients), the nvidia.com/gpu=present:NoSchedule taint GKE adds.
- EKS: "Managed node groups" (eks.amazonaws.com/nodegroup, eks.amazonaws.com/capacityType); EC2 P4d = 8x A100
  40GB. AKS: "Use GPUs on AKS" (kubernetes.azure.com/agentpool, kubernetes.azure.com/accelerator=nvidia, the
  pool created with --node-taints sku=gpu:NoSchedule); "Add an Azure Spot node pool" (the
  kubernetes.azure.com/scalesetpriority=spot:NoSchedule taint and label); Standard_NC24ads_A100_v4 = 1x A100
  80GB PCIe.
"""

from __future__ import annotations

import copy

from gpus.choices import NodeHealth as H
from gpus.diagnosis import ERROR, INFO, OK, WARNING
from tests.realdata import real_json

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
#: The taint AKS's docs give GPU node pools, and the one AKS puts on spot pools.
AKS_GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
AKS_SPOT_TAINT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
#: Real GFD labels of a one-GPU H100 node (fixture 02), the base of the GFD shapes.
H100 = real_json("02")


def node(
    name: str,
    labels: dict[str, str],
    capacity: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[dict] | None = None,
    conditions: list[dict] | None = None,
    provider_id: str = "",
) -> dict:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **(capacity or {})}
    alloc = {"cpu": "63", "memory": "500Gi", "pods": "110", **{k: v for k, v in capacity.items() if "/" in k}}
    alloc.update(allocatable or {})
    spec: dict = {"taints": copy.deepcopy(taints if taints is not None else [GPU_TAINT])}
    if provider_id:
        spec["providerID"] = provider_id
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": alloc,
            "conditions": conditions
            or [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready"}],
        },
    }


def h100(name: str, gpus: int = 8, **extra: str) -> dict[str, str]:
    return {**H100, "nvidia.com/gpu.count": str(gpus), "kubernetes.io/arch": "amd64", **extra}


#: What Node Feature Discovery and the Kubernetes node carry on the same machine before any NVIDIA software runs:
#: fixture 02 without a single nvidia.com/ label, plus NFD's NVIDIA PCI label (the GPU Operator's gpuNodeLabels,
#: NVIDIA/gpu-operator controllers/state_manager.go @ a22dbf67).
BARE = {
    **{k: v for k, v in H100.items() if not k.startswith("nvidia.com/")},
    "feature.node.kubernetes.io/pci-10de.present": "true",
}
#: The GPU Operator's own labels on a GPU node of its ClusterPolicy (device-plugin) stack: nvidia.com/gpu.present
#: and the gpu.deploy.* switches of the "container" workload (state_manager.go gpuStateLabels), as fixture 02 has them.
OPERATOR = {k: v for k, v in H100.items() if k.startswith(("nvidia.com/gpu.deploy.", "nvidia.com/gpu.present"))}
#: The GPU Operator's labels on a node of its GPUCluster (DRA) stack: gpu.present and gpuClusterStateLabels
#: (driver, dra-driver, dra-validator, dcgm-dra, dcgm-exporter-dra); the device-plugin stack's switches are swept
#: off (devicePluginOnlyStateLabelKeys; controllers/nodelabeling_controller.go updateGPUStateLabels).
DRA_OPERATOR = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.deploy.driver": "true",
    "nvidia.com/gpu.deploy.dra-driver": "true",
    "nvidia.com/gpu.deploy.dra-validator": "true",
    "nvidia.com/gpu.deploy.dcgm-dra": "true",
    "nvidia.com/gpu.deploy.dcgm-exporter-dra": "true",
}


def b200_single(name: str) -> dict[str, str]:
    """An 8× B200 node cut all-1g.23gb under the single strategy, as GFD labels it: the real GPU Operator node of
    fixture 02 with the B200's facts. Product "NVIDIA B200" and driver 580.105.08 from a real ``nvidia-smi -q -x``
    (NVIDIA/k8s-test-infra tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-b200.xml @ 3b2b865d); the
    1g.23gb instance (18 SMs, 22.00 GiB, 7 per GPU) from the B200's ``nvidia-smi mig -lgip`` (NVIDIA/mig-parted#166);
    under the single strategy gpu.count counts MIG devices and gpu.memory is a device's (docs/gpu-feature-discovery)."""
    return {
        **{k: v for k, v in H100.items() if not k.startswith("nvidia.com/cuda.")},
        "nvidia.com/cuda.driver-version.full": "580.105.08",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "105",
        "nvidia.com/cuda.driver-version.revision": "08",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/gpu.product": "NVIDIA-B200-MIG-1g.23gb",
        "nvidia.com/gpu.count": "56",
        "nvidia.com/gpu.memory": "22528",
        "nvidia.com/gpu.multiprocessors": "18",
        "nvidia.com/gpu.slices.gi": "1",
        "nvidia.com/gpu.slices.ci": "1",
        "nvidia.com/gpu.family": "blackwell",
        "nvidia.com/gpu.compute.major": "10",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/mig.config": "all-1g.23gb",
        "nvidia.com/mig.strategy": "single",
    }


def h200_mixed(name: str) -> dict[str, str]:
    """An 8× H200 node in all-balanced under the mixed strategy: the real mixed labels of fixture 01 with the
    H200's profiles (1g.18gb 16 SMs, 2g.35gb 32, 3g.71gb 60: the H200's ``nvidia-smi mig -lgip``,
    NVIDIA/mig-parted#120) and the operator's all-balanced for 0x2335 (2×1g.18gb, 2g.35gb, 3g.71gb per GPU)."""
    mixed = real_json("01")
    labels = {k: v for k, v in mixed.items() if not k.startswith("nvidia.com/mig-")}
    labels.update(
        {
            "nvidia.com/gpu.product": "NVIDIA-H200",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "143771",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.strategy": "mixed",
        }
    )
    for profile, count, sms, slices in (("1g.18gb", 16, 16, 1), ("2g.35gb", 8, 32, 2), ("3g.71gb", 8, 60, 3)):
        labels[f"nvidia.com/mig-{profile}.count"] = str(count)
        labels[f"nvidia.com/mig-{profile}.multiprocessors"] = str(sms)
        labels[f"nvidia.com/mig-{profile}.slices.gi"] = str(slices)
        labels[f"nvidia.com/mig-{profile}.slices.ci"] = str(slices)
    return labels


def shapes(prefix: str = "shape") -> dict[str, dict]:
    """Every shape, keyed by a short name; node names start with ``prefix``."""
    n = lambda key: f"{prefix}-{key}"  # noqa: E731 - a name maker, read once
    return {
        "gke-l4": node(
            n("gke-l4"),
            {
                "cloud.google.com/gke-nodepool": "l4-pool",
                "cloud.google.com/gke-accelerator": "nvidia-l4",
                "cloud.google.com/gke-gpu-driver-version": "latest",
                "node.kubernetes.io/instance-type": "g2-standard-24",
                "kubernetes.io/arch": "amd64",
            },
            {GPU: "2"},
            provider_id=f"gce://project/europe-west4-a/{n('gke-l4')}",
        ),
        "gke-a100-mig": node(
            n("gke-a100-mig"),
            {
                "cloud.google.com/gke-nodepool": "mig-pool",
                "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-gpu-partition-size": "1g.5gb",
                "node.kubernetes.io/instance-type": "a2-highgpu-2g",
            },
            {GPU: "14"},
        ),
        "gke-t4-mps": node(
            n("gke-t4-mps"),
            {
                "cloud.google.com/gke-nodepool": "mps-pool",
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                "cloud.google.com/gke-gpu-sharing-strategy": "mps",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "4",
            },
            {GPU: "4"},
        ),
        "eks-p4d": node(
            n("eks-p4d"),
            {
                "eks.amazonaws.com/nodegroup": "a100",
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "node.kubernetes.io/instance-type": "p4d.24xlarge",
            },
            {GPU: "8"},
            taints=[],
            provider_id="aws:///us-east-1a/i-0123456789abcdef0",
        ),
        "eks-p4d-missing-gpu": node(
            n("eks-p4d-missing-gpu"),
            {"eks.amazonaws.com/nodegroup": "a100", "node.kubernetes.io/instance-type": "p4d.24xlarge"},
            {GPU: "7"},
            taints=[],
        ),
        "aks-nc24": node(
            n("aks-nc24"),
            {
                "kubernetes.azure.com/agentpool": "gpunp",
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
            },
            {GPU: "1"},
            taints=[AKS_GPU_TAINT],
        ),
        # An AKS spot GPU pool, created as "Use GPUs on AKS" does (--node-taints sku=gpu:NoSchedule); AKS itself
        # taints spot nodes kubernetes.azure.com/scalesetpriority=spot:NoSchedule and labels them with the priority
        # ("Add an Azure Spot node pool"); AKS nodes carry the pool label in both spellings.
        "aks-nc24-spot": node(
            n("aks-nc24-spot"),
            {
                "kubernetes.azure.com/agentpool": "spotgpu",
                "agentpool": "spotgpu",
                "kubernetes.azure.com/accelerator": "nvidia",
                "kubernetes.azure.com/scalesetpriority": "spot",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
            },
            {GPU: "1"},
            taints=[AKS_GPU_TAINT, AKS_SPOT_TAINT],
            provider_id=f"azure:///subscriptions/s/resourceGroups/mc_rg/providers/Microsoft.Compute/"
            f"virtualMachineScaleSets/aks-spotgpu-vmss/virtualMachines/{n('aks-nc24-spot')}",
        ),
        # A GKE A3 pool (8 x H100 80GB): GKE taints GPU pools nvidia.com/gpu=present:NoSchedule itself ("About GPUs
        # in GKE") and labels the nodes with the pool and the accelerator type.
        "gke-h100-a3": node(
            n("gke-h100-a3"),
            {
                "cloud.google.com/gke-nodepool": "a3-pool",
                "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                "kubernetes.io/arch": "amd64",
            },
            {GPU: "8"},
            provider_id=f"gce://project/us-central1-a/{n('gke-h100-a3')}",
        ),
        "unhealthy": node(n("unhealthy"), h100(n("unhealthy")), {GPU: "8"}, {GPU: "6"}),
        "all-unhealthy": node(n("all-unhealthy"), h100(n("all-unhealthy")), {GPU: "8"}, {GPU: "0"}),
        "mps": node(
            n("mps"),
            {
                **h100(n("mps"), 2),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "mps",
                "nvidia.com/mps.capable": "true",
            },
            {GPU: "8"},
        ),
        "time-sliced": node(
            n("time-sliced"),
            {
                **h100(n("time-sliced"), 2),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
            },
            {GPU: "8"},
        ),
        "upgrade-draining": node(
            n("upgrade-draining"),
            h100(n("upgrade-draining"), **{"nvidia.com/gpu-driver-upgrade-state": "drain-required"}),
            {GPU: "8"},
        ),
        "upgrade-failed": node(
            n("upgrade-failed"),
            h100(n("upgrade-failed"), **{"nvidia.com/gpu-driver-upgrade-state": "upgrade-failed"}),
            {GPU: "8"},
        ),
        "plugin-switched-off": node(
            n("plugin-switched-off"), h100(n("plugin-switched-off"), **{"nvidia.com/gpu.deploy.device-plugin": "false"})
        ),
        "operands-off": node(n("operands-off"), h100(n("operands-off"), **{"nvidia.com/gpu.deploy.operands": "false"})),
        "mig-pending": node(
            n("mig-pending"),
            h100(
                n("mig-pending"),
                **{
                    "nvidia.com/mig.config": "all-1g.10gb",
                    "nvidia.com/mig.config.state": "pending",
                    "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
                },
            ),
        ),
        "mig-rebooting": node(
            n("mig-rebooting"),
            h100(
                n("mig-rebooting"),
                **{
                    "nvidia.com/mig.config": "all-1g.10gb",
                    "nvidia.com/mig.config.state": "rebooting",
                    "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
                },
            ),
        ),
        "mig-failed": node(
            n("mig-failed"),
            h100(n("mig-failed"), **{"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "failed"}),
            {GPU: "8"},
        ),
        "memory-pressure": node(
            n("memory-pressure"),
            h100(n("memory-pressure")),
            {GPU: "8"},
            taints=[GPU_TAINT, {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}],
            conditions=[
                {
                    "type": "MemoryPressure",
                    "status": "True",
                    "reason": "KubeletHasInsufficientMemory",
                    "message": "kubelet has insufficient memory available",
                },
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        ),
        "network-unavailable": node(
            n("network-unavailable"),
            h100(n("network-unavailable")),
            {GPU: "8"},
            taints=[GPU_TAINT, {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}],
            conditions=[
                {"type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        ),
        # GFD before v0.15 wrote only cuda.driver.* / cuda.runtime.*; newer GFD writes cuda.driver-version.* /
        # cuda.runtime-version.* as well (docs/gpu-feature-discovery label list; fixture 02 carries both).
        "gfd-old-labels": node(
            n("gfd-old-labels"),
            {
                **{k: v for k, v in h100(n("gfd-old-labels")).items() if "-version." not in k},
                "nvidia.com/cuda.driver.major": "535",
                "nvidia.com/cuda.driver.minor": "104",
                "nvidia.com/cuda.driver.rev": "05",
                "nvidia.com/cuda.runtime.major": "12",
                "nvidia.com/cuda.runtime.minor": "2",
            },
            {GPU: "8"},
        ),
        "gfd-new-labels": node(
            n("gfd-new-labels"),
            {
                **{
                    k: v
                    for k, v in h100(n("gfd-new-labels")).items()
                    if not k.startswith(("nvidia.com/cuda.driver.", "nvidia.com/cuda.runtime."))
                },
                "nvidia.com/cuda.driver-version.full": "560.35.03",
                "nvidia.com/cuda.driver-version.major": "560",
                "nvidia.com/cuda.driver-version.minor": "35",
                "nvidia.com/cuda.driver-version.revision": "03",
                "nvidia.com/cuda.runtime-version.full": "12.6",
                "nvidia.com/cuda.runtime-version.major": "12",
                "nvidia.com/cuda.runtime-version.minor": "6",
            },
            {GPU: "8"},
        ),
        "gke-t4-time-sharing": node(
            n("gke-t4-time-sharing"),
            {
                "cloud.google.com/gke-nodepool": "ts-pool",
                "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
                "cloud.google.com/gke-max-shared-clients-per-gpu": "3",
            },
            {GPU: "3"},
        ),
        "upgrade-queued": node(
            n("upgrade-queued"),
            h100(n("upgrade-queued"), **{"nvidia.com/gpu-driver-upgrade-state": "upgrade-required"}),
            {GPU: "8"},
        ),
        "disk-pressure": node(
            n("disk-pressure"),
            h100(n("disk-pressure")),
            {GPU: "8"},
            taints=[GPU_TAINT, {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}],
            conditions=[
                {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        ),
        "pid-pressure": node(
            n("pid-pressure"),
            h100(n("pid-pressure")),
            {GPU: "8"},
            taints=[GPU_TAINT, {"key": "node.kubernetes.io/pid-pressure", "effect": "NoSchedule"}],
            conditions=[
                {"type": "PIDPressure", "status": "True", "reason": "KubeletHasInsufficientPID"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
        ),
        "gh200": node(
            n("gh200"),
            {
                **H100,
                "nvidia.com/gpu.product": "NVIDIA-GH200-480GB",
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.memory": "97871",
                "nvidia.com/gpu.clique": "5d2c1a1e-7c0b-4a8e-9b1f-3c2d1e0f9a8b.1",
                "kubernetes.io/arch": "arm64",
                "beta.kubernetes.io/arch": "arm64",
            },
            {GPU: "1"},
        ),
        # Issue 31 item 17: Blackwell and Hopper MIG nodes the catalogue must read.
        "b200-mig-single": node(n("b200-mig-single"), b200_single(n("b200-mig-single")), {GPU: "56"}),
        "h200-mig-mixed": node(
            n("h200-mig-mixed"),
            h200_mixed(n("h200-mig-mixed")),
            {"nvidia.com/mig-1g.18gb": "16", "nvidia.com/mig-2g.35gb": "8", "nvidia.com/mig-3g.71gb": "8"},
        ),
        # Issue 31 item 18: a GPU with no driver is the driver's fault; a DRA node is not a broken device plugin.
        "no-driver-operator": node(n("no-driver-operator"), {**BARE, **OPERATOR}),
        "no-driver-nfd-only": node(n("no-driver-nfd-only"), BARE, taints=[]),
        "dra-driver": node(n("dra-driver"), {**BARE, **DRA_OPERATOR}),
    }


#: shape -> (product, physical GPUs, provider, (finding title contains, severity), health, blocked)
EXPECTED = {
    "gke-l4": ("NVIDIA-L4", 2, "gke", ("GKE-managed GPU stack", OK), H.HEALTHY, False),
    "gke-a100-mig": ("NVIDIA-A100-SXM4-40GB", 2, "gke", ("GKE-managed GPU stack", OK), H.HEALTHY, False),
    "gke-t4-mps": ("Tesla-T4", 1, "gke", ("GKE MPS sharing (4 clients", INFO), H.HEALTHY, True),
    "gke-t4-time-sharing": ("Tesla-T4", 1, "gke", ("Time-sliced, 3 replicas", OK), H.HEALTHY, False),
    "gfd-old-labels": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Accepts new work", OK), H.HEALTHY, False),
    "gfd-new-labels": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Accepts new work", OK), H.HEALTHY, False),
    "upgrade-queued": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Driver upgrade queued", INFO), H.HEALTHY, False),
    "disk-pressure": ("NVIDIA-H100-80GB-HBM3", 8, "", ("disk pressure", WARNING), H.WARNING, True),
    "pid-pressure": ("NVIDIA-H100-80GB-HBM3", 8, "", ("short of process IDs", WARNING), H.WARNING, True),
    "eks-p4d": ("NVIDIA-A100-SXM4-40GB", 8, "eks", ("EKS-managed GPU stack", OK), H.HEALTHY, False),
    "eks-p4d-missing-gpu": ("NVIDIA-A100-SXM4-40GB", 7, "eks", ("7 of 8 GPUs visible", WARNING), H.WARNING, False),
    "aks-nc24": ("NVIDIA-A100-80GB-PCIe", 1, "aks", ("AKS-managed GPU stack", OK), H.HEALTHY, False),
    "aks-nc24-spot": ("NVIDIA-A100-80GB-PCIe", 1, "aks", ("Tainted sku=gpu:NoSchedule", OK), H.HEALTHY, False),
    "gke-h100-a3": ("NVIDIA-H100-80GB-HBM3", 8, "gke", ("Tainted nvidia.com/gpu=present:NoSchedule", OK), H.HEALTHY,
                    False),
    "unhealthy": ("NVIDIA-H100-80GB-HBM3", 8, "", ("2 of 8 GPUs unhealthy", WARNING), H.WARNING, False),
    "all-unhealthy": ("NVIDIA-H100-80GB-HBM3", 8, "", ("none allocatable", ERROR), H.ERROR, True),
    "mps": ("NVIDIA-H100-80GB-HBM3", 2, "", ("MPS sharing, 4 clients per GPU", OK), H.HEALTHY, False),
    "time-sliced": ("NVIDIA-H100-80GB-HBM3", 2, "", ("Time-sliced, 4 replicas", OK), H.HEALTHY, False),
    "upgrade-draining": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Driver upgrade in progress", WARNING), H.WARNING, True),
    "upgrade-failed": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Driver upgrade failed", ERROR), H.ERROR, True),
    "plugin-switched-off": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Device plugin switched off", INFO), H.DISABLED, True),
    "operands-off": ("NVIDIA-H100-80GB-HBM3", 8, "", ("Device plugin switched off", INFO), H.DISABLED, True),
    "mig-pending": ("NVIDIA-H100-80GB-HBM3", 8, "", ("MIG reconfiguration pending", WARNING), H.WARNING, True),
    "mig-rebooting": ("NVIDIA-H100-80GB-HBM3", 8, "", ("MIG reconfiguration rebooting", WARNING), H.WARNING, True),
    "mig-failed": ("NVIDIA-H100-80GB-HBM3", 8, "", ("MIG configuration failed", ERROR), H.ERROR, True),
    "memory-pressure": ("NVIDIA-H100-80GB-HBM3", 8, "", ("memory pressure", WARNING), H.WARNING, True),
    "network-unavailable": ("NVIDIA-H100-80GB-HBM3", 8, "", ("network is not configured", ERROR), H.ERROR, True),
    "gh200": ("NVIDIA-GH200-480GB", 1, "", ("NVLink domain", OK), H.HEALTHY, False),
    "b200-mig-single": ("NVIDIA-B200", 8, "", ("MIG single strategy, layout 'all-1g.23gb'", OK), H.HEALTHY, False),
    "h200-mig-mixed": ("NVIDIA-H200", 8, "", ("MIG mixed strategy, layout 'all-balanced'", OK), H.HEALTHY, False),
    "no-driver-operator": ("", 0, "", ("NVIDIA GPU without a working driver", ERROR), H.ERROR, True),
    "no-driver-nfd-only": ("", 0, "", ("NVIDIA GPU without a working driver", ERROR), H.ERROR, True),
    "dra-driver": ("", 0, "", ("GPUs offered through NVIDIA's DRA driver", INFO), H.DISABLED, True),
}  # fmt: skip

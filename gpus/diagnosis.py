"""Per-node diagnosis of the GPU stack, layer by layer, each finding with what to do about it.

The layers follow how a GPU becomes schedulable on Kubernetes: the node is Ready → the driver is loaded
and GPU Feature Discovery labelled the GPUs → the device plugin advertises them as extended resources →
MIG Manager applied the wanted layout → the GPU taint keeps general pods off → the node takes new work.
A layer is blamed only when the layers below it work: a GPU that Node Feature Discovery or the GPU Operator found
but no driver serves is a driver fault, not the device plugin's (the GPU Operator starts GFD and the device plugin
only after its validator found a working driver and container toolkit: NVIDIA/gpu-operator
assets/gpu-feature-discovery/0500_daemonset.yaml and assets/state-device-plugin/0500_daemonset.yaml wait for
``/run/nvidia/validations/toolkit-ready``), and a node where the GPU Operator runs NVIDIA's DRA driver instead of
the device plugin has no ``nvidia.com/gpu`` by design (its GPUCluster stack sets ``gpu.deploy.dra-driver`` and
removes ``gpu.deploy.device-plugin``: controllers/nodelabeling_controller.go and controllers/state_manager.go
@ a22dbf671f2e26f9a1e342f8eea28e196235e110).
Pure Python over ``NodeFacts``; no Django.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vocab.cloud import AKS, GKE, GKE_MPS_NEEDS_HOST_IPC, PROVIDER_STACKS
from vocab.gfd import NodeFacts
from vocab.names import (
    AKS_GPU_TAINT_KEY,
    AKS_GPU_TAINT_VALUE,
    DEPLOY_OPERANDS_SWITCH,
    DEPLOY_PAUSED_FOR_MIG,
    DISK_PRESSURE_CONDITION,
    DRIVER_UPGRADE_DONE,
    DRIVER_UPGRADE_FAILED,
    DRIVER_UPGRADE_IN_PROGRESS_STATES,
    DRIVER_UPGRADE_REQUIRED,
    FALSE_VALUE,
    GPU_CLIQUE_LABEL,
    GPU_DRIVER_UPGRADE_STATE_LABEL,
    GPU_OPERATOR_NAMESPACE,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    GPU_WORKLOAD_CONFIG_LABEL,
    MEMORY_PRESSURE_CONDITION,
    MIG_CONFIG_FAILED,
    MIG_CONFIG_PENDING,
    MIG_CONFIG_REBOOTING,
    MIG_CONFIG_STATE_LABEL,
    MIG_CONFIG_SUCCESS,
    MIG_INVALID_PROFILE,
    NETWORK_UNAVAILABLE_CONDITION,
    NFD_NVIDIA_PCI_LABEL,
    NO_SCHEDULE,
    NVIDIA_GPU_DRA_DRIVER,
    NVIDIA_PREFIX,
    PID_PRESSURE_CONDITION,
    PRESSURE_CONDITION_TAINTS,
    SHARING_MPS,
    SHARING_NONE,
    WORKLOAD_VM_PASSTHROUGH,
    WORKLOAD_VM_VGPU,
    gpu_deploy_label,
)
from vocab.taints import convention_of

from .dra_inventory import DraNode

OK, INFO, WARNING, ERROR = "ok", "info", "warning", "error"
_RANK = {OK: 0, INFO: 1, WARNING: 2, ERROR: 3}
#: The GPU Operator operand whose ``gpu.deploy.*`` switch says whether the device plugin runs.
DEVICE_PLUGIN_OPERAND = "device-plugin"
DRIVER_OPERAND = "driver"
GFD_OPERAND = "gpu-feature-discovery"
#: The operand the GPU Operator's GPUCluster (DRA) stack runs instead of the device plugin: NVIDIA's GPU DRA
#: driver's kubelet plugin (its DaemonSet selects ``nvidia.com/gpu.deploy.dra-driver=true``: NVIDIA/gpu-operator
#: manifests/state-dra-driver/0500_daemonset.yaml).
DRA_DRIVER_OPERAND = "dra-driver"

#: What each node condition means and what to do (Kubernetes "Node-pressure eviction" and "Nodes" pages).
_PRESSURE = {
    MEMORY_PRESSURE_CONDITION: (
        "Node is under memory pressure",
        "The kubelet is short of memory: it evicts pods (BestEffort first) and the node takes no new pods.",
        "Find what uses the memory (`kubectl top pods -A --field-selector spec.nodeName={name}`) and free it.",
    ),
    DISK_PRESSURE_CONDITION: (
        "Node is under disk pressure",
        "The node's root or image file system is nearly full: the kubelet garbage-collects images, evicts pods "
        "and takes no new ones.",
        "Free disk space on {name} (unused images: `crictl rmi --prune`; large emptyDir volumes and logs).",
    ),
    PID_PRESSURE_CONDITION: (
        "Node is short of process IDs",
        "Too many processes run on the node: the kubelet evicts pods and takes no new ones.",
        "Find the pod that forks without bound and stop it; consider the kubelet's podPidsLimit.",
    ),
    NETWORK_UNAVAILABLE_CONDITION: (
        "Node network is not configured",
        "The network plugin or the cloud's route controller has not set up the node's network; pods cannot be "
        "scheduled here.",
        "Check the CNI plugin's pod on {name} and, on a cloud, its route controller.",
    ),
}


@dataclass(frozen=True)
class Finding:
    layer: str
    severity: str
    title: str
    detail: str = ""
    action: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def diagnose(facts: NodeFacts, dra_published: bool = False) -> list[Finding]:
    """Findings for one node, in stack order. Every layer reports, healthy ones with severity 'ok'.
    ``dra_published``: NVIDIA's DRA driver publishes GPUs of this node (ResourceSlices; gpus.dra_inventory), so a
    node without nvidia.com/gpu is a DRA node, not a broken device plugin; its own findings are ``dra_findings``."""
    out: list[Finding] = []
    name = facts.name

    # 1. Node
    if facts.ready:
        out.append(Finding("node", OK, "Node is Ready"))
    else:
        out.append(
            Finding(
                "node",
                ERROR,
                "Node is not Ready",
                facts.ready_message or "The kubelet has not reported the node Ready.",
                f"Check the kubelet on {name} (`kubectl describe node {name}`, `journalctl -u kubelet`).",
            )
        )

    for condition, message in facts.pressure.items():
        title, detail, action = _PRESSURE[condition]
        taint = PRESSURE_CONDITION_TAINTS[condition]
        tainted = any(t.key == taint for t in facts.taints)
        out.append(
            Finding(
                "node",
                ERROR if condition == NETWORK_UNAVAILABLE_CONDITION else WARNING,
                title,
                f"{condition}=True"
                + (f": {message}" if message else "")
                + f". {detail}"
                + (f" The node is tainted {taint}:{NO_SCHEDULE}." if tainted else ""),
                action.format(name=name),
            )
        )

    # 2. Driver and GPU Feature Discovery
    if not facts.is_gpu_node:
        out.append(
            Finding(
                "driver",
                INFO,
                "No GPU labels",
                "GPU Feature Discovery has not labelled this node: it has no NVIDIA GPU, or the driver or GFD "
                "is not running on it.",
                "If the node has GPUs, check the GPU Operator's driver and gpu-feature-discovery pods on it "
                f"(`kubectl get pods -n gpu-operator -o wide --field-selector spec.nodeName={name}`).",
            )
        )
        return out
    if vm_workload(facts):
        out.append(
            Finding(
                "driver",
                INFO,
                "GPUs set aside for virtual machines",
                f"{GPU_WORKLOAD_CONFIG_LABEL}={facts.workload_config}: the GPU Operator passes this node's GPUs to "
                "virtual machines (KubeVirt or Kata), so no driver or device plugin runs for containers here and "
                "the portal does not use its GPUs.",
            )
        )
        return out
    dra = (dra_stack(facts) or dra_published) and not facts.gpus_advertised
    no_driver = driver_missing(facts)
    if no_driver:
        out.append(_driver_missing(facts))
    elif facts.provider and not facts.has_gpu_labels:
        out.extend(_managed_stack(facts))
    elif dra and not (facts.product_label or facts.driver_version):
        out.append(
            Finding(
                "driver",
                INFO,
                "GPUs run by the GPU Operator's DRA stack",
                f"{gpu_deploy_label(DRA_DRIVER_OPERAND)}={facts.operand_deploy.get(DRA_DRIVER_OPERAND)}: the GPU "
                "Operator runs NVIDIA's DRA driver on this node instead of the device plugin. GPU Feature "
                "Discovery is not part of that stack, so the GPU model, memory and driver version are not on the "
                "node's labels.",
            )
        )
    elif facts.has_gpu_labels:
        version = f"driver {facts.driver_version or 'unknown'}, CUDA {facts.cuda_version or 'unknown'}"
        out.append(Finding("driver", OK, f"{facts.gpu_count}× {facts.product or 'GPU'} labelled", version))
    elif facts.operand_deploy.get(GFD_OPERAND) == FALSE_VALUE:
        out.append(
            Finding(
                "driver",
                INFO,
                "GPU Feature Discovery switched off for this node",
                f"{gpu_deploy_label(GFD_OPERAND)}={FALSE_VALUE}: the GPU Operator was told not to run GFD here, so "
                "the portal cannot tell the GPU model, memory or driver version.",
                f"Set {gpu_deploy_label(GFD_OPERAND)}=true if the node should be labelled.",
            )
        )
    else:
        out.append(
            Finding(
                "driver",
                WARNING,
                "GPU resources without GPU labels",
                "The device plugin advertises GPUs but GPU Feature Discovery labels are missing, so the portal "
                "cannot tell the GPU model, memory or driver version.",
                "Deploy gpu-feature-discovery (part of the GPU Operator) on this node.",
            )
        )

    out.extend(_driver_upgrade(facts))
    if facts.single_mig_profile and not facts.mig_count_known:
        out.append(
            Finding(
                "driver",
                INFO,
                "Physical GPU count unknown",
                f"{facts.product} is not in the portal's MIG catalogue, so how many {facts.single_mig_profile} "
                "devices one GPU holds is unknown; each MIG device is counted as a GPU.",
                "Add the product's MIG geometry to vocab/mig.py (from `nvidia-smi mig -lgip`).",
            )
        )

    # 3. Device plugin
    advertised = {k: v for k, v in facts.gpu_capacity.items() if v > 0}
    reconfiguring = facts.mig_config_state in (MIG_CONFIG_PENDING, MIG_CONFIG_REBOOTING)
    paused_for_mig = facts.operand_deploy.get(DEVICE_PLUGIN_OPERAND) == DEPLOY_PAUSED_FOR_MIG
    if no_driver:
        out.append(
            Finding(
                "device-plugin",
                INFO,
                "Device plugin waits for the driver",
                "Nothing is advertised because no driver serves the GPUs yet; the device plugin starts once the "
                "driver works. The fault is at the driver layer, not here.",
            )
        )
    elif dra:
        out.append(
            Finding(
                "device-plugin",
                INFO,
                "GPUs offered through NVIDIA's DRA driver, not the device plugin",
                f"The DRA driver publishes the GPUs as ResourceSlices of driver {NVIDIA_GPU_DRA_DRIVER} (device "
                "classes gpu.nvidia.com and mig.nvidia.com) for pods that claim them with ResourceClaims, so no "
                f"{GPU_RESOURCE} appears in the node's capacity. That is the stack working as configured, not a "
                "broken device plugin. The portal counts these devices in its DRA resource classes "
                "(dra:gpu.nvidia.com@…, dra:mig.nvidia.com/<profile>@…) and admits work for them here.",
                f"What the DRA driver offers: `kubectl get resourceslices --field-selector spec.nodeName={name}`.",
            )
        )
    elif device_plugin_switched_off(facts) and not facts.gpus_advertised:
        switch = (
            gpu_deploy_label(DEPLOY_OPERANDS_SWITCH)
            if facts.operand_deploy.get(DEPLOY_OPERANDS_SWITCH) == FALSE_VALUE
            else gpu_deploy_label(DEVICE_PLUGIN_OPERAND)
        )
        out.append(
            Finding(
                "device-plugin",
                INFO,
                "Device plugin switched off for this node",
                f"{switch}={FALSE_VALUE}: the GPU Operator was told not to run the device plugin here, so the "
                "GPUs are not offered to pods. This is a setting, not a fault.",
                f"To use the GPUs, `kubectl label node {name} {switch}=true --overwrite`.",
            )
        )
    elif reconfiguring and paused_for_mig and not facts.gpus_advertised:
        out.append(
            Finding(
                "device-plugin",
                WARNING,
                "Device plugin paused for a MIG change",
                "MIG Manager stops the device plugin while it re-partitions the GPUs; nothing is allocatable "
                "until it finishes.",
                f"Wait for {MIG_CONFIG_STATE_LABEL}={MIG_CONFIG_SUCCESS}; if it stays pending, "
                "read the MIG Manager log.",
            )
        )
    elif not facts.gpu_capacity or not advertised:
        paused = facts.operand_deploy.get(DEVICE_PLUGIN_OPERAND) in ("false", DEPLOY_PAUSED_FOR_MIG)
        out.append(
            Finding(
                "device-plugin",
                ERROR,
                "GPUs are labelled but nothing is allocatable",
                "The node advertises no nvidia.com/gpu (or MIG) resources, so every GPU pod will stay Pending. "
                + (
                    "The GPU Operator has paused the device plugin on this node."
                    if paused
                    else "The NVIDIA device plugin is not running here or failed to start."
                ),
                "Check the nvidia-device-plugin-daemonset pod on this node and its logs; check the label "
                f"{gpu_deploy_label(DEVICE_PLUGIN_OPERAND)} and that the container toolkit / runtime class "
                "is installed. If NVIDIA's DRA driver, installed with its own Helm chart, serves these GPUs "
                f"instead, `kubectl get resourceslices --field-selector spec.driver={NVIDIA_GPU_DRA_DRIVER},"
                f"spec.nodeName={name}` lists them: the node is then not broken, only not usable by portal "
                "workloads (the portal reads Node objects, not ResourceSlices).",
            )
        )
    elif not facts.gpus_advertised:
        out.append(
            Finding(
                "device-plugin",
                ERROR,
                "GPUs advertised but none allocatable",
                "Capacity lists GPUs but allocatable is 0: the device plugin marked the devices unhealthy.",
                "Look for XID errors in the device plugin log and `nvidia-smi -q` on the node.",
            )
        )
    else:
        summary = ", ".join(f"{k.removeprefix(NVIDIA_PREFIX)}: {v}" for k, v in advertised.items())
        out.append(Finding("device-plugin", OK, "Device plugin advertises GPUs", summary))
        if facts.unhealthy:
            out.append(_unhealthy(facts))
        if facts.expected_gpus and facts.gpu_count < facts.expected_gpus:
            out.append(
                Finding(
                    "device-plugin",
                    WARNING,
                    f"{facts.gpu_count} of {facts.expected_gpus} GPUs visible",
                    f"A {facts.instance_type} has {facts.expected_gpus} GPUs but the device plugin found "
                    f"{facts.gpu_count}: a GPU may have fallen off the bus or failed to initialise.",
                    f"Run `nvidia-smi` on {name} and look for XID 79 in the kernel log; replace the instance if a "
                    "GPU is missing.",
                )
            )

    # 3b. Sharing
    if facts.sharing_strategy != SHARING_NONE and facts.replicas > 1:
        out.append(_sharing(facts))

    # 4. MIG
    if facts.mig_capable:
        state = facts.mig_config_state
        if state == MIG_CONFIG_FAILED:
            out.append(
                Finding(
                    "mig",
                    ERROR,
                    "MIG configuration failed",
                    f"MIG Manager could not apply '{facts.mig_config}'.",
                    "Read the nvidia-mig-manager pod's log on this node, then re-apply a valid layout or go back "
                    "to the previous one.",
                )
            )
        elif state == MIG_CONFIG_PENDING:
            out.append(
                Finding(
                    "mig",
                    WARNING,
                    f"MIG reconfiguration {state}",
                    f"MIG Manager is applying '{facts.mig_config}': it has stopped the GPU operands and is "
                    "re-partitioning the GPUs, which are unavailable until it succeeds.",
                    f"Wait for {MIG_CONFIG_STATE_LABEL}={MIG_CONFIG_SUCCESS}; if it stays {state} for more than a "
                    "few minutes, read the nvidia-mig-manager pod's log (GPU processes still running block it).",
                )
            )
        elif state == MIG_CONFIG_REBOOTING:
            out.append(
                Finding(
                    "mig",
                    WARNING,
                    f"MIG reconfiguration {state}",
                    f"Turning MIG mode on or off for '{facts.mig_config}' needs a GPU reset the driver could not do "
                    "in place, so MIG Manager is rebooting the node; it resumes after the reboot.",
                    f"Wait for the node to come back Ready and {MIG_CONFIG_STATE_LABEL}={MIG_CONFIG_SUCCESS}.",
                )
            )
        elif facts.single_mig_profile == MIG_INVALID_PROFILE:
            out.append(
                Finding(
                    "mig",
                    ERROR,
                    "Invalid layout for the single MIG strategy",
                    "Under the single strategy every GPU must use the same MIG profile.",
                    "Apply a uniform preset (e.g. all-1g.10gb) or switch the node to the mixed strategy.",
                )
            )
        else:
            layout = facts.mig_config or "default"
            out.append(Finding("mig", OK, f"MIG {facts.mig_strategy} strategy, layout '{layout}'", state or ""))

    # 5. Taint: any of the GPU conventions keeps general pods off (vocab.taints: GPU Operator, GKE, EKS, AKS).
    if facts.gpu_taint is None:
        out.append(
            Finding(
                "taint",
                INFO if facts.provider and not facts.has_gpu_labels else WARNING,
                "GPU node is not tainted",
                "Without a GPU taint (nvidia.com/gpu, or sku=gpu on AKS), pods that need no GPU may be scheduled "
                "here and take its CPU and memory.",
                _taint_fix(facts),
            )
        )
    else:
        convention = convention_of(facts.gpu_taint)
        owner = f" ({convention.owner})" if convention is not None else ""
        pool = f"; node pool {facts.pool}" if facts.pool else ""
        out.append(Finding("taint", OK, f"Tainted {facts.gpu_taint}", f"The GPU taint of{owner}{pool}."))

    # 6. Scheduling
    if facts.unschedulable:
        out.append(
            Finding(
                "scheduling",
                WARNING,
                "Node is cordoned",
                "No new work will be placed here; running work continues.",
                f"`kubectl uncordon {name}` when maintenance is over.",
            )
        )
    elif blocked := blocking_reason(facts, out):
        out.append(Finding("scheduling", INFO, "Portal keeps new GPU work off this node", f"Because {blocked}."))
    else:
        out.append(Finding("scheduling", OK, "Accepts new work"))

    # 7. Topology
    if facts.clique:
        out.append(
            Finding(
                "topology",
                OK,
                f"NVLink domain {facts.clique}",
                f"{GPU_CLIQUE_LABEL}={facts.clique}: distributed jobs placed on nodes of the same clique share "
                "one NVLink fabric.",
            )
        )
    return out


def dra_findings(facts: NodeFacts, dra: DraNode | None, expected: bool) -> list[Finding]:
    """The DRA layer of a node's diagnosis (issue 33): what NVIDIA's DRA driver publishes for it, its tainted
    devices, and slices that are missing. ``dra``: the node's inventory from ResourceSlices (None: no slice names
    it); ``expected``: the node says it runs the DRA driver (the GPU Operator's dra-driver label) or its pool's GPUs
    are requested through DRA. [] for a node that has nothing to do with DRA."""
    name = facts.name
    if dra is None:
        if not expected or not facts.is_gpu_node:
            return []
        why = (
            f"{gpu_deploy_label(DRA_DRIVER_OPERAND)}={facts.operand_deploy.get(DRA_DRIVER_OPERAND)} says NVIDIA's "
            "DRA driver runs here"
            if dra_stack(facts)
            else "its node pool's GPUs are requested through DRA"
        )
        return [
            Finding(
                "dra",
                ERROR,
                "No ResourceSlices for this node",
                f"{why}, but no ResourceSlice of driver {NVIDIA_GPU_DRA_DRIVER} names {name}: the driver's kubelet "
                "plugin is not running here or has not published its GPUs, so no claim can be given them.",
                f"Check NVIDIA's DRA kubelet plugin pod on {name} and its log (`kubectl get pods -A -o wide "
                f"--field-selector spec.nodeName={name}`); `kubectl get resourceslices --field-selector "
                f"spec.nodeName={name}` should list its GPUs.",
            )
        ]
    out = []
    products = sorted({g.product for g in dra.gpus})
    carvable = sorted({p for g in dra.gpus for p in g.carvable})
    detail = f"Pool {dra.pool}: {len(dra.gpus)}× {', '.join(products) or 'GPU'}"
    migs = sum(len(g.mig) for g in dra.gpus)
    if migs:
        detail += f", with {migs} MIG devices"
    if carvable:
        detail += f"; partitionable (dynamic MIG): {', '.join(carvable)} can be carved from what is free"
    out.append(Finding("dra", OK, f"{len(dra.gpus)} GPUs published through NVIDIA's DRA driver", detail + "."))
    if dra.incomplete:
        out.append(
            Finding(
                "dra",
                WARNING,
                "Some of this node's ResourceSlices are missing",
                f"The driver's pool {dra.pool} says it has more slices than the portal read, so some devices may "
                "be missing from the inventory until the driver finishes publishing.",
                f"If this lasts, restart NVIDIA's DRA kubelet plugin on {name}.",
            )
        )
    for device, taint in dra.tainted:
        text = f"{taint.get('key')}={taint.get('value', '')}:{taint.get('effect')}"
        effect = taint.get("effect")
        consequence = (
            "claims that do not tolerate it are not given this device"
            + (", and pods using it are evicted" if effect == "NoExecute" else "")
            if effect in ("NoSchedule", "NoExecute")
            else "it is only marked; claims are still given it"
        )
        out.append(
            Finding(
                "dra",
                WARNING if effect in ("NoSchedule", "NoExecute") else INFO,
                f"Device {device} is tainted",
                f"Device {device} of {name} carries the device taint {text}: {consequence}.",
                "Find out why the driver or an admin tainted it (a DeviceTaintRule, an XID error); once fixed, "
                "remove the taint.",
            )
        )
    return out


def device_plugin_switched_off(facts: NodeFacts) -> bool:
    """Whether the GPU Operator's per-node switches turn the device plugin off on purpose."""
    return FALSE_VALUE in (
        facts.operand_deploy.get(DEVICE_PLUGIN_OPERAND),
        facts.operand_deploy.get(DEPLOY_OPERANDS_SWITCH),
    )


def dra_stack(facts: NodeFacts) -> bool:
    """Whether the GPU Operator runs NVIDIA's DRA driver on this node (its GPUCluster stack labels the node
    ``nvidia.com/gpu.deploy.dra-driver``; the ClusterPolicy stack sweeps that label away)."""
    return facts.operand_deploy.get(DRA_DRIVER_OPERAND, FALSE_VALUE) not in ("", FALSE_VALUE)


def vm_workload(facts: NodeFacts) -> bool:
    """Whether the GPU Operator gives this node's GPUs to virtual machines (``nvidia.com/gpu.workload.config``)."""
    return facts.workload_config in (WORKLOAD_VM_PASSTHROUGH, WORKLOAD_VM_VGPU)


def driver_missing(facts: NodeFacts) -> bool:
    """Whether the node has an NVIDIA GPU that no driver serves: Node Feature Discovery or the GPU Operator found
    it (``feature.node.kubernetes.io/pci-10de.present``, ``nvidia.com/gpu.present``), but GPU Feature Discovery
    wrote neither a model nor a driver version (it runs only once the driver works) and no NVIDIA resource is
    advertised. Not when GFD is switched off (its labels then say nothing about the driver), nor on a node whose
    GPUs go to virtual machines or whose stack (DRA) has no GFD."""
    if not (facts.nvidia_pci or facts.gpu_present):
        return False
    if facts.product_label or facts.driver_version or any(facts.gpu_capacity.values()):
        return False
    if FALSE_VALUE in (facts.operand_deploy.get(GFD_OPERAND), facts.operand_deploy.get(DEPLOY_OPERANDS_SWITCH)):
        return False
    return not (dra_stack(facts) or vm_workload(facts))


def blocking_reason(facts: NodeFacts, findings: list[Finding] | None = None, dra_published: bool = False) -> str:
    """Why the node's stack cannot run new GPU work now ("" when it can): placement keeps work off it, whatever
    the kind of work. ``findings``: the node's diagnosis when already made (else it is made here); any error in it
    means the node cannot run GPU work (issue 16: a job was placed on a node whose MIG configuration had failed)."""
    if not facts.ready:
        return "the node is not Ready"
    for condition in facts.pressure:
        return f"the node reports {condition}"
    state = facts.driver_upgrade_state
    if state in DRIVER_UPGRADE_IN_PROGRESS_STATES:
        return f"its driver is being upgraded ({state})"
    if state == DRIVER_UPGRADE_FAILED:
        return "its driver upgrade failed"
    if facts.mig_config_state in (MIG_CONFIG_PENDING, MIG_CONFIG_REBOOTING):
        return f"its MIG layout is being changed ({facts.mig_config_state})"
    if facts.mig_config_state == MIG_CONFIG_FAILED:
        return f"its MIG configuration failed ({MIG_CONFIG_STATE_LABEL}={MIG_CONFIG_FAILED})"
    if device_plugin_switched_off(facts):
        return "its device plugin is switched off"
    if driver_missing(facts):
        return "no NVIDIA driver serves its GPUs"
    if dra_stack(facts) and not dra_published and not facts.gpus_advertised:
        return "NVIDIA's DRA driver should offer its GPUs but publishes no ResourceSlice for it"
    if gke_mps(facts):
        return "GKE's MPS sharing needs pods with hostIPC: true, which portal jobs never get"
    for finding in diagnose(facts, dra_published) if findings is None else findings:
        if finding.severity == ERROR:
            return f"its diagnosis says it cannot run GPU work ({finding.title})"
    return ""


def _taint_fix(facts: NodeFacts) -> str:
    """How to add the GPU taint: on a managed pool through the provider (a taint kubectl adds is lost when the pool
    replaces the node), else with kubectl."""
    if facts.provider == AKS and facts.pool:
        return (f"`az aks nodepool update --name {facts.pool} --node-taints {AKS_GPU_TAINT_KEY}={AKS_GPU_TAINT_VALUE}:"
                f"{NO_SCHEDULE}` (then tell the portal nothing: it tolerates the AKS convention).")  # fmt: skip
    if facts.provider and facts.pool:
        return (f"Set the taint {GPU_TAINT_KEY}={GPU_TAINT_VALUE}:{NO_SCHEDULE} on the node pool {facts.pool} through "
                f"{facts.provider_name}, so new nodes of the pool get it too.")  # fmt: skip
    return f"`kubectl taint nodes {facts.name} {GPU_TAINT_KEY}={GPU_TAINT_VALUE}:{NO_SCHEDULE}`"


def gke_mps(facts: NodeFacts) -> bool:
    """A GKE node pool shared through NVIDIA MPS: its pods must share the host's IPC namespace (vocab.cloud)."""
    return facts.provider == GKE and facts.sharing_strategy == SHARING_MPS


def _managed_stack(facts: NodeFacts) -> list[Finding]:
    provider = facts.provider_name
    stack = PROVIDER_STACKS[facts.provider]
    if facts.product_source:
        return [
            Finding(
                "driver",
                OK,
                f"{facts.gpu_count}× {facts.product} ({provider}-managed GPU stack)",
                f"{stack} Model from {facts.product_source}."
                + (f" Driver: {facts.driver_version}." if facts.driver_version else ""),
            )
        ]
    what = f"instance type {facts.instance_type}" if facts.instance_type else "no instance type label"
    return [
        Finding(
            "driver",
            WARNING,
            f"{provider} GPU node of an unknown model",
            f"{stack} The node advertises GPUs but its {what} is not in the portal's table, so the model and "
            "memory are unknown; its GPUs are counted under a class without a model.",
            "Add the instance type to vocab/cloud.py, or deploy GPU Feature Discovery on the node pool.",
        )
    ]


def _driver_missing(facts: NodeFacts) -> Finding:
    name = facts.name
    found = " and ".join(
        label
        for label, seen in (
            (f"{NFD_NVIDIA_PCI_LABEL}=true", facts.nvidia_pci),
            (f"{GPU_PRESENT_LABEL}=true", facts.gpu_present),
        )
        if seen
    )
    pods = f"`kubectl get pods -n {GPU_OPERATOR_NAMESPACE} -o wide --field-selector spec.nodeName={name}`"
    if DRIVER_OPERAND in facts.operand_deploy or facts.gpu_present:
        detail = (
            f"The node has an NVIDIA GPU ({found}) but GPU Feature Discovery has labelled no model or driver "
            "version and nothing is advertised. The GPU Operator starts GFD and the device plugin only after its "
            "validator found a working driver, so the stack stops at the driver: the driver container "
            f"(nvidia-driver-daemonset, on nodes labelled {gpu_deploy_label(DRIVER_OPERAND)}=true when the "
            "ClusterPolicy enables the driver) has not loaded it yet or failed, or no driver is installed on "
            "the host."
        )
        action = (
            f"List the GPU Operator's pods on {name} ({pods}); the nvidia-driver-daemonset pod's log "
            "(container nvidia-driver-ctr) says why the driver did not load, the nvidia-operator-validator's "
            "driver-validation container whether a host driver was found. With a driver installed on the host, "
            "`nvidia-smi` on the node must list the GPUs."
        )
    else:
        detail = (
            f"Node Feature Discovery found an NVIDIA GPU ({found}), but there are no GPU Feature Discovery labels "
            f"and no {GPU_RESOURCE} resource: no NVIDIA driver (nor the rest of the GPU stack) runs on the node."
        )
        action = (
            f"Install the NVIDIA driver on {name} (`nvidia-smi` must list the GPUs) and the device plugin, or "
            "deploy the GPU Operator, which installs both."
        )
    return Finding("driver", ERROR, "NVIDIA GPU without a working driver", detail, action)


def _driver_upgrade(facts: NodeFacts) -> list[Finding]:
    state, label = facts.driver_upgrade_state, GPU_DRIVER_UPGRADE_STATE_LABEL
    if state in ("", DRIVER_UPGRADE_DONE):
        return []
    if state == DRIVER_UPGRADE_REQUIRED:
        return [
            Finding(
                "driver",
                INFO,
                "Driver upgrade queued",
                f"{label}={state}: the GPU Operator will upgrade this node's driver when its turn comes "
                "(maxParallelUpgrades); it will then be cordoned and drained.",
                "Nothing to do; expect the node to be drained soon.",
            )
        ]
    if state == DRIVER_UPGRADE_FAILED:
        return [
            Finding(
                "driver",
                ERROR,
                "Driver upgrade failed",
                f"{label}={state}: the driver upgrade controller gave up on this node (a drain that timed out, a "
                "driver pod that did not become ready); the node stays cordoned and takes no GPU work.",
                "Read the nvidia-driver-daemonset pod's log on this node and the operator's events, fix the cause, "
                f"then set `{label}=upgrade-required` to retry.",
            )
        ]
    if state in DRIVER_UPGRADE_IN_PROGRESS_STATES:
        return [
            Finding(
                "driver",
                WARNING,
                "Driver upgrade in progress",
                f"{label}={state}: the GPU Operator is cordoning, draining and reloading the driver on this "
                "node; it takes no GPU work until the state is upgrade-done.",
                f"Wait for {label}={DRIVER_UPGRADE_DONE}; if it stays at {state}, look at the pods blocking the drain.",
            )
        ]
    return [
        Finding(
            "driver",
            INFO,
            f"Driver upgrade state {state}",
            f"{label}={state} is not a state the portal knows.",
            "Check the GPU Operator's upgrade controller.",
        )
    ]


def _unhealthy(facts: NodeFacts) -> Finding:
    total = facts.gpu_capacity.get(GPU_RESOURCE, 0)
    if facts.unhealthy_gpus:
        whole = total // max(1, facts.replicas) if facts.replicas > 1 else total
        title = f"{facts.unhealthy_gpus} of {whole or facts.gpu_count} GPUs unhealthy"
    else:
        title = f"{sum(facts.unhealthy.values())} GPU devices unhealthy"
    parts = ", ".join(
        f"{r.removeprefix(NVIDIA_PREFIX)}: {facts.gpu_allocatable.get(r, 0)} of {facts.gpu_capacity[r]} allocatable"
        for r in facts.unhealthy
    )
    return Finding(
        "device-plugin",
        WARNING,
        title,
        f"{parts}. The device plugin marks a device unhealthy after a critical XID error (a GPU fallen off the "
        "bus, uncorrectable ECC memory errors); capacity keeps counting it, allocatable does not, and the portal "
        "places work only on the healthy ones.",
        f"Look for XID errors in the device plugin's log and `dmesg` on {facts.name}; drain the node and reset "
        "the GPU (`nvidia-smi -r`) or have it replaced.",
    )


def _sharing(facts: NodeFacts) -> Finding:
    if gke_mps(facts):
        return Finding(
            "sharing",
            INFO,
            f"GKE MPS sharing ({facts.replicas} clients per GPU): portal jobs cannot run here",
            GKE_MPS_NEEDS_HOST_IPC,
            "Run portal jobs on a GKE node pool without MPS (whole GPUs, time-sharing or MIG); use this pool "
            "for workloads deployed outside the portal.",
        )
    if facts.sharing_strategy == SHARING_MPS:
        return Finding(
            "sharing",
            OK,
            f"MPS sharing, {facts.replicas} clients per GPU",
            f"Each GPU is shared by up to {facts.replicas} pods through the CUDA Multi-Process Service: each gets "
            f"1/{facts.replicas} of the GPU's memory and compute (enforced by the MPS control daemon), but errors "
            "are not isolated: a fault in one client can end the others.",
        )
    return Finding(
        "sharing",
        OK,
        f"Time-sliced, {facts.replicas} replicas per GPU",
        f"Each GPU is offered {facts.replicas} times and the pods take turns: no memory or fault isolation, a pod "
        "can use all of the GPU's memory.",
    )


def overall(findings: list[Finding]) -> str:
    """The worst severity among the findings."""
    return max((f.severity for f in findings), key=_RANK.__getitem__, default=OK)

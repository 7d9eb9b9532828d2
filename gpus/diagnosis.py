"""Per-node diagnosis of the GPU stack, layer by layer, each finding with what to do about it.

The layers follow how a GPU becomes schedulable on Kubernetes: the node is Ready → the driver is loaded
and GPU Feature Discovery labelled the GPUs → the device plugin advertises them as extended resources →
MIG Manager applied the wanted layout → the GPU taint keeps general pods off → the node takes new work.
Pure Python over ``NodeFacts``; no Django.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vocab.gfd import NodeFacts
from vocab.names import (
    DEPLOY_PAUSED_FOR_MIG,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    MIG_CONFIG_FAILED,
    MIG_CONFIG_PENDING,
    MIG_CONFIG_REBOOTING,
    MIG_CONFIG_STATE_LABEL,
    MIG_CONFIG_SUCCESS,
    MIG_INVALID_PROFILE,
    NO_SCHEDULE,
    NVIDIA_PREFIX,
    gpu_deploy_label,
)

OK, INFO, WARNING, ERROR = "ok", "info", "warning", "error"
_RANK = {OK: 0, INFO: 1, WARNING: 2, ERROR: 3}
#: The GPU Operator operand whose ``gpu.deploy.*`` switch says whether the device plugin runs.
DEVICE_PLUGIN_OPERAND = "device-plugin"


@dataclass(frozen=True)
class Finding:
    layer: str
    severity: str
    title: str
    detail: str = ""
    action: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def diagnose(facts: NodeFacts) -> list[Finding]:
    """Findings for one node, in stack order. Every layer reports, healthy ones with severity 'ok'."""
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
    if facts.has_gpu_labels:
        version = f"driver {facts.driver_version or 'unknown'}, CUDA {facts.cuda_version or 'unknown'}"
        out.append(Finding("driver", OK, f"{facts.gpu_count}× {facts.product or 'GPU'} labelled", version))
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

    # 3. Device plugin
    advertised = {k: v for k, v in facts.gpu_capacity.items() if v > 0}
    reconfiguring = facts.mig_config_state in (MIG_CONFIG_PENDING, MIG_CONFIG_REBOOTING)
    paused_for_mig = facts.operand_deploy.get(DEVICE_PLUGIN_OPERAND) == DEPLOY_PAUSED_FOR_MIG
    if reconfiguring and paused_for_mig and not facts.gpus_advertised:
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
                "is installed.",
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
        elif state in (MIG_CONFIG_PENDING, MIG_CONFIG_REBOOTING):
            out.append(
                Finding(
                    "mig",
                    WARNING,
                    f"MIG reconfiguration {state}",
                    f"MIG Manager is applying '{facts.mig_config}'; GPUs are unavailable until it succeeds.",
                    f"Wait for {MIG_CONFIG_STATE_LABEL}={MIG_CONFIG_SUCCESS}.",
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

    # 5. Taint
    if facts.gpu_taint is None:
        out.append(
            Finding(
                "taint",
                WARNING,
                "GPU node is not tainted",
                "Without the nvidia.com/gpu taint, pods that need no GPU may be scheduled here and take its CPU "
                "and memory.",
                f"`kubectl taint nodes {name} {GPU_TAINT_KEY}={GPU_TAINT_VALUE}:{NO_SCHEDULE}`",
            )
        )
    else:
        out.append(Finding("taint", OK, f"Tainted {facts.gpu_taint}"))

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
    else:
        out.append(Finding("scheduling", OK, "Accepts new work"))
    return out


def overall(findings: list[Finding]) -> str:
    """The worst severity among the findings."""
    return max((f.severity for f in findings), key=_RANK.__getitem__, default=OK)

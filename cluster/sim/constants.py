"""Well-known names the simulated components share: annotations, labels, taints, default timings.

Not a component: nothing here reads or writes objects. Components agree on these names the way Kubernetes
components agree on label and taint keys.
"""

from __future__ import annotations

from pathlib import Path

DURATION_ANNOTATION = "sim.gpu-portal.io/duration-seconds"
EXIT_CODE_ANNOTATION = "sim.gpu-portal.io/exit-code"
DURATION_ENV = "SIM_DURATION_SECONDS"
EXIT_CODE_ENV = "SIM_EXIT_CODE"
#: The exit code the kernel's OOM killer leaves (128 + SIGKILL); the simulated kubelet reports it as OOMKilled,
#: since nothing else kills a container it has not been asked to stop.
OOM_EXIT_CODE = 137
IMAGE_PULL_FAILURE_MARKER = "doesnotexist"

GPU_OPERATOR_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIG_MAP = "time-slicing-config"  # where the scenario's time-slicing configs are written
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "demo.yaml"
DEFAULT_KUBERNETES_VERSION = "v1.20.2"
STATE_FORMAT = 1

#: Seconds for the simulated machinery; a scenario's ``timing:`` section overrides them.
DEFAULT_TIMING = {
    "container_creating_seconds": 4.0,  # bound -> Running (pull, create, start)
    "image_pull_error_seconds": 3.0,  # bound -> ErrImagePull for an image that does not exist
    "image_pull_backoff_seconds": 10.0,  # ErrImagePull -> ImagePullBackOff
    "mig_reconfigure_seconds": 30.0,  # mig.config.state pending -> success/failed
    "job_backoff_seconds": 10.0,  # first retry delay after a failed pod (doubles, capped at 360 s)
    "event_ttl_seconds": 3600.0,  # kube-apiserver --event-ttl
}

TERMINAL = ("Succeeded", "Failed")

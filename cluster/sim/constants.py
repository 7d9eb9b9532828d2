"""What the simulated components share: the simulator's own annotations and env vars, default timings.

Not a component: nothing here reads or writes objects. NVIDIA and Kubernetes names (labels, taints, resources,
ConfigMaps) are ``vocab.names``'; the ``sim.gpu-portal.io/`` names here are the project's own.
"""

from __future__ import annotations

from pathlib import Path

from vocab.names import GPU_TAINT_KEY, GPU_TAINT_VALUE, NO_SCHEDULE

DURATION_ANNOTATION = "sim.gpu-portal.io/duration-seconds"
EXIT_CODE_ANNOTATION = "sim.gpu-portal.io/exit-code"
DURATION_ENV = "SIM_DURATION_SECONDS"
EXIT_CODE_ENV = "SIM_EXIT_CODE"
#: The exit code the kernel's OOM killer leaves (128 + SIGKILL); the simulated kubelet reports it as OOMKilled,
#: since nothing else kills a container it has not been asked to stop.
OOM_EXIT_CODE = 137
IMAGE_PULL_FAILURE_MARKER = "doesnotexist"

#: The taint the scenario puts on GPU nodes, as the GPU Operator docs recommend.
GPU_TAINT = {"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": NO_SCHEDULE}

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "demo.yaml"
DEFAULT_KUBERNETES_VERSION = "v1.20.2"
#: The API server version the simulated cluster reports (``/version``), a scenario's ``server_version``: modern by
#: default, so gangs render as Indexed Jobs; a scenario that says v1.20 gets one Job per rank, as a real v1.20.
DEFAULT_SERVER_VERSION = "v1.29.0"
#: Failure injection for distributed jobs: the rank (NODE_RANK, or the pod's completion index) whose container
#: exits with SIM_EXIT_CODE (1 if unset) after SIM_FAIL_AFTER_SECONDS of running (30 s if unset).
FAIL_RANK_ENV = "SIM_FAIL_RANK"
FAIL_AFTER_ENV = "SIM_FAIL_AFTER_SECONDS"
STATE_FORMAT = 1
#: A container whose command runs this program (NVIDIA's CUDA sample image, nvcr.io/nvidia/k8s/cuda-sample,
#: puts it at /cuda-samples/vectorAdd) is a GPU check: it runs a few seconds and prints nvidia-smi's summary and
#: the sample's verdict. A node's scenario ``cuda_fault: "<Xid text>"`` makes it fail there (an allocatable GPU
#: that is broken, before the device plugin's health check notices).
CUDA_CHECK_PROGRAM = "vectorAdd"
CUDA_CHECK_SECONDS = 3.0

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

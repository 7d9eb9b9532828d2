"""The embedded simulated cluster: the portal's own default backend for the demo, tests and benchmarks.

It is not a mock. It keeps Kubernetes-shaped objects (Node, Namespace, batch/v1 Job, Pod, ConfigMap, core/v1 Event)
and makes them behave the way a small real cluster with the NVIDIA GPU Operator does:

* Nodes carry what GPU Feature Discovery, the GPU Operator and Node Feature Discovery label them with for the
  hardware and configuration in the scenario, and advertise what the NVIDIA device plugin would: whole GPUs,
  MIG devices (single / mixed strategy) or time-sliced replicas (optionally renamed ``.shared``).
* MIG Manager is simulated: setting ``nvidia.com/mig.config`` on a node moves ``nvidia.com/mig.config.state``
  through ``pending`` (and ``rebooting`` when MIG mode is turned on or off) to ``success`` (or ``failed``: unknown
  config, impossible geometry, GPUs still in use, or a failure injected with ``fail_next_mig_reconfiguration``) and
  the advertised resources follow. The device plugin follows ``nvidia.com/device-plugin.config`` and the ConfigMaps
  in the ``gpu-operator`` namespace.
* A scheduler with kube-scheduler's filters (v1.20 order and messages), a Job controller and a kubelet that moves
  pods through ContainerCreating, Running and a terminal phase as the clock advances.
* Dynamic Resource Allocation from a ``server_version`` of 1.34 on: ``resource.k8s.io/v1`` objects, NVIDIA's DRA
  driver publishing ResourceSlices for the scenario's ``dra:`` nodes (whole GPUs, static or dynamic MIG with shared
  counters, ComputeDomain channels), the resourceclaim controller, and the scheduler allocating claims with CEL
  selectors as kube-scheduler's DynamicResources plugin does (docs/design.md, "DRA (issue 33)").

The API semantics follow Kubernetes v1.20, the version of the real kube-apiserver the project's integration tests
run, so both backends return the same shapes: ``controller-uid``/``job-name`` labels, no Job ``suspend``, scheduler
messages such as ``0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had taint {nvidia.com/gpu:
present}, that the pod didn't tolerate.``

Time is lazy: nothing runs in the background. Every call first advances the world to ``clock()``.

State is one JSON document. With a ``state_path`` every call is a read-modify-write under an exclusive ``fcntl``
lock on ``<state_path>.lock`` and is written atomically (temporary file + ``os.replace``), so the web process,
Celery workers and beat can share one simulated cluster.

How the package is cut, after KWOK's controllers (each reads and writes stored objects; none calls another):

* ``api``: ``SimulatedCluster``, the API server facade; ``validation``: its validation and admission.
* ``store``: the persisted state, transactions, resourceVersions, the node watch log, object helpers.
* ``clock``: runs the components in a fixed order until nothing is due (see its docstring).
* Components: ``node_lifecycle``, ``gpu_operator`` (GFD, device plugin, MIG Manager), ``dra_driver`` (NVIDIA's DRA
  driver), ``compute_domains``, ``kubelet`` (with its device manager), ``job_controller``, ``resource_claims``,
  ``scheduler``. None imports another. ``dra_api`` serves the DRA objects; ``dra_allocator`` is the scheduler's
  structured allocator.
* Helpers: ``events``, ``logs``, ``nodes``, ``scenario``, ``selectors``, ``pod_resources`` (a pod's requests and
  QoS class; quantities are parsed by ``vocab.quantity``), ``constants``, and ``dcgm_exporter`` (the GPU
  telemetry the exporter would serve).

Simulation conventions (how a workload says how it should behave):

* ``sim.gpu-portal.io/duration-seconds`` annotation on the Job (or its pod template), else the container env var
  ``SIM_DURATION_SECONDS``, else a container command/args ending in ``sleep <seconds>``: the container exits after
  that long. Without any of them it runs until deleted (or until ``activeDeadlineSeconds``).
* ``sim.gpu-portal.io/exit-code`` annotation (default 0): the exit code when it ends; non-zero fails the pod and
  the Job retries up to ``backoffLimit``.
* An image whose name contains ``doesnotexist`` cannot be pulled: ErrImagePull, then ImagePullBackOff.
"""

from ..label_selectors import parse_label_selector, selector_matches
from .api import SimulatedCluster
from .constants import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, IMAGE_PULL_FAILURE_MARKER
from .gpu_operator import render_gpu_node
from .scenario import load_scenario

__all__ = [
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "IMAGE_PULL_FAILURE_MARKER",
    "SimulatedCluster",
    "load_scenario",
    "parse_label_selector",
    "render_gpu_node",
    "selector_matches",
]

"""Dynamic Resource Allocation names: the Kubernetes ``resource.k8s.io`` API and NVIDIA's DRA driver.

Each name is written here once, with where it comes from (the few that look like label or resource names, such as
the ``resource.kubernetes.io/`` ones, are spelled in vocab.names, like every such name). Kubernetes names are from
the ``resource.k8s.io/v1`` API (k8s.io/api resource/v1 types.go; stable since Kubernetes 1.34). NVIDIA names are
from kubernetes-sigs/dra-driver-nvidia-gpu at tag v0.4.1 (formerly NVIDIA/k8s-dra-driver-gpu); the file is given
per name. The simulated cluster publishes and allocates with them; the portal renders claims with them.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

import re

from vocab.names import DRA_STANDARD_ATTRIBUTE_PREFIX, GPU_RESOURCE

# -- the Kubernetes API (resource.k8s.io) ------------------------------------------------------------------------

#: The API group of DeviceClass, ResourceSlice, ResourceClaim and ResourceClaimTemplate.
RESOURCE_API_GROUP = "resource.k8s.io"
#: The stable version (Kubernetes 1.34, KEP-4381); v1beta1 (1.32) and v1beta2 (1.33) are the older betas.
RESOURCE_API_VERSION = f"{RESOURCE_API_GROUP}/v1"
#: The first Kubernetes release that serves resource.k8s.io/v1 by default.
RESOURCE_V1_SINCE = (1, 34)
DEVICE_CLASS_KIND = "DeviceClass"
RESOURCE_SLICE_KIND = "ResourceSlice"
RESOURCE_CLAIM_KIND = "ResourceClaim"
RESOURCE_CLAIM_TEMPLATE_KIND = "ResourceClaimTemplate"

#: DeviceRequest allocation modes (ExactDeviceRequest.allocationMode; ExactCount is the default, count 1).
ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"
#: DeviceAllocationConfiguration.source: where a configuration in an allocation came from.
CONFIG_SOURCE_CLASS = "FromClass"
CONFIG_SOURCE_CLAIM = "FromClaim"
#: Device taint effects (DeviceTaint.effect); "None" only marks a device, PreferNoSchedule is not valid here.
DEVICE_TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
#: Limits of a ResourceSlice (ResourceSliceSpec.devices): 128 devices, 64 when any device has taints or counters.
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS = 64
#: The prefix of standard device attributes (k8s.io/dynamic-resource-allocation/deviceattribute/attribute.go).
STANDARD_ATTRIBUTE_PREFIX = DRA_STANDARD_ATTRIBUTE_PREFIX
PCIE_ROOT_ATTRIBUTE = STANDARD_ATTRIBUTE_PREFIX + "pcieRoot"
PCI_BUS_ID_ATTRIBUTE = STANDARD_ATTRIBUTE_PREFIX + "pciBusID"

# -- NVIDIA's driver: drivers and device classes -----------------------------------------------------------------

#: The GPU kubelet plugin's driver name (cmd/gpu-kubelet-plugin; the DeviceClass selectors in
#: deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml test ``device.driver`` against it).
GPU_DRIVER = "gpu.nvidia.com"
#: The ComputeDomain kubelet plugin's driver name (templates/deviceclass-compute-domain-*.yaml).
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
#: Device classes the Helm chart installs (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml):
#: a whole GPU, a MIG device, a GPU for VFIO passthrough, a ComputeDomain's default IMEX channel, its IMEX daemon.
GPU_DEVICE_CLASS = "gpu.nvidia.com"
MIG_DEVICE_CLASS = "mig.nvidia.com"
VFIO_DEVICE_CLASS = "vfio.gpu.nvidia.com"
COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
COMPUTE_DOMAIN_DAEMON_DEVICE_CLASS = "compute-domain-daemon.nvidia.com"
#: The extended resource the gpu.nvidia.com class maps onto under resource.k8s.io/v1 (``extendedResourceName`` in
#: deviceclass-gpu.yaml; Kubernetes' DRAExtendedResource feature, beta in 1.36).
GPU_EXTENDED_RESOURCE = GPU_RESOURCE

# -- NVIDIA's driver: device attributes and capacities -----------------------------------------------------------
# Attribute names are unqualified in the slice (so in the driver's domain, gpu.nvidia.com); CEL reaches them as
# device.attributes['gpu.nvidia.com'].<name>. Whole GPUs: cmd/gpu-kubelet-plugin/deviceinfo.go (GpuInfo.Attributes);
# MIG devices: cmd/gpu-kubelet-plugin/mig.go (CommonAttributesMig, CommonCapacitiesMig).

#: ``type``: what a device is (cmd/gpu-kubelet-plugin/types.go: GpuDeviceType "gpu", MigStaticDeviceType "mig",
#: VfioDeviceType "vfio"; a dynamic MIG partition is also announced with type "mig").
TYPE_ATTRIBUTE = "type"
DEVICE_TYPE_GPU = "gpu"
DEVICE_TYPE_MIG = "mig"
DEVICE_TYPE_VFIO = "vfio"
UUID_ATTRIBUTE = "uuid"
PRODUCT_NAME_ATTRIBUTE = "productName"
#: NVML's brand as go-nvlib spells it (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go
#: GetBrandAsString: data-centre GPUs report "Nvidia").
BRAND_ATTRIBUTE = "brand"
#: go-nvlib's GetArchitectureAsString: "Ampere", "Hopper", "Blackwell", "Ada Lovelace", ...
ARCHITECTURE_ATTRIBUTE = "architecture"
#: Version-typed attributes (semver strings: "9.0.0", "550.54.15", "12.4.0").
CUDA_COMPUTE_CAPABILITY_ATTRIBUTE = "cudaComputeCapability"
DRIVER_VERSION_ATTRIBUTE = "driverVersion"
CUDA_DRIVER_VERSION_ATTRIBUTE = "cudaDriverVersion"
#: MIG devices only: the MIG profile ("1g.10gb") and the UUID of the GPU it is carved from.
PROFILE_ATTRIBUTE = "profile"
PARENT_UUID_ATTRIBUTE = "parentUUID"
#: Capacities: memory in bytes (whole GPUs and MIG devices); MIG devices also their engines and SMs.
MEMORY_CAPACITY = "memory"
MULTIPROCESSORS_CAPACITY = "multiprocessors"
COPY_ENGINES_CAPACITY = "copyEngines"
DECODERS_CAPACITY = "decoders"
ENCODERS_CAPACITY = "encoders"
JPEG_ENGINES_CAPACITY = "jpegEngines"
OFA_ENGINES_CAPACITY = "ofaEngines"
#: The MIG capacities in the order the driver lists them (CommonCapacitiesMig), with the vocab.products engine key.
MIG_ENGINE_CAPACITIES = (
    (COPY_ENGINES_CAPACITY, "copy"),
    (DECODERS_CAPACITY, "decoder"),
    (ENCODERS_CAPACITY, "encoder"),
    (JPEG_ENGINES_CAPACITY, "jpeg"),
    (OFA_ENGINES_CAPACITY, "ofa"),
)
#: ComputeDomain devices (cmd/compute-domain-kubelet-plugin/deviceinfo.go): ``type`` "channel" or "daemon", ``id``.
DEVICE_TYPE_CHANNEL = "channel"
DEVICE_TYPE_DAEMON = "daemon"
ID_ATTRIBUTE = "id"


def gpu_device_name(minor: int) -> str:
    """A whole GPU's device name in the slice: ``gpu-<minor>`` (deviceinfo.go, GpuInfo.CanonicalName)."""
    return f"gpu-{minor}"


def mig_device_name(parent_minor: int, profile: str, profile_id: int, placement_start: int) -> str:
    """A MIG device's name: ``gpu-<parent minor>-mig-<profile>-<profile id>-<placement start>``, the profile
    without dots and made RFC 1123 compliant (mig.go, MigSpecTuple.ToCanonicalName and toRFC1123Compliant):
    "1g.10gb+me" -> "1g10gb-me"."""
    cleaned = re.sub(r"[^a-z0-9.-]", "-", profile.replace(".", "").lower()).strip("-")
    return f"gpu-{parent_minor}-mig-{cleaned}-{profile_id}-{placement_start}"


def channel_device_name(channel: int) -> str:
    """An IMEX channel's device name (cmd/compute-domain-kubelet-plugin/deviceinfo.go): ``channel-<id>``."""
    return f"{DEVICE_TYPE_CHANNEL}-{channel}"


def daemon_device_name(index: int) -> str:
    return f"{DEVICE_TYPE_DAEMON}-{index}"


# -- dynamic MIG: partitionable devices and their shared counters ------------------------------------------------
# With the DynamicMIG gate the plugin announces every MIG placement a GPU could hold, each consuming counters from
# one counter set per GPU (cmd/gpu-kubelet-plugin/partitions.go): the set holds, per capacity, the largest value
# any profile has, plus one counter per memory slice; a whole GPU consumes all of it, a MIG placement its own
# capacities and the memory slices it covers. Counter names are the capacity names in DNS form (camelToDNSName in
# mig.go: copyEngines -> copy-engines).


def counter_set_name(minor: int) -> str:
    """The GPU's counter set (partitions.go, GetSharedCounterSetName): ``gpu-<minor>-counter-set``."""
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    """The counter of one memory slice (partitions.go, memsliceCounterName): ``memory-slice-<i>``."""
    return f"memory-slice-{index}"


def counter_name(capacity: str) -> str:
    """A capacity name as a counter name (mig.go camelToDNSName): ``jpegEngines`` -> ``jpeg-engines``."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity).lower()


# -- NVIDIA's driver: opaque configuration (api/nvidia.com/resource/v1beta1) -------------------------------------

#: The API group and version of the driver's configuration objects and CRDs (api.go: GroupName, Version).
NVIDIA_CONFIG_API_GROUP = "resource.nvidia.com"
NVIDIA_CONFIG_API_VERSION = f"{NVIDIA_CONFIG_API_GROUP}/v1beta1"
#: Kinds (api.go): a whole GPU's config, a MIG device's, a ComputeDomain channel's and daemon's.
GPU_CONFIG_KIND = "GpuConfig"
MIG_DEVICE_CONFIG_KIND = "MigDeviceConfig"
VFIO_DEVICE_CONFIG_KIND = "VfioDeviceConfig"
COMPUTE_DOMAIN_CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
COMPUTE_DOMAIN_DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"
#: GpuConfig / MigDeviceConfig fields (gpuconfig.go, migconfig.go, sharing.go): ``sharing: {strategy,
#: timeSlicingConfig: {interval}, mpsConfig: {defaultActiveThreadPercentage, defaultPinnedDeviceMemoryLimit,
#: defaultPerDevicePinnedMemoryLimit}}``. MIG devices take MPS only (MigDeviceSharing has no timeSlicingConfig).
SHARING_FIELD = "sharing"
STRATEGY_FIELD = "strategy"
TIME_SLICING_CONFIG_FIELD = "timeSlicingConfig"
INTERVAL_FIELD = "interval"
MPS_CONFIG_FIELD = "mpsConfig"
MPS_ACTIVE_THREAD_PERCENTAGE_FIELD = "defaultActiveThreadPercentage"
MPS_PINNED_MEMORY_LIMIT_FIELD = "defaultPinnedDeviceMemoryLimit"
MPS_PER_DEVICE_PINNED_MEMORY_LIMIT_FIELD = "defaultPerDevicePinnedMemoryLimit"
#: Sharing strategies and time-slice intervals (sharing.go).
TIME_SLICING_STRATEGY = "TimeSlicing"
MPS_STRATEGY = "MPS"
TIME_SLICE_INTERVALS = ("Default", "Short", "Medium", "Long")

# -- NVIDIA's driver: ComputeDomain (api/nvidia.com/resource/v1beta1/computedomain.go) ---------------------------

COMPUTE_DOMAIN_KIND = "ComputeDomain"
COMPUTE_DOMAIN_PLURAL = "computedomains"
#: spec: ``numNodes`` (deprecated), ``channel: {resourceClaimTemplate: {name}, allocationMode: Single | All}``.
COMPUTE_DOMAIN_ALLOCATION_MODES = ("Single", "All")
#: status.status values.
COMPUTE_DOMAIN_READY = "Ready"
COMPUTE_DOMAIN_NOT_READY = "NotReady"
#: What the controller labels the channel template with (cmd/compute-domain-controller/computedomain.go):
#: the domain's uid under ``resource.nvidia.com/computeDomain`` (also its finalizer) and the target.
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
COMPUTE_DOMAIN_TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
COMPUTE_DOMAIN_TARGET_WORKLOAD = "Workload"
#: The request name in the channel template (templates/compute-domain-workload-claim-template.tmpl.yaml).
COMPUTE_DOMAIN_CHANNEL_REQUEST = "channel"

# -- NVIDIA's driver: feature gates (pkg/featuregates/featuregates.go) -------------------------------------------

TIME_SLICING_SETTINGS_GATE = "TimeSlicingSettings"
MPS_SUPPORT_GATE = "MPSSupport"
DYNAMIC_MIG_GATE = "DynamicMIG"
PASSTHROUGH_SUPPORT_GATE = "PassthroughSupport"
NVML_DEVICE_HEALTH_CHECK_GATE = "NVMLDeviceHealthCheck"
COMPUTE_DOMAIN_CLIQUES_GATE = "ComputeDomainCliques"
#: Pairs the driver refuses to start with ("feature gate X is currently mutually exclusive with Y",
#: pkg/featuregates/featuregates.go at v0.4.1).
EXCLUSIVE_GATES = (
    (DYNAMIC_MIG_GATE, PASSTHROUGH_SUPPORT_GATE),
    (DYNAMIC_MIG_GATE, NVML_DEVICE_HEALTH_CHECK_GATE),
    (DYNAMIC_MIG_GATE, MPS_SUPPORT_GATE),
    (PASSTHROUGH_SUPPORT_GATE, NVML_DEVICE_HEALTH_CHECK_GATE),
)

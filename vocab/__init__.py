"""Pure NVIDIA/Kubernetes vocabulary: label and resource names, quantities, GFD labels, MIG geometry,
products, DCGM text, what a pod or container state means, durations in words; and the portal's wait reasons
(plain enums). No Django, no I/O: the bottom floor every other package may import."""

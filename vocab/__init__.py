"""Pure NVIDIA/Kubernetes vocabulary: label and resource names, quantities, GFD labels, MIG geometry, products, DCGM text. No Django, no I/O."""

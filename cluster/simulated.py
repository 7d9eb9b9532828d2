"""The embedded simulated cluster; it lives in the ``cluster.sim`` package now (one module per component).

This module keeps the old import path working: ``from cluster.simulated import SimulatedCluster``.
"""

from .sim import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    IMAGE_PULL_FAILURE_MARKER,
    SimulatedCluster,
    load_scenario,
    parse_label_selector,
    render_gpu_node,
    selector_matches,
)

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

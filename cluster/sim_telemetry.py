"""Moved to ``cluster.sim.dcgm_exporter``; this name stays so existing imports keep working."""

from .sim.dcgm_exporter import BURST_SECONDS, LOAD_ENV, kernels, load_kind, render, utilisation

__all__ = ["BURST_SECONDS", "LOAD_ENV", "kernels", "load_kind", "render", "utilisation"]

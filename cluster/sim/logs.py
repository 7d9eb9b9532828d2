"""Container logs, as the kubelet serves them for ``kubectl logs`` (the API server only proxies).

Not a component: it writes nothing. It reads a pod and its ``podsim`` record (start, end, exit code, the devices
the kubelet's device manager assigned) and renders a deterministic training log: the GPUs the container sees
(UUIDs as nvidia-smi prints them), then a step line every 10 seconds of running, then how it ended.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from ..base import KubeObject
from .constants import CUDA_CHECK_PROGRAM
from .dcgm_exporter import load_kind
from .pod_resources import pod_rank
from .store import Txn, gpu_uuid, stable_hex, timestamp


def log_lines(tx: Txn, pod: KubeObject, sim: dict[str, Any]) -> list[str]:
    running = sim.get("running")
    if running is None:
        return []
    end = sim.get("finished") if sim.get("finished") is not None else tx.now
    seed = int(stable_hex("logs", pod["metadata"]["uid"], length=8), 16)
    rng = random.Random(seed)
    node_name = pod["spec"].get("nodeName") or ""
    lines = [f"{timestamp(running)} starting {pod['metadata']['name']} on {node_name}"]
    gpus_seen: dict[str, list[str]] = {}
    for device in sim.get("devices") or []:
        index, product, detail = device.split("|", 2)
        gpus_seen.setdefault(f"{index}|{product}", []).append(detail)
    for shown, (gpu, details) in enumerate(sorted(gpus_seen.items())):
        index, product = gpu.split("|", 1)
        lines.append(f"GPU {shown}: {product} (UUID: {gpu_uuid(node_name, int(index))})")
        for slot, detail in enumerate(details):
            if detail.startswith("MIG "):
                profile = detail.split()[1]
                mig_uuid = "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{node_name}/{index}/{detail}"))
                lines.append(f"  MIG {profile} Device {slot}: (UUID: {mig_uuid})")
    command = " ".join(str(w) for w in (pod["spec"]["containers"][0].get("command") or []))
    if CUDA_CHECK_PROGRAM in command:
        return lines + _cuda_check(tx, node_name, sim, sorted(gpus_seen))
    if not gpus_seen:
        lines.append("No GPU visible to this container (CUDA_VISIBLE_DEVICES is empty); running on CPU")
    # A container that only sleeps (holding its GPU, doing nothing) prints nothing more.
    idle = load_kind(pod["spec"]["containers"][0]) == "idle"
    steps = 0 if idle else int(max(0.0, end - running) // 10)
    loss = 2.5 + rng.random()
    throughput = 200 + rng.random() * 800
    # A rank of a distributed job says which rank it is on every step line ("rank 1/4: step 50 ...").
    rank, world = pod_rank(pod), _env(pod, "WORLD_SIZE")
    who = f"rank {rank}/{world}: " if rank is not None and world else ""
    for step in range(1, steps + 1):
        loss = max(0.05, loss * (0.97 + rng.random() * 0.02))
        lines.append(
            f"{timestamp(running + step * 10)} {who}step {step * 50} loss={loss:.4f} "
            f"throughput={throughput * (0.95 + rng.random() * 0.1):.1f} samples/s"
        )
    if sim.get("finished") is not None:
        code = int(sim.get("exit_code") or 0)
        if code:
            lines.append(
                f"{timestamp(sim['finished'])} {who}RuntimeError: training step failed; exiting with code {code}"
            )
        elif not idle:
            lines.append(f"{timestamp(sim['finished'])} finished after {steps * 50} steps")
    return lines


def _cuda_check(tx: Txn, node_name: str, sim: dict[str, Any], gpus: list[str]) -> list[str]:
    """What ``nvidia-smi && /cuda-samples/vectorAdd`` prints, in short: the driver line, one line per GPU seen,
    then the sample's verdict (after the container ended)."""
    hw = tx.state["hw"].get(node_name) or {}
    driver, cuda = hw.get("driver", ""), hw.get("cuda", "")
    lines = [f"NVIDIA-SMI {driver}    Driver Version: {driver}    CUDA Version: {cuda}"]
    for shown, gpu in enumerate(gpus):
        index, product = gpu.split("|", 1)
        lines.append(f"|   {shown}  {product}  |  {gpu_uuid(node_name, int(index))}  |")
    if not gpus:
        lines.append("No devices were found")
    if sim.get("finished") is None:
        return lines
    lines.append("[Vector addition of 50000 elements]")
    if int(sim.get("exit_code") or 0):
        fault = hw.get("cuda_fault") or "unspecified launch failure"
        lines.append(f"Failed to launch vectorAdd kernel (error code {fault})!")
    else:
        lines += [
            "Copy input data from the host memory to the CUDA device",
            "CUDA kernel launch with 196 blocks of 256 threads",
            "Copy output data from the CUDA device to the host memory",
            "Test PASSED",
            "Done",
        ]
    return lines


def _env(pod: KubeObject, name: str) -> str:
    container = pod["spec"]["containers"][0]
    return str(next((e.get("value") or "" for e in container.get("env") or [] if e.get("name") == name), ""))

"""What NVIDIA's dcgm-exporter would print for the simulated cluster's GPUs.

Not a component: it writes nothing. It reads the pods, their ``podsim.devices`` (the kubelet's device manager's
assignment) and each GPU node's ``hw`` record, at the time it is asked.

The simulated cluster knows which pod holds which GPU, MIG instance or time-sliced replica (the device
plugin's assignment); this module turns that into dcgm-exporter text (Prometheus exposition format, the
current label set: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``GPU_I_PROFILE``,
``GPU_I_ID``, and ``pod``/``namespace``/``container`` for GPUs a pod holds). The portal scrapes it with exactly
the code it uses against a real exporter (vocab.dcgm), so the demo's charts and idle flags come through the
real path.

How busy a pod keeps its GPUs, from its container (first match):

- env ``SIM_GPU_LOAD``: ``train`` (busy, 85–98%), ``bursty`` (a notebook: bursts for 15 minutes after it
  starts, then near zero with its memory still held), ``idle`` (0%), or a number (that percentage);
- a command that only sleeps (``sleep 3600``, ``sleep infinity``) holds the GPU and does nothing: idle;
- a Jupyter server (``start-notebook.py``, ``jupyter lab`` …), code-server or RStudio's ``rserver`` is a
  notebook: bursty;
- anything else trains.

GPUs nobody holds read 0% at idle power. Values are deterministic in (GPU, time) so repeated scrapes agree.
As on real hardware, ``DCGM_FI_DEV_GPU_UTIL`` reads 0 on MIG instances; their activity is
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (a ratio).
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import UTC, datetime
from typing import Any

LOAD_ENV = "SIM_GPU_LOAD"
BURST_SECONDS = 15 * 60
#: Board power (W) at full load and at idle, by a substring of the product name; defaults last.
_POWER = (("H200", 700, 75), ("H100", 700, 70), ("A100", 400, 55), ("A30", 165, 32), ("L40", 300, 35),
          ("L4", 72, 16), ("T4", 70, 10), ("V100", 300, 40), ("", 300, 40))  # fmt: skip
_MEMORY = (("H200", 143771), ("H100 NVL", 95830), ("H100", 81559), ("A100-SXM4-80GB", 81920), ("A100", 40960),
           ("A30", 24576), ("L40", 46068), ("L4", 23034), ("T4", 15360), ("", 16384))  # fmt: skip
_SLEEP_ONLY = re.compile(
    r"^\s*(?:(?:/bin/|/usr/bin/)?(?:ba)?sh\s+-c\s+)?[\"']?sleep\s+(?:[0-9.]+s?|infinity)[\"']?\s*$"
)
_TERMINAL = ("Succeeded", "Failed")
_JUPYTER = re.compile(
    r"(?:^|[\s/])(?:start-notebook(?:\.py|\.sh)?|jupyter(?:-lab|-notebook|-server)?|code-server|rserver)(?:\s|$)"
)


def _noise(*parts: Any) -> float:
    """A deterministic value in [-1, 1) for the given parts."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") / 2**31 - 1.0


def load_kind(container: dict[str, Any]) -> str:
    env = {e.get("name"): e.get("value") for e in container.get("env") or [] if isinstance(e, dict)}
    if env.get(LOAD_ENV):
        return str(env[LOAD_ENV]).strip().lower()
    words = " ".join(str(w) for w in (container.get("command") or []) + (container.get("args") or []))
    if words and _SLEEP_ONLY.match(words):
        return "idle"
    if _JUPYTER.search(words):
        return "bursty"
    return "train"


def kernels(kind: str, started: float, now: float) -> list[dict[str, Any]]:
    """What the notebook server's /api/kernels would answer: one kernel, "busy" while the load model computes,
    otherwise "idle" with ``last_activity`` at the end of its latest burst (or its start)."""
    age = max(0.0, now - started)
    if kind == "idle":
        last, busy = started, False
    elif kind == "bursty":
        span = min(age, BURST_SECONDS)
        busy = age < BURST_SECONDS and (age % 300) < 120
        bursts = span // 300 if (span % 300) < 120 else span // 300 + 1  # bursts that have ended
        last = started + (age if busy else max(0.0, (bursts - 1) * 300 + 120) if bursts else 0.0)
    else:
        try:
            busy = float(kind) >= 10.0
        except ValueError:
            busy = True  # train
        last = now if busy else started
    stamp = datetime.fromtimestamp(last, UTC).isoformat().replace("+00:00", "Z")
    return [{"id": "sim-kernel-0", "name": "python3", "execution_state": "busy" if busy else "idle",
             "last_activity": stamp, "connections": 1}]  # fmt: skip


def heartbeat(kind: str, started: float, now: float) -> dict[str, Any]:
    """What code-server's /healthz would answer, from the same model as the kernels: its heartbeat is the latest
    use (now while the model computes), "alive" within code-server's minute of it, else "expired"."""
    [kernel] = kernels(kind, started, now)
    last = now if kernel["execution_state"] == "busy" else datetime.fromisoformat(kernel["last_activity"]).timestamp()
    return {"status": "alive" if now - last < 60 else "expired", "lastHeartbeat": int(last * 1000)}


def utilisation(kind: str, seed: str, started: float, now: float) -> tuple[float, float]:
    """(percent busy, share of the device's memory held) for one pod's device at ``now``."""
    age = max(0.0, now - started)
    tick = int(now // 10)
    if kind == "idle":
        return 0.0, 0.0
    if kind == "bursty":
        if age < BURST_SECONDS and (age % 300) < 120:
            return max(0.0, min(100.0, 80 + 15 * _noise(seed, tick))), 0.45
        return max(0.0, 1.5 + 1.5 * _noise(seed, tick)), 0.45
    if kind == "train":
        warm = min(1.0, age / 60)
        busy = 91 + 5 * math.sin(now / 97 + (_noise(seed) + 1) * 3) + 2 * _noise(seed, tick)
        return max(0.0, min(100.0, busy * warm + 2 * (1 - warm))), 0.55 + 0.3 * warm
    try:
        level = float(kind)
    except ValueError:
        level = 90.0
    return max(0.0, min(100.0, level + _noise(seed, tick))), 0.5 if level > 0 else 0.0


def _lookup(table, product: str):
    for key, *values in table:
        if key in product:
            return values
    return table[-1][1:]


def _mig_instances(layout: dict[str, int]) -> list[tuple[str, int, int]]:
    """(profile, slot among that profile's instances, GPU instance id) for a GPU's MIG layout."""
    out = []
    gi = 1
    for profile in sorted(layout, key=lambda p: (-int(p.split("g", 1)[0]) if p[0].isdigit() else 0, p)):
        for slot in range(int(layout[profile])):
            out.append((profile, slot, gi))
            gi += 1
    return out


def _slices(profile: str) -> int:
    match = re.match(r"(\d+)g", profile)
    return int(match.group(1)) if match else 1


def render(state: dict[str, Any], now: float, gpu_uuid) -> dict[str, str]:
    """dcgm-exporter text per node with GPUs, as the exporter on that node would serve it at ``now``."""
    holders: dict[str, dict[tuple[int, str, int], list[tuple[str, str, str, str, float]]]] = {}
    for key, pod in state["pods"].items():
        sim = state["podsim"].get(key) or {}
        node = pod["spec"].get("nodeName")
        if not node or pod["status"].get("phase") in _TERMINAL or sim.get("running") is None:
            continue
        container = pod["spec"]["containers"][0]
        kind = load_kind(container)
        for device in sim.get("devices") or []:
            index, _product, what = (device.split("|", 2) + ["", ""])[:3]
            if not index.isdigit():
                continue
            mig = re.match(r"MIG (\S+) Device (\d+)", what)
            where = (int(index), mig.group(1), int(mig.group(2))) if mig else (int(index), "", 0)
            holders.setdefault(node, {}).setdefault(where, []).append(
                (pod["metadata"]["namespace"], pod["metadata"]["name"], container["name"], kind, float(sim["running"]))
            )
    out: dict[str, str] = {}
    for node, hw in sorted(state["hw"].items()):
        gpu = hw.get("gpu")
        if not gpu or node not in state["nodes"] or not hw.get("ready", True):
            continue
        product = str(gpu["product"])
        full_w, idle_w = _lookup(_POWER, product)
        (default_memory,) = _lookup(_MEMORY, product)
        memory = int(gpu.get("memory_mb") or default_memory)
        layouts = (hw.get("mig") or {}).get("gpus") or [None] * int(gpu["count"])
        lines: list[str] = []
        pods_here = holders.get(node, {})
        for index in range(int(gpu["count"])):
            uuid = gpu_uuid(node, index)
            base = (
                f'gpu="{index}",UUID="{uuid}",pci_bus_id="00000000:{0x18 + 0x10 * index:02X}:00.0",'
                f'device="nvidia{index}",modelName="{product}",Hostname="{node}"'
            )
            layout = layouts[index] if index < len(layouts) else None
            if layout:
                total_slices = 4 if "A30" in product else 7
                busy_weighted, mem_used = 0.0, 0.0
                for profile, slot, gi in _mig_instances(layout):
                    share = _slices(profile) / total_slices
                    util, held = 0.0, 0.0
                    owners = pods_here.get((index, profile, slot), [])
                    for _ns, pod_name, _c, kind, started in owners:
                        u, m = utilisation(kind, f"{uuid}/{gi}/{pod_name}", started, now)
                        util, held = max(util, u), max(held, m)
                    who = ""
                    if owners:
                        namespace, pod_name, container = owners[0][:3]
                        who = f',container="{container}",namespace="{namespace}",pod="{pod_name}"'
                    labels = f'{base},GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}"{who}'
                    instance_mem = memory * share * held
                    lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 0")
                    lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {util / 100:.6f}")
                    lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {int(instance_mem)}")
                    lines.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {int(memory * share - instance_mem)}")
                    busy_weighted += util * share
                    mem_used += instance_mem
                util_gpu, mem_gpu = busy_weighted, mem_used
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{base}}} 0")
                lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{base}}} {util_gpu / 100:.6f}")
            else:
                util_gpu, held = 0.0, 0.0
                owners = pods_here.get((index, "", 0), [])
                for _namespace, pod_name, _container, kind, started in owners:
                    u, m = utilisation(kind, f"{uuid}/{pod_name}", started, now)
                    util_gpu, held = min(100.0, util_gpu + u), min(0.95, held + m)
                mem_gpu = memory * held
                who = ""
                if len(owners) == 1:
                    namespace, pod_name, container = owners[0][:3]
                    who = f',container="{container}",namespace="{namespace}",pod="{pod_name}"'
                lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{base}{who}}} {round(util_gpu)}")
                lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{base}{who}}} {util_gpu / 100:.6f}")
                for name, value in (
                    ("FB_USED", int(mem_gpu)),
                    ("FB_FREE", int(memory - mem_gpu)),
                ):
                    lines.append(f"DCGM_FI_DEV_{name}{{{base}{who}}} {value}")
            tick = int(now // 10)
            power = idle_w + (full_w - idle_w) * util_gpu / 100 + 3 * _noise(uuid, "p", tick)
            temp = 31 + 0.42 * util_gpu + _noise(uuid, "t", tick)
            lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{base}}} {power:.3f}")
            lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{base}}} {round(temp)}")
        out[node] = _with_headers(lines)
    return out


_HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
}


def _with_headers(lines: list[str]) -> str:
    """Group samples by metric with # HELP / # TYPE lines, the way the exporter prints them."""
    by_metric: dict[str, list[str]] = {}
    for line in lines:
        by_metric.setdefault(line.split("{", 1)[0], []).append(line)
    text = []
    for metric, samples in by_metric.items():
        kind, help_text = _HELP[metric]
        text.append(f"# HELP {metric} {help_text}")
        text.append(f"# TYPE {metric} {kind}")
        text.extend(samples)
    return "\n".join(text) + "\n"

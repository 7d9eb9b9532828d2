"""Run on a real GPU node (not collected by pytest; CI has no GPU): the node agent against the real ``pynvml``,
and the tests' fake NVML against the same GPU.

    python3 tests/gpu_node/check_real_nvml.py OUTDIR

It checks, and exits 1 when any check fails:

1. Shape: every NVML function the fake defines exists in the real module with the same parameters, and every
   ``NVML_*`` constant the fake defines has the real value.
2. Fidelity: ``nvidia-smi -q -x`` of this node, read by the fake, gives the agent the same inventory (names, UUIDs,
   PCI bus ids, memory, MIG mode) as the real library does, and samples with the same fields and types.
3. The agent's one-shot dry run (``python -m agent --once --dry-run``) exits 0 and prints a batch.

It writes what it read to OUTDIR: the XML, the real inventory and samples, the fake's, and a report.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "unit" / "agent"))

import fake_nvml  # noqa: E402
import pynvml  # noqa: E402

from agent.nvml import NvmlCollector  # noqa: E402

#: Inventory fields that describe the hardware (the same from the real library and the XML); the rest move.
STATIC = ("index", "gpu_uuid", "mig_uuid", "name", "pci_bus_id", "mem_total_mb", "mig_enabled", "mig_profile")


def shape_problems() -> list[str]:
    problems = []
    for name, member in inspect.getmembers(fake_nvml.FakeNvml, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        real = getattr(pynvml, name, None)
        if real is None:
            problems.append(f"{name}: not in the real pynvml")
            continue
        fake_params = list(inspect.signature(member).parameters)[1:]  # without self
        real_params = list(inspect.signature(real).parameters)
        if fake_params != real_params:
            problems.append(f"{name}: fake takes {fake_params}, real takes {real_params}")
    for name in dir(fake_nvml):
        if name.startswith("NVML_") and getattr(pynvml, name, object()) != getattr(fake_nvml, name):
            problems.append(f"{name}: fake {getattr(fake_nvml, name)!r}, real {getattr(pynvml, name, None)!r}")
    return problems


def read(nvml) -> tuple[list[dict], list[dict]]:
    collector = NvmlCollector(nvml)
    collector.start()
    try:
        readings = collector.collect("2026-11-24T00:00:00Z")
    finally:
        collector.stop()
    return [r.to_inventory() for r in readings], [r.to_sample() for r in readings]


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    problems = shape_problems()
    report.append(f"shape: {len(problems)} problem(s)")
    report += [f"  {p}" for p in problems]

    xml = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, text=True, check=True).stdout
    (out / "nvidia-smi-q-x.xml").write_text(xml)
    real_inventory, real_samples = read(pynvml)
    fake_inventory, fake_samples = read(fake_nvml.FakeNvml.from_xml_text(xml))
    for name, value in (
        ("real_inventory.json", real_inventory),
        ("real_samples.json", real_samples),
        ("fake_inventory.json", fake_inventory),
        ("fake_samples.json", fake_samples),
    ):
        (out / name).write_text(json.dumps(value, indent=2))

    fidelity = []
    if len(real_inventory) != len(fake_inventory):
        fidelity.append(f"devices: real {len(real_inventory)}, fake {len(fake_inventory)}")
    for real, fake in zip(real_inventory, fake_inventory, strict=False):
        for key in STATIC:
            if real.get(key) != fake.get(key):
                fidelity.append(f"device {real.get('index')} {key}: real {real.get(key)!r}, fake {fake.get(key)!r}")
    for real, fake in zip(real_samples, fake_samples, strict=False):
        if set(real) != set(fake):
            fidelity.append(f"sample fields: real {sorted(real)}, fake {sorted(fake)}")
        for key in real:
            kinds = {type(real[key]).__name__, type(fake.get(key)).__name__}
            if len(kinds) > 1 and "NoneType" not in kinds:
                fidelity.append(f"sample {key}: real {type(real[key]).__name__}, fake {type(fake.get(key)).__name__}")
    report.append(f"fidelity: {len(fidelity)} difference(s)")
    report += [f"  {p}" for p in fidelity]
    problems += fidelity

    run = subprocess.run(
        [sys.executable, "-m", "agent", "--once", "--dry-run", "--node", "gpu-node-check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (out / "agent_dry_run.json").write_text(run.stdout)
    (out / "agent_dry_run.log").write_text(run.stderr)
    batch_ok = run.returncode == 0 and bool(json.loads(run.stdout or "{}").get("samples"))
    report.append(f"agent --once --dry-run: exit {run.returncode}, batch {'printed' if batch_ok else 'MISSING'}")
    if not batch_ok:
        problems.append("the agent's dry run failed")

    report.append(f"pynvml {getattr(pynvml, '__version__', '?')}; {len(real_inventory)} device(s)")
    (out / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "gpu-node-check")))

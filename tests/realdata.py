"""Access to the real captures in the shared folder (../shared/fixtures/real, or $PORTAL_SHARED_DIR).

These are recordings of real clusters and GPUs; tests parse them as they are. A missing folder is an error,
not a skip: the tests that use them are the proof that the parsers match reality."""

import json
import os
from pathlib import Path

SHARED = Path(os.environ.get("PORTAL_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
REAL = SHARED / "fixtures" / "real"


def real_path(prefix: str) -> Path:
    matches = sorted(REAL.glob(f"{prefix}_*"))
    if not matches:
        raise FileNotFoundError(f"No real capture {prefix}_* under {REAL}; set PORTAL_SHARED_DIR to the shared folder.")
    return matches[0]


def real_text(prefix: str) -> str:
    """The capture without its '#' provenance header lines."""
    lines = real_path(prefix).read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("#"))


def real_json(prefix: str):
    return json.loads(real_text(prefix))


def node_from_labels(labels: dict, capacity: dict | None = None, name: str = "node-1", taints=None, ready=True) -> dict:
    """A Node object (camelCase JSON) carrying real labels, as the API would return it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": {
            "taints": taints
            if taints is not None
            else [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        },
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", **(capacity or {})},
            "allocatable": {"cpu": "63", "memory": "500Gi", "pods": "110", **(capacity or {})},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
        },
    }


def doc_blocks(prefix: str) -> list[str]:
    """Sections of a capture separated by its '# =====' lines."""
    text = real_path(prefix).read_text()
    return [block for block in text.split("# =====") if block.strip()]

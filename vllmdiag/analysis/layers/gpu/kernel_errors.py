"""GPU layer, hardware evidence: Xids from the kernel log (before the hang too) and NVLink error
counters (pure). Evidence, never a verdict of its own: warnings at most, attached to the
deployment whose GPUs they name when NVML ties a PCI address to a GPU one of its processes uses.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.analysis.views import nvml_pids
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.model import Finding, Snapshot

LAYER = "gpu"
CODES = ("gpu.kernel_xid", "gpu.nvlink_errors")
# Xids that mean the GPU, its memory or its links failed (NVIDIA's Xid catalog); others (13, 31, 43,
# 45: an application's own fault or cleanup) are reported as information only.
HARDWARE_XIDS = {48: "double-bit ECC", 61: "internal micro-controller breakpoint", 62: "internal micro-controller halt",
                 63: "ECC page retirement / row remap", 64: "ECC page retirement / row remap failure",
                 74: "NVLink error", 79: "GPU fell off the bus", 92: "high single-bit ECC rate",
                 94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
                 121: "C2C link error", 140: "unrecovered ECC error", 143: "GPU initialization failure",
                 145: "NVLink error", 149: "NVLink/NVSwitch fatal error", 154: "GPU recovery action required"}


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    nvml = snapshot.data("nvml")
    by_pci = {_pci_key(g.get("pci_bus_id")): g.get("index") for g in nvml.get("gpus") or [] if g.get("pci_bus_id")}
    owners = _gpu_owners(nvml, deployments)
    return _xids(snapshot, deployments, by_pci, owners) + _nvlink(snapshot, deployments, owners)


def _pci_key(pci: Any) -> str:
    """``00000000:3B:00.0`` (NVML) and ``0000:3b:00`` (Xid line) to ``3b:00``."""
    parts = str(pci or "").lower().split(":")
    return ":".join(p.split(".")[0] for p in parts[-2:]) if len(parts) >= 2 else ""


def _gpu_owners(nvml: dict[str, Any], deployments: list[Deployment]) -> dict[int, Deployment]:
    owners: dict[int, Deployment] = {}
    for dep in deployments:
        for idx in sorted(nvml_pids.pid_map(nvml, dep.processes).held(dep.pids)):
            owners.setdefault(idx, dep)
    return owners


def _xids(snap: Snapshot, deployments: list[Deployment], by_pci: dict[str, Any], owners: dict[int, Deployment]
          ) -> list[Finding]:
    groups: dict[tuple[str | None, bool], list[dict[str, Any]]] = {}
    for x in snap.data("kmsg").get("xids") or []:
        if not isinstance(x, dict) or not isinstance(x.get("xid"), int):
            continue
        gpu = by_pci.get(_pci_key(x.get("pci")))
        dep = owners.get(gpu) if isinstance(gpu, int) else None
        # During this deployment's life (its oldest process is older than the line) or before it.
        life = max((float(p.get("age_s") or 0) for p in dep.processes), default=0.0) if dep else None
        recent = life is None or x.get("age_s") is None or float(x["age_s"]) <= life
        hardware = x["xid"] in HARDWARE_XIDS
        groups.setdefault((dep.id if dep else None, hardware and recent), []).append({**x, "gpu": gpu})
    out = []
    for (dep_id, serious), xs in groups.items():
        dep = next((d for d in deployments if d.id == dep_id), None)
        names = sorted({f"Xid {x['xid']}" + (f" ({HARDWARE_XIDS[x['xid']]})" if x["xid"] in HARDWARE_XIDS else "")
                        for x in xs})
        gpus = sorted({f"GPU{x['gpu']}" if x["gpu"] is not None else f"PCI {x.get('pci')}" for x in xs})
        newest = min((x["age_s"] for x in xs if x.get("age_s") is not None), default=None)
        when = f", newest {newest / 60:.0f} min ago" if newest is not None else ""
        msg = f"Kernel log: {', '.join(names)} on {', '.join(gpus)}{when}" + (
            "." if serious else " (an application fault, or before this deployment started).")
        out.append(finding("gpu.kernel_xid", LAYER, "warning" if serious else "info", snap, dep, msg,
                           sorted({x["pid"] for x in xs if isinstance(x.get("pid"), int)}),
                           {"xids": xs[-10:], "source": snap.data("kmsg").get("source")}, []))
    return out


def _nvlink(snap: Snapshot, deployments: list[Deployment], owners: dict[int, Deployment]) -> list[Finding]:
    """Counters are cumulative since the driver loaded: replays and recoveries mean a link that
    retrains; CRC errors alone are often noise (information). Growth between passes is current."""
    first = {g.get("index"): g.get("nvlink_errors") or {} for g in snap.data("nvml").get("gpus") or []}
    last = dict(first)
    for p in snap.passes:
        for g in p.data("nvml").get("gpus") or []:
            if g.get("nvlink_errors"):
                last[g.get("index")] = g["nvlink_errors"]
    out = []
    for idx, counters in sorted(first.items(), key=lambda kv: str(kv[0])):
        now = last.get(idx) or counters
        if not now or not any(now.values()):
            continue
        grew = sorted(k for k in now if int(now.get(k) or 0) > int(counters.get(k) or 0))
        serious = bool(grew) or int(now.get("replay") or 0) > 0 or int(now.get("recovery") or 0) > 0
        dep = owners.get(idx) if isinstance(idx, int) else None
        what = ", ".join(f"{k} {v}" for k, v in sorted(now.items()) if v)
        msg = f"GPU{idx} NVLink error counters: {what}" + (f" (growing while we looked: {', '.join(grew)})" if grew else "") + "."
        out.append(finding("gpu.nvlink_errors", LAYER, "warning" if serious else "info", snap, dep, msg, [],
                           {"gpu": idx, "counters": now, "grew": grew}, []))
    return out

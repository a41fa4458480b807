"""Coverage note when vllmdiag ran inside a pod: which GPU processes it could attribute (pure).

The mapping itself lives in ``nvml_pids.py`` and every GPU rule reads it; this module only tells
the reader what that mapping could not do (info, never blocking: a blind spot is not a fault).
"""

from __future__ import annotations

from vllmdiag.analysis.common import finding
from vllmdiag.analysis.deployments import Deployment
from vllmdiag.analysis.nvml_pids import pid_map
from vllmdiag.model import Finding, Snapshot

LAYER = "gpu"
CODES = ("gpu.nvml_pids_foreign",)


def analyze(snapshot: Snapshot, deployments: list[Deployment]) -> list[Finding]:
    nvml = snapshot.data("nvml")
    procs = snapshot.data("processes").get("processes") or []
    m = pid_map(nvml, procs)
    if m.mode == "host" or not m.local_of:
        return []
    mapped = {n: p for n, p in sorted(m.local_of.items()) if p is not None}
    how = ", ".join(f"host pid {n} = pid {p}" for n, p in mapped.items()) or "none"
    msg = ("vllmdiag runs inside a container's PID namespace; NVML names processes by host pid, so GPUs were "
           f"tied to processes here through their /dev/nvidia* device nodes (attributed: {how}).")
    if m.notes:
        msg += " " + " ".join(m.notes)
    evidence = {"mode": m.mode, "attributed": {str(n): p for n, p in mapped.items()},
                "unattributed_nvml_pids": sorted(n for n, p in m.local_of.items() if p is None),
                "held_by": {f"GPU{g}": hs for g, hs in sorted(m.held_by.items())},
                "pid_namespace": nvml.get("pid_namespace")}
    return [finding("gpu.nvml_pids_foreign", LAYER, "info", snapshot, None, msg, sorted(mapped.values()),
                    evidence, [])]

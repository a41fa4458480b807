"""Coverage note when vllmdiag ran inside a pod: which GPU processes it could attribute (pure).

The mapping itself lives in ``nvml_pids.py`` and every GPU rule reads it; this module only tells
the reader what that mapping could not do (info, never blocking: a blind spot is not a fault).
"""

from __future__ import annotations

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.analysis.views.nvml_pids import pid_map
from vllmdiag.model import Finding

LAYER = "gpu"
CODES = ("gpu.nvml_pids_foreign",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot = facts.snapshot
    nvml = snapshot.data("nvml")
    procs = snapshot.data("processes").get("processes") or []
    m = pid_map(nvml, procs)
    if m.mode == "host" or not m.local_of:
        return []
    mapped = {n: p for n, p in sorted(m.local_of.items()) if p is not None}
    how = ", ".join(f"host pid {n} = pid {p}" for n, p in mapped.items()) or "none"
    tied = ("GPUs were tied to processes here through their /dev/nvidia* device nodes" if m.mode == "pod"
            else "no GPU could be tied to a process here")
    msg = (f"vllmdiag runs inside a container's PID namespace, where NVML's pids (the host's) mean nothing; {tied} "
           f"(attributed: {how}).")
    if m.notes:
        msg += " " + " ".join(m.notes)
    memory = {e["pid"]: e.get("used_memory_bytes") for g in nvml.get("gpus") or [] if isinstance(g, dict)
              for e in g.get("processes") or [] if isinstance(e, dict) and isinstance(e.get("pid"), int)}
    # NVML's per-process memory travels with the attribution: the reader can check it against the
    # process (a worker holds its weights + KV cache; a stray process a few hundred MiB).
    evidence = {"mode": m.mode, "attributed": {str(n): {"pid": p, "gpu": m.gpu_of.get(p),
                                                        "used_memory_bytes": memory.get(n)} for n, p in mapped.items()},
                "unattributed_nvml_pids": sorted(n for n, p in m.local_of.items() if p is None),
                "held_by": {f"GPU{g}": hs for g, hs in sorted(m.held_by.items())},
                "pid_namespace": nvml.get("pid_namespace")}
    return [finding("gpu.nvml_pids_foreign", LAYER, "info", snapshot, None, msg, sorted(mapped.values()),
                    evidence, [])]

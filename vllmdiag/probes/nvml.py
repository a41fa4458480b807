"""Per-GPU NVML facts (utilization, power, memory, ECC, Xid, compute pids), from a child process.

NVML calls run in ``probes/_nvml_child.py`` under a deadline: a call into a wedged driver cannot be
interrupted from a thread, but a child can be killed with its process group (DESIGN principle 2).
The child streams one JSON line per GPU, so the GPUs read before a hang are kept.

NVML names processes by host pids (the driver ignores PID namespaces). When our ``/proc`` belongs
to another namespace (vllmdiag run inside a pod), the probe also records which local processes hold
each GPU's device node, so analysis (``analysis/views/nvml_pids.py``) can map honestly (``_gpu_fds``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.probes import _gpu_fds

SPEC = ProbeSpec(name="nvml", layer="gpu", description="per-GPU NVML: util, power, memory, ECC, Xid, compute pids",
                 timeout_s=5.0)
CHILD_TIMEOUT_S = 3.0
# NVML reaches the kernel module through /dev/nvidiactl (WSL2: /dev/dxg); a loaded module shows in
# /proc/driver/nvidia (the container toolkit mounts both into a GPU pod). With none of them there is
# no driver NVML could reach: starting the child would cost a whole interpreter (~65 ms CPU, a fifth
# of a triage on 2 cores) only to learn that, and NVIDIA's libraries may run nvidia-modprobe to load
# the module and create device nodes, which is not ours to do on a node we only look at.
DRIVER_DEVICES = ("/dev/nvidiactl", "/dev/dxg")


def driver_visible(ctx: Context) -> bool:
    """Whether any sign of an NVIDIA driver is here (or a test's fake NVML, which stands in for it)."""
    if os.environ.get("VLLMDIAG_FAKE_NVML"):
        return True
    return ctx.proc("driver", "nvidia").exists() or any(os.path.exists(d) for d in DRIVER_DEVICES)


def collect(ctx: Context) -> dict[str, Any] | Partial:
    if not driver_visible(ctx):
        raise Skip(f"NVML unavailable (no NVIDIA GPU or driver here: no {ctx.proc('driver', 'nvidia')}, "
                   f"{' or '.join(DRIVER_DEVICES)}); NVML not started")
    timeout = float(ctx.options.nvml_timeout_s or CHILD_TIMEOUT_S)
    res = ctx.run([sys.executable, "-m", "vllmdiag.probes._nvml_child"], timeout)
    if res.error:
        raise Skip(f"cannot start the NVML child: {res.error}")
    data = parse_child(res.stdout)
    if "skip" in data:
        raise Skip(data["skip"])
    data["child"] = {"status": "timeout" if res.timed_out else "ok" if res.returncode == 0 else "error",
                     "returncode": res.returncode, "duration_s": round(res.duration_s, 4)}
    _namespace_facts(ctx, data)
    if res.timed_out:
        where = f"GPU {data['hung_gpu']}" if data.get("hung_gpu") is not None else "init"
        return Partial(data, f"timeout: NVML child killed at its {timeout:.1f} s deadline while querying {where} "
                             "(a wedged driver call); GPUs read before it are kept")
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return Partial(data, f"NVML child exited {res.returncode}: {tail}")
    return data


def _namespace_facts(ctx: Context, data: dict[str, Any]) -> None:
    """Which pid namespace numbers our /proc, and (only when it is not the host's, so the scan stays
    off the common path) the local holders of GPU device nodes. Read after the child has exited: its
    own /dev/nvidia* fds are gone by then."""
    ns = _gpu_fds.pid_namespace(ctx)
    data["pid_namespace"] = ns
    if _gpu_fds.not_the_hosts(ns) and data.get("gpus"):
        data["device_fds"] = _gpu_fds.device_fds(ctx)


def parse_child(text: str) -> dict[str, Any]:
    """The child's JSON lines -> {meta..., gpus: [...], hung_gpu: index begun but not finished}."""
    out: dict[str, Any] = {"gpus": []}
    begun = None
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the kill
        if not isinstance(obj, dict):
            continue
        if "skip" in obj:
            return {"skip": str(obj["skip"])}
        if "meta" in obj:
            out.update(obj["meta"])
        elif "begin" in obj:
            begun = obj["begin"]
        elif "gpu" in obj:
            out["gpus"].append(obj["gpu"])
            begun = None
    out["hung_gpu"] = begun
    return out

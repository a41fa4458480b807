"""Finding, naming and stopping the processes of one simulated deployment.

Roles come from the command line, as a diagnosis would read them: `VLLM::*` titles, the
untitled `vllm serve` API server, the multiprocessing resource tracker. A process is only ever
signalled if its (pid, create_time) pair was recorded by this deployment, so a recycled pid
that now belongs to someone else is left alone.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import psutil

_WORKER_RE = re.compile(r"^VLLM::Worker(?:_DP(\d+))?(?:_PP(\d+))?(?:_TP(\d+))?(?:_EP(\d+))?$")
_ENGINE_RE = re.compile(r"^VLLM::EngineCore(?:_DP(\d+))?$")
_API_RE = re.compile(r"^VLLM::APIServer_(\d+)$")
_RAY_RE = re.compile(r"^ray::RayWorker(?:Proc|Wrapper)(?:\.\w+)?$")


def classify(cmdline: list[str]) -> dict[str, Any] | None:
    """`{"role", "title", "rank", "dp_rank"}` for a sim process, else None."""
    if not cmdline:
        return None
    title = cmdline[0].rstrip("\x00 ")
    if m := _WORKER_RE.match(title):
        # "VLLM::Worker" without a rank is a worker inside init_device: its rank is not known yet.
        # With PP the rank here is the TP rank; shapes.annotate makes it the global rank (pp * TP + tp).
        info = {"role": "worker", "title": title, "dp_rank": int(m[1] or 0),
                "rank": int(m[3]) if m[3] else (0 if m[1] or m[2] or m[4] else None)}
        if m[2]:
            info["pp_rank"] = int(m[2])
        return info
    if m := _ENGINE_RE.match(title):
        return {"role": "engine_core", "title": title, "dp_rank": int(m[1] or 0), "rank": None}
    if m := _API_RE.match(title):  # an API server under a manager `vllm serve` (--api-server-count > 1)
        return {"role": "api_server_child", "title": title, "dp_rank": None, "rank": int(m[1])}
    if title == "VLLM::DPCoordinator":
        return {"role": "dp_coordinator", "title": title, "dp_rank": None, "rank": None}
    if _RAY_RE.match(title):  # a Ray actor: its rank is what it recorded (shapes.annotate)
        return {"role": "worker", "title": title, "dp_rank": 0, "rank": None}
    joined = " ".join(cmdline)
    if "/raylet " in joined or cmdline[0].endswith("/raylet"):
        return {"role": "raylet", "title": joined, "dp_rank": None, "rank": None}
    if cmdline[0].endswith("unshare"):
        return {"role": "unshare", "title": joined, "dp_rank": None, "rank": None}
    if len(cmdline) > 2 and cmdline[1].endswith("/vllm") and cmdline[2] == "serve":
        role = "headless" if "--headless" in cmdline else "api_server"
        return {"role": role, "title": joined, "dp_rank": None, "rank": None}
    for needle, role in (("multiprocessing.resource_tracker", "resource_tracker"),
                         ("vllmdiag_sim.nsinit", "nsinit"), ("vllmdiag_sim.clients", "client"),
                         ("vllmdiag_sim.vllm.entrypoints.llm", "llm_client")):
        if needle in joined:
            return {"role": role, "title": joined, "dp_rank": None, "rank": None}
    return None


def describe(proc: psutil.Process) -> dict[str, Any] | None:
    try:
        info = classify(proc.cmdline())
        if info is None:
            return None
        return {**info, "pid": proc.pid, "create_time": proc.create_time()}
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


def discover(top_pids: list[int]) -> list[dict[str, Any]]:
    """The given processes and all their live descendants, classified."""
    seen: dict[int, dict[str, Any]] = {}
    for pid in top_pids:
        try:
            top = psutil.Process(pid)
            family = [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in family:
            if proc.pid not in seen and (info := describe(proc)) is not None:
                seen[proc.pid] = info
    return sorted(seen.values(), key=lambda p: p["pid"])


def parent_pid(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).ppid())
    except psutil.NoSuchProcess:
        return None


def still_ours(rec: dict[str, Any]) -> psutil.Process | None:
    try:
        proc = psutil.Process(rec["pid"])
        if abs(proc.create_time() - rec["create_time"]) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.NoSuchProcess:
        pass
    return None


def kill_all(records: list[dict[str, Any]], timeout_s: float = 10.0) -> None:
    """SIGKILL every recorded process still alive, and their descendants; wait until gone."""
    victims: dict[int, psutil.Process] = {}
    for rec in records:
        if (proc := still_ours(rec)) is not None:
            victims[proc.pid] = proc
            try:
                victims.update({c.pid: c for c in proc.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
    for proc in victims.values():
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    deadline = time.monotonic() + timeout_s
    for proc in victims.values():
        while time.monotonic() < deadline and _alive(proc):
            time.sleep(0.02)
        _reap_if_child(proc.pid)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _reap_if_child(pid: int, timeout_s: float = 3.0) -> None:
    """Reap a SIGKILLed child of ours (e.g. the API server when `sim up` ran in this process);
    the kill lands asynchronously, so poll until it is reaped, not just once."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child, or already reaped
        if done or time.monotonic() > deadline:
            return
        time.sleep(0.01)

"""Small helpers shared by the gate checks (pure)."""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Snapshot

VLLM_ROLES = ("api_server", "api_server_child", "engine_core", "worker", "dp_coordinator")


def probe_problem(snap: Snapshot, probe: str) -> str | None:
    """Why a probe's data cannot be used (absent, skipped, error, timeout), or None when it can."""
    res = snap.probes.get(probe)
    if res is None:
        return f"probe {probe!r} did not run on {snap.node}"
    if res.status in ("ok", "partial"):
        return None
    return f"probe {probe!r} {res.status}: {res.reason or 'no reason given'}"


def vllm_processes(snap: Snapshot) -> list[dict[str, Any]]:
    """Live vLLM processes of the snapshot (zombies carry no environ or limits)."""
    return [p for p in snap.data("processes").get("processes", [])
            if p.get("role") in VLLM_ROLES and p.get("state") != "Z"]


def deployment_running(snap: Snapshot) -> bool:
    return any(p.get("role") in ("engine_core", "worker") for p in vllm_processes(snap))

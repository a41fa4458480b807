"""fleet_versions, fleet_libnccl, fleet_env, fleet_shm_size: one value per node that every node of a
fleet must share (``sweep --gate``; ``gate/cross_node.py`` compares them with the most common value).
Ranks of one job on nodes with different NCCL builds or settings have hung vLLM (issue #41725).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.gate.common import vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.model import Snapshot


def _versions(snap: Snapshot, cfg: GateConfig) -> Any:
    return snap.data("libs").get("packages") or None


def _libnccl(snap: Snapshot, cfg: GateConfig) -> Any:
    libs = snap.data("libs").get("nccl") or []
    return {lib["path"]: lib.get("build_id") for lib in libs} or None


def _env(snap: Snapshot, cfg: GateConfig) -> Any:
    procs = vllm_processes(snap)
    env = (procs[0].get("environ") if procs else snap.data("preflight").get("env")) or {}
    keep = {k: v for k, v in env.items() if k.startswith(("NCCL_", "VLLM_", "TORCH_NCCL", "CUDA_"))
            and k not in cfg.allowed_env_differences}
    return keep if (procs or "preflight" in snap.probes) else None


def _shm_size(snap: Snapshot, cfg: GateConfig) -> Any:
    return (snap.data("host").get("dev_shm") or {}).get("size_bytes")


GATE_CHECKS = (
    GateCheck("fleet_versions", "fleet", "fleet", _versions, what="vLLM/torch/NCCL package versions"),
    GateCheck("fleet_libnccl", "fleet", "fleet", _libnccl, what="libnccl path and ELF build-id"),
    GateCheck("fleet_env", "fleet", "fleet", _env, what="NCCL_/VLLM_/CUDA_ environment"),
    GateCheck("fleet_shm_size", "fleet", "fleet", _shm_size, what="/dev/shm size"),
)

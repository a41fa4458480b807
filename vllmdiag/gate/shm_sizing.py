"""/dev/shm bytes a vLLM 0.33 deployment of TP=N allocates for its ring buffers (vllm-internals 1.10).

tmpfs allocates pages lazily, but 0.33 calls check_shm_free_space() before creating each ring and
refuses to start ("Insufficient space in /dev/shm ..."); older versions started and later died of
SIGBUS on first touch. Either way the planned total must fit in the free space.
"""

from __future__ import annotations

from vllmdiag.probes._ringfmt import (
    RESPONSE_CHUNK_BYTES,
    RESPONSE_CHUNKS,
    RPC_CHUNK_BYTES,
    RPC_CHUNKS,
    TP_CHUNK_BYTES,
    TP_CHUNKS,
    Geometry,
    MiB,
)


def ring_bytes(tp: int, chunk_mb: int = RPC_CHUNK_BYTES // MiB) -> dict[str, int]:
    """Segment bytes per ring kind for TP=tp on one node. TP=1 runs UniProcExecutor: no rings at all."""
    if tp <= 1:
        return {"rpc_broadcast": 0, "worker_response": 0, "tp_broadcaster": 0, "total": 0}
    # The geometry the probe decodes (probes/_ringfmt.py): one ring per kind, one response ring per rank.
    rpc = Geometry(RPC_CHUNKS, chunk_mb * MiB, tp).size_bytes
    responses = tp * Geometry(RESPONSE_CHUNKS, RESPONSE_CHUNK_BYTES, 1).size_bytes
    broadcaster = Geometry(TP_CHUNKS, TP_CHUNK_BYTES, tp - 1).size_bytes
    return {"rpc_broadcast": rpc, "worker_response": responses, "tp_broadcaster": broadcaster,
            "total": rpc + responses + broadcaster}


def human_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"

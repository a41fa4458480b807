"""/dev/shm bytes a vLLM 0.33 deployment of TP=N allocates for its ring buffers (vllm-internals 1.10).

tmpfs allocates pages lazily, but 0.33 calls check_shm_free_space() before creating each ring and
refuses to start ("Insufficient space in /dev/shm ..."); older versions started and later died of
SIGBUS on first touch. Either way the planned total must fit in the free space.
"""

from __future__ import annotations

MIB = 1 << 20
RPC_CHUNKS = 10  # rpc_broadcast_mq: max_chunks
RESPONSE_CHUNK_BYTES = 24 * MIB  # worker_response_mq: MessageQueue(1, 1) class default
RESPONSE_CHUNKS = 10
TP_CHUNK_BYTES = 1 << 22  # GroupCoordinator mq_broadcaster: create_from_process_group(cpu_group, 1 << 22, 6)
TP_CHUNKS = 6


def ring_bytes(tp: int, chunk_mb: int = 16) -> dict[str, int]:
    """Segment bytes per ring kind for TP=tp on one node. TP=1 runs UniProcExecutor: no rings at all."""
    if tp <= 1:
        return {"rpc_broadcast": 0, "worker_response": 0, "tp_broadcaster": 0, "total": 0}
    # Each ring: (max_chunk_bytes + n_reader metadata bytes) x max_chunks (ShmRingBuffer layout).
    rpc = (chunk_mb * MIB + 1 + tp) * RPC_CHUNKS
    responses = tp * (RESPONSE_CHUNK_BYTES + 2) * RESPONSE_CHUNKS
    broadcaster = (TP_CHUNK_BYTES + tp) * TP_CHUNKS
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

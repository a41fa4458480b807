"""Chunk heads written by the REAL vLLM 0.33.0 enqueue paths, read back with pread (for offline decoder tests)."""
import json
import os
import sys
from collections import deque

from vllm.distributed.device_communicators.shm_broadcast import MessageQueue
from vllm.v1.executor.multiproc_executor import MultiprocExecutor, WorkerProc


def chunk0(mq):
    path = "/dev/shm/" + mq.buffer.shared_memory.name.lstrip("/")
    fd = os.open(path, os.O_RDONLY)
    try:
        head = os.pread(fd, 7, 0)
        n = int.from_bytes(head[3:7], "big")
        return path, os.pread(fd, 7 + n, 0)
    finally:
        os.close(fd)


out = {}
rpc = MessageQueue(4, 4, max_chunk_bytes=16 * 1024 * 1024)
ex = MultiprocExecutor.__new__(MultiprocExecutor)
ex.is_failed, ex.rpc_broadcast_mq, ex.response_mqs, ex.futures_queue = False, rpc, [None] * 4, deque()
ex.collective_rpc("execute_model", args=({"step": 1, "req_ids": ["req-0"]},), unique_reply_rank=0, non_block=True)
p, b = chunk0(rpc)
out["rpc_execute_model"] = {"segment_size": os.stat(p).st_size, "chunk_hex": b.hex()}
for name, result in (("response_success", {"req_ids": ["req-0"], "sampled_token_ids": [[1]]}),
                     ("response_failure", RuntimeError("CUDA error: an illegal memory access was encountered"))):
    wp = WorkerProc.__new__(WorkerProc)
    wp.worker_response_mq = MessageQueue(1, 1)
    wp.enqueue_output(result)
    p, b = chunk0(wp.worker_response_mq)
    out[name] = {"segment_size": os.stat(p).st_size, "chunk_hex": b.hex()}
    del wp
json.dump(out, sys.stdout, indent=1)

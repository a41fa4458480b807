"""A deployment still starting, and whether its start-up moves (pure).

vLLM's start-up is long and legitimate: weights load (minutes from a network disk), torch.compile and
CUDA graph capture run, the KV cache is profiled, and every rank waits at READY barriers for the others
(real-vllm-cpu.md, start-up phases; real-hang-patterns row 10). Until the engine reports ready the
deployment is *starting*, never healthy or idle (DESIGN.md, output contract): its rings are empty and
its API server does not listen yet, so the serving rules have nothing to say.

Two kinds of phase: a rank **works** (init_device, load_model, compile, warm-up / capture, a profiling
forward) or **waits** for its peers (wait_until_ready, wait_for_ready, the handshake, NCCL init, a
barrier). The start-up moves when a working rank's stack leaves its place, or it spends CPU time, or it
reads (``/proc/PID/io`` rchar: files or a socket). CPU of a waiting rank is no movement: several of
these waits spin. A working rank that does none of that over ``HELD_S`` while the others wait is the one
they wait for; every rank waiting with nothing moving is a start-up stuck as a group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment, display_title, role_of
from vllmdiag.analysis.views.progress import HELD_S, all_passes, same_place, watched_s
from vllmdiag.analysis.views.rank_compare import rank_name
from vllmdiag.analysis.views.stack_match import StackClass, classify_threads, stop_signature
from vllmdiag.model import Snapshot
from vllmdiag.vocab.stack_classes import (
    COLLECTIVE,
    COMPILING,
    ENGINE_BUSY,
    ENGINE_IDLE,
    ENGINE_WAITING_WORKERS,
    EXECUTING,
    HANDSHAKE,
    IDLE,
    INIT_DEVICE,
    LOAD_MODEL,
    NCCL_INIT,
    SYNC_POINT,
    WAIT_FOR_READY,
    WAIT_UNTIL_READY,
    WARMUP,
)

WORKING = (INIT_DEVICE, LOAD_MODEL, COMPILING, WARMUP)
WAITING = (WAIT_UNTIL_READY, WAIT_FOR_READY, HANDSHAKE, NCCL_INIT)
# Past start-up: an engine or worker in its serving loop (idle or in a step) has reported ready.
SERVING = (ENGINE_IDLE, ENGINE_BUSY, ENGINE_WAITING_WORKERS, IDLE)
# During start-up a profiling forward (KV-cache sizing, warm-up) runs the model: work, not a served step; a
# collective or a sync point then is a wait for peers. An unknown stack is neither: it is never "held".
WORKS_AT_START = (EXECUTING,)
WAITS_AT_START = (COLLECTIVE, SYNC_POINT)
STARTING_ROLES = ("engine_core", "worker", "worker_starting")
CPU_MOVING_S = 0.1  # CPU seconds over the window that count as a working rank moving (a polling hold: ~1 ms/s)
CPU_MOVING_SHARE = 0.05  # or this share of one core over a long window
READ_MOVING_BYTES = 4 << 10  # a held rank reads nothing (recorded: 0 B over 3.3 s; its waiting peers 16-32 B)


@dataclass
class RankLook:
    pid: int
    name: str  # "TP1", "EngineCore", "DP1's worker"
    phase: str  # the class name of its latest look
    where: str | None
    looks: int
    moved: list[str] = field(default_factory=list)  # what moved: "stack", "CPU 1.2 s", "read 40 MB"

    @property
    def works(self) -> bool:
        return self.phase in WORKING or self.phase in WORKS_AT_START

    @property
    def waits(self) -> bool:
        return self.phase in WAITING or self.phase in WAITS_AT_START


@dataclass
class StartupPicture:
    deployment_id: str
    since_s: float  # since the deployment's first process started
    window_s: float
    ranks: list[RankLook]
    http_listening: bool

    @property
    def moving(self) -> list[RankLook]:
        return [r for r in self.ranks if r.moved and r.works]

    @property
    def held(self) -> list[RankLook]:
        """Working ranks that did not move over a window long enough to call it held."""
        return [r for r in self.ranks if r.works and not r.moved] if self.window_s >= HELD_S else []

    @property
    def waiting(self) -> list[RankLook]:
        return [r for r in self.ranks if r.waits]

    def phases(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in self.ranks:
            out.setdefault(r.phase, []).append(r.name)
        return out

    def phase_text(self) -> str:
        return "; ".join(f"{phase}: {', '.join(names)}" for phase, names in self.phases().items()) or "no stacks"


def startup_picture(snapshot: Snapshot, dep: Deployment) -> StartupPicture | None:
    """The picture of a deployment whose engine has not reported ready, else None (serving, or no stacks
    say either way). Start-up is what the stacks show (a rank in a start-up phase, none in a serving loop)
    or, with an API server, its HTTP port not listening yet while no rank is in a serving loop."""
    passes = all_passes(snapshot)
    looks = _looks(passes, dep)
    if not looks:  # no stack of its EngineCore or workers: nothing says starting or serving (a blind look, or
        return None  # a non-root one whose socket owners are hidden too): the verdict names what was not seen
    latest = {pid: obs[-1] for pid, obs in looks.items()}
    phases = {pid: sc.name for pid, (sc, _) in latest.items()}
    if any(name in SERVING for name in phases.values()):
        return None
    listening = _http_listening(passes[-1], dep)
    starting_stack = any(name in WORKING + WAITING for name in phases.values())
    starting_http = _has_api_server(dep) and listening is False and bool(dep.engines or dep.workers)
    if not (starting_stack or starting_http):
        return None
    procs = {p["pid"]: p for p in dep.processes}
    ranks = []
    for pid, obs in sorted(looks.items(), key=lambda kv: _order(procs[kv[0]])):
        sc = obs[-1][0]
        look = RankLook(pid, _name(procs[pid]), sc.name, sc.place or sc.where, len(obs))
        look.moved = _moved(passes, pid, obs)
        ranks.append(look)
    since = max((float(p.get("age_s") or 0.0) for p in dep.processes), default=0.0)
    return StartupPicture(dep.id, round(since, 1), watched_s(passes), ranks, bool(listening))


def _looks(passes: list[Snapshot], dep: Deployment) -> dict[int, list[tuple[StackClass, tuple[Any, ...]]]]:
    roles = {p["pid"]: role_of(p) for p in dep.processes}
    out: dict[int, list[tuple[StackClass, tuple[Any, ...]]]] = {}
    for snap in passes:
        for d in snap.data("stacks").get("dumps", []) or []:
            if not isinstance(d, dict) or roles.get(d.get("pid")) not in STARTING_ROLES:
                continue
            for threads in (d.get("threads"), (d.get("resample") or {}).get("threads")):
                if threads:
                    role = "worker" if roles[d["pid"]] == "worker_starting" else roles[d["pid"]]
                    sc = classify_threads(threads, role)
                    out.setdefault(int(d["pid"]), []).append((sc, stop_signature(threads, sc)))
    return out


def _moved(passes: list[Snapshot], pid: int, obs: list[tuple[StackClass, tuple[Any, ...]]]) -> list[str]:
    out = []
    if len(obs) > 1 and not all(same_place(obs[0][1], sig) for _, sig in obs[1:]):
        out.append("its stack moved")
    first, last = _counters(passes[0], pid), _counters(passes[-1], pid)
    if first and last:
        window = max(watched_s(passes), 0.0)
        cpu = last[0] - first[0]
        if cpu >= max(CPU_MOVING_S, CPU_MOVING_SHARE * window):
            out.append(f"{cpu:.1f} CPU-s")
        read = last[1] - first[1]
        if read >= READ_MOVING_BYTES:
            out.append(f"read {read / (1 << 20):.1f} MiB")
    return out


def _counters(snap: Snapshot, pid: int) -> tuple[float, int] | None:
    for q in snap.data("processes").get("processes", []) or []:
        if isinstance(q, dict) and q.get("pid") == pid:
            io = q.get("io")
            rchar = io.get("rchar") if isinstance(io, dict) else None
            return (float(q.get("cpu_user_s") or 0.0) + float(q.get("cpu_system_s") or 0.0),
                    rchar if isinstance(rchar, int) else 0)
    return None


def _has_api_server(dep: Deployment) -> bool:
    return any(role_of(p) in ("api_server", "api_server_child") for p in dep.processes)


def _http_listening(snap: Snapshot, dep: Deployment) -> bool | None:
    """Whether an API server process of the deployment listens on TCP; None when sockets were not read."""
    if snap.status("sockets") not in ("ok", "partial"):
        return None
    api = {p["pid"] for p in dep.processes if role_of(p) in ("api_server", "api_server_child")}
    return any(isinstance(t, dict) and t.get("state") == "LISTEN" and api & set(t.get("pids") or [])
               for t in snap.data("sockets").get("tcp", []) or [])


def _name(proc: dict[str, Any]) -> str:
    role = role_of(proc)
    if role in ("worker", "worker_starting"):
        if role == "worker_starting" or not proc.get("titled"):
            return f"a starting worker (pid {proc['pid']})"
        return rank_name(proc)
    return display_title(proc).replace("VLLM::", "") or role


def _order(proc: dict[str, Any]) -> tuple[int, int]:
    return (0 if role_of(proc) == "engine_core" else 1, int(proc["pid"]))


__all__ = ["StartupPicture", "RankLook", "startup_picture", "WORKING", "WAITING"]

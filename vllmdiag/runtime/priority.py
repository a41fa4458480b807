"""The tool's own CPU on a saturated node: SCHED_FIFO for its short, bounded life (issue 24).

A hung or overloaded vLLM node has every core busy (workers spin in collectives, in the rings'
``sched_yield`` loops, in OMP). At normal priority a triage there took 20-45 s and its py-spy dumps
timed out; started under ``chrt -f 10`` the same triage took 0.4-1.1 s (nice -15 did not help: CFS
still shares a core with every spinning thread). So, as root, the tool raises *its own* scheduling
class, and only its own (``sched_setscheduler`` of this thread, inherited by the threads and
children it starts afterwards: the collector, py-spy, the NVML child). It never touches a target.

Why that cannot hurt the target:
- it holds the priority only for the command's life, which the hard budget ends (the collector is
  killed at the budget, the command prints its verdict by budget + 1 s);
- the kernel's RT throttling (``kernel.sched_rt_runtime_us``, 950 ms of every 1 s by default) leaves
  every core's other tasks their share even if one of our threads spun; where throttling is off
  (-1) we do not take SCHED_FIFO at all;
- ``RLIMIT_RTTIME`` has the kernel kill a thread of ours that runs at RT priority for ``RTTIME_S``
  without blocking once, so a runaway loop cannot keep a core;
- most of our time is spent waiting (on py-spy, on pipes, on sampling gaps): a blocked FIFO task
  takes no CPU, and a py-spy that runs at once holds its ptrace stop of a target for less time.
Where the kernel refuses (no CAP_SYS_NICE, a cgroup without an RT budget: EPERM) it falls back to a
lower nice value, else leaves the priority as it is, and the snapshot says which (``options.priority``).
``--no-boost`` (triage, collect) or ``VLLMDIAG_BOOST=0`` (every command, the watcher's triages included) turn it off.
The installed command (scripts/vllmdiag, sh) takes SCHED_FIFO before the interpreter starts, by the same
rules, and says so in ``VLLMDIAG_RT_FROM``; here the rest of the rules then apply (``_launched``).
"""

from __future__ import annotations

import os
import resource

TYPE_CHECKING = False  # not typing's: this module loads before anything else (boost_first), typing costs ~5 ms
if TYPE_CHECKING:
    from typing import Any

FIFO_PRIORITY = 10  # low among RT priorities (1-99): kernel threads (migration, watchdog) stay above us
NICE = -10  # the fallback: better than nothing where RT is refused
RTTIME_S = 5.0  # CPU seconds a thread of ours may run at RT priority without blocking once (then SIGKILL)
ENV = "VLLMDIAG_BOOST"
LAUNCHER_ENV = "VLLMDIAG_RT_FROM"  # set by scripts/vllmdiag when it took SCHED_FIFO for the command
RT_RUNTIME = "/proc/sys/kernel/sched_rt_runtime_us"

_state: dict[str, Any] | None = None


# The commands that look at a node: they take CPU first thing (``boost_first``).
LOOKING = ("triage", "gate", "collect")


def boost_first(argv: list[str]) -> None:
    """The command's very first step (``vllmdiag/__main__.py``, before the CLI is imported): on a
    saturated node every CPU millisecond spent at normal priority costs ten to fifty in wall time, so
    the commands that look at a node boost before loading anything else. ``-h`` needs no CPU."""
    if argv[:1] and argv[0] in LOOKING and not {"-h", "--help"} & set(argv[1:]):
        boost("--no-boost" not in argv)


def disabled_by_env() -> bool:
    return os.environ.get(ENV, "1").strip().lower() in ("0", "no", "off", "false")


def boost(enabled: bool = True) -> dict[str, Any]:
    """Raise this thread's (and everything it starts afterwards) scheduling class; say what was done.
    Call it before any thread is started (Linux sets the class per thread). Idempotent."""
    global _state
    if _state is not None:
        return _state
    _state = _apply(enabled and not disabled_by_env(), not enabled)
    return _state


def state() -> dict[str, Any]:
    """What ``boost`` did in this process (``{"policy": "normal", ...}`` when it was never asked)."""
    if _state is not None:
        return _state
    return {"policy": _policy_name(), "why": "not asked to boost"}


def realtime() -> bool:
    """True once this process runs in a real-time class (boosted, or started under chrt)."""
    return state().get("policy") in ("SCHED_FIFO", "SCHED_RR")


def _apply(on: bool, by_flag: bool) -> dict[str, Any]:
    if not on:
        return {"policy": _policy_name(), "why": "--no-boost" if by_flag else f"{ENV}=0"}
    if not hasattr(os, "sched_setscheduler"):
        return {"policy": "normal", "why": "no sched_setscheduler on this platform"}
    launched = os.environ.pop(LAUNCHER_ENV, "") == "launcher"  # scripts/vllmdiag took SCHED_FIFO before exec
    if os.sched_getscheduler(0) in (os.SCHED_FIFO, os.SCHED_RR):
        if not launched:  # the user's own chrt: their choice, kept as it is
            return {"policy": _policy_name(), "why": "already real-time (started under chrt)"}
        return _launched()
    taken, why = _take_fifo()
    if taken is not None:
        return taken
    try:
        before = os.nice(0)
        if before > NICE:
            os.nice(NICE - before)
        return {"policy": "SCHED_OTHER", "nice": os.nice(0), "why": why}
    except OSError as exc:
        return {"policy": "SCHED_OTHER", "nice": os.nice(0), "why": f"{why}; nice refused ({exc.strerror})"}


def thread_realtime() -> dict[str, Any]:
    """SCHED_FIFO for the calling thread alone, by the rules above (RT throttling on, more than one core,
    ``RLIMIT_RTTIME``, ``VLLMDIAG_BOOST=0`` honoured). For a resident thread that blocks between answers
    and spends microseconds on each: the watcher's /livez, /readyz and /metrics server. On the real server under
    load (2 cores, vLLM's OMP threads spinning) the watcher at normal priority left a kubelet's probe
    without an answer for 3 s running (its timeoutSeconds is 1 s by default): three misses restart the pod.
    The watcher's passes and triages stay at their own priority: only the answers jump the queue."""
    if disabled_by_env():
        return {"policy": _policy_name(), "why": f"{ENV}=0"}
    if not hasattr(os, "sched_setscheduler"):
        return {"policy": "normal", "why": "no sched_setscheduler on this platform"}
    if os.sched_getscheduler(0) in (os.SCHED_FIFO, os.SCHED_RR):
        return {"policy": _policy_name(), "why": "already real-time"}
    taken, why = _take_fifo()
    return taken if taken is not None else {"policy": _policy_name(), "why": why}


def _take_fifo() -> tuple[dict[str, Any] | None, str]:
    """SCHED_FIFO for the calling thread where the rules allow it (RT throttling on, more than one usable
    core, RLIMIT_RTTIME set first): (what was taken, "") or (None, why not)."""
    runtime = _read_int(RT_RUNTIME)
    if runtime is None or runtime < 0:
        return None, ("kernel RT throttling is off (sched_rt_runtime_us=-1): SCHED_FIFO could starve the node"
                      if runtime is not None else "cannot read sched_rt_runtime_us: RT throttling unknown")
    if _one_core():
        return None, "a single usable core: SCHED_FIFO not taken there"
    try:
        _limit_rt_time()
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
    except (PermissionError, OSError, ValueError) as exc:
        return None, f"SCHED_FIFO refused ({type(exc).__name__}: {exc}; no CAP_SYS_NICE or no RT budget in this cgroup)"
    return {"policy": "SCHED_FIFO", "priority": FIFO_PRIORITY, "rt_runtime_us": runtime, "rttime_limit_s": RTTIME_S}, ""


def _launched() -> dict[str, Any]:
    """SCHED_FIFO taken by the `vllmdiag` launcher before the interpreter started (it checked the flags and
    RT throttling): the rest of the rules here, the RT-time limit and one usable core (then back to normal)."""
    runtime = _read_int(RT_RUNTIME)
    try:
        if _one_core():
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            return {"policy": "SCHED_OTHER", "why": "a single usable core: the launcher's SCHED_FIFO given back"}
        _limit_rt_time()
    except (PermissionError, OSError, ValueError) as exc:  # the limit refused: no RT without it
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return {"policy": "SCHED_OTHER", "why": f"RLIMIT_RTTIME refused ({type(exc).__name__}: {exc}): SCHED_FIFO given back"}
    return {"policy": _policy_name(), "priority": os.sched_getparam(0).sched_priority, "rt_runtime_us": runtime,
            "rttime_limit_s": RTTIME_S, "by": "the vllmdiag launcher, from exec (the interpreter's start included)"}


def _one_core() -> bool:
    return (os.cpu_count() or 1) < 2 or len(os.sched_getaffinity(0)) < 2


def _limit_rt_time() -> None:
    """A thread that would spin at RT priority without ever blocking is killed by the kernel."""
    limit = int(RTTIME_S * 1e6)
    resource.setrlimit(resource.RLIMIT_RTTIME, (limit, limit))


def _policy_name() -> str:
    try:
        policy = os.sched_getscheduler(0)
    except (AttributeError, OSError):
        return "normal"
    names = {os.SCHED_FIFO: "SCHED_FIFO", os.SCHED_RR: "SCHED_RR", os.SCHED_OTHER: "SCHED_OTHER"}
    return names.get(policy, str(policy))


def _read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None

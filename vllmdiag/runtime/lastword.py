"""A triage's last word when it gets no CPU: an inconclusive verdict by budget + 1 s, whatever ran late.

Without SCHED_FIFO (``--no-boost``, no root, a cgroup without an RT budget) a triage on a node whose
every core spins gets about 1 % of a core: on the loaded real server its own imports (~0.1 s of CPU)
took 10-20 s, so the budget checks in the code behind them came far too late (14-22 s against 9 s).
So the command arms an interval timer at its first line (``vllmdiag/__main__.py``), due at the process
start + budget + ``LAST_WORD_S``: if no verdict was written by then, the handler writes a short
inconclusive one that says why (fixed text, nothing imported), ends the collector it started, if
any, and exits 4. A fraction of a millisecond of CPU: on such a node, tens of milliseconds.

The command's own guards (``deadline.guard``) nest inside this timer and give it back after; the
verdict written (``spoken``) turns it into a no-op; the confirm window moves it (``postpone``). A
boosted command runs at full speed and keeps its own rules (it may finish a quick pass after a slow
start-up), so the timer is armed only where the boost did not take. It uses ``_signal``, not
``signal``, which imports enum (~7 ms of CPU: most of a second at 1 % of a core).

``vllmdiag collect`` (what every node of a sweep runs) gets the same timer. Its last word is a
snapshot in which the processes probe timed out, saying why, on stdout (exit 0): the sweep reads it
as that node's answer (blind, so inconclusive), by the node's budget + 1 s, not at the sweep's own
``--timeout``. With ``--out FILE`` (and no ``--json``) it is one line on stderr and exit 4.
``vllmdiag gate`` too: its last word is a failed gate (the check ``budget``, exit 1), armed at the first
line with the default budget, or once its config is read where a ``--config`` or ``--url`` sets it."""

from __future__ import annotations

import os
import time

try:
    import _signal
except ImportError:  # not CPython: no last word, the guards behind it still hold
    _signal = None

TYPE_CHECKING = False  # not typing's: this module loads before the CLI (typing costs ~5 ms)
if TYPE_CHECKING:
    from typing import Any

LAST_WORD_S = 1.0  # the verdict is out by budget + this (deadline.LAST_WORD_S is this value)
EARLY_S = 0.05  # the timer fires at least this much before, so that writing the line fits
# A starved process runs its handler late: the signal waits for the thread's next slice of CPU and for
# the C call it is in (unmarshalling a module) to return. The interpreter's own start (~15 ms of CPU)
# measures how starved: the timer fires this many times that start's wall time earlier, at most the
# whole LAST_WORD_S (on the loaded real server a start of 1.3-2.5 s; the handler then ran ~1 s late).
STARVED_FACTOR = 0.7
STARVED_SHARE = 0.25  # below this share of a core since the start, the verdict says the node starved us
EXIT_INCONCLUSIVE = 4  # errors.EXIT_INCONCLUSIVE (not imported: see above)

_state: dict[str, Any] = {"armed": False, "spoken": False, "json": False, "budget": 0.0, "origin": 0.0,
                          "early": EARLY_S, "collector": None, "command": "triage", "snapshot": False,
                          "nagios": False}
COMMANDS = ("triage", "collect", "gate")
EXIT_GATE_FAIL = 1  # gate/result.EXIT_FAIL: a gate that could not finish its checks did not pass
EXIT_NAGIOS_UNKNOWN = 3  # render/nagios_view.UNKNOWN: to a plugin runner, a check that could not look


def process_start() -> float:
    """This process's start on the ``time.monotonic`` clock (from /proc/self/stat's start time, in
    clock ticks since boot); now when it cannot be read. The command's origin: its budget counts from
    here, the interpreter's own start included (the one name for it: callers import it from here)."""
    # Imported here, not above: arm() calls this after the priority boost, so the parser loads after it.
    from vllmdiag.runtime.procstat import read_stat

    now = time.monotonic()
    stat = read_stat("/proc/self")
    try:
        if stat is None:
            return now
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - stat.starttime_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return now
    return now - max(0.0, min(age, 3600.0))


def arm(argv: list[str]) -> None:
    """``vllmdiag triage|collect|gate ...`` (argv without the program): the timer, at the
    process start + the budget (+ ``--rates``) + LAST_WORD_S. A command line it cannot read plainly arms
    nothing: the CLI will reject or read it, with its own checks."""
    if _signal is None or not argv or argv[0] not in COMMANDS or {"-h", "--help"} & set(argv):
        return
    if argv[0] == "gate" and any(a.split("=", 1)[0] in ("--config", "--url") for a in argv):
        return  # its budget is in the config or grows with the URL checks: armed once read (arm_gate)
    # --watch: the deprecated spelling of --rates (the CLI still reads it)
    budget, rates, old = _seconds(argv, "--budget", 8.0), _seconds(argv, "--rates", 0.0), _seconds(argv, "--watch", 0.0)
    if budget is None or rates is None or old is None or not 0.2 <= budget <= 600:
        return
    rates = max(rates, old)
    if not 0 <= rates <= 3600:
        return
    origin = process_start()
    early = _early(origin)
    to_file = any(a == "--out" or a.startswith("--out=") for a in argv)
    _state.update(armed=True, json="--json" in argv, budget=budget + rates, origin=origin, early=early,
                  command=argv[0], snapshot=argv[0] == "collect" and ("--json" in argv or not to_file),
                  nagios=argv[0] == "gate" and "--nagios" in argv)
    _signal.signal(_signal.SIGALRM, _fire)
    _set(origin + budget + rates + LAST_WORD_S - early)


def arm_gate(budget: float, json_out: bool, nagios: bool = False) -> None:
    """``vllmdiag gate`` once its config is read: the timer at the process start + the gate's budget
    (the config's, grown by the URL checks) + LAST_WORD_S. Its last word is a failed gate (exit 1), or
    with ``--nagios`` the plugin's UNKNOWN (exit 3): the checks could not look, the node was not judged."""
    if _signal is None or _state["spoken"] or not 0.2 <= budget <= 3600:
        return
    if not _state["armed"]:
        origin = process_start()
        _state.update(origin=origin, early=_early(origin))
    _state.update(armed=True, json=json_out, budget=budget, command="gate", snapshot=False, nagios=nagios)
    _signal.signal(_signal.SIGALRM, _fire)
    _set(_state["origin"] + budget + LAST_WORD_S - _state["early"])


def _early(origin: float) -> float:
    """How much before its due time the timer fires: more the slower the interpreter's own start was."""
    return min(LAST_WORD_S, EARLY_S + STARVED_FACTOR * (time.monotonic() - origin))


def postpone(at: float) -> None:
    """The verdict is now due at monotonic ``at`` + LAST_WORD_S (the confirm window opened)."""
    if _state["armed"] and not _state["spoken"] and _signal is not None:
        _set(at + LAST_WORD_S - _state["early"])


def spoken() -> None:
    """The verdict is being written: from now on the timer does nothing."""
    _state["spoken"] = True


def collector(pid: int | None) -> None:
    """The collector running now (hardstop.py), ended with everything it started if the timer fires."""
    _state["collector"] = pid


def _set(at: float) -> None:
    if _signal.getsignal(_signal.SIGALRM) is _fire:  # else a guard holds the timer and gives it back after
        _signal.setitimer(_signal.ITIMER_REAL, max(0.001, at - time.monotonic()))


def _seconds(argv: list[str], name: str, default: float) -> float | None:
    value: str | None = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg[len(name) + 1:]
    if value is None:
        return default
    try:
        return float(value)
    except ValueError:
        return None


def _fire(signum: int, frame: Any) -> None:
    if _state["spoken"]:
        return
    _state["spoken"] = True
    took = time.monotonic() - _state["origin"]
    share = time.process_time() / max(took, 0.001)  # of one core, this process's threads together
    what = {"collect": "a snapshot", "gate": "the gate's checks"}.get(_state["command"], "a verdict")
    why = f"The {_state['budget']:g} s budget ran out before {what} ({took:.1f} s since the command started, " + (
        f"at normal priority: the node is starved of CPU, vllmdiag got {100 * share:.0f} % of a core and could not take "
        "SCHED_FIFO)" if share < STARVED_SHARE else "at normal priority: a probe or the analysis ran past it)")
    fix = ("Re-run as root so vllmdiag can take SCHED_FIFO for its short life (or under `chrt -f 10`), with a larger "
           "--budget (e.g. --budget 30), or from outside a CPU-throttled pod (see docs/priority.md, Kubernetes).")
    if _state["snapshot"]:  # collect: a snapshot the sweep (or `vllmdiag analyze`) reads as a blind node
        _say(_snapshot_line(why, took))
        _end(0)
    if _state["command"] == "collect":  # its snapshot was to go to a file: none is written
        _say(f"vllmdiag collect: no snapshot: {why}. {fix}\n", 2)
        _end(EXIT_INCONCLUSIVE)
    if _state["command"] == "gate" and _state["nagios"]:  # one plugin line (render/nagios_view.py's shape)
        _say(f"VLLMDIAG GATE UNKNOWN - {why}. {fix} | pass=0 warn=0 fail=0 skip=0\n")
        _end(EXIT_NAGIOS_UNKNOWN)
    if _state["command"] == "gate":
        _say(_gate_line(why, fix, took) if _state["json"] else f"vllmdiag gate: FAIL: {why}. {fix}\n")
        _end(EXIT_GATE_FAIL)
    if _state["json"]:  # the JSON contract's shape, as deadline-cut output has it (render/cli: emit)
        text = ('{"schema_version":1,"verdict":{"status":"inconclusive","layer":null,"culprits":[],'
                f'"summary":"Inconclusive: {why}.","evidence":["{why}."],"next_steps":["{fix}"],'
                '"confidence":"low"},"cut":"the budget ran out before the report was made"}\n')
    else:
        text = f"vllmdiag: inconclusive: {why}. {fix}\n"
    _say(text)
    _end(EXIT_INCONCLUSIVE)


def _say(text: str, fd: int = 1) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:  # a reader that went away: the exit code still says it
        pass


def _end(code: int) -> None:
    pid = _state["collector"]
    if pid is not None:
        from vllmdiag.runtime.killtree import kill_session  # loaded with the collector (hardstop.py)

        kill_session(pid)
    os._exit(code)


def _gate_line(why: str, fix: str, took: float) -> str:
    """``gate --json``'s shape (cli/gate_command.py) with one failed required check, ``budget``."""
    check = f'{{"name":"budget","status":"fail","required":true,"reason":"{why}. {fix}","numbers":{{}}}}'
    return (f'{{"schema_version":1,"gate":{{"node":"{_node()}","status":"fail","failed_required":["budget"],'
            f'"counts":{{"pass":0,"warn":0,"fail":1,"skip":0}},"duration_s":{took:.3f},"checks":[{check}]}},'
            '"snapshot":null}\n')


def _plain(text: str, keep: str = "._-") -> str:
    """Only characters that need no escaping in JSON nor a terminal (a host name, a version)."""
    return "".join(c if c.isalnum() or c in keep else "?" for c in text)


def _node() -> str:
    return _plain(os.uname().nodename[:253]) or "unknown"


def _snapshot_line(why: str, took: float) -> str:
    """The snapshot JSON (model/snapshot.py's shape) of a collect that saw nothing in time: the processes
    probe stands for all, timed out, so analysis says blind (inconclusive), never "no deployment". Built
    by hand: json would import re (milliseconds of CPU, most of a second here)."""
    from vllmdiag import __version__  # the package is loaded: this module is part of it

    node = _node()
    version = _plain(str(__version__)[:64], "._+-")
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    budget = _state["budget"]
    return (f'{{"schema_version":1,"node":"{node}","collected_at":"{at}","vllmdiag_version":"{version}",'
            f'"duration_s":{took:.3f},"probes":{{"processes":{{"status":"timeout","duration_s":0.0,'
            f'"reason":"not complete: {why}","data":{{}}}}}},"options":{{"command_budget_s":{budget:g},'
            '"collected":"nothing in time: the last word of a starved collect"}}\n')

"""SIGCONT only for a stop our own py-spy caused (issue 15 item 6), watched with strace.

Three workers of a real process tree, each meeting a different py-spy stand-in that hangs until the
collector kills it at its deadline: one worker an operator stopped before we came, one stopped by
somebody else (``kill -STOP``, not a ptrace) while our dump ran, one our stand-in ptrace-attached
(the attach stop a killed py-spy leaves behind). strace on the collector records every kill/tgkill:
only the third worker may get a SIGCONT; the other two must still be stopped afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_stacks_probe import PTRACE_FAKE

from fake_tree import fake_tree

pytestmark = pytest.mark.skipif(shutil.which("strace") is None or os.geteuid() != 0,
                                reason="needs strace and root (ptrace of other processes)")
ROOT = Path(__file__).resolve().parent.parent.parent
COLLECT = ("import sys\n"
           "from vllmdiag.probes import stacks\n"
           "stacks.find_py_spy = lambda: sys.argv[1]\n"
           "stacks.DUMP_TIMEOUT_S = stacks.STOPPED_TIMEOUT_S = 4.0  # a loaded machine: let the stand-in stop\n"
           "from vllmdiag.api import collect\n"
           "snap = collect(probes=['processes', 'stacks'], options={'pids': [int(sys.argv[2])]}, budget_s=12)\n"
           "keys = ('pid', 'status', 'state_before', 'state_after', 'sigcont_sent', 'reason')\n"
           "print([{k: d.get(k) for k in keys} for d in snap.data('stacks').get('dumps', [])])\n")


def _fake_py_spy(path: Path, plan: dict[int, str]) -> None:
    """Per target pid: 'hang' (a dump that never answers), 'stop' (kill -STOP it, then hang), 'ptrace'."""
    path.write_text(f"#!{sys.executable} -S\n"
                    "import json, os, signal, sys, time\n"
                    f"plan = {{int(k): v for k, v in json.loads({json.dumps(json.dumps(plan))}).items()}}\n"
                    "pid = int(sys.argv[sys.argv.index('--pid') + 1])\n"
                    "what = plan.get(pid, 'none')\n"
                    "if what == 'none': print('[]'); sys.exit(0)\n"
                    "if what == 'stop': os.kill(pid, signal.SIGSTOP)\n"
                    f"if what == 'ptrace':\n    exec({PTRACE_FAKE!r})\n"
                    "time.sleep(30)\n")
    path.chmod(0o755)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _stat_line(pid: int, state: str) -> str:
    """A whole stat line as the kernel writes it (52 fields): the one parser reads no shorter one."""
    return f"{pid} (python) {state} 1 1 1 0 -1 0" + " 0" * 43 + "\n"


def _wait_state(pid: int, want: str) -> None:
    end = time.monotonic() + 5
    while _state(pid) != want and time.monotonic() < end:
        time.sleep(0.01)


def test_sigcont_only_for_what_our_py_spy_stopped(tmp_path: Path, reliability: Any) -> None:
    with fake_tree(tp=3) as t:
        pre, other, ours = t.workers[0], t.workers[1], t.workers[2]
        os.kill(pre, signal.SIGSTOP)  # an operator (or Slurm) stopped it before we came
        _wait_state(pre, "T")
        fake = tmp_path / "py-spy"
        _fake_py_spy(fake, {pre: "hang", other: "stop", ours: "ptrace"})
        log = tmp_path / "strace.log"
        try:
            proc = subprocess.run(["strace", "-f", "-qq", "-e", "trace=kill,tgkill", "-e", "signal=none", "-o",
                                   str(log), sys.executable, "-c", COLLECT, str(fake), str(t.api)],
                                  capture_output=True, text=True, timeout=60, cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "FAKE_PYSPY_MARK": str(tmp_path / "m")})
            assert proc.returncode == 0, proc.stderr
            sigconts = {int(m.group(1)) for m in re.finditer(r"kill\((\d+), SIGCONT\)", log.read_text())}
            states = {"pre": _state(pre), "other": _state(other), "ours": _state(ours)}
        finally:
            for pid in (pre, other, ours):
                os.kill(pid, signal.SIGCONT)
        reliability.case(unsafe=bool(sigconts & {pre, other}))
        assert (tmp_path / f"m.{ours}").exists(), "the stand-in did not reach its stop in time"
        assert sigconts & {pre, other} == set(), f"SIGCONT sent to a stop that was not ours: {sigconts}"
        assert states["pre"] == "T" and states["other"] == "T"  # both stops stand
        assert ours in sigconts and states["ours"] in ("S", "R"), proc.stdout  # our own attach stop is undone


def test_a_target_still_on_its_way_into_our_stop_is_resumed_all_the_same(tmp_path: Path) -> None:
    """Its tracer (our killed py-spy) is gone, but the woken target has not been scheduled into the group
    stop within the wait (state R on a loaded node): SIGCONT anyway, or it would stay stopped once it is."""
    from vllmdiag.probes import _ptrace

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        fake = tmp_path / "proc" / str(sleeper.pid)
        fake.mkdir(parents=True)
        (fake / "stat").write_text(_stat_line(sleeper.pid, "R"))
        (fake / "status").write_text("Name:\tpython\nTracerPid:\t0\n")
        assert _ptrace.resume_stopped([sleeper.pid], tmp_path / "proc", wait_s=0.05) == [sleeper.pid]
        (fake / "stat").write_text(_stat_line(sleeper.pid, "S"))  # settled, not stopped: nothing
        assert _ptrace.resume_stopped([sleeper.pid], tmp_path / "proc", wait_s=0.05) == []
        (fake / "status").write_text("Name:\tpython\nTracerPid:\t4242\n")  # still traced: never while a tracer holds it
        (fake / "stat").write_text(_stat_line(sleeper.pid, "t"))
        assert _ptrace.resume_stopped([sleeper.pid], tmp_path / "proc", wait_s=0.05) == []
    finally:
        sleeper.kill()
        sleeper.wait()

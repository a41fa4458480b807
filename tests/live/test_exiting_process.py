"""The processes probe reads the kernel's PF_EXITING flag: a process being torn down is not a live one.

A SIGKILLed vLLM worker with GBs mapped takes a while to go: for a few hundred ms its state is still R,
its cmdline is gone and only comm's 15 characters ("VLLM::Worker_TP") are left, so its title has no rank
(tests/unit/test_real_vllm_cpu_fixtures.py has the real snapshot). The kernel marks such a task PF_EXITING;
so does it a process whose main thread exited while another runs, which is how this test gets one that
stays put: a real "VLLM::EngineCore" whose child "VLLM::Worker_TP1" ends its main thread.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from vllmdiag.api import collect
from vllmdiag.probes._procfs import read_stat
from vllmdiag.probes.processes import PF_EXITING

CHILD = """
import ctypes, os, sys, threading, time
from setproctitle import setproctitle
setproctitle("VLLM::EngineCore")
pid = os.fork()
if pid == 0:
    setproctitle("VLLM::Worker_TP1")
    threading.Thread(target=time.sleep, args=(60,)).start()
    ctypes.CDLL(None).pthread_exit(None)  # the main thread ends, the process stays (its other thread runs)
print(pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def engine_with_exiting_worker() -> Iterator[tuple[int, int]]:
    pytest.importorskip("setproctitle")
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        end = time.monotonic() + 10
        while time.monotonic() < end and not _flags(child) & PF_EXITING:
            time.sleep(0.02)
        yield proc.pid, child
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _flags(pid: int) -> int:
    stat = read_stat(f"/proc/{pid}")
    return stat.flags if stat else 0


def test_a_process_being_torn_down_is_marked_exiting(engine_with_exiting_worker: tuple[int, int]) -> None:
    engine, worker = engine_with_exiting_worker
    snap = collect(probes=["processes"], options={"pids": [engine]}, budget_s=5)
    rows = {p["pid"]: p for p in snap.data("processes")["processes"]}
    assert rows[worker]["exiting"] is True, rows[worker]
    assert rows[engine]["exiting"] is False
    assert rows[worker]["comm"] == "VLLM::Worker_TP"  # comm keeps 15 characters: no rank left in it

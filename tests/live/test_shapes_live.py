"""The live tests of tests/unit/test_shapes.py, which says what they check: these start something."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest


def test_real_retitled_processes_are_selected_with_their_raylet() -> None:
    """A real raylet-like parent with a setproctitle title and a Ray-titled child: the processes probe
    selects the child as a worker and describes the raylet as its parent."""
    pytest.importorskip("setproctitle")
    code = ("import os,sys,time,setproctitle\n"
            "setproctitle.setproctitle('/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/s')\n"
            "pid=os.fork()\n"
            "if pid==0:\n setproctitle.setproctitle('ray::RayWorkerProc.run'); print(os.getpid(), flush=True); time.sleep(30)\n"
            "else:\n time.sleep(30)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        child = int(p.stdout.readline())  # type: ignore[union-attr]
        time.sleep(0.1)
        from vllmdiag.context import Context
        from vllmdiag.probes.processes import collect

        data = collect(Context())
        assert isinstance(data, dict), data  # a Partial (some pid unreadable) fails the lookups below too
        mine = next(x for x in data["processes"] if x["pid"] == child)
        assert (mine["role"], mine["executor"], mine["title"]) == ("worker", "ray", "ray::RayWorkerProc.run")
        raylet = next(x for x in data["parents"] if x["pid"] == p.pid)
        assert raylet["role"] == "raylet"
        assert raylet["cmdline"][1] == "--raylet_socket_name=/tmp/s"
    finally:
        if child:
            os.kill(child, signal.SIGKILL)  # our own fork child, by its pid
        p.kill()
        p.wait()

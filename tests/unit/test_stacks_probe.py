"""The pure tests of tests/live/test_stacks_probe_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.probe import Skip
from vllmdiag.probes import stacks as probe

# A py-spy stand-in that PTRACE_ATTACHes (16) its --pid, takes the attach stop, lets the SIGSTOP through
# (PTRACE_CONT, 7, with signal 19) so the target sits in a group stop, and hangs: killed, it leaves the
# target stopped (T), as a py-spy killed between its stop and its detach does.
PTRACE_FAKE = ("import ctypes, os, sys, time\n"
               "libc, pid = ctypes.CDLL(None), int(sys.argv[sys.argv.index('--pid') + 1])\n"
               "libc.ptrace(16, pid, 0, 0)\n"
               "os.waitpid(pid, 0x40000000)\n"
               "libc.ptrace(7, pid, 0, 19)\n"
               "os.waitpid(pid, 0x40000000 | 2)\n"
               "mark = os.environ.get('FAKE_PYSPY_MARK')\n"
               "mark and open(f'{mark}.{pid}', 'w').close()  # the stop is in place\n"
               "time.sleep(30)\n")


def test_parse_dump_is_compact(shared_data: Path) -> None:
    threads = probe.parse_dump((shared_data / "worker-idle-dequeue.pyspy.json").read_text())
    main = next(t for t in threads if t["name"] == "MainThread")
    assert main["frames"][1] == ["SpinCondition.wait", "vllm/distributed/device_communicators/shm_broadcast.py", 221]
    assert set(main) == {"name", "os_thread_id", "active", "owns_gil", "frames"}
    assert probe.short_file("shm_broadcast.py", "/venv/lib/python3.11/site-packages/vllm/x/shm_broadcast.py") == \
        "vllm/x/shm_broadcast.py"
    with pytest.raises(ValueError):
        probe.parse_dump("Error: no such process")


def test_skip_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Skip, match="cannot be combined"):
        probe.collect(Context(options={"native": True, "nonblocking": True}))
    monkeypatch.setattr(probe, "find_py_spy", lambda: None)
    with pytest.raises(Skip, match="py-spy not found"):
        probe.collect(Context())
    root = tmp_path / "proc"
    (root / "sys/kernel/yama").mkdir(parents=True)
    (root / "self").mkdir()
    (root / "self/status").write_text("Name:\tx\nCapEff:\t0000000000000000\n")
    (root / "sys/kernel/yama/ptrace_scope").write_text("1\n")
    why = probe.ptrace_block(Context(proc_root=root), {"pid": 1, "uid": os.geteuid()})
    assert why and "CAP_SYS_PTRACE" in why and "kubectl debug --profile=general" in why
    (root / "sys/kernel/yama/ptrace_scope").write_text("0\n")
    assert probe.ptrace_block(Context(proc_root=root), {"pid": 1, "uid": os.geteuid()}) is None
    assert "uid" in (probe.ptrace_block(Context(proc_root=root), {"pid": 1, "uid": os.geteuid() + 1}) or "")

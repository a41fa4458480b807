"""The stacks probe with real py-spy on real processes whose frames carry vLLM's names: parallel
dumps, a SIGSTOPped and a D-state target end in bounded time with their state unchanged, the
SIGCONT restore, skip reasons."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_stacks_probe import PTRACE_FAKE  # noqa: F401 - shared with the pure half

from vllmdiag.api import collect
from vllmdiag.context import Context
from vllmdiag.probes import stacks as probe

DATA = Path(__file__).parent.parent / "data" / "stacks"

needs_py_spy = pytest.mark.skipif(probe.find_py_spy() is None, reason="py-spy not installed")


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, title: str, mode: str, *extra: str, session: bool = False) -> int:
        ready = Path(f"/tmp/vllmdiag-test-ready-{os.getpid()}-{len(self.procs)}")
        ready.unlink(missing_ok=True)
        argv = [sys.executable, str(DATA / "fake_rank.py"), title, mode, "--ready", str(ready), "--ttl", "40", *extra]
        p = subprocess.Popen(argv, start_new_session=session)
        self.procs.append(p)
        end = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < end:
            time.sleep(0.02)
        ready.unlink(missing_ok=True)
        return p.pid

    def kill_all(self) -> None:
        for p in self.procs:
            for child in _children(p.pid):  # the vfork helper's child first, so the parent can die
                os.kill(child, signal.SIGKILL)
            p.kill()
            p.wait(timeout=10)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    try:
        yield p
    finally:
        p.kill_all()


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@needs_py_spy
@pytest.mark.parametrize("cores", [2, 8])
def test_dumps_a_deployment_in_parallel_limited_to_its_tree(procs: Procs, cores: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Few cores: one tree dump (least CPU); with cores to spare, one py-spy per process side by side."""
    monkeypatch.setattr(os, "cpu_count", lambda: cores)  # the forked collector inherits it
    engine = procs.start("VLLM::EngineCore", "engine_waiting")
    workers = [procs.start(f"VLLM::Worker_TP{i}", "all_reduce") for i in range(3)]
    other = procs.start("VLLM::Worker_TP0", "idle", session=True)  # another deployment: own session and pgid
    snap = collect(probes=["stacks"], options={"pids": [engine]}, budget_s=8)
    res = snap.probes["stacks"]
    assert res.status == "ok", res.reason
    dumped = {d["pid"]: d for d in res.data["dumps"]}
    # Workers whose tree does not reach their engine rejoin it by process group (orphans do that).
    assert {engine, *workers} <= set(dumped) and other not in dumped
    assert all(dumped[p]["status"] == "ok" and dumped[p]["state_after"] in ("S", "R") for p in workers)
    assert res.data["concurrency"] == min(cores, len(dumped))
    vias = {str(dumped[p].get("via")) for p in (engine, *workers)}
    # (what a tree dump misses goes to the single dumps, so few cores may show both)
    assert any(v.startswith("tree:") for v in vias) if cores < probe.PARALLEL_MIN_CORES else vias == {"None"}
    # This test process is the engine's Python parent (read as an offline LLM() script, so dumped too);
    # its tree holds the collector and py-spy itself, which failed the whole tree walk: it is dumped alone.
    assert os.getpid() in dumped and dumped[os.getpid()].get("via") is None
    assert not any(str(d.get("via")) == f"tree:{os.getpid()}" for d in dumped.values())


@needs_py_spy
def test_stopped_target_is_read_in_bounded_time_and_stays_stopped(procs: Procs) -> None:
    pid = procs.start("VLLM::Worker_TP1", "idle")
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + 5
    while state(pid) != "T" and time.monotonic() < end:  # the stop is delivered asynchronously
        time.sleep(0.01)
    try:
        t0 = time.monotonic()
        out = probe.dump_one(Context(), probe.find_py_spy() or "", pid, "blocking")
        assert time.monotonic() - t0 < probe.STOPPED_TIMEOUT_S + 1.5
        assert out["state_before"] == "T" and out["state_after"] == "T" and state(pid) == "T"
        assert out["mode"] == "nonblocking" and out["status"] in ("ok", "timeout")
        assert not out.get("sigcont_sent")
    finally:
        os.kill(pid, signal.SIGCONT)


@needs_py_spy
@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the vfork helper")
def test_d_state_target_is_read_in_bounded_time(procs: Procs, tmp_path: Path) -> None:
    """vfork's parent waits in the kernel (state D) until its child dies: a real D-state process.
    Blocking py-spy would wait forever for its ptrace stop; the probe reads it without stopping."""
    lib = tmp_path / "vfork_hold.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(DATA / "vfork_hold.c")], check=True)
    pid = procs.start("VLLM::Worker_TP2", "executing", "--hold-lib", str(lib))
    end = time.monotonic() + 5
    while state(pid) != "D" and time.monotonic() < end:
        time.sleep(0.02)
    assert state(pid) == "D"
    t0 = time.monotonic()
    out = probe.dump_one(Context(), probe.find_py_spy() or "", pid, "blocking")
    assert time.monotonic() - t0 < probe.STOPPED_TIMEOUT_S + 1.5
    assert out["state_before"] == "D" and state(pid) == "D" and out["mode"] == "nonblocking"
    assert out["status"] in ("ok", "timeout")


def test_sigcont_restores_a_target_our_killed_py_spy_left_stopped(procs: Procs, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in py-spy that ptrace-stops its target and hangs, as one killed mid-dump does: the kill
    leaves the target stopped (T), and this, our own stop, is undone."""
    pid = procs.start("VLLM::Worker_TP0", "idle")
    fake = tmp_path / "py-spy"
    fake.write_text(f"#!{sys.executable} -S\n{PTRACE_FAKE}")
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_PYSPY_MARK", str(tmp_path / "stopped"))
    monkeypatch.setattr(probe, "DUMP_TIMEOUT_S", 4.0)  # a loaded machine: let the stand-in reach its stop
    out = probe.dump_one(Context(), str(fake), pid, "blocking")
    assert (tmp_path / f"stopped.{pid}").exists(), "the stand-in did not reach its stop in time"
    assert out["status"] == "timeout" and out["state_before"] in ("S", "R")
    assert out["sigcont_sent"] is True and state(pid) in ("S", "R")


def test_a_tight_budget_keeps_every_dump_and_names_the_ones_it_could_not_take(procs: Procs, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A confirm pass has 0.5-3 s; on a loaded node py-spy may not answer in it. The probe must hand back
    one entry per target (a timeout says so) before the runner's watchdog fires, not lose them all
    (it used to end its dumps exactly at the deadline: the watchdog won, and the pass had no stacks)."""
    engine = procs.start("VLLM::EngineCore", "engine_waiting")
    workers = [procs.start(f"VLLM::Worker_TP{i}", "all_reduce") for i in range(2)]
    slow = tmp_path / "py-spy"  # py-spy on a node too loaded to answer in time
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(probe, "find_py_spy", lambda: str(slow))
    snap = collect(probes=["processes", "stacks"], options={"pids": [engine]}, budget_s=1.5, hard=False)
    res = snap.probes["stacks"]
    assert res.status == "partial", (res.status, res.reason)
    dumped = {d["pid"]: d for d in res.data["dumps"]}
    assert {engine, *workers} <= set(dumped)
    assert all(dumped[p]["status"] == "timeout" and dumped[p]["reason"] for p in (engine, *workers))

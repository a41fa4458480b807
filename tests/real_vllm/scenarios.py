"""The on-call scenarios, played against a RealServer (tests/real_vllm/server.py).

Each scenario is a context manager: inside the `with`, the deployment is in that condition (a real
hang in the model step, a stopped or killed process, a client that stopped reading); on the way out it
is undone (trigger files removed, SIGCONT) so the next scenario finds the server healthy again,
except `worker_sigkill`, which ends the server (vLLM shuts itself down).

Shared by the live tests (tests/live/test_real_vllm_live.py) and the fixture recorder (record.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from real_vllm.server import RealServer

ROOT = Path(__file__).resolve().parents[2]
SETTLE_S = 3.0  # a hang injected at the next forward: let a request reach it


def worker_titles(tp: int) -> list[str]:
    return ["VLLM::Worker"] if tp == 1 else [f"VLLM::Worker_TP{i}" for i in range(tp)]


def _wait_idle(server: RealServer, timeout: float = 60.0) -> None:
    """After a fault is undone: the server answers a completion again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            server.complete(max_tokens=2, timeout=20)
            return
        time.sleep(1.0)


@contextlib.contextmanager
def idle(server: RealServer) -> Iterator[None]:
    server.complete(max_tokens=4)
    time.sleep(2.0)
    yield


@contextlib.contextmanager
def idle_llm(server: RealServer) -> Iterator[None]:
    """An offline script's engines, idle after their first generate (no HTTP to send a request to)."""
    time.sleep(2.0)
    yield


@contextlib.contextmanager
def load(server: RealServer) -> Iterator[None]:
    with server.load(clients=3, seconds=180) as done:
        deadline = time.monotonic() + 60
        while done[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        yield


@contextlib.contextmanager
def _hang(server: RealServer, which: str, mode: str = "") -> Iterator[None]:
    server.hang(which, mode)
    try:
        threads = [server.send_completion_async() for _ in range(2)]
        time.sleep(SETTLE_S)
        yield
    finally:
        server.release()
        for t in threads:
            t.join(timeout=60)
        _wait_idle(server)


def straggler(server: RealServer) -> contextlib.AbstractContextManager[None]:
    """TP=2: rank 1 blocks in its forward; rank 0 goes on into the all-reduce and waits there."""
    return _hang(server, f"rank-{server.tp - 1}")


def straggler_event(server: RealServer) -> contextlib.AbstractContextManager[None]:
    """As `straggler`, but rank 1 waits in threading.Event.wait under its forward: the innermost frames are
    a wait primitive, and the frame an operator wants named ("where") is the plugin's, under vLLM's."""
    return _hang(server, f"rank-{server.tp - 1}", "event")


def uniform_event(server: RealServer) -> contextlib.AbstractContextManager[None]:
    """As `uniform` with the Event wait (at TP=1: the lone worker wedged in a wait primitive)."""
    return _hang(server, "all", "event")


def uniform(server: RealServer) -> contextlib.AbstractContextManager[None]:
    """Every rank blocks at the same point of its forward (at TP=1: the lone worker's wedge)."""
    return _hang(server, "all")


@contextlib.contextmanager
def _stopped(server: RealServer, title: str, with_request: bool) -> Iterator[int]:
    pid = server.signal(title, signal.SIGSTOP)
    try:
        threads = [server.send_completion_async()] if with_request else []
        time.sleep(1.0)
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)
        for t in threads:
            t.join(timeout=60)
        _wait_idle(server)


def worker_sigstop(server: RealServer) -> contextlib.AbstractContextManager[int]:
    """The last rank's worker is SIGSTOPped while a request is in flight."""
    return _stopped(server, worker_titles(server.tp)[-1], with_request=True)


def api_sigstop(server: RealServer) -> contextlib.AbstractContextManager[int]:
    """The API server (the `vllm serve` process) is SIGSTOPped."""
    return _stopped(server, "api_server", with_request=False)


@contextlib.contextmanager
def stalled_client(server: RealServer) -> Iterator[None]:
    with server.stalled_stream():
        time.sleep(SETTLE_S)
        yield
    _wait_idle(server)


@contextlib.contextmanager
def worker_sigkill(server: RealServer) -> Iterator[int]:
    """The last rank's worker is SIGKILLed: vLLM's own monitor shuts the deployment down. Ends the server."""
    server.remember_segments()
    pid = server.signal(worker_titles(server.tp)[-1], signal.SIGKILL)
    yield pid


SCENARIOS: dict[str, Callable[[RealServer], contextlib.AbstractContextManager[Any]]] = {
    "idle": idle, "load": load, "straggler": straggler, "straggler-event": straggler_event, "uniform": uniform,
    "uniform-event": uniform_event, "worker-sigstop": worker_sigstop,
    "api-sigstop": api_sigstop, "stalled-client": stalled_client, "worker-sigkill": worker_sigkill,
}


# ---- the tool, as an operator runs it ----------------------------------------------------------------
def vllmdiag(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(ROOT))


def triage(server: RealServer, save: Path) -> tuple[int, dict[str, Any]]:
    """`triage --json --save` limited to this server's deployment (others share the machine)."""
    res = vllmdiag("triage", "--json", "--save", str(save), "--pid", str(server.sid))
    try:
        return res.returncode, dict(json.loads(res.stdout))
    except ValueError as e:
        raise AssertionError(f"triage exited {res.returncode} without JSON: {res.stderr[-2000:]}") from e


def analyze(snapshot: Path, pid: int | None = None) -> tuple[int, dict[str, Any]]:
    args = ["analyze", "--json", str(snapshot)] + (["--pid", str(pid)] if pid else [])
    res = vllmdiag(*args, timeout=120)
    try:
        return res.returncode, dict(json.loads(res.stdout))
    except ValueError as e:
        raise AssertionError(f"analyze exited {res.returncode} without JSON: {res.stderr[-2000:]}") from e


def pyspy_json(pid: int, timeout: float = 60.0) -> str | None:
    res = subprocess.run(["py-spy", "dump", "--json", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
    return res.stdout if res.returncode == 0 else None

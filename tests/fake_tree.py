"""A real process tree titled like vLLM 0.33 (API server -> EngineCore -> workers) for tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).parent / "data" / "bin" / "vllm"


@dataclass
class FakeTree:
    api: int
    engine: int
    workers: dict[int, int]
    proc: subprocess.Popen[bytes]
    extra: list[int] = field(default_factory=list)

    @property
    def all_pids(self) -> list[int]:
        return [self.api, self.engine, *self.workers.values(), *self.extra]


@contextlib.contextmanager
def fake_tree(tp: int = 4, ranks: list[int] | None = None, extra_args: tuple[str, ...] = (),
              env: dict[str, str] | None = None, user: str | None = None) -> Iterator[FakeTree]:
    with tempfile.TemporaryDirectory(prefix="vllmdiag-fake-") as tmp:
        state = Path(tmp) / "state.json"
        argv = [sys.executable, str(SCRIPT), "serve", "fake/model", "--tensor-parallel-size", str(tp)]
        if ranks is not None:
            argv += ["--ranks", ",".join(map(str, ranks))]
        argv += list(extra_args)
        if user:
            # Another uid's deployment, as a non-root triage sees it (setpriv keeps it one process).
            os.chmod(tmp, 0o777)
            argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {}), "FAKE_TREE_STATE": str(state)},
                                start_new_session=True)
        tree = None
        try:
            deadline = time.monotonic() + 20
            while not state.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("fake vLLM tree did not start")
                time.sleep(0.02)
            info = json.loads(state.read_text())
            tree = FakeTree(info["api"], info["engine"], {int(k): v for k, v in info["workers"].items()}, proc)
            yield tree
        finally:
            pids = tree.all_pids if tree else []
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            _wait_gone([p for p in pids if p != proc.pid])


def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    """Orphans are reaped by init (or a subreaper) asynchronously; wait so no test leaves them."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break  # a zombie whose parent is dead: init will reap it
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.02)


def wait_state(pid: int, states: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in states:
                    return
        except FileNotFoundError:
            if "gone" in states:
                return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} never reached state {states}")

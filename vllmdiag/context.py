"""The collection context: every OS path and subprocess a probe uses goes through here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllmdiag.model import ProbeResult
from vllmdiag.runtime.options import Parsed


@dataclass
class CmdResult:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    error: str | None = None  # could not start (missing binary, permission)


@dataclass
class Context:
    proc_root: Path = Path("/proc")
    dev_shm: Path = Path("/dev/shm")
    # Where vLLM puts its ipc:// socket files (VLLM_RPC_BASE_PATH, default the temp dir).
    rpc_base: Path = field(default_factory=lambda: default_rpc_base())
    title_prefix: str = field(default_factory=lambda: os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM"))
    # What the collection is asked to do (vllmdiag/runtime/options.py): typed; a dict given here
    # (``Context(options={...})``) is parsed into it once.
    options: Parsed = Parsed()
    deadline: float = field(default_factory=lambda: time.monotonic() + 10.0)
    stretch: float = 1.0  # per-probe deadlines x this (the runner: budget / default budget, at least 1)
    _results: dict[str, ProbeResult] = field(default_factory=dict)
    _results_lock: threading.Lock = field(default_factory=threading.Lock)
    _others_done: threading.Event = field(default_factory=threading.Event)
    _cancelled: threading.Event = field(default_factory=threading.Event)
    _window_opened: threading.Event = field(default_factory=threading.Event)
    # Called with every recorded result (hardstop streams them to the parent, so a killed collection
    # keeps what it had); must not raise.
    on_record: Callable[[str, ProbeResult], None] | None = None

    # ---- time -------------------------------------------------------------------------------
    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """True once the runner gave up on the run (total budget hit); long loops should stop."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        self._cancelled.set()
        self._others_done.set()
        self._window_opened.set()

    def wait_others(self, timeout_s: float) -> bool:
        """For samplers: block until all non-sampler probes finished, or timeout. True if they did."""
        return self._others_done.wait(max(0.0, timeout_s))

    def mark_others_done(self) -> None:
        self._others_done.set()

    def open_window(self) -> None:
        """The movement window's first sample is taken (or will not be): deferred probes may start."""
        self._window_opened.set()

    def wait_window(self, timeout_s: float) -> bool:
        return self._window_opened.wait(max(0.0, timeout_s))

    # ---- results of other probes ---------------------------------------------------------------
    def result(self, name: str) -> ProbeResult | None:
        with self._results_lock:
            return self._results.get(name)

    def data(self, name: str) -> dict[str, Any]:
        res = self.result(name)
        return res.data if res is not None else {}

    def record(self, name: str, result: ProbeResult) -> None:
        with self._results_lock:
            self._results[name] = result
        if self.on_record is not None:
            try:
                self.on_record(name, result)
            except Exception:  # noqa: BLE001 - a broken pipe to a gone parent must not fail the probe
                pass

    # ---- paths --------------------------------------------------------------------------------
    def proc(self, *parts: str | int) -> Path:
        return self.proc_root.joinpath(*(str(p) for p in parts))

    # ---- subprocesses -------------------------------------------------------------------------
    def run(self, argv: list[str], timeout_s: float, *, env: dict[str, str] | None = None,
            on_timeout: Callable[[subprocess.Popen[bytes]], None] | None = None) -> CmdResult:
        """Run argv (never a shell) in its own process group; kill the whole group at the deadline.

        The effective timeout is also capped by the run's remaining budget. ``on_timeout`` sees the
        process at its deadline, still alive, just before the kill (stacks: who is it tracing?).
        """
        timeout = max(0.05, min(timeout_s, self.remaining() or 0.05))
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                **_GROUP,
            )
        except OSError as exc:
            return CmdResult(argv, None, "", "", False, time.monotonic() - start, error=str(exc))
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            if on_timeout is not None:
                on_timeout(proc)
            kill_group(proc)
            try:
                out, err = proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                out, err = b"", b""
            timed_out = True
        return CmdResult(
            argv,
            proc.returncode,
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            timed_out,
            time.monotonic() - start,
        )


# A group of its own (killed as one at its deadline) but in our session, so that the hard budget
# (vllmdiag/runtime/hardstop.py) finds and kills it with the collector. Python 3.10 lacks process_group:
# there the child stays in our group (killed by pid, and with the collector's group).
_GROUP: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {}


def default_rpc_base() -> Path:
    """Where vLLM puts ipc sockets: VLLM_RPC_BASE_PATH, else tempfile.gettempdir()'s choice.

    tempfile.gettempdir() itself creates and unlinks a probe file to test writability: a write in
    the target's socket directory, which we never do. So resolve its candidates without writing."""
    explicit = os.environ.get("VLLM_RPC_BASE_PATH")
    if explicit:
        return Path(explicit)
    for name in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(name)
        if value and os.path.isdir(value):
            return Path(value)
    for candidate in ("/tmp", "/var/tmp", "/usr/tmp"):
        if os.path.isdir(candidate):
            return Path(candidate)
    return Path(os.getcwd())


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's whole process group (it leads one of its own, see _GROUP)."""
    if _GROUP:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass

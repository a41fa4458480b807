"""A watcher that cannot see says so (issue 25 item 3): watching a stalled deployment of another user
without the capabilities to read its fds, maps and rings, the deployment is ``unknown`` with the reason
and the fix, in the log and the exporter; never ``idle``.

The simulator runs as nobody (with DAC capabilities only so that it may run the interpreter under
/root), the watcher as root with every capability dropped: what an unprivileged on-call user, or a
DaemonSet without SYS_PTRACE/DAC_READ_SEARCH, sees of someone else's vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
          "--inh-caps=+dac_override,+dac_read_search", "--ambient-caps=+dac_override,+dac_read_search"]
DROP = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")


@contextlib.contextmanager
def foreign_stalled_deployment() -> Iterator[tuple[int, dict[str, str]]]:
    top = Path(tempfile.mkdtemp(prefix="vllmdiag-blind-"))
    (top / "rpc").mkdir()
    for d in (top, top / "rpc"):
        d.chmod(0o777)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLMDIAG_SIM_STATE": str(top / "state"),
           "VLLM_RPC_BASE_PATH": str(top / "rpc")}
    try:
        up = subprocess.run([*NOBODY, sys.executable, "-m", "vllmdiag", "sim", "up", "--tp", "2", "--fault",
                             "uniform-collective", "--json"], capture_output=True, text=True, timeout=120, env=env)
        assert up.returncode == 0, up.stderr[-2000:]
        doc = json.loads(up.stdout)
        yield int(doc["root_pid"]), env
    finally:
        subprocess.run([*NOBODY, sys.executable, "-m", "vllmdiag", "sim", "down", "--all"], capture_output=True,
                       timeout=60, env=env)
        shutil.rmtree(top, ignore_errors=True)


@needs_root
def test_unprivileged_watch_of_a_stalled_foreign_deployment_is_unknown_with_the_fix(tmp_path: Path,
                                                                                    reliability: Any) -> None:
    with foreign_stalled_deployment() as (root_pid, env):
        proc = subprocess.Popen([*DROP, sys.executable, "-m", "vllmdiag", "watch", "--out", str(tmp_path / "out"),
                                 "--interval", "0.5", "--metrics-port", "0"], stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True).start()
        try:
            line = _wait(lines, rf"unknown \S+:{root_pid} ")
            url = _wait(lines, r"metrics on (http://\S+)")
            with urllib.request.urlopen(re.search(r"http://\S+", url).group(0), timeout=10) as resp:  # type: ignore[union-attr]
                text = resp.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    log = "".join(lines)
    reliability.case(traceback="Traceback" in log)
    assert "permission denied" in line and "root" in line and "CAP_SYS_PTRACE" in line, line
    dep = re.escape(f":{root_pid}\"")
    state = {m.group(1): m.group(2) for m in re.finditer(
        rf'vllmdiag_deployment_state{{[^}}]*deployment="[^"]*{dep},state="(\w+)"}} (\d)', text)}
    assert state.get("unknown") == "1" and state.get("idle") == "0", text
    assert re.search(rf'vllmdiag_deployment_blind{{[^}}]*deployment="[^"]*{dep}}} 1', text), text
    assert not re.search(rf"idle \S+:{root_pid}\b", log)


def _wait(lines: list[str], pattern: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in list(lines):
            if re.search(pattern, line):
                return line
        time.sleep(0.1)
    raise AssertionError(f"no line {pattern!r}:\n" + "".join(lines[-30:]))


TREE = ('(exec -a VLLM::EngineCore bash -c "(exec -a VLLM::Worker_TP0 sleep 60) & '
        '(exec -a VLLM::Worker_TP1 sleep 60) & wait") & wait')


@needs_root
def test_a_blind_gate_never_passes_the_environment_check(reliability: Any) -> None:
    """Without the capabilities to read another user's /proc/<pid>/environ, env passed on an empty one."""
    tree = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "bash", "-c", TREE],
                            start_new_session=True)
    try:
        time.sleep(1.0)
        out = subprocess.run([*DROP, sys.executable, "-m", "vllmdiag", "gate", "--json"], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tree.pid, signal.SIGKILL)
        tree.wait(timeout=10)
    reliability.case(traceback="Traceback" in out.stderr)
    doc = json.loads(out.stdout)
    nodes = [doc["gate"]]
    env = next(c for n in nodes for c in n["checks"] if c["name"] == "env")
    assert env["status"] == "fail" and "permission denied" in env["reason"], env
    assert out.returncode != 0

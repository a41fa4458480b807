"""`sweep --ship` never runs an interpreter another user can change (issue 15 item 1).

A local user starts a decoy titled ``VLLM::EngineCore`` whose exe is their own copy of Python (in a
venv whose ``.pth`` file writes a marker whenever that binary starts). The sweep runs as root through a
real sshd inside the node's PID+mount namespace: the decoy binary must never run, the node must still
be collected with a trusted Python, and an operator's ``--ship-python`` pointing at the decoy is
refused with a one-line reason for that node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ship_trust import SYSTEM_PYTHON, _why_skip  # noqa: F401 - shared with the pure half

from fleet_fixtures import Fleet, NodeSpec, fleet, ns_init_pid

NOBODY = 65534

FAST = ["--probe", "processes", "--probe", "host"]

pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")]


@contextlib.contextmanager
def decoy_python() -> Iterator[Path]:
    """A user-writable copy of the system Python in a venv whose site-packages write a marker on start."""
    base = Path(tempfile.mkdtemp(prefix="vllmdiag-decoy-"))
    base.chmod(0o755)
    home = base / "u"
    real = Path(os.path.realpath(SYSTEM_PYTHON))
    version = f"python{real.name.removeprefix('python')}" if real.name != "python3" else "python3"
    site = home / "venv" / "lib" / version / "site-packages"
    site.mkdir(parents=True)
    (home / "venv" / "bin").mkdir()
    exe = home / "venv" / "bin" / "python3"
    shutil.copy2(real, exe)
    (home / "venv" / "pyvenv.cfg").write_text(f"home = {real.parent}\ninclude-system-site-packages = false\n")
    (site / "decoy.pth").write_text(
        f"import os, sys; open({str(home)!r} + '/ran.%d' % os.getpid(), 'w').write(repr(sys.argv))\n")
    for path in [home, *home.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    try:
        yield exe
    finally:
        shutil.rmtree(base, ignore_errors=True)


def markers(exe: Path) -> list[str]:
    return [p.read_text() for p in exe.parents[2].glob("ran.*")]


@contextlib.contextmanager
def decoy_in_node(fl: Fleet, node: str, exe: Path) -> Iterator[None]:
    """Run the decoy as uid 65534 inside the node, titled like a vLLM EngineCore (argv[0], as setproctitle)."""
    init = ns_init_pid(fl.procs[node].pid)
    proc = subprocess.Popen(["nsenter", "-t", str(init), "-p", "-m", "--", "setpriv", f"--reuid={NOBODY}",
                             f"--regid={NOBODY}", "--clear-groups", "--", "bash", "-c",
                             f'exec -a VLLM::EngineCore {exe} -c "import time; time.sleep(600)"'],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not _decoy_running(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None, "decoy did not start"
            time.sleep(0.02)
        assert markers(exe) == []  # started by its title, the decoy binary did not run its venv
        yield
    finally:
        for child in _children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _decoy_running(nsenter_pid: int) -> bool:
    for child in _children(nsenter_pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"VLLM::EngineCore"):
                return True
    return False


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[Fleet, Path]]:
    with decoy_python() as exe, fleet([NodeSpec("gpu-decoy", "127.0.0.41", None)]) as fl, \
            decoy_in_node(fl, "gpu-decoy", exe):
        yield fl, exe


def sweep(fl: Fleet, *args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "gpu-decoy", "--ship", "--no-ship-py-spy",
                           *args, *FAST, "--inventory", str(fl.inventory), "--json", "--timeout", "20"],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_ship_never_runs_a_decoy_python(node: tuple[Fleet, Path]) -> None:
    fl, exe = node
    rc, out = sweep(fl)
    assert markers(exe) == [], "the decoy's Python ran as root"
    assert out["nodes"][0]["status"] == "ok", out["nodes"]  # collected with a trusted Python instead
    titles = [p["title"] for p in out["snapshots"][0]["probes"]["processes"]["data"]["processes"]]
    assert any(t.startswith("VLLM::EngineCore") for t in titles)  # the decoy was seen, just not run


def test_ship_python_pointing_at_a_user_file_is_refused(node: tuple[Fleet, Path]) -> None:
    fl, exe = node
    rc, out = sweep(fl, "--ship-python", str(exe))
    assert markers(exe) == []
    status = out["nodes"][0]
    assert status["status"] == "error" and f"uid {NOBODY}" in status["reason"] and "refusing" in status["reason"]
    assert rc == 4


def test_snippet_refuses_writable_directories_and_non_pythons(tmp_path: Path) -> None:
    """The same check without ssh: a root-owned Python in a group-writable directory, a shell, a relative name."""
    from vllmdiag.sweep.ship import SHIP_SNIPPET

    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy2(os.path.realpath(SYSTEM_PYTHON), loose / "python3")
    loose.chmod(0o775)
    for want, why in ((str(loose / "python3"), "writable by group or others"),
                      ("/bin/sh", "not named like a Python"), ("python3", "not an absolute path")):
        proc = subprocess.run(["sh", "-c", SHIP_SNIPPET, "vllmdiag-ship", want, "--json"], input=b"",
                              capture_output=True, timeout=30)
        assert proc.returncode == 96 and why in proc.stderr.decode(), proc.stderr

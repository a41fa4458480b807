"""A triage never writes to the target: proven from the syscalls of the whole triage process tree.

strace follows vllmdiag and every py-spy it starts; any open-for-write, unlink, rename or truncate
of a /dev/shm segment or socket file, and any signal to a target other than SIGCONT, is a write.
The files and process states of the deployment are also compared before and after.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sim = pytest.importorskip("vllmdiag_sim.deployment")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("strace"), reason="needs root and strace")

SYSCALLS = "openat,open,creat,unlink,unlinkat,rename,renameat,renameat2,truncate,ftruncate,kill,tgkill,tkill"
WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC|O_APPEND")
SIGNAL = re.compile(r"^\d+\s+(kill|tgkill|tkill)\((\d+)(?:, \d+)?, (SIG\w+)\)")
PATHCALL = re.compile(r'^\d+\s+(\w+)\((?:AT_FDCWD, |\d+, )?"([^"]*)"(.*)$')


def _state(dep: Any) -> dict[str, Any]:
    files: dict[str, tuple[int, int] | None] = {}
    for path in [f"/dev/shm/{n}" for n in dep.segments] + list(dep.ipc_paths):
        try:
            st = os.stat(path)
            files[path] = (st.st_ino, st.st_size)
        except FileNotFoundError:
            files[path] = None
    stopped: dict[int, bool | None] = {}
    for p in dep.processes:
        try:
            with open(f"/proc/{p['pid']}/stat") as fh:
                stopped[p["pid"]] = fh.read().rsplit(")", 1)[1].split()[0] in "Tt"
        except FileNotFoundError:
            stopped[p["pid"]] = None
    return {"files": files, "stopped": stopped}


def _violations(log: str, targets: set[int], protected: tuple[str, ...]) -> list[str]:
    bad = []
    for line in log.splitlines():
        m = SIGNAL.match(line)
        if m and int(m.group(2)) in targets and m.group(3) != "SIGCONT":
            bad.append(line)
            continue
        m = PATHCALL.match(line)
        if not m or not m.group(2).startswith(protected):
            continue
        call, rest = m.group(1), m.group(3)
        if call in ("openat", "open") and not WRITE_FLAGS.search(rest):
            continue
        bad.append(line)
    return bad


@pytest.mark.parametrize("fault,rank", [("healthy", None), ("rpc-ring-full", 1), ("worker-stopped", 0)])
def test_triage_writes_nothing(fault: str, rank: int | None, tmp_path: Path, reliability: Any) -> None:
    with sim.Deployment.up(tp=2, fault=fault, rank=rank) as dep:
        before = _state(dep)
        log = tmp_path / "strace.log"
        out = subprocess.run(["strace", "-f", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log),
                              sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(dep.root_pid)],
                             capture_output=True, text=True, timeout=120)
        after = _state(dep)
        targets = {p["pid"] for p in dep.processes}
        protected = ("/dev/shm/", *(str(Path(p).parent) + "/" for p in dep.ipc_paths))
        bad = _violations(log.read_text(), targets, protected)
        reliability.case(write=bool(bad) or before != after, traceback="Traceback" in out.stderr)
        assert out.returncode in (0, 1), out.stderr
        assert bad == [], "\n".join(bad[:10])
        assert before == after


def test_the_detector_sees_a_write(tmp_path: Path) -> None:
    """The check above can fail: a process that does write is caught."""
    victim = Path("/dev/shm") / f"vllmdiag-test-{os.getpid()}"
    log = tmp_path / "strace.log"
    try:
        subprocess.run(["strace", "-f", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log), sys.executable, "-c",
                        f"open({str(victim)!r}, 'w').close(); import os; os.unlink({str(victim)!r})"],
                       check=True, timeout=60)
    finally:
        victim.unlink(missing_ok=True)
    bad = _violations(log.read_text(), set(), ("/dev/shm/",))
    assert len(bad) == 2

"""The one /proc reader tells gone, denied and zombie apart (psutil's vocabulary), on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllmdiag.probes._procfs import DENIED, GONE, ZOMBIE, read_proc, read_text

ROOT = Path(__file__).resolve().parents[2]
DROP = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2:][:1]


def test_a_live_process_reads_and_a_reaped_one_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env={"VLLMDIAG_MARK": "1"})
    try:
        deadline, text = time.monotonic() + 10, read_proc(Path(f"/proc/{proc.pid}/environ"))
        while not (isinstance(text, str) and text) and time.monotonic() < deadline:  # until it has exec'd
            time.sleep(0.01)
            text = read_proc(Path(f"/proc/{proc.pid}/environ"))
        assert isinstance(text, str) and "VLLMDIAG_MARK=1" in text
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert read_proc(Path(f"/proc/{proc.pid}/environ")) is GONE
    assert read_text(Path(f"/proc/{proc.pid}/environ")) is None


def test_a_zombie_is_a_zombie_not_an_empty_environment() -> None:
    proc = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(proc.pid) == "Z"
        assert read_proc(Path(f"/proc/{proc.pid}/environ")) is ZOMBIE
    finally:
        proc.wait(timeout=10)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (util-linux)")
def test_another_users_environ_is_denied_and_the_processes_probe_says_so() -> None:
    target = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while "setpriv" in Path(f"/proc/{target.pid}/comm").read_text() and time.monotonic() < deadline:
            time.sleep(0.01)  # until setpriv has exec'd the target
        code = ("import sys; from pathlib import Path; from vllmdiag.probes._procfs import read_proc; "
                f"print(read_proc(Path('/proc/{target.pid}/environ')))")
        out = subprocess.run([*DROP, sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert out.stdout.strip() == repr(DENIED), out.stderr[-500:]
    finally:
        target.kill()
        target.wait(timeout=10)

"""Issue 35 item 7: the systemd recipe holds the watcher to what the README and the priority code need.

The unit once set CPUQuota=50% and Nice=5 and left CAP_SYS_NICE out of its bounding set, so the SCHED_FIFO
that each watch triage's collector takes (vllmdiag/runtime/priority.py, docs/priority.md) was refused and the triage
of a stall ran throttled; its Documentation= pointed at a placeholder URL. Read here as systemd reads it
(systemd-analyze verify where installed, else parsed), and the capability set is tried for real: with the
unit's bounding set the boost gets SCHED_FIFO, without CAP_SYS_NICE it does not (the negative control).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[1] / "examples" / "watch" / "vllmdiag-watch.service"


def _service() -> dict[str, list[str]]:
    """The unit's [Service] keys as systemd reads them: comments skipped, a key may repeat."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}{key.strip()}", []).append(value.strip())
    return out


def test_the_unit_lets_the_watchers_triages_take_their_priority() -> None:
    keys = _service()
    caps = " ".join(keys.get("[Service]CapabilityBoundingSet", [])).split()
    assert "CAP_SYS_NICE" in caps and "CAP_SYS_PTRACE" in caps, caps
    assert "[Service]CPUQuota" not in keys, "a CPU quota throttles the triage of a stall (docs/priority.md)"
    assert all(int(v) <= 0 for v in keys.get("[Service]Nice", [])), "a positive Nice lowers the watcher below vLLM"
    assert keys.get("[Service]RestrictRealtime", ["no"])[-1] == "no", "RestrictRealtime=yes refuses SCHED_FIFO"
    assert keys.get("[Service]CPUSchedulingPolicy", ["other"])[-1] in ("other", "fifo", "rr")


def test_the_unit_points_at_no_placeholder() -> None:
    keys = _service()
    for url in " ".join(keys.get("[Unit]Documentation", [])).split():
        assert "github.com/vllmdiag/vllmdiag" not in url and "example" not in url, url


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_reads_the_unit_without_a_complaint(tmp_path: Path) -> None:
    text = UNIT.read_text()
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    program = shlex.split(exec_line.split("=", 1)[1])[0]
    unit = tmp_path / UNIT.name  # verify wants ExecStart's program to exist: this checkout's vllmdiag
    unit.write_text(text.replace(f"ExecStart={program} ", f"ExecStart={sys.executable} -m vllmdiag ", 1))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and not out.stdout.strip() and not out.stderr.strip(), out.stdout + out.stderr


def _boost_under(caps: list[str]) -> str:
    bounding = "-all," + ",".join(f"+{c.removeprefix('CAP_').lower()}" for c in caps)
    code = "from vllmdiag.runtime.priority import boost; print(boost().get('policy'))"
    out = subprocess.run(["setpriv", f"--bounding-set={bounding}", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=60, cwd=UNIT.parents[2])
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_the_units_capabilities_get_sched_fifo_and_without_sys_nice_do_not() -> None:
    if not Path("/proc/sys/kernel/sched_rt_runtime_us").exists() or \
            Path("/proc/sys/kernel/sched_rt_runtime_us").read_text().strip() == "-1":
        pytest.skip("RT throttling is off here: the boost is not taken at all (priority.py)")
    caps = " ".join(_service()["[Service]CapabilityBoundingSet"]).split()
    assert _boost_under(caps) == "SCHED_FIFO"
    assert _boost_under([c for c in caps if c != "CAP_SYS_NICE"]) == "SCHED_OTHER"

"""The live tests of tests/unit/test_operator_path_systemd.py, which says what they check: these start something."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_operator_path_systemd import UNIT, _service  # noqa: F401 - shared with the pure half


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

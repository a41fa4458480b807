"""The live tests of tests/unit/test_procstat.py, which says what they check: these start something."""

from __future__ import annotations

import subprocess
import sys

from test_procstat import ROOT  # noqa: F401 - shared with the pure half


def test_process_start_has_one_name_and_counts_from_the_interpreters_start() -> None:
    code = ("import time; time.sleep(0.3)\nfrom vllmdiag.runtime.lastword import process_start\n"
            "import vllmdiag.runtime.deadline as d\nprint(time.monotonic() - process_start(), "
            "hasattr(d, 'process_start'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    age, second_name = out.stdout.split()
    assert float(age) >= 0.25 and second_name == "False"

"""The live tests of tests/unit/test_runner.py, which says what they check: these start something."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from vllmdiag.context import Context


def test_ctx_run_kills_the_whole_process_group(tmp_path: Any, reliability: Any) -> None:
    marker = tmp_path / "grandchild.pid"
    code = ("import os,subprocess,sys,time;"
            "p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']);"
            f"open({str(marker)!r},'w').write(str(p.pid));"
            "time.sleep(60)")
    ctx = Context()
    ctx.deadline = time.monotonic() + 10
    start = time.monotonic()
    res = ctx.run([sys.executable, "-c", code], timeout_s=1.0)
    reliability.case(hang=time.monotonic() - start > 4)
    assert res.timed_out and time.monotonic() - start < 4
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and os.path.exists(f"/proc/{grandchild}") and not _zombie(grandchild):
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{grandchild}") or _zombie(grandchild)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True

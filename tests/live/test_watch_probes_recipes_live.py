"""The live tests of tests/unit/test_watch_probes_recipes.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_watch_probes_recipes import _pod  # noqa: F401 - shared with the pure half

from vllmdiag.watch.exporter import Exporter

from ports import free_port


@pytest.mark.parametrize("answer, exit_code", [((200, "serving"), 0), ((503, "stalled, evidence saved"), 1),
                                               ((503, "x"), 1), (None, 0)])
def test_the_sidecars_liveness_exec_fails_only_on_a_503(answer: tuple[int, str] | None, exit_code: int) -> None:
    pod = _pod("sidecar.yaml")
    vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
    argv = list(vllm["livenessProbe"]["exec"]["command"])
    assert argv[:2] == ["python3", "-c"]
    exp = None
    if answer is not None:
        exp = Exporter("127.0.0.1", 0, lambda: [], routes={"/livez": lambda _dep: answer})
        exp.start()
        port = exp.address[1]
    else:
        port = free_port("127.0.0.1")  # nothing listens there: the watcher is down
    try:
        script = argv[2].replace(":9842/", f":{port}/")
        assert script != argv[2]
        out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "POD_IP": "127.0.0.1"},
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == exit_code, out.stderr
        assert "Traceback" not in out.stderr
    finally:
        if exp is not None:
            exp.close()

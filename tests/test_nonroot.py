"""A non-root triage degrades with reasons: never a crash, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from fake_tree import fake_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root and setpriv to run a triage as another user")


def test_triage_as_nobody_reports_what_it_could_not_see(reliability: Any) -> None:
    with fake_tree(tp=2) as t:
        out = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                              sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(t.api), "--budget", "6"],
                             capture_output=True, text=True, timeout=60, cwd="/")
        reliability.case(traceback="Traceback" in out.stderr)
        assert "Traceback" not in out.stderr
        assert out.returncode in (0, 1, 4), out.stderr
        doc = json.loads(out.stdout)
        snap = doc["snapshot"]
        procs = snap["probes"]["processes"]["data"]["processes"]
        # titles and states are world-readable, so the tree is still found...
        assert {p["pid"] for p in procs} >= {t.api, t.engine, *t.workers.values()}
        # ...but what needs privileges is missing, and says so where a probe could not run.
        api = next(p for p in procs if p["pid"] == t.api)
        assert api["environ"] == {} and api["num_fds"] is None
        stacks = snap["probes"].get("stacks")
        if stacks is not None:
            assert stacks["status"] in ("skipped", "partial", "error")
            assert "ptrace" in (stacks["reason"] or "").lower() or "root" in (stacks["reason"] or "").lower()
            assert doc["verdict"]["status"] == "inconclusive"

"""Without privileges a triage degrades with reasons: never a crash, never a traceback.

The pyenv interpreter here lives under /root (mode 700), so "another user" cannot run it; instead
the targets run as nobody and the triage runs as root with every capability dropped, which is
exactly what an unprivileged on-call shell sees of someone else's vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="needs root and setpriv (util-linux)")

TREE = ('(exec -a VLLM::EngineCore bash -c "(exec -a VLLM::Worker_TP0 sleep 60) & '
        '(exec -a VLLM::Worker_TP1 sleep 60) & wait") & wait')
DROP = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]


def test_unprivileged_triage_reports_what_it_could_not_see(reliability: Any) -> None:
    tree = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                             "bash", "-c", TREE], start_new_session=True)
    try:
        engine = _wait_for_title("VLLM::EngineCore", tree.pid)
        out = subprocess.run([*DROP, sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(engine),
                              "--budget", "6"], capture_output=True, text=True, timeout=60)
        reliability.case(traceback="Traceback" in out.stderr)
        assert "Traceback" not in out.stderr
        assert out.returncode in (0, 1, 4), out.stderr
        doc = json.loads(out.stdout)
        ours = {p["pid"] for d in doc["deployments"] for p in d["processes"]}
        procs = [p for p in doc["snapshot"]["probes"]["processes"]["data"]["processes"] if p["pid"] in ours]
        titles = sorted(p["title"].split(" ")[0] for p in procs)
        assert titles == ["VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP1"]  # titles are world-readable
        assert all(p["num_fds"] is None and p["environ"] == {} for p in procs)  # fds and environ are not
        # ... and the probe says so: each denied read is marked, the probe is partial and names them
        assert all(p.get("fds_unreadable") == p.get("environ_unreadable") == "denied" for p in procs), procs
        processes = doc["snapshot"]["probes"]["processes"]
        assert processes["status"] == "partial" and "/proc/<pid>/environ" in processes["reason"]
        assert "/proc/<pid>/fd" in processes["reason"]
        stacks = doc["snapshot"]["probes"].get("stacks")
        if stacks is not None:
            assert stacks["status"] in ("skipped", "partial", "error")
            assert "ptrace" in (stacks["reason"] or "").lower()
            assert doc["verdict"]["status"] == "inconclusive"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tree.pid, signal.SIGKILL)
        tree.wait(timeout=10)


def _wait_for_title(title: str, session: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    head = fh.read().split(b"\0")[0].decode()
                if head == title and os.getsid(int(name)) == session:
                    return int(name)
            except (OSError, UnicodeDecodeError):
                continue
        time.sleep(0.05)
    raise AssertionError(f"{title} never appeared")


def test_blind_triage_of_a_healthy_deployment_is_inconclusive_never_blocked(reliability: Any) -> None:
    """Issue 15 item 4: without CAP_SYS_PTRACE the fds and maps of root's vLLM are unreadable; that
    once read as "0 sockets" and gave "BLOCKED handshake: endpoint gone" (exit 1) on a healthy node."""
    sim = pytest.importorskip("vllmdiag_sim.deployment")
    with sim.Deployment.up(tp=2, fault="healthy") as dep:
        out = subprocess.run([*DROP, sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(dep.root_pid),
                              "--budget", "6"], capture_output=True, text=True, timeout=60)
    reliability.case(traceback="Traceback" in out.stderr)
    doc = json.loads(out.stdout)
    probes = doc["snapshot"]["probes"]
    ours = {p["pid"] for d in doc["deployments"] for p in d["processes"]}
    assert out.returncode == 4, doc["verdict"]["summary"]
    assert doc["verdict"]["status"] == "inconclusive"
    # The one cause first (issue 35 item 8), not last of five clauses.
    assert doc["verdict"]["summary"].startswith("No blocking problem seen, but the tool could not see enough: not root"), \
        doc["verdict"]["summary"]
    assert "CAP_SYS_PTRACE" in " ".join(doc["verdict"]["next_steps"])
    assert not [f for f in doc["findings"] if f["severity"] == "critical"], doc["findings"]
    for name in ("sockets", "endpoints", "shm"):
        assert probes[name]["status"] == "partial", (name, probes[name]["status"])
        assert "permission denied" in probes[name]["reason"] and "CAP_SYS_PTRACE" in probes[name]["reason"]
        assert ours & set(probes[name]["data"]["unreadable_pids"]), name
    assert ours & set(probes["sockets"]["data"]["unreadable_pids"]) == ours
    assert all(probes["sockets"]["data"]["socket_fds"][str(p)] is None for p in ours)  # unknown, never 0


def test_rings_probe_says_which_mappers_it_could_not_see(tmp_path: Any, reliability: Any) -> None:
    """A ring segment we may not open (another user's, mode 0600) makes the rings probe partial with
    its mappers as unreadable pids, never an empty "no rings" (issue 15 item 4)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent.parent))
    from test_rings_probe import write_fixture

    seg = write_fixture("response-3-unread", tmp_path / "psm_0badf00d")
    os.chown(seg, 65534, 65534)
    os.chmod(seg, 0o600)
    os.chmod(tmp_path, 0o755)
    code = (
        "import json, sys\n"
        "from vllmdiag.context import Context\n"
        "from vllmdiag.model import ProbeResult\n"
        "from vllmdiag.probe import Partial\n"
        "from vllmdiag.probes import rings\n"
        f"seg = {{'name': 'psm_0badf00d', 'path': {str(seg)!r}, 'kind': 'psm', 'size_bytes': {seg.stat().st_size},"
        " 'mapped_by': [4242, 4243], 'mapped_by_other': []}\n"
        "ctx = Context()\n"
        "ctx.record('shm', ProbeResult('ok', 0.0, None, {'segments': [seg]}))\n"
        "ctx.mark_others_done()\n"
        "out = rings.collect(ctx)\n"
        "print(json.dumps({'partial': isinstance(out, Partial), 'reason': getattr(out, 'reason', ''),"
        " 'data': out.data if isinstance(out, Partial) else out}))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([*DROP, sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["partial"] and "permission denied" in doc["reason"] and "CAP_SYS_PTRACE" in doc["reason"]
    assert doc["data"]["unreadable_pids"] == [4242, 4243] and doc["data"]["rings"] == []

"""The probe recipes of examples/watch/ (issue 34): the vLLM container's probes ask the watcher.

The sidecar's vllm container: a startupProbe on vLLM's own /health, readiness on the watcher's
/readyz (out at the first 503), liveness through an exec probe that fails only on an HTTP 503 of
/livez (run here against a real exporter: 200 -> alive, 503 -> dead, watcher down -> alive); the
watcher's own probes never ask /livez (that would restart the watcher, not the hung server).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmdiag.watch.exporter import Exporter

from ports import free_port

RECIPES = Path(__file__).resolve().parent.parent / "examples" / "watch"


def _pod(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((RECIPES / name).read_text()) if isinstance(d, dict)]
    return next(d for d in docs if d.get("kind") in ("Deployment", "DaemonSet"))["spec"]["template"]["spec"]


def _watch(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c.get("args", [None])[0] == "watch")


def test_sidecar_vllm_probes_ask_the_watcher() -> None:
    pod = _pod("sidecar.yaml")
    vllm = next(c for c in pod["containers"] if c["name"] == "vllm")
    port = int(_watch(pod)["args"][_watch(pod)["args"].index("--metrics-port") + 1])
    assert vllm["startupProbe"]["httpGet"]["path"] == "/health", "the start-up: vLLM's own answer"
    assert vllm["startupProbe"]["failureThreshold"] * vllm["startupProbe"]["periodSeconds"] >= 600
    ready = vllm["readinessProbe"]
    assert ready["httpGet"] == {"path": "/readyz", "port": port} and ready["failureThreshold"] == 1
    live = vllm["livenessProbe"]
    assert "/livez" in live["exec"]["command"][-1] and f":{port}/" in live["exec"]["command"][-1]
    assert any(e["name"] == "POD_IP" for e in vllm["env"]), "the exec probe finds the watcher at the pod IP"


@pytest.mark.parametrize("name", ["sidecar.yaml", "daemonset.yaml"])
def test_the_watchers_own_probes_never_ask_livez(name: str) -> None:
    watch = _watch(_pod(name))
    probes = [watch[k] for k in ("startupProbe", "readinessProbe", "livenessProbe") if k in watch]
    assert probes and all(p["httpGet"]["path"] == "/metrics" for p in probes)


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

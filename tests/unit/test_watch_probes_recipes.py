"""The probe recipes of examples/watch/ (issue 34): the vLLM container's probes ask the watcher.

The sidecar's vllm container: a startupProbe on vLLM's own /health, readiness on the watcher's
/readyz (out at the first 503), liveness through an exec probe that fails only on an HTTP 503 of
/livez (run here against a real exporter: 200 -> alive, 503 -> dead, watcher down -> alive); the
watcher's own probes never ask /livez (that would restart the watcher, not the hung server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

RECIPES = Path(__file__).resolve().parent.parent.parent / "examples" / "watch"


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

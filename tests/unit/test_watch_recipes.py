"""The pure tests of tests/live/test_watch_recipes_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
RECIPES = ROOT / "examples" / "watch"
CAPS = {"SYS_PTRACE", "DAC_READ_SEARCH", "SYS_NICE"}


def _load(name: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all((RECIPES / name).read_text()) if d is not None]
    work = [d for d in docs if isinstance(d, dict) and d.get("kind") != "NetworkPolicy"]
    assert len(work) == 1
    return work[0]


def _watch_container(pod: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in pod["containers"] if c.get("args", [None])[0] == "watch"]
    assert len(found) == 1, "one container runs `vllmdiag watch`"
    return found[0]


def _check_pod(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What any workload running the watcher must state; returns (pod spec, watch container)."""
    assert obj["apiVersion"] == "apps/v1" and obj["metadata"]["name"]
    tmpl = obj["spec"]["template"]
    selector = obj["spec"]["selector"]["matchLabels"]
    assert selector.items() <= tmpl["metadata"]["labels"].items(), "the selector must match the pod's labels"
    pod, c = tmpl["spec"], _watch_container(tmpl["spec"])
    assert c["image"] and isinstance(c["args"], list) and all(isinstance(a, str) for a in c["args"])
    sec = c["securityContext"]
    assert sec["capabilities"]["drop"] == ["ALL"] and set(sec["capabilities"]["add"]) == CAPS
    assert sec["readOnlyRootFilesystem"] is True and sec["allowPrivilegeEscalation"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert all(m["name"] in volumes for m in c["volumeMounts"]), "every mount names a volume"
    for path in ("/dev/shm", "/tmp"):
        assert mounts[path].get("readOnly") is True, f"{path} is mounted read-only"
    out = c["args"][c["args"].index("--out") + 1]
    assert out in mounts and not mounts[out].get("readOnly"), "--out is the one writable mount"
    port = c["args"][c["args"].index("--metrics-port") + 1]
    assert {p["containerPort"] for p in c["ports"]} == {int(port)}
    assert tmpl["metadata"]["annotations"]["prometheus.io/port"] == port
    # issue 25 item 2: the pod IP (what Prometheus and the liveness probe use), never 0.0.0.0
    assert c["args"][c["args"].index("--metrics-addr") + 1] == "$(POD_IP)", "bound to the pod IP"
    assert any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP" for e in c["env"])
    limits = c["resources"]["limits"]
    assert limits.get("memory") and limits.get("cpu"), "memory and CPU are bounded"
    # A saturated node (issue 24): a real cpu request (the CFS weight beside pods of whole cores) and a
    # limit of at least one core (a smaller quota would throttle the one-core triage of a stall).
    cpu = str(c["resources"]["requests"]["cpu"])
    assert (float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)) >= 0.1, cpu
    lim = str(limits["cpu"])
    assert (float(lim[:-1]) / 1000 if lim.endswith("m") else float(lim)) >= 1.0, lim
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= 18, "SIGTERM lets a running triage (budget 8 s + confirm 10 s) finish"
    return pod, c


def test_daemonset_has_host_pid_capabilities_and_host_mounts() -> None:
    obj = _load("daemonset.yaml")
    assert obj["kind"] == "DaemonSet"
    pod, c = _check_pod(obj)
    assert pod["hostPID"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    for path in ("/dev/shm", "/tmp"):
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
    assert "$(NODE_NAME)" in c["args"] and c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    klass = _load("priorityclass.yaml")
    assert klass["kind"] == "PriorityClass" and pod["priorityClassName"] == klass["metadata"]["name"]
    assert klass["preemptionPolicy"] == "Never" and klass["value"] < 1_000_000_000  # below system-* classes


def test_sidecar_shares_the_process_namespace_and_the_vllm_volumes_read_only() -> None:
    obj = _load("sidecar.yaml")
    pod, c = _check_pod(obj)
    assert pod["shareProcessNamespace"] is True and "hostPID" not in pod
    vllm = next(x for x in pod["containers"] if x["name"] == "vllm")
    theirs = {m["mountPath"]: m["name"] for m in vllm["volumeMounts"]}
    ours = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert theirs["/dev/shm"] == ours["/dev/shm"] and theirs["/tmp"] == ours["/tmp"], "the same volumes vLLM uses"

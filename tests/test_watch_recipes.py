"""The deployment recipes under examples/watch/: manifests that say what the watcher needs, a
systemd unit systemd accepts, and arguments the real CLI accepts (one pass run with each)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
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


def _run_one_pass(args: list[str], tmp_path: Path) -> None:
    """Run the recipe's own arguments through the real CLI for one pass (paths and port made local)."""
    args = [a.replace("$(NODE_NAME)", "recipe-node").replace("$(POD_NAME)", "recipe-pod")
            .replace("$(POD_IP)", "127.0.0.1") for a in args]
    args[args.index("--out") + 1] = str(tmp_path / "out")
    args[args.index("--metrics-port") + 1] = "0"
    if "--metrics-addr" in args:
        args[args.index("--metrics-addr") + 1] = "127.0.0.1"
    out = subprocess.run([sys.executable, "-m", "vllmdiag", *args, "--max-passes", "1",
                          "--select", "VLLM_RPC_BASE_PATH=/nonexistent-recipe-test"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert "watching" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["daemonset.yaml", "sidecar.yaml"])
def test_manifest_arguments_are_accepted_by_the_cli(name: str, tmp_path: Path) -> None:
    _run_one_pass(list(_watch_container(_load(name)["spec"]["template"]["spec"])["args"]), tmp_path)


def _unit() -> tuple[str, list[str]]:
    text = (RECIPES / "vllmdiag-watch.service").read_text()
    exec_line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    return text, shlex.split(exec_line.split("=", 1)[1])


def test_systemd_unit_arguments_are_accepted_by_the_cli(tmp_path: Path) -> None:
    text, argv = _unit()
    assert argv[0] == "/usr/local/bin/vllmdiag" and argv[1] == "watch"
    for key in ("CapabilityBoundingSet=CAP_SYS_PTRACE CAP_DAC_READ_SEARCH CAP_SYS_NICE", "NoNewPrivileges=yes",
                "ProtectSystem=strict", "ReadWritePaths=/var/lib/vllmdiag/watch", "KillSignal=SIGTERM",
                "MemoryMax=512M", "LimitNOFILE=4096", "TasksMax=64"):
        assert key in text.splitlines(), key
    assert "PrivateTmp=yes" not in text, "the watcher must see vLLM's ipc sockets in /tmp"
    assert "--metrics-addr" not in argv or argv[argv.index("--metrics-addr") + 1] != "0.0.0.0"
    _run_one_pass(argv[1:], tmp_path)


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here")
    text, argv = _unit()
    # verify checks that ExecStart's program exists: point it at this checkout's vllmdiag.
    unit = tmp_path / "vllmdiag-watch.service"
    unit.write_text(text.replace(f"ExecStart={argv[0]} ", f"ExecStart={sys.executable} -m vllmdiag ", 1))
    out = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr.strip() == "" and out.stdout.strip() == "", out.stdout + out.stderr

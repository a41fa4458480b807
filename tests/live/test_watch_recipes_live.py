"""The deployment recipes under examples/watch/: manifests that say what the watcher needs, a
systemd unit systemd accepts, and arguments the real CLI accepts (one pass run with each)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_watch_recipes import RECIPES, ROOT, _load, _watch_container  # noqa: F401 - shared with the pure half


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

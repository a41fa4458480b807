"""``sweep -x NODES``, ``-l USER``, ``-o OPTION`` with ClusterShell's (clush's) meaning (issue 26 item 3).

-o is untrusted input that reaches an ssh argv: it is held to the inventory's allow-list (nothing that runs a
command or loads code/config), one option per -o, refused in one line with exit 2, and nothing runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "tests" / "data" / "vllm-real" / "snap-a-healthy.json"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _node_script(tmp_path: Path) -> Path:
    raw = json.loads(GOOD.read_text())
    (tmp_path / "good.json").write_text(json.dumps(raw.get("snapshot", raw)))
    script = tmp_path / "node"
    script.write_text(f"#!/bin/sh\ncat {tmp_path}/good.json\n")
    script.chmod(0o755)
    return script


def test_x_excludes_nodes_in_node_set_syntax(tmp_path: Path) -> None:
    script = _node_script(tmp_path)
    proc = _cli("sweep", "n[1-5]", "-x", "n[2-3]", "-x", "n5", "--exec", f"{script} %h", "--json", "--confirm", "0")
    assert proc.returncode == 0, proc.stderr
    assert [n["name"] for n in json.loads(proc.stdout)["nodes"]] == ["n1", "n4"]


def test_x_of_every_node_is_a_usage_error_not_an_empty_sweep(tmp_path: Path) -> None:
    proc = _cli("sweep", "n[1-2]", "-x", "n[1-2]", "--exec", f"{_node_script(tmp_path)} %h", "--json")
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "-x" in proc.stderr


REFUSED = ["ProxyCommand=touch {m}", "-oProxyCommand=touch {m}", "proxycommand touch {m}", "LocalCommand=touch {m}",
           "PermitLocalCommand=yes", "KnownHostsCommand=touch {m}", "Match=exec touch {m}", "Include={m}",
           "PKCS11Provider={m}", "Port=22 -oProxyCommand=touch {m}", "ProxyJump=-oProxyCommand=touch",
           "ConnectTimeout=300", "ServerAliveInterval=600", "StrictHostKeyChecking=no", "=x", "Port=", "-p 22"]


@pytest.mark.parametrize("option", REFUSED)
def test_o_refuses_options_that_run_commands_in_one_line(option: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = _cli("sweep", "127.0.0.1", "-o", option.format(m=marker), "--json", "--connect-timeout", "1",
                "--timeout", "3")
    assert not marker.exists(), "an ssh option ran a command"
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr

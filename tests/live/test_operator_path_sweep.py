"""Issue 35 items 8 and 10: sweep speaks clush (-f fanout, -t connect timeout, -u command timeout, -g/-X GROUP
and @group from ClusterShell's own groups.conf/groups.d, -o raw ssh arguments split into an argv list), and
nodes it could not reach are said as such, never listed as culprits. Real ssh on loopback, ClusterShell's
real resolver (pointed at a private config with CLUSTERSHELL_CFGDIR), the terminal read as text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllmdiag.cli.sweep_command import split_ssh_options
from vllmdiag.errors import BadInput
from vllmdiag.sweep.transport import Transport, node_argv

ROOT = Path(__file__).resolve().parent.parent.parent
GOOD = ROOT / "tests" / "data" / "vllm-real" / "snap-a-healthy.json"


def _cli(*args: str, env: dict[str, str] | None = None, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    extra = {"COLUMNS": str(columns)} if columns else {}
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**full, "PYTHONPATH": str(ROOT), **extra, **(env or {})})


def _node_script(tmp_path: Path) -> Path:
    raw = json.loads(GOOD.read_text())
    (tmp_path / "good.json").write_text(json.dumps(raw.get("snapshot", raw)))
    script = tmp_path / "node"
    script.write_text(f"#!/bin/sh\ncat {tmp_path}/good.json\n")
    script.chmod(0o755)
    return script


def _clush_config(tmp_path: Path) -> dict[str, str]:
    """A ClusterShell config of our own (groups.conf + a groups.d YAML source), as /etc/clustershell holds it."""
    cfg = tmp_path / "clustershell"
    (cfg / "groups.d").mkdir(parents=True)
    (cfg / "groups.conf").write_text("[Main]\ndefault: site\nautodir: $CFGDIR/groups.d\n")
    (cfg / "groups.d" / "site.yaml").write_text("site:\n  gpus: 'gpu[00-03]'\n  rack1: 'gpu[00-01]'\n")
    return {"CLUSTERSHELL_CFGDIR": str(cfg)}


def _names(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [n["name"] for n in json.loads(proc.stdout)["nodes"]]


def test_groups_resolve_through_clustershell_as_clush_reads_them(tmp_path: Path) -> None:
    env, script = _clush_config(tmp_path), _node_script(tmp_path)
    common = ["--exec", f"{script} %h", "--json", "--confirm", "0"]
    assert _names(_cli("sweep", "@gpus", *common, env=env)) == ["gpu00", "gpu01", "gpu02", "gpu03"]
    assert _names(_cli("sweep", "-g", "gpus", "-X", "rack1", *common, env=env)) == ["gpu02", "gpu03"]
    assert _names(_cli("sweep", "@site:rack1", *common, env=env)) == ["gpu00", "gpu01"]
    unknown = _cli("sweep", "-g", "nope", *common, env=env)
    assert unknown.returncode == 2 and unknown.stdout == "" and len(unknown.stderr.splitlines()) == 1, unknown.stderr
    assert "@nope" in unknown.stderr and "groups.conf" in unknown.stderr


def test_clush_short_options_are_read_as_clush_means_them(tmp_path: Path) -> None:
    script = _node_script(tmp_path)
    ok = _cli("sweep", "n[1-3]", "-f", "2", "-t", "2", "-u", "10", "--exec", f"{script} %h", "--json", "--confirm", "0")
    assert _names(ok) == ["n1", "n2", "n3"]
    for option, word in (("-f", "--fanout"), ("-u", "--timeout"), ("-t", "--connect-timeout")):
        bad = _cli("sweep", "n1", option, "0", "--exec", f"{script} %h")
        assert bad.returncode == 2 and word in bad.stderr and len(bad.stderr.splitlines()) == 1, (option, bad.stderr)


def test_o_takes_clush_raw_ssh_arguments_as_an_argv_list(tmp_path: Path) -> None:
    options = split_ssh_options(["-oPort=2222 -o Compression=yes", "User=ops"])
    argv = node_argv(Transport(ssh_options=options), "n1", None, 4.0)
    assert "-oPort=2222" in argv and "-oCompression=yes" in argv and "-oUser=ops" in argv
    assert argv.index("-oBatchMode=yes") < argv.index("-oPort=2222")
    marker = tmp_path / "ran"
    for raw in (f"-oPort=22 -oProxyCommand='touch {marker}'", "-oPort=22 -p 2222", f"-oPort=22; touch {marker}"):
        with pytest.raises(BadInput):
            Transport(ssh_options=split_ssh_options([raw]))
        proc = _cli("sweep", "127.0.0.1", "-o", raw, "--json", "-t", "1", "-u", "3")
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert not marker.exists(), "an -o argument reached a shell"


@pytest.mark.parametrize("columns", [None, 80, 200])
def test_nodes_not_reached_are_said_as_such_never_culprits(columns: int | None) -> None:
    """Real ssh to loopback ports nothing listens on: each node refuses; the verdict names them, folded, as
    unreachable (piped, and at 80 and 200 columns)."""
    proc = _cli("sweep", "127.0.0.[1-3]", "-o", "Port=1", "-t", "2", "-u", "5", "--confirm", "0", columns=columns)
    text = proc.stdout
    assert proc.returncode == 4, proc.stderr
    assert "culprit:" not in text and "unreachable: 127.0.0.[1-3] (connection refused)" in text, text
    flat = " ".join(text.split())  # below the grid: one folded line, not one per node
    assert "127.0.0.[1-3] unreachable: connection refused (3 nodes" in flat, text

"""The `vllmdiag` command's sh half (scripts/vllmdiag, issue 24): on a node whose every core spins, a
process at normal priority gets ~1 % of a core, so the interpreter's own start took 1-5 s before
vllmdiag/__main__.py could boost. The launcher takes SCHED_FIFO for the commands that look at a node,
then execs the Python half (scripts/vllmdiag-py) next to it, which so starts at full speed.

Installed as pip installs it: both files in one directory, the Python half's first line pointing at
the interpreter. A stand-in Python half (sh) shows what the launcher passed on: policy, environment
and arguments, byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
LAUNCHER = ROOT / "scripts" / "vllmdiag"
PYTHON_HALF = ROOT / "scripts" / "vllmdiag-py"
ENV = {k: v for k, v in os.environ.items() if k not in ("VLLMDIAG_BOOST", "VLLMDIAG_RT_FROM")}


def _rt_allowed() -> bool:
    try:
        throttled = Path("/proc/sys/kernel/sched_rt_runtime_us").read_text().strip() != "-1"
    except OSError:
        return False
    return os.geteuid() == 0 and throttled and len(os.sched_getaffinity(0)) >= 2 and shutil.which("chrt") is not None


needs_rt = pytest.mark.skipif(not _rt_allowed(), reason="needs root, RT throttling on, 2 usable cores and chrt")
STAND_IN = """#!/bin/sh
printf '%s|%s|' "$(chrt -p $$ | sed -n '1s/.*: //p')" "${VLLMDIAG_RT_FROM:-}"
for a in "$@"; do printf '[%s]' "$a"; done
"""


def _installed(tmp_path: Path, python_half: str | None = None) -> Path:
    """A bin directory as pip leaves it: the launcher, and the Python half with its first line rewritten."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy2(LAUNCHER, bin_dir / "vllmdiag")
    text = python_half if python_half is not None else PYTHON_HALF.read_text().replace("#!python", f"#!{sys.executable}", 1)
    (bin_dir / "vllmdiag-py").write_text(text)
    (bin_dir / "vllmdiag-py").chmod(0o755)
    return bin_dir / "vllmdiag"


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env or ENV, cwd="/")


@needs_rt
def test_a_triage_starts_in_sched_fifo_and_says_the_launcher_took_it(tmp_path: Path) -> None:
    cmd = _installed(tmp_path)
    out = _run([str(cmd), "triage", "--probe", "processes", "--json"], {**ENV, "PYTHONPATH": str(ROOT)})
    assert out.returncode in (0, 1, 3, 4), out.stderr
    prio = json.loads(out.stdout)["snapshot"]["options"]["priority"]
    assert prio["policy"] == "SCHED_FIFO" and "launcher" in prio["by"] and prio["rttime_limit_s"] > 0, prio
    plain = _run([str(cmd), "triage", "--probe", "processes", "--json", "--no-boost"], {**ENV, "PYTHONPATH": str(ROOT)})
    assert json.loads(plain.stdout)["snapshot"]["options"]["priority"]["policy"] == "SCHED_OTHER", plain.stderr


@needs_rt
def test_only_the_commands_that_look_at_a_node_are_boosted_and_arguments_pass_verbatim(tmp_path: Path) -> None:
    cmd = _installed(tmp_path, STAND_IN)
    marker = tmp_path / "evaluated"
    out = _run([str(cmd), "collect", "a b", f"$(touch {marker})", "*", "`id`", "--json"])
    assert out.stdout == f"SCHED_FIFO|launcher|[collect][a b][$(touch {marker})][*][`id`][--json]"
    assert not marker.exists()
    for argv in (["watch", "--interval", "2"], ["demo"], ["triage", "--no-boost"], ["gate", "-h"], ["collect", "--help"],
                 ["sim", "up"], []):
        got = _run([str(cmd), *argv]).stdout
        assert got.startswith("SCHED_OTHER||"), (argv, got)
    assert _run([str(cmd), "gate"], {**ENV, "VLLMDIAG_BOOST": "off"}).stdout.startswith("SCHED_OTHER||")
    # Reached through a symlink elsewhere (a tool dir on PATH): the Python half is the real file's neighbour.
    link = tmp_path / "elsewhere" / "vllmdiag"
    link.parent.mkdir()
    link.symlink_to(cmd)
    assert _run([str(link), "triage"]).stdout == "SCHED_FIFO|launcher|[triage]"


def test_refused_real_time_changes_nothing() -> None:
    """No root (no CAP_SYS_NICE): chrt is refused, silently; the command runs as it would have."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to drop to another uid")
    with tempfile.TemporaryDirectory(prefix="vllmdiag-launcher-") as tmp:  # pytest's tmp_path is root's alone
        Path(tmp).chmod(0o755)
        cmd = _installed(Path(tmp), STAND_IN)
        out = _run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(cmd), "triage", "--json"])
    assert out.returncode == 0 and out.stdout == "SCHED_OTHER||[triage][--json]" and not out.stderr, out.stderr


def test_without_its_python_half_it_says_what_to_do(tmp_path: Path) -> None:
    cmd = _installed(tmp_path)
    (tmp_path / "bin" / "vllmdiag-py").unlink()
    out = _run([str(cmd), "triage"])
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert "vllmdiag-py is not next to" in out.stderr and "python3 -m vllmdiag" in out.stderr

"""The live tests of tests/unit/test_outfile.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.files.outfile import OutputError

SNAP = {"schema_version": 1, "node": "n1", "collected_at": "", "vllmdiag_version": "x", "duration_s": 0.1,
        "probes": {}}


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_dash_is_stdout(tmp_path: Path) -> None:
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps(SNAP))
    out = _cli("collect", "--probe", "processes", "--out", "-")
    assert out.returncode == 0 and json.loads(out.stdout)["schema_version"] == 1


@pytest.mark.parametrize("how", ["directory", "dev_full", "victim_link"])
def test_cli_prints_the_verdict_before_the_file_error(tmp_path: Path, how: str, reliability: Any) -> None:
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps(SNAP))
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n")
    if how == "directory":
        report = tmp_path / "dir.md"
        report.mkdir()
    elif how == "dev_full":
        report = tmp_path / "full.md"
        report.symlink_to("/dev/full")
    else:
        report = tmp_path / "r.md"
        report.symlink_to(victim)
    out = _cli("analyze", str(snap), "--json", "--report", str(report))
    reliability.case(traceback="Traceback" in out.stderr, write=victim.read_text() != "keep\n")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert json.loads(out.stdout)["verdict"]["status"]  # the verdict came out first
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("vllmdiag: --report ")
    assert victim.read_text() == "keep\n"


def test_gate_junit_dev_null_and_prom_dev_full(tmp_path: Path) -> None:
    out = _cli("gate", "--json", "--junit", "/dev/null", "--prom", "/dev/full", timeout=120)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert out.returncode == 2, out.stderr
    assert json.loads(out.stdout)["gate"]["checks"]
    assert out.stderr.strip() == f"vllmdiag: --prom /dev/full: cannot write: No space left on device (fix: {OutputError.fix})"


def test_collect_out_directory_is_exit_2_after_stdout(tmp_path: Path) -> None:
    out = _cli("collect", "--json", "--probe", "processes", "--out", str(tmp_path))
    assert out.returncode == 2 and json.loads(out.stdout)["schema_version"] == 1
    assert out.stderr.strip().endswith(f"is a directory; name a file (fix: {OutputError.fix})")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("strace"), reason="needs root and strace")
def test_strace_gate_never_opens_a_device_for_create_or_renames_onto_it(tmp_path: Path, reliability: Any) -> None:
    """The original bug: rename(tmp, "/dev/null"). Now: /dev/null opened without O_CREAT/O_TRUNC, no rename."""
    log = tmp_path / "strace.log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    link = tmp_path / "victim-link.prom"  # a name node_exporter reads: refused for being a link, not for its name
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    link.symlink_to(victim)
    subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat,rename,renameat,renameat2,truncate,unlink,unlinkat",
                    "-o", str(log), sys.executable, "-m", "vllmdiag", "gate", "--junit", "/dev/null", "--prom",
                    str(link)], capture_output=True, text=True, timeout=120, env=env)
    lines = log.read_text().splitlines()
    # opened in its directory (openat of "null" in /dev, reached without following others' links)
    null_opens = [ln for ln in lines if ('"/dev/null"' in ln or '"null"' in ln) and "open" in ln and "O_WRONLY" in ln]
    bad = [ln for ln in lines if ("rename" in ln and "/dev/null" in ln) or (str(victim) in ln and "O_WRONLY" in ln)
           or (str(link) in ln and ("O_WRONLY" in ln or "rename" in ln))]
    bad += [ln for ln in null_opens if "O_CREAT" in ln or "O_TRUNC" in ln]
    reliability.case(write=bool(bad))
    assert null_opens and not bad, bad
    assert victim.read_text() == "keep\n"

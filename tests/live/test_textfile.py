"""node_exporter textfiles (issue 34 item 3): `watch --textfile` and `sweep --gate --prom`.

Written whole and renamed into place, named *.prom or refused (one line, exit 2, before any work),
never through a link, and served by Debian's real prometheus-node-exporter from its textfile
directory (its /metrics read here, scrape error 0).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ports import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
NODE_EXPORTER = shutil.which("prometheus-node-exporter")
NOTHING = ["--select", "VLLM_RPC_BASE_PATH=/nonexistent-textfile-test"]


def _vllmdiag(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _usage_error(out: subprocess.CompletedProcess[str], option: str) -> None:
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0] and "*.prom" in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", ["metrics.txt", "vllmdiag.prom.tmp", ".prom", "prom"])
def test_a_name_node_exporter_never_reads_is_a_usage_error(tmp_path: Path, name: str) -> None:
    _usage_error(_vllmdiag("watch", "--out", str(tmp_path / "out"), "--textfile", str(tmp_path / name), *NOTHING,
                           "--max-passes", "1"), "--textfile")
    _usage_error(_vllmdiag("sweep", "gpu00", "--gate", "--prom", str(tmp_path / name)), "--prom")
    assert not (tmp_path / "out").exists(), "refused before anything was done"
    assert not (tmp_path / name).exists()


def test_prom_needs_the_gate(tmp_path: Path) -> None:
    out = _vllmdiag("sweep", "gpu00", "--prom", str(tmp_path / "g.prom"))
    assert out.returncode == 2 and "need --gate" in out.stderr and not (tmp_path / "g.prom").exists()


def test_watch_writes_its_textfile_each_pass_readable_by_node_exporter_and_never_through_a_link(tmp_path: Path) -> None:
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    out = _vllmdiag("watch", "--out", str(tmp_path / "out"), "--textfile", str(textdir), "--interval", "0.2",
                    "--max-passes", "2", *NOTHING)
    assert out.returncode == 0, out.stderr
    written = textdir / "vllmdiag_watch.prom"
    text = written.read_text()
    assert re.search(r'^vllmdiag_watch_passes_total\{node="[^"]+"\} 2$', text, re.M), text
    assert stat.S_IMODE(written.stat().st_mode) == 0o644, "node_exporter runs as its own user"
    assert sorted(p.name for p in textdir.iterdir()) == ["vllmdiag_watch.prom"], "no temporary file left"
    # A link planted at the name is never written through: one line in the log, the watcher goes on.
    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    written.unlink()
    written.symlink_to(victim)
    out = _vllmdiag("watch", "--out", str(tmp_path / "out"), "--textfile", str(written), "--interval", "0.2",
                    "--max-passes", "3", *NOTHING)
    assert out.returncode == 0 and victim.read_text() == "theirs\n"
    assert out.stderr.count("--textfile") == 1 and "symlink" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.fixture
def node_exporter(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    if NODE_EXPORTER is None:
        pytest.skip("apt-get install prometheus-node-exporter")
    textdir, port = tmp_path / "ne-textfile", free_port("127.0.0.1")
    textdir.mkdir()
    with open(tmp_path / "node_exporter.log", "wb") as log:
        proc = subprocess.Popen([NODE_EXPORTER, "--web.listen-address", f"127.0.0.1:{port}", "--collector.disable-defaults",
                                 "--collector.textfile", "--collector.textfile.directory", str(textdir)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield textdir, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _scrape(port: int) -> str:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                return resp.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_node_exporter_serves_the_watchers_and_the_sweep_gates_textfiles(node_exporter: tuple[Path, int]) -> None:
    textdir, port = node_exporter
    out = _vllmdiag("watch", "--out", str(textdir.parent / "out"), "--textfile", str(textdir), "--max-passes", "1",
                    *NOTHING)
    assert out.returncode == 0, out.stderr
    # Two "nodes" reached through an exec template that runs the local collector (the transport is tested elsewhere).
    gate = _vllmdiag("sweep", "gpu00,gpu01", "--exec", "env VLLMDIAG_TEST_NODE=%h", "--remote-cmd",
                     f"{sys.executable} -m vllmdiag", "--gate", "--prom", str(textdir / "gate.prom"), "--json")
    assert gate.returncode in (0, 1), gate.stderr
    metrics = _scrape(port)
    assert "node_textfile_scrape_error 0" in metrics, metrics[-2000:]
    assert re.search(r'^vllmdiag_watch_passes_total\{node="[^"]+"\} 1$', metrics, re.M)
    passed = dict(re.findall(r'^vllmdiag_gate_passed\{node="(gpu0\d)"\} (\d)$', metrics, re.M))
    assert sorted(passed) == ["gpu00", "gpu01"], metrics[-2000:]
    expect = "1" if gate.returncode == 0 else "0"
    assert expect in passed.values()
    assert re.search(r'^vllmdiag_gate_check\{check="\w+",node="gpu00",required="(true|false)",status="pass"\} 1$',
                     metrics, re.M), "node_exporter re-sorts the labels: it parsed them"

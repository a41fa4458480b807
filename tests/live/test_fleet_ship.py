"""The --ship bundle: self-contained collect path, no front-end packages, py-spy unpacked next to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from vllmdiag.sweep.ship import build_zipapp, local_py_spy, write_zipapp
from vllmdiag.sweep.transport import SHIP_SNIPPET


def test_bundle_holds_the_collect_path_only(tmp_path: Path) -> None:
    path = write_zipapp(tmp_path / "collect.pyz")
    names = zipfile.ZipFile(path).namelist()
    assert "__main__.py" in names and "vllmdiag/cli/collect.py" in names and "vllmdiag/probes/processes.py" in names
    assert not [n for n in names if n.startswith(("vllmdiag/render/", "vllmdiag/sweep/", "vllmdiag_sim/"))]
    assert "vllmdiag/cli/app.py" not in names and build_zipapp() == path.read_bytes()  # deterministic


def test_bundle_runs_without_the_installed_package(tmp_path: Path) -> None:
    path = write_zipapp(tmp_path / "collect.pyz")
    # -I -S: no site-packages at all, so neither the installed vllmdiag nor typer/rich can be imported
    proc = subprocess.run([sys.executable, "-I", "-S", str(path), "--json", "--probe", "host", "--node", "n1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["node"] == "n1"


def test_shipped_py_spy_is_unpacked_beside_the_bundle(tmp_path: Path) -> None:
    if local_py_spy() is None:
        return
    path = tmp_path / "collect.pyz"
    path.write_bytes(build_zipapp(True))
    env = {**os.environ, "VLLMDIAG_SHIPPED": "1"}
    proc = subprocess.run([sys.executable, str(path), "--json", "--probe", "host"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert os.access(tmp_path / "bin" / "py-spy", os.X_OK)


def test_ship_snippet_reads_the_bundle_from_stdin_and_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["sh", "-c", SHIP_SNIPPET, "vllmdiag-ship", "", "--json", "--probe", "host", "--node", "x"],
                          input=build_zipapp(), capture_output=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["node"] == "x"
    assert list(tmp_path.iterdir()) == []  # the temp dir went with the trap

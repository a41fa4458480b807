"""What users install: the built wheel holds every tracked file under its packages (a missing one broke
`vllmdiag demo` outside the checkout), and a simulator that cannot start says why on its one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vllmdiag_sim.deployment import SimError

REPO = Path(__file__).resolve().parents[1]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files are tracked")
    return [f for f in out.stdout.split("\0") if f]


def test_the_wheel_holds_every_tracked_file_of_its_packages(tmp_path: Path) -> None:
    # Build from the tracked files alone (a build/ left in the tree could hide a missing file).
    src = tmp_path / "src"
    for rel in _tracked():
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    names: set[str] = set()
    for whl in (tmp_path / "dist").glob("*.whl"):
        names |= set(zipfile.ZipFile(whl).namelist())
    tops = {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))}
    missing = [f for f in _tracked() if f.split("/")[0] in tops and f not in names and "__pycache__" not in f]
    assert tops, "the wheel holds no package"
    assert missing == [], f"tracked files the wheel leaves out: {missing}"


def test_a_simulator_that_did_not_start_names_the_root_cause_on_its_first_line() -> None:
    tail = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/x/_C_stable_libtorch.abi3.so'\n"
            "RuntimeError: Engine core initialization failed. See root cause above.")
    first = str(SimError("simulated deployment ab12 did not start", tail)).splitlines()[0]
    assert first.startswith("simulated deployment ab12 did not start: FileNotFoundError:")
    assert "_C_stable_libtorch" in first
    assert str(SimError("x did not start", "")).splitlines()[0] == "x did not start: no output from the launcher"
    assert str(SimError("no simulated deployment 'q'")) == "no simulated deployment 'q'"

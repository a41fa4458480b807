"""What users install: the product's wheel and the simulator's (sim/) hold every tracked file under their
packages (a missing one broke `vllmdiag demo` outside the checkout), the product's holds no simulator and
none of its libraries, and a simulator that is missing or cannot start says why on its one line."""

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


SIM_LIBS = ("psutil", "pyzmq", "setproctitle")


def _wheel(src: Path, out: Path) -> set[str]:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    (whl,) = out.glob("*.whl")
    return set(zipfile.ZipFile(whl).namelist())


def _missing(names: set[str], tracked: list[str], prefix: str = "") -> list[str]:
    """Tracked files under the wheel's packages (``prefix`` is where the project sits in the checkout)."""
    rel = [f[len(prefix):] for f in tracked if f.startswith(prefix)]
    tops = {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops, "the wheel holds no package"
    return [f for f in rel if f.split("/")[0] in tops and f not in names and "__pycache__" not in f]


def test_both_wheels_hold_every_tracked_file_of_their_packages(tmp_path: Path) -> None:
    """The product's wheel and the simulator's (sim/): each holds its packages' tracked files; the
    product's holds no simulator and depends on none of the simulator's libraries."""
    src = tmp_path / "src"  # built from the tracked files alone (a build/ left in the tree could hide one)
    tracked = _tracked()
    for rel in tracked:
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    product = _wheel(src, tmp_path / "dist")
    simulator = _wheel(src / "sim", tmp_path / "simdist")
    assert _missing(product, tracked) == [], "tracked files the product wheel leaves out"
    assert _missing(simulator, tracked, "sim/") == [], "tracked files the simulator wheel leaves out"
    assert not [n for n in product if n.startswith("vllmdiag_sim")]
    assert "vllmdiag_sim/bin/vllm" in simulator and any(n.startswith("vllmdiag_sim/vllm/") and n.endswith(".so")
                                                         for n in simulator)
    # The `vllmdiag` command is our own script (scripts/vllmdiag, issue 24), not pip's generated wrapper.
    assert "vllmdiag-0.1.0.data/scripts/vllmdiag" in product and "vllmdiag-0.1.0.data/scripts/vllmdiag-py" in product
    (meta,) = [n for n in product if n.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))) as zf:
        requires = [line.split(":", 1)[1].strip().lower() for line in zf.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert requires and not [r for r in requires if r.startswith(SIM_LIBS)], requires


def test_demo_and_sim_without_the_simulator_name_the_command_that_adds_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from vllmdiag.cli.app import SIM_INSTALL, main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllmdiag_sim" else real(name, *a))
    for argv in (["demo"], ["sim", "list-faults"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and SIM_INSTALL in err, err


def test_a_simulator_that_did_not_start_names_the_root_cause_on_its_first_line() -> None:
    tail = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/x/_C_stable_libtorch.abi3.so'\n"
            "RuntimeError: Engine core initialization failed. See root cause above.")
    first = str(SimError("simulated deployment ab12 did not start", tail)).splitlines()[0]
    assert first.startswith("simulated deployment ab12 did not start: FileNotFoundError:")
    assert "_C_stable_libtorch" in first
    assert str(SimError("x did not start", "")).splitlines()[0] == "x did not start: no output from the launcher"
    assert str(SimError("no simulated deployment 'q'")) == "no simulated deployment 'q'"

"""What users install: the release scripts/build-release makes (issue 35: the only install the README
gives; the name is not published on any index). Its product wheel and simulator wheel hold every tracked
file under their packages (a missing one broke `vllmdiag demo` outside the checkout), the product's holds
no simulator and none of its libraries; SHA256SUMS verifies and catches a changed byte; the wheels
installed into a fresh venv run `vllmdiag demo` from outside the checkout; the collector bundle runs
with no site-packages at all. A simulator that is missing or cannot start says why on its one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_RELEASE = REPO / "scripts" / "build-release"


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which files are tracked")
    return [f for f in out.stdout.split("\0") if f]


SIM_LIBS = ("psutil", "pyzmq", "setproctitle")


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/build-release of this working tree's tracked files (--worktree: the code under test, not
    HEAD's), into a private directory: the files the README tells an operator to copy to a node."""
    _tracked()
    out = tmp_path_factory.mktemp("release") / "dist"
    built = subprocess.run([str(BUILD_RELEASE), "--worktree", "--out", str(out)], capture_output=True, text=True,
                           timeout=600, cwd=tmp_path_factory.getbasetemp())
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    return out


def _names(release: Path, pattern: str) -> set[str]:
    (whl,) = release.glob(pattern)
    return set(zipfile.ZipFile(whl).namelist())


def _missing(names: set[str], tracked: list[str], prefix: str = "") -> list[str]:
    """Tracked files under the wheel's packages (``prefix`` is where the project sits in the checkout)."""
    rel = [f[len(prefix):] for f in tracked if f.startswith(prefix)]
    tops = {n.split("/")[0] for n in names if "/" in n and not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops, "the wheel holds no package"
    return [f for f in rel if f.split("/")[0] in tops and f not in names and "__pycache__" not in f]


def test_both_wheels_hold_every_tracked_file_of_their_packages(release: Path) -> None:
    """The product's wheel and the simulator's (sim/): each holds its packages' tracked files; the
    product's holds no simulator and depends on none of the simulator's libraries."""
    tracked = [f for f in _tracked() if (REPO / f).is_file()]
    product = _names(release, "vllmdiag-*.whl")
    simulator = _names(release, "vllmdiag_sim-*.whl")
    assert _missing(product, tracked) == [], "tracked files the product wheel leaves out"
    assert _missing(simulator, tracked, "sim/") == [], "tracked files the simulator wheel leaves out"
    assert not [n for n in product if n.startswith("vllmdiag_sim")]
    assert "vllmdiag_sim/bin/vllm" in simulator and any(n.startswith("vllmdiag_sim/vllm/") and n.endswith(".so")
                                                         for n in simulator)
    # The `vllmdiag` command is our own script (scripts/vllmdiag, issue 24), not pip's generated wrapper;
    # the release tooling (scripts/build-release, scripts/readme-sample) is not installed on nodes.
    assert "vllmdiag-0.1.0.data/scripts/vllmdiag" in product and "vllmdiag-0.1.0.data/scripts/vllmdiag-py" in product
    assert not [n for n in product if n.endswith(("/build-release", "/readme-sample"))]
    (meta,) = [n for n in product if n.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(next(release.glob("vllmdiag-*.whl"))) as zf:
        requires = [line.split(":", 1)[1].strip().lower() for line in zf.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert requires and not [r for r in requires if r.startswith(SIM_LIBS)], requires


def test_release_checksums_cover_every_artifact_and_catch_a_changed_byte(release: Path, tmp_path: Path) -> None:
    sums = (release / "SHA256SUMS").read_text().splitlines()
    listed = sorted(line.split("  ", 1)[1] for line in sums)
    assert listed == sorted(p.name for p in release.iterdir() if p.name != "SHA256SUMS")
    assert {n.split("-")[0] for n in listed} >= {"vllmdiag", "vllmdiag_sim"} and "RELEASE" in listed
    assert [n for n in listed if n.startswith("vllmdiag-collect-") and n.endswith(".pyz")]
    ok = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=release, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and ok.stdout.count(": OK") == len(listed), ok.stdout + ok.stderr
    # What the README has a node run: only the product wheel and SHA256SUMS copied there.
    node = tmp_path / "node"
    node.mkdir()
    (whl,) = release.glob("vllmdiag-*.whl")
    data = bytearray(whl.read_bytes())
    (node / "SHA256SUMS").write_bytes((release / "SHA256SUMS").read_bytes())
    (node / whl.name).write_bytes(data)
    check = ["sha256sum", "-c", "--ignore-missing", "SHA256SUMS"]
    assert subprocess.run(check, cwd=node, capture_output=True, timeout=30).returncode == 0
    data[len(data) // 2] ^= 1  # one flipped bit in transit
    (node / whl.name).write_bytes(data)
    bad = subprocess.run(check, cwd=node, capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and "FAILED" in bad.stdout, bad.stdout
    assert "source: working tree of commit" in (release / "RELEASE").read_text()


def test_release_installs_in_a_fresh_venv_and_runs_outside_the_checkout(release: Path, tmp_path: Path) -> None:
    """`pip install ./vllmdiag-*.whl` as the README says (plus the simulator, for the demo), then the
    installed `vllmdiag` command from a directory that is not the checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheels = [str(p) for p in sorted(release.glob("*.whl"))]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *wheels], capture_output=True,
                         text=True, timeout=600, env=env)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env["VLLMDIAG_SIM_STATE"] = str(tmp_path / "simstate")
    demo = subprocess.run([str(venv / "bin" / "vllmdiag"), "demo"], cwd=elsewhere, capture_output=True, text=True,
                          timeout=300, env=env)
    assert demo.returncode == 1 and "BLOCKED" in demo.stdout and "FOUND" in demo.stdout, demo.stdout[-3000:] + demo.stderr
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import vllmdiag; print(vllmdiag.__file__)"],
                           cwd=elsewhere, capture_output=True, text=True, timeout=60, env=env)
    assert where.stdout.startswith(str(venv)), where.stdout  # the wheel's copy, not the checkout's


def test_release_collector_bundle_runs_with_no_site_packages(release: Path, tmp_path: Path) -> None:
    (pyz,) = release.glob("vllmdiag-collect-*.pyz")
    proc = subprocess.run([sys.executable, "-I", "-S", str(pyz), "--json", "--probe", "host", "--node", "n7"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["node"] == "n7"
    names = zipfile.ZipFile(pyz).namelist()
    assert "vllmdiag/cli/collect.py" in names and not [n for n in names if n.startswith(("vllmdiag/render/",
                                                                                         "vllmdiag_sim/"))]


def test_demo_and_sim_without_the_simulator_name_the_command_that_adds_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from vllmdiag.cli import plugins
    from vllmdiag.cli.app import main
    from vllmdiag.cli.plugins import SIM_INSTALL

    monkeypatch.setattr(plugins, "offered", lambda: ())  # no distribution offers a command: no simulator
    for argv in (["demo"], ["sim", "list-faults"], ["demo", "-h"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and SIM_INSTALL in err, err

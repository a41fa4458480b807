"""The live tests of tests/unit/test_evidence_dir.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_evidence_dir import _nobody, needs_root, planted  # noqa: F401 - shared with the pure half

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@needs_root
def test_gate_prom_through_another_users_link_is_one_line_exit_2(planted: tuple[Path, Path], reliability: Any) -> None:  # noqa: F811 - the fixture shared with the pure half
    link, secret = planted
    out = _run("gate", "--prom", str(link / "x.prom"))
    reliability.case(write=bool(list(secret.iterdir())), traceback="Traceback" in out.stderr)
    assert out.returncode == 2 and "another user's link" in out.stderr, (out.returncode, out.stderr)
    assert list(secret.iterdir()) == []


@needs_root
def test_watch_out_through_another_users_link_or_in_their_directory_is_refused(planted: tuple[Path, Path],  # noqa: F811 - the fixture shared with the pure half
                                                                               tmp_path: Path,
                                                                               reliability: Any) -> None:
    link, secret = planted
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, *_nobody())
    for out_dir in (link, link / "watch", theirs):
        out = _run("watch", "--out", str(out_dir), "--max-passes", "1", "--interval", "0.2")
        reliability.case(write=bool(list(secret.iterdir())), traceback="Traceback" in out.stderr)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (out_dir, out.stderr)
    assert list(secret.iterdir()) == [] and list(theirs.iterdir()) == []


@pytest.mark.parametrize("where", ["/dev/null", "/sys", "file", "/proc"])
def test_watch_out_not_a_usable_directory_is_one_line_exit_2(where: str, tmp_path: Path, reliability: Any) -> None:
    if where == "file":
        where = str(tmp_path / "regular")
        Path(where).write_text("x\n")
    out = _run("watch", "--out", where, "--max-passes", "1", "--interval", "0.2")
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (out.returncode, out.stderr)
    assert "--out" in out.stderr


@pytest.mark.parametrize("item", ["FOO=1", "HOME=/root", "HF_TOKEN=x"])
def test_watch_select_of_a_key_it_cannot_see_is_one_line_exit_2(item: str, tmp_path: Path) -> None:
    out = _run("watch", "--out", str(tmp_path / "o"), "--select", item, "--max-passes", "1")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (out.returncode, out.stderr)
    assert "--select" in out.stderr and "watch nothing" in out.stderr

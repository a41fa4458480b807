"""tests/unit/ and tests/live/ are checked, not trusted (tests/conftest.py): a test in the wrong folder stops
the run at collection, named with the folder it belongs in; the right folders collect."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).resolve().parent.parent / "conftest.py"

STARTS = '''import subprocess
import sys


def test_starts_a_process() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
'''
PURE = '''def test_sorts() -> None:
    assert sorted([2, 1]) == [1, 2]
'''


def _collect(root: Path, unit: str, live: str) -> subprocess.CompletedProcess[str]:
    tests = root / "tests"
    for folder, text in (("unit", unit), ("live", live)):
        (tests / folder).mkdir(parents=True)
        (tests / folder / f"test_planted_{folder}.py").write_text(text)
    shutil.copy(CONFTEST, tests / "conftest.py")
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(root), "tests"], cwd=root, capture_output=True, text=True, timeout=120)


def test_a_test_in_the_wrong_folder_stops_the_run_and_says_where_it_belongs(tmp_path: Path) -> None:
    out = _collect(tmp_path, unit=STARTS + "\n\n" + PURE, live=PURE.replace("test_sorts", "test_sorts_too"))
    assert out.returncode != 0, out.stdout
    said = out.stdout + out.stderr
    assert "tests in the wrong folder" in said, said
    assert "tests/unit/test_planted_unit.py::test_starts_a_process (it is live: move it to tests/live/)" in said, said
    assert "tests/live/test_planted_live.py::test_sorts_too (it is unit: move it to tests/unit/)" in said, said
    assert "test_planted_unit.py::test_sorts (" not in said, said


def test_tests_in_their_folders_collect(tmp_path: Path) -> None:
    out = _collect(tmp_path, unit=PURE, live=STARTS)
    assert out.returncode == 0 and "2 tests collected" in out.stdout, out.stdout + out.stderr

"""The live tests of tests/unit/test_input_files.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

REAL = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **(env or {})}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=60,
                         env=full)
    return out, time.monotonic() - start


def _kind(tmp_path: Path, kind: str, suffix: str) -> str:
    if kind == "fifo":
        path = tmp_path / f"in{suffix}"
        os.mkfifo(path)  # nobody ever writes: a blocking open would wait forever
        return str(path)
    if kind == "dev_zero":
        return "/dev/zero"
    if kind == "directory":
        path = tmp_path / f"dir{suffix}"
        path.mkdir()
        return str(path)
    if kind == "huge":
        path = tmp_path / f"huge{suffix}"
        with open(path, "wb") as fh:
            fh.truncate(600 << 20)  # sparse: over every cap, costs no disk
        return str(path)
    path = tmp_path / f"bomb{suffix}"
    path.write_text(BOMB)
    return str(path)


CASES = {
    "snapshot": lambda p, env: (["analyze", p], env),
    "gate-config": lambda p, env: (["gate", "--config", p], env),
    "inventory": lambda p, env: (["sweep", "--inventory", p, "--sweep-timeout", "5"], env),
    "hostfile": lambda p, env: (["sweep", "--hostfile", p, "--sweep-timeout", "5"], env),
    "stack-rules": lambda p, env: (["analyze", str(REAL)], {**env, "VLLMDIAG_STACK_RULES": p}),
}


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory", "huge", "bomb"])
@pytest.mark.parametrize("what", list(CASES))
def test_hostile_input_file_is_one_line_exit_2(tmp_path: Path, what: str, kind: str, reliability: Any) -> None:
    if kind == "bomb" and what in ("snapshot", "hostfile"):
        pytest.skip("JSON and hostfiles have no aliases")
    if kind == "directory" and what == "snapshot":
        pytest.skip("a directory is a sweep --save dir for analyze")
    path = _kind(tmp_path, kind, ".json" if what == "snapshot" else ".yaml")
    args, env = CASES[what](path, {})
    out, elapsed = _cli(*args, env=env)
    reliability.case(hang=elapsed > 20, traceback="Traceback" in out.stderr)
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    why = {"fifo": "a FIFO", "dev_zero": "a character device", "directory": "a directory", "huge": "allowed",
           "bomb": "aliases"}[kind]
    assert why in out.stderr, out.stderr

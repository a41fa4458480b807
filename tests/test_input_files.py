"""Input files are untrusted (issue 15, items 10 and 11): a FIFO, /dev/zero, a directory, a huge
file or a YAML alias bomb named as a snapshot, gate config, inventory, hostfile or stack-rules file
is one line on stderr and exit 2, at once; never a hang, never unbounded memory, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.files.infile import InputError, read_input, read_yaml

REAL = Path(__file__).parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
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


def test_read_input_units(tmp_path: Path) -> None:
    good = tmp_path / "ok.yaml"
    good.write_text("a: 1\nb: &x [1]\n")  # an anchor alone is fine
    assert read_input(good, "config", 100) == "a: 1\nb: &x [1]\n"
    assert read_yaml(good, "config") == {"a": 1, "b": [1]}
    with pytest.raises(InputError, match="more than the 10 bytes"):
        read_input(good, "config", 10)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not UTF-8"):
        read_input(bad, "config", 100)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 100_000)
    with pytest.raises(InputError, match="nested too deeply|not valid YAML"):
        read_yaml(deep, "config")

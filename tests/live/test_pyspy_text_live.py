"""The live tests of tests/unit/test_pyspy_text.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from vllmdiag.probes._pyspy_text import parse_tree_dump
from vllmdiag.probes.stacks import find_py_spy, parse_dump

from fake_tree import fake_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or find_py_spy() is None, reason="needs root and py-spy")


def _frames(threads: list[dict[str, Any]]) -> dict[str, list[tuple[str, str, int]]]:
    # The text form carries py-spy's short file name only (a bare name for a script outside
    # sys.path, where the JSON form lets us keep more of the path): compare base names.
    return {t["name"]: [(f[0], os.path.basename(f[1]), f[2]) for f in t["frames"]] for t in threads}


def test_tree_text_matches_per_process_json() -> None:
    exe = find_py_spy()
    assert exe
    with fake_tree(tp=2) as t:
        text = subprocess.run([exe, "dump", "--subprocesses", "--pid", str(t.api)], capture_output=True, text=True,
                              timeout=30).stdout
        tree = parse_tree_dump(text)
        assert set(t.all_pids) <= set(tree)
        for pid in t.all_pids:
            raw = subprocess.run([exe, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True,
                                 timeout=30).stdout
            assert _frames(tree[pid]) == _frames(parse_dump(raw)), pid

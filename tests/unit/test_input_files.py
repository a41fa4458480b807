"""Input files are untrusted (issue 15, items 10 and 11): a FIFO, /dev/zero, a directory, a huge
file or a YAML alias bomb named as a snapshot, gate config, inventory, hostfile or stack-rules file
is one line on stderr and exit 2, at once; never a hang, never unbounded memory, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllmdiag.files.infile import InputError, read_input, read_yaml


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

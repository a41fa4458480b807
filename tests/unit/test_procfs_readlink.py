"""One _procfs owns readlink and its quirks: " (deleted)", NULs, gone vs denied (psutil's way)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from vllmdiag.probes import _procfs


def test_deleted_file_behind_an_fd_is_seen_as_deleted() -> None:
    fd, name = tempfile.mkstemp(prefix="vllmdiag-readlink-")
    try:
        os.unlink(name)
        target = _procfs.readlink(f"/proc/self/fd/{fd}")
        assert target == f"{name} (deleted)"
        assert _procfs.split_deleted(target) == (name, True)
        assert _procfs.split_deleted(name) == (name, False)
    finally:
        os.close(fd)


def test_gone_and_denied_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _procfs.readlink_checked("/proc/999999999/fd/0") == (None, False)  # gone: a normal race
    assert _procfs.readlink("/proc/999999999/ns/net") is None

    def denied(path: object) -> str:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(os, "readlink", denied)
    assert _procfs.readlink_checked("/proc/1/fd/3") == (None, True)
    assert _procfs.readlink("/proc/1/fd/3") is None


def test_nul_and_what_follows_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "readlink", lambda path: "/dev/shm/psm_1\0garbage (deleted)")
    assert _procfs.readlink("/proc/1/fd/3") == "/dev/shm/psm_1"
    assert _procfs.readlink_checked("/proc/1/fd/3") == ("/dev/shm/psm_1", False)


def test_no_probe_keeps_its_own_readlink() -> None:
    probes = Path(_procfs.__file__).parent
    own = [p.name for p in probes.glob("*.py") if p.name != "_procfs.py" and "os.readlink(" in p.read_text()]
    assert own == []

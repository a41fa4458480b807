"""Output files (issue 15, item 3): real files, the real /dev/null and /dev/full, symlinks onto a
victim, directories, FIFOs; the CLI prints its verdict before a file error; strace proves the writes."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.files import outfile
from vllmdiag.files.outfile import OutputError, write_output


def test_regular_file_is_replaced_atomically_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    write_output(target, "one\n")
    assert target.read_text() == "one\n"
    target.chmod(0o640)
    ino = target.stat().st_ino
    write_output(target, "two\n")
    assert target.read_text() == "two\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != ino  # a new inode renamed over the entry, never written in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temp file left


def test_hard_link_to_a_victim_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "out.xml"
    os.link(victim, link)
    write_output(link, "report\n")
    assert victim.read_text() == "precious\n" and link.read_text() == "report\n"


def test_dev_null_stays_a_character_device(reliability: Any) -> None:
    before = os.stat("/dev/null")
    write_output("/dev/null", "x" * 100_000, "--junit")
    after = os.stat("/dev/null")
    ok = stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev
    reliability.case(write=not ok)
    assert ok


def test_symlink_to_a_victim_file_is_refused_and_the_victim_is_unchanged(tmp_path: Path, reliability: Any) -> None:
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    link = tmp_path / "report.md"
    link.symlink_to(victim)
    with pytest.raises(OutputError, match="symlink"):
        write_output(link, "owned\n", "--report")
    unchanged = victim.read_text() == "root:secret\n" and link.is_symlink()
    reliability.case(write=not unchanged)
    assert unchanged


def test_symlink_to_a_device_is_a_stream(tmp_path: Path) -> None:
    link = tmp_path / "to-null"
    link.symlink_to("/dev/null")
    write_output(link, "x\n")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_dangling_symlink_is_refused_and_not_created_through(tmp_path: Path) -> None:
    link = tmp_path / "out.prom"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputError, match="dangling"):
        write_output(link, "x\n")
    assert not (tmp_path / "elsewhere").exists()


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="is a directory"):
        write_output(tmp_path, "x", "--save")


def test_missing_directory_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="No such file"):
        write_output(tmp_path / "nope" / "x.json", "x")


def test_dev_full_is_enospc(reliability: Any) -> None:
    with pytest.raises(OutputError, match="No space left"):
        write_output("/dev/full", "x" * 10, "--prom")
    reliability.case()


def test_fifo_without_reader_is_refused_at_once(tmp_path: Path, reliability: Any) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(OutputError, match="no reader"):
        write_output(fifo, "x")
    reliability.case(hang=time.monotonic() - start > 2)


def test_fifo_with_a_slow_reader_gets_everything(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)

    def read() -> None:
        # Until the writer has opened the FIFO a read says EOF: keep reading, slowly, until all came.
        deadline = time.monotonic() + 20
        while sum(map(len, got)) < 500_000 and time.monotonic() < deadline:
            time.sleep(0.01)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if chunk:
                got.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    write_output(fifo, "y" * 500_000)
    reader.join(10)
    os.close(fd)
    assert b"".join(got) == b"y" * 500_000


def test_fifo_whose_reader_never_reads_ends_in_bounded_time(tmp_path: Path, monkeypatch: Any,
                                                            reliability: Any) -> None:
    monkeypatch.setattr(outfile, "STREAM_TIMEOUT_S", 0.5)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        start = time.monotonic()
        with pytest.raises(OutputError, match="did not take"):
            write_output(fifo, "z" * 2_000_000)
        reliability.case(hang=time.monotonic() - start > 5)
    finally:
        os.close(fd)


def test_sweep_save_dir_refuses_a_planted_symlink(tmp_path: Path, reliability: Any) -> None:
    """sweep --save DIR writes one file per node through the same writer: a symlink planted at
    DIR/<node>.json is refused and its target unchanged."""
    from vllmdiag.api import analyze_files
    from vllmdiag.sweep.sweep_api import save

    real = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json"
    result = analyze_files([real])
    node = result.report.snapshots[0].node
    out = tmp_path / "save"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (out / f"{node}.json").symlink_to(victim)
    with pytest.raises(OutputError, match="symlink"):
        save(result, out)
    reliability.case(write=victim.read_text() != "keep\n")
    assert victim.read_text() == "keep\n"
    (out / f"{node}.json").unlink()
    assert [p.name for p in save(result, out)] == [f"{node}.json"]

"""Output files and the watcher's evidence directory against another local user (issue 25 items 6 and 9,
issue 26's watch --out and --select): no symlink of another user is followed at any level, a
directory another user made (or may write) is refused, evidence is 0640 in a 0750 directory of ours,
rotation never deletes through a link, and --out is a usable directory or one line, exit 2."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.files.outfile import OutputError, write_output
from vllmdiag.watch.store import Store
from vllmdiag.watch.watcher import default_out_dir

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to make another user's link)")


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def _report() -> Any:
    from vllmdiag.analysis.bisect import Report
    from vllmdiag.model import Verdict

    return Report(Verdict("blocked", "gpu", summary="s"), [], [], [])


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """S: a world-writable sticky directory (like /tmp); S/link: nobody's symlink to a root-only directory."""
    shared, secret = tmp_path / "shared", tmp_path / "secret"
    shared.mkdir()
    shared.chmod(0o1777)
    secret.mkdir(mode=0o700)
    link = shared / "link"
    link.symlink_to(secret)
    os.lchown(link, *_nobody())
    return link, secret


@needs_root
def test_no_output_file_is_created_through_another_users_linked_parent(planted: tuple[Path, Path],
                                                                       reliability: Any) -> None:
    link, secret = planted
    for name in ("x.prom", "r.md", "sub/dir/x.json"):
        with pytest.raises(OutputError, match="another user's link"):
            write_output(link / name, "x\n", "--prom")
    reliability.case(write=bool(list(secret.iterdir())))
    assert list(secret.iterdir()) == []


def test_links_we_or_root_own_are_still_followed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "mine").symlink_to(real)
    write_output(tmp_path / "mine" / "a.txt", "ok\n")
    assert (real / "a.txt").read_text() == "ok\n"


def test_evidence_is_private_and_the_directory_made_so(tmp_path: Path) -> None:
    out_dir = tmp_path / "ev"
    out_dir.mkdir()
    out_dir.chmod(0o755)  # as a hostPath DirectoryOrCreate makes it
    store = Store(out_dir, keep=5, max_bytes=1 << 20, report_suffix=".md")
    store.prepare()
    saved = store.save("n:1", {"node": "n"}, _report())
    assert stat.S_IMODE(out_dir.stat().st_mode) == 0o750
    assert stat.S_IMODE(saved.snapshot.stat().st_mode) == 0o640
    fresh = Store(tmp_path / "new" / "ev", keep=5, max_bytes=1 << 20)
    fresh.prepare()
    assert stat.S_IMODE((tmp_path / "new" / "ev").stat().st_mode) == 0o750
    store.close()
    fresh.close()


def test_a_shared_writable_directory_with_other_files_is_refused(tmp_path: Path) -> None:
    out_dir = tmp_path / "open"
    out_dir.mkdir()
    (out_dir / "notes.txt").write_text("someone's\n")
    out_dir.chmod(0o777)
    with pytest.raises(OutputError, match="writable by others"):
        Store(out_dir, keep=5, max_bytes=1 << 20).prepare()


def test_rotation_never_deletes_through_a_link_swapped_in(tmp_path: Path, reliability: Any) -> None:
    out_dir, victim = tmp_path / "ev", tmp_path / "victim"
    victim.mkdir()
    names = [f"vllmdiag-watch-2020010{i}T000000000Z-000{i}-x.json" for i in range(1, 4)]
    for name in names:
        (victim / name).write_text("{}\n")
    store = Store(out_dir, keep=1, max_bytes=1 << 20)
    store.prepare()
    out_dir.rename(tmp_path / "ev.old")
    out_dir.symlink_to(victim)  # the path now leads elsewhere; the store keeps its own directory
    store.save("n:1", {}, _report())
    store.save("n:1", {}, _report())
    store.close()
    left = sorted(p.name for p in victim.iterdir())
    reliability.case(write=left != sorted(names))
    assert left == sorted(names)
    assert len(list((tmp_path / "ev.old").glob("vllmdiag-watch-*.json"))) == 1  # rotated in its own directory


def test_watch_out_default_is_absolute(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLMDIAG_WATCH_DIR", "/srv/w")  # the one setting for watch and triage, when absolute
    assert default_out_dir() == Path("/srv/w")
    monkeypatch.setenv("VLLMDIAG_WATCH_DIR", "relative")  # never a path relative to where it was started
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_out_dir() == Path("/var/lib/vllmdiag/watch")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", "/home/u/.state")
    assert default_out_dir() == Path("/home/u/.state/vllmdiag/watch")
    monkeypatch.setenv("XDG_STATE_HOME", "relative")
    monkeypatch.setenv("HOME", "/home/u")
    assert default_out_dir() == Path("/home/u/.local/state/vllmdiag/watch")
    monkeypatch.delenv("HOME")
    assert default_out_dir() is None

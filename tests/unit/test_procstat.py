"""One /proc/<pid>/stat parser (issue 36 item 2): ``runtime/procstat.py`` reads every stat line the tool
reads, so the comm rule (split at the *last* ``)``) and what a short or garbled line gives (None) are
written once. The AST check fails on any other module of the product that names a stat file."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from vllmdiag.probes import _procfs
from vllmdiag.runtime import procstat
from vllmdiag.runtime.procstat import Stat, parse_stat, read_stat

ROOT = Path(__file__).resolve().parents[2]
# The parser, and the probes' reader that tells a hidden process (DENIED) from a gone one through it.
OWNERS = {"vllmdiag/runtime/procstat.py", "vllmdiag/probes/_procfs.py"}
TAIL = " ".join(["0"] * 28)  # fields 25-52, which the tool does not read


def line(pid: int, comm: str, state: str = "S", ppid: int = 1, flags: int = 0, rss: int = 0, vsize: int = 0,
         start: int = 100) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    # cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...
    return (f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 {flags} 10 0 0 0 7 3 0 0 20 0 4 0 {start} "
            f"{vsize} {rss} {TAIL}\n")


def test_a_comm_with_spaces_and_parens_splits_at_the_last_paren() -> None:
    got = parse_stat(line(4242, "a) (b", state="R", ppid=17, flags=0x404044, rss=9, vsize=4096))
    assert got == Stat(pid=4242, comm="a) (b", state="R", ppid=17, pgid=4242, session=4242, flags=0x404044,
                       utime_ticks=7, stime_ticks=3, num_threads=4, starttime_ticks=100, vsize_bytes=4096,
                       rss_pages=9)
    assert parse_stat(line(7, "VLLM::Worker TP0)")) is not None  # a comm ending in ")" too
    assert parse_stat(line(7, "x) Z 1 1 1")).state == "S"  # type: ignore[union-attr]  # a comm that mimics fields


def test_a_zombie_and_a_kernel_thread_read_as_the_kernel_writes_them() -> None:
    zombie = parse_stat(line(300, "python3", state="Z", ppid=299))
    assert zombie is not None and zombie.state == "Z" and zombie.ppid == 299
    kthread = parse_stat(line(2, "kthreadd", ppid=0, flags=0x208040))
    assert kthread is not None and kthread.ppid == 0 and kthread.vsize_bytes == 0 and kthread.rss_pages == 0
    assert parse_stat(line(9, "kworker/0:1-events").encode()) == parse_stat(line(9, "kworker/0:1-events"))


@pytest.mark.parametrize("text", [
    "", "\n", "1234", "1234 (python", "1234 (python) S 1 1 1 0 -1 0\n",  # cut short: old fakes, a torn read
    line(5, "x").replace(" 20 0 4 ", " 20 0 four "),  # a field that is no number
    line(5, "x").replace("5 (x)", "five (x)"), "garbage ) with a paren " + TAIL,
])
def test_a_short_or_garbled_line_is_none_never_half_a_record(text: str) -> None:
    assert parse_stat(text) is None


def test_it_reads_this_process_and_its_threads(tmp_path: Path) -> None:
    me = read_stat(f"/proc/{os.getpid()}")
    assert me is not None and me.pid == os.getpid() and me.ppid == os.getppid() and me.state in ("R", "S")
    assert read_stat("/proc/self") == read_stat(Path("/proc/self"))
    assert read_stat(f"/proc/self/task/{os.getpid()}") is not None
    assert read_stat(tmp_path / "gone") is None
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "stat").write_text("77 (x) S 1")
    assert read_stat(tmp_path / "torn") is None
    assert _procfs.read_stat_checked(tmp_path / "torn") is _procfs.GONE
    assert _procfs.read_stat_checked(tmp_path / "gone") is _procfs.GONE
    assert isinstance(_procfs.read_stat_checked(Path(f"/proc/{os.getpid()}")), Stat)


def test_the_probes_read_the_same_parser() -> None:
    assert _procfs.parse_stat is procstat.parse_stat and _procfs.Stat is procstat.Stat


def _stat_names(tree: ast.AST) -> list[int]:
    """Lines that name a stat file: a path ending in /stat, or "stat" as a path part (an operand of ``/``,
    an argument of a call such as ``ctx.proc(pid, "stat")`` or ``os.path.join``). ``row["stat"]`` is a key."""
    out = []
    for node in ast.walk(tree):
        parts: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Call):
            parts = [*node.args, *(k.value for k in node.keywords)]
        out += [p.lineno for p in parts if isinstance(p, ast.Constant) and p.value == "stat"]
        # "/proc/<pid>/stat" (with the placeholder) is words in a message, not a path
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith("/stat") \
                and "<" not in node.value:
            out.append(node.lineno)
    return out


def test_no_module_but_the_parser_opens_a_stat_file() -> None:
    found = {}
    for path in sorted((ROOT / "vllmdiag").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        lines = _stat_names(ast.parse(path.read_text()))
        if lines and rel not in OWNERS:
            found[rel] = lines
    assert found == {}, f"stat read outside runtime/procstat.py: {found}"


def test_the_check_catches_a_second_parser() -> None:
    """The check itself can fail: each way a module could name the file is caught."""
    for code in ('open(f"/proc/{pid}/stat")', 'Path("/proc") / str(pid) / "stat"', 'ctx.proc(pid, "stat")',
                 'open("/proc/self/stat")'):
        assert _stat_names(ast.parse(code)), code
    assert not _stat_names(ast.parse('blind_reason("/proc/<pid>/stat", hidden)'))
    assert not _stat_names(ast.parse('open("/proc/self/statm")'))
    assert not _stat_names(ast.parse('row["stat"].ppid'))


def test_no_second_stat_split_in_the_product() -> None:
    """The comm rule written by hand elsewhere (rfind(")") / rsplit(")") before the fields) is a second parser."""
    hand = re.compile(r"""r(?:find|split)\(b?["']\)["']""")
    found = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "vllmdiag").rglob("*.py"))
             if hand.search(p.read_text()) and p.relative_to(ROOT).as_posix() not in OWNERS]
    assert found == []

"""The product's commands are found by folder (issue 36 item 3: one discover() at every extension point): each
``cli/<name>_command.py`` declares ``COMMAND``; the found set is today's commands in today's help order, a
command asked for by name imports its module alone, and a new command is one new file, proved on a copy of
the folder in tmp_path (nothing is written into the installed package)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from test_cli_discovery import HELLO, folder_copy  # noqa: F401 - shared with the pure half
from typer.testing import CliRunner

from vllmdiag.cli import app as cli
from vllmdiag.cli.shared import Command

ROOT = Path(__file__).resolve().parents[2]

TODAY = ("triage", "analyze", "collect", "playbook", "sweep", "gate", "watch")  # the hand-kept list before discovery


def _help(package: str) -> str:
    result = CliRunner().invoke(cli.build_app(None, package), ["-h"], env={"COLUMNS": "100", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    return result.output


def _listed(help_text: str) -> list[str]:
    """The command names of the help's Commands box, in order."""
    box = help_text[help_text.index("Commands"):]
    return re.findall(r"^\W+([a-z][a-z-]*)\s{2,}\S", box, re.MULTILINE)


def test_the_commands_found_are_todays_in_todays_order() -> None:
    own = cli.own_commands(None)
    assert [n for n in cli.help_order(own) if n != cli.PLUGINS] == list(TODAY) == list(cli.OWN_COMMANDS)
    assert all(isinstance(c, Command) and c.name == n for n, c in own.items())
    listed = _listed(_help(cli.COMMANDS))
    assert [n for n in listed if n in TODAY] == list(TODAY)


def test_a_command_asked_for_imports_its_module_alone() -> None:
    code = ("import sys\nfrom vllmdiag.cli.app import build_app\nbuild_app(sys.argv[1:])\n"
            "print(' '.join(sorted(m for m in sys.modules if m.endswith('_command'))))")
    for argv, expected in ((["gate", "-h"], "vllmdiag.cli.gate_command"),
                           (["triage"], "vllmdiag.cli.triage_command"),
                           (["-h", "gate"], " ".join(f"vllmdiag.cli.{n}_command" for n in sorted(TODAY)))):
        out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                             cwd=ROOT)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[0] == expected, argv


def test_a_copy_of_the_folder_gives_the_same_help(folder_copy: tuple[str, Path]) -> None:  # noqa: F811 - the fixture shared with the pure half
    name, _ = folder_copy
    assert _help(name) == _help(cli.COMMANDS)


def test_a_new_command_is_one_file(folder_copy: tuple[str, Path]) -> None:  # noqa: F811 - the fixture shared with the pure half
    name, pkg = folder_copy
    (pkg / "hello_command.py").write_text(HELLO)
    listed = _listed(_help(name))
    before = _listed(_help(cli.COMMANDS))
    watch = before.index("watch")
    assert listed == before[:watch + 1] + ["hello"] + before[watch + 1:]  # after the named ones, before any group
    runner = CliRunner()
    assert runner.invoke(cli.build_app(["hello"], name), ["hello", "--json"]).output == "hello json\n"
    assert runner.invoke(cli.build_app(None, name), ["hello"]).output == "hello\n"
    shown = runner.invoke(cli.build_app(["hello"], name), ["hello", "-h"], env={"COLUMNS": "100"}).output
    assert "Say hello" in shown and "--json" in shown

"""The live tests of tests/unit/test_sim_plugin.py, which says what they check: these start something."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_sim_plugin import ROOT, SIM, sim_imports  # noqa: F401 - shared with the pure half

from vllmdiag.cli import plugins
from vllmdiag.cli.app import main


def test_the_scan_sees_every_way_to_import_the_simulator() -> None:
    src = ("import vllmdiag_sim\nfrom vllmdiag_sim.faults import X\nimport importlib\n"
           "importlib.import_module('vllmdiag_sim.cli')\ndef f():\n    from vllmdiag_sim import demo\n"
           "importlib.util.find_spec('vllmdiag_sim')\nimport vllmdiag_simulator\nx = 'vllmdiag_sim'\n")
    assert sim_imports(src) == [1, 2, 4, 6, 7]


def test_the_help_lists_the_simulators_commands_where_demo_always_stood() -> None:
    pytest.importorskip(SIM)
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "-h"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0 and not out.stderr, out.stderr
    # A command's row starts right after the box's edge; its help's second line is indented.
    rows = out.stdout.split("Commands ", 1)[-1].splitlines()
    listed = [line.split()[1] for line in rows if line.startswith("│ ") and line[2:3].strip()]
    assert listed == ["triage", "analyze", "collect", "playbook", "demo", "sweep", "gate", "watch", "sim"], listed


def test_without_the_simulator_demo_names_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(plugins, "offered", lambda: ())
    for argv in (["demo"], ["demo", "--fault", "straggler"], ["sim", "start"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and plugins.SIM_INSTALL in err, err

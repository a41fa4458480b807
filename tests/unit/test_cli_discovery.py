"""The pure tests of tests/live/test_cli_discovery_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import vllmdiag.cli as cli_folder
from vllmdiag.cli import app as cli

CLI_DIR = Path(cli_folder.__file__).parent

HELLO = '''"""A command that is one file."""

from __future__ import annotations

from typing import Any

from vllmdiag.cli.options import JSON, with_defaults
from vllmdiag.cli.shared import Command


def hello_command(**given: Any) -> int:
    """Say hello: a command found by its file."""
    print("hello json" if with_defaults((JSON,), given)["json_out"] else "hello")
    return 0


COMMAND = Command("hello", hello_command, (JSON,))
'''


@pytest.fixture
def folder_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """The product's command modules copied into a fresh package; its modules are forgotten afterwards."""
    name = "cmds_" + re.sub(r"\W", "_", tmp_path.name)
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for module in CLI_DIR.glob("*_command.py"):
        shutil.copy(module, pkg / module.name)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, pkg
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]


def test_a_module_must_declare_the_command_its_file_names(folder_copy: tuple[str, Path]) -> None:
    name, pkg = folder_copy
    (pkg / "hullo_command.py").write_text(HELLO)  # declares "hello"
    with pytest.raises(TypeError, match="hullo_command: COMMAND must be"):
        cli.build_app(None, name)

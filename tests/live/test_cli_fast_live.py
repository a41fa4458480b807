"""The live tests of tests/unit/test_cli_fast.py, which says what they check: these start something."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import typer.main

import vllmdiag.cli.app as cli
import vllmdiag.cli.triage_command as triage_module
from vllmdiag.cli import options
from vllmdiag.cli.fast_triage import triage_kwargs
from vllmdiag.cli.options import with_defaults

LINES = [[], ["--json"], ["--json", "--pid", "5"], ["--pid", "5", "--pid=7", "-v"], ["--budget", "3.5", "--confirm=0"],
         ["--save", "s.json", "--report", "r.md", "--rates", "2"], ["--watch", "1.5"],
         ["--probe", "stacks", "--probe", "rings", "--native"],
         ["--nonblocking", "--nccl-ras", "--probe-request", "--enable", "nccl_ras", "--verbose"],
         ["--budget", "1", "--budget", "2"], ["--pid", "1_0"]]


def _typer_call(args: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    @functools.wraps(triage_module.triage_command)
    def record(**kwargs: Any) -> int:
        seen.update(kwargs)
        return 0

    monkeypatch.setattr(triage_module, "COMMAND", triage_module.COMMAND._replace(run=record))
    app = cli.build_app(["triage"])
    typer.main.get_command(app).main(["triage", *args], standalone_mode=False)
    return seen


@pytest.mark.parametrize("args", LINES, ids=" ".join)
def test_the_fast_reading_is_typers(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    fast = triage_kwargs(args)
    assert fast is not None
    seen = with_defaults(options.TRIAGE, fast)  # what triage_command reads when the fast path calls it
    via_typer = _typer_call(args, monkeypatch)
    assert set(via_typer) == set(seen)
    for name, value in via_typer.items():
        got = seen[name]
        assert got == value and type(got) is type(value), (name, got, value)

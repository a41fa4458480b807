"""``vllmdiag triage`` read without typer (speed) must be exactly typer's reading, or typer's turn."""

from __future__ import annotations

import pytest
import typer.main

import vllmdiag.cli.app as cli
from vllmdiag.cli import options
from vllmdiag.cli.fast_triage import FLAGS, VALUES, triage_kwargs

TYPER_ONLY = [["--help"], ["-h"], ["--pid"], ["--pid", "x"], ["--pid", ""], ["--pid", "-5"], ["--save", "--json"],
              ["--jsn"], ["--json=1"], ["stray"], ["--", "--json"], ["-vv"], ["--budget", " 2"]]


def test_every_fast_option_is_declared_by_the_typer_command() -> None:
    command = typer.main.get_command(cli.build_app(["triage"])).commands["triage"]  # type: ignore[attr-defined]
    declared = {opt: p for p in command.params for opt in p.opts}
    for opt, param in FLAGS.items():
        assert declared[opt].name == param and declared[opt].is_flag
    for opt, (param, _, many) in VALUES.items():
        assert declared[opt].name == param and not declared[opt].is_flag and declared[opt].multiple == many
    # a new triage option must be added to the fast path too, or triage lines using it go through typer
    assert set(declared) == set(FLAGS) | set(VALUES)


@pytest.mark.parametrize("args", TYPER_ONLY, ids=" ".join)
def test_anything_else_is_left_to_typer(args: list[str]) -> None:
    assert triage_kwargs(args) is None


def test_collect_is_one_table_for_argparse_and_typer() -> None:
    """The collector's argparse door (what every node runs) and typer's `collect --help` read one table."""
    from vllmdiag.cli.collect import build_parser

    words = {n for o in options.COLLECT for n in o.names}
    parsed = {s for a in build_parser()._actions for s in a.option_strings} - {"-h", "--help", "--version"}
    command = typer.main.get_command(cli.build_app(["collect"])).commands["collect"]  # type: ignore[attr-defined]
    shown = {opt for p in command.params for opt in p.opts} - {"--help"}
    assert parsed == words == shown
    helps = {a.help for a in build_parser()._actions if a.option_strings and a.help} - {"show this help message and exit"}
    assert {o.help for o in options.COLLECT} <= helps | {"show program's version number and exit"}

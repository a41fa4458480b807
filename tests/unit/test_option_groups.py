"""The option table (vllmdiag/cli/options.py): each option declared once with its range check, commands built
from named groups, and the one line a value out of range gets from every door (typer, argparse, the library)."""

from __future__ import annotations

from typing import Any

import pytest

from vllmdiag.cli import options
from vllmdiag.cli.options import Group, Option, check, command
from vllmdiag.errors import BadInput

COMMANDS = {name: getattr(options, name) for name in ("TRIAGE", "COLLECT", "ANALYZE", "SWEEP", "GATE", "WATCH")}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_takes_each_option_and_each_word_once(name: str) -> None:
    table = COMMANDS[name]
    params = [o.param for o in table]
    words = [w for o in table for w in o.names]
    assert len(params) == len(set(params)) and len(words) == len(set(words)), name


def test_an_option_word_has_one_range_in_every_command() -> None:
    """The range is the option's, not the command's: a command may reword the help, never the check."""
    ranges: dict[str, set[Any]] = {}
    for table in COMMANDS.values():
        for o in table:
            for word in o.names:
                ranges.setdefault(word, set()).add((o.limits, o.unit, o.why))
    assert {w: r for w, r in ranges.items() if len(r) > 1} == {}
    assert ranges["--confirm"] == {((0, 600), " seconds", None)}


@pytest.mark.parametrize(("table", "param", "bad", "good", "message"), [
    ("TRIAGE", "budget", 0.1, 0.2, "--budget must be between 0.2 and 600 seconds"),
    ("TRIAGE", "rates", 3601, 3600, "--rates must be between 0 and 3600 seconds"),
    ("TRIAGE", "confirm", 600.5, 600, "--confirm must be between 0 and 600 seconds"),
    ("COLLECT", "confirm", -1, 0, "--confirm must be between 0 and 600 seconds"),
    ("SWEEP", "timeout", 0.4, 0.5, "--timeout must be 0.5-3600 s and --connect-timeout 0.5-600 s"),
    ("SWEEP", "connect_timeout", 601, 600, "--timeout must be 0.5-3600 s and --connect-timeout 0.5-600 s"),
    ("SWEEP", "sweep_timeout", 86401, 86400, "--sweep-timeout must be between 0.5 and 86400 seconds"),
    ("SWEEP", "fanout", 0, 1, "--fanout must be between 1 and 4096"),
    ("SWEEP", "confirm", -0.1, 0, "--confirm must be between 0 and 600 seconds"),
    ("WATCH", "interval", 0.1, 0.2, "--interval must be between 0.2 and 3600 seconds"),
    ("WATCH", "keep", 100001, 100000, "--keep must be between 1 and 100000"),
    ("WATCH", "budget", 601, 600, "--budget must be between 0.2 and 600 seconds"),
    ("WATCH", "on_stall_timeout", 0, 0.1, "--on-stall-timeout must be between 0.1 and 3600 seconds"),
    ("WATCH", "webhook_timeout", 601, 600, "--webhook-timeout must be between 0.1 and 600 seconds"),
    ("WATCH", "metrics_port", 65536, 0, "--metrics-port must be between 0 and 65535"),
    ("WATCH", "gone_grace", -1, 86400, "--gone-grace must be between 0 and 86400 seconds"),
])
def test_each_range_is_checked_where_it_is_declared(table: str, param: str, bad: float, good: float,
                                                    message: str) -> None:
    options_ = COMMANDS[table]
    defaults = {o.param: o.default for o in options_}
    check(options_, {**defaults, param: good})  # both ends are allowed
    with pytest.raises(BadInput) as caught:
        check(options_, {**defaults, param: bad})
    assert str(caught.value) == message


def test_an_option_not_given_is_not_checked() -> None:
    check(options.SWEEP, {"sweep_timeout": None})
    check(options.WATCH, {"metrics_port": None})


def test_a_command_lists_each_installed_option_once_in_its_order() -> None:
    a = Option(("--a",), "a", bool, "a", False)
    b = Option(("--b",), "b", int, "b", 1, limits=(0, 2))
    group = Group("g", (a, b))
    assert command(group, order="b a") == (b, a)
    assert command(group.only("a").but(a="another help"), order="a")[0].help == "another help"
    with pytest.raises(TypeError):
        command(group, order="a")  # b installed but not placed
    with pytest.raises(TypeError):
        command(group, a, order="a b")  # a twice
    with pytest.raises(TypeError):
        group.only("c")

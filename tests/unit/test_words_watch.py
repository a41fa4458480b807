""""watch" means the resident watcher only (issue 36 item 4): not --rates' window, not the confirm window.

What a user reads (the playbooks, every option's help) says "watch" only for `vllmdiag watch`, its
watcher, its files and variables, or the deprecated --watch spelling of --rates. The snapshot on disk
keeps its old keys (``options.watch_s``, ``confirm.watched_s``): analyze reads saved files of every version.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from vllmdiag.cli import options as cli_options
from vllmdiag.cli.options import Group, Option
from vllmdiag.model import Snapshot
from vllmdiag.runtime.options import CollectOptions, collect_options
from vllmdiag.runtime.record import Collected, ConfirmWindow, note
from vllmdiag.runtime.second_look import pass_options

PRODUCT = Path(__file__).resolve().parents[2] / "vllmdiag"
PLAYBOOKS = PRODUCT / "playbooks"
# The watcher's own code says "watch" for itself; everything else (analysis, render, the other commands' words,
# progress bars, next steps) is checked, docstrings and comments-as-strings included.
WATCHER_CODE = ("watch/", "cli/watch_command.py")
# The uses that mean the watcher: the command, its path and files, its variables, the watcher itself, a
# watchdog (torch's, the runner's), and the deprecated --watch option named as such.
ALLOWED = re.compile(r"`?vllmdiag watch\b`?|[/-]watch\b|\bwatch/|VLLMDIAG_WATCH_\w*|\bwatch(?:ers?|dog)\b|--watch\b",
                     re.IGNORECASE)
WATCHER_OWN = re.compile(r"\bwatched deployments?\b", re.IGNORECASE)  # `watch`'s own options: what it follows
WORD = re.compile(r"watch\w*", re.IGNORECASE)


def misuses(text: str, watcher_option: bool = False) -> list[str]:
    """The "watch" words left in ``text`` once the allowed uses are taken out."""
    text = ALLOWED.sub(" ", text)
    if watcher_option:
        text = WATCHER_OWN.sub(" ", text)
    return WORD.findall(text)


def strings(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every text value in a YAML document (keys are codes, not words), with where it is."""
    if isinstance(node, str):
        yield where, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, f"{where}[{i}]")


def option_helps() -> Iterator[tuple[str, str, bool]]:
    """Every option's help text in cli/options.py: standalone, in a group, in a command (where ``but``
    gave it its own words), with whether it is one of `vllmdiag watch`'s own options."""
    for name, value in vars(cli_options).items():
        found = value.options if isinstance(value, Group) else (value,) if isinstance(value, Option) else value
        if not isinstance(found, tuple):
            continue
        for opt in found:
            if isinstance(opt, Option) and opt.help:
                yield f"{name} {'/'.join(opt.names) or opt.param}", opt.help, value is cli_options.WATCH


def test_the_checker_finds_a_misuse_and_passes_the_watcher() -> None:
    assert misuses("when nothing moved, keep watching up to S seconds") == ["watching"]
    assert misuses("a stall watched for 3 s; watch longer") == ["watched", "watch"]
    assert misuses("the resident watcher is `vllmdiag watch` (/var/lib/vllmdiag/watch, VLLMDIAG_WATCH_X)") == []
    assert misuses("torch watchdog; the old spelling --watch S") == []
    assert misuses("no watched deployment") == ["watched"]
    assert misuses("no watched deployment", watcher_option=True) == []


def test_playbooks_say_watch_for_the_watcher_only() -> None:
    books = sorted(PLAYBOOKS.glob("*.yaml"))
    assert len(books) >= 5
    bad = [f"{path.name}:{where}: {words}" for path in books
           for where, text in strings(yaml.safe_load(path.read_text(encoding="utf-8")), "")
           if (words := misuses(text))]
    assert not bad, "\n".join(bad)


def test_option_help_says_watch_for_the_watcher_only() -> None:
    helps = list(option_helps())
    assert any("--rates" in where for where, _, _ in helps) and any(own for _, _, own in helps)
    bad = [f"{where}: {words}" for where, text, own in helps if (words := misuses(text, own))]
    assert not bad, "\n".join(bad)


def test_the_rates_window_keeps_its_disk_key() -> None:
    opts = collect_options(native=False, nonblocking=False, nccl_ras=False, enable={}, rates_s=2.5)
    assert opts.rates_s == 2.5 and opts.to_dict() == {"native": False, "nonblocking": False, "nccl_ras": False,
                                                      "watch_s": 2.5}
    back = CollectOptions.from_dict(json.loads(json.dumps(opts.to_dict())))  # a saved snapshot, read back
    assert back == opts and back.rates_s == 2.5 and not back.extra
    typed = CollectOptions.from_dict({"rates_s": 4, "native": True})  # the typed name given as a key
    assert typed.rates_s == 4 and list(typed.to_dict()) == ["watch_s", "native"]
    assert pass_options(opts).to_dict() == {"native": False, "nonblocking": False}  # nccl_ras and the window go
    assert opts.without("rates_s").to_dict() == opts.without("watch_s").to_dict() == {
        "native": False, "nonblocking": False, "nccl_ras": False}
    assert opts.merged({"rates_s": 9}).to_dict()["watch_s"] == 9


def test_the_confirm_window_keeps_its_disk_key() -> None:
    snap = Snapshot(node="n", collected_at="t", vllmdiag_version="v", duration_s=0.1, options={})
    note(snap, confirm=ConfirmWindow(requested_s=10.0, window_s=3.25, passes=5, stopped="window"))
    assert snap.options["confirm"] == {"requested_s": 10.0, "watched_s": 3.25, "passes": 5, "stopped": "window"}
    again = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert Collected.read(again).confirm == ConfirmWindow(10.0, 3.25, 5, "window")


def product_strings() -> Iterator[tuple[str, str]]:
    """Every string literal (f-strings' literal parts included) in the product outside the watcher's code."""
    for path in sorted(PRODUCT.rglob("*.py")):
        rel = path.relative_to(PRODUCT).as_posix()
        if rel.startswith(WATCHER_CODE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f"{rel}:{node.lineno}", node.value


# Code words, not prose: the deprecated option's parameter name (alone or in an option order), the disk keys,
# the watcher's module path; and the one sentence that says what the word now means.
CODE_WORDS = re.compile(r"^(watch|watch_s|watched_s|vllmdiag\.watch\b.*|[a-z_ ]* watch [a-z_ ]*)$")
ABOUT_THE_WORD = '"watch" now means the resident watcher only'


def test_product_strings_say_watch_for_the_watcher_only() -> None:
    found = list(product_strings())
    assert len(found) > 1000
    bad = [f"{where}: {words}" for where, text in found
           if not CODE_WORDS.match(text) and ABOUT_THE_WORD not in text and (words := misuses(text, watcher_option=True))]
    assert not bad, "\n".join(bad)

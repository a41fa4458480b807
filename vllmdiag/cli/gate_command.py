"""`vllmdiag gate`: found by vllmdiag/cli/app.py (``COMMAND``) when this module exists.

Exit codes: 0 every required check passed (warnings and skips allowed), 1 a required check failed,
2 bad usage or config (one line on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vllmdiag.cli.options import GATE, with_defaults
from vllmdiag.cli.shared import Command
from vllmdiag.model import strict_json


def gate_command(**given: Any) -> int:
    """CI health gate before rollout: pass/warn/fail per check; exit 1 when a required check fails."""
    o = with_defaults(GATE, given)  # the options as declared in cli/options.py (typer passes them all)
    config, tp, url, junit, json_out, prom, show_config = (o["config"], o["tp"], o["url"], o["junit"], o["json_out"],
                                                           o["prom"], o["show_config"])
    if not o["nagios"]:
        return _gate(config, tp, url, junit, json_out, prom, show_config)
    from vllmdiag.errors import VllmdiagError
    from vllmdiag.render.nagios_view import error_line, plugin_line

    if json_out or show_config:
        line, code = error_line("--nagios prints the plugin line only: without --json and --default-config")
    else:
        try:
            line, code = plugin_line(_gate(config, tp, url, junit, False, prom, False, quiet=True))
        except VllmdiagError as exc:  # a plugin's exit 2 is CRITICAL: our own usage error is UNKNOWN (3)
            from vllmdiag.errors import one_line

            line, code = error_line(one_line(exc))
    sys.stdout.write(line + "\n")
    return code


def _gate(config: Path | None, tp: int | None, url: str | None, junit: Path | None, json_out: bool, prom: Path | None,
          show_config: bool, quiet: bool = False) -> Any:
    """The gate; its exit code, or with `quiet` (--nagios) the node's results, nothing printed."""
    from vllmdiag.gate.config import default_yaml, load_config

    if prom is not None:  # before any check runs: node_exporter reads only *.prom (a usage error, one line)
        from vllmdiag.gate.prom import check_name

        check_name(prom, "--prom")
    if show_config:
        from vllmdiag.runtime import lastword

        lastword.spoken()
        sys.stdout.write(default_yaml())
        return 0
    cfg = load_config(config).with_tp(tp)
    from vllmdiag.gate.run import gate_budget, run_gate, validate_url
    from vllmdiag.runtime import lastword
    from vllmdiag.runtime.lastword import process_start
    from vllmdiag.runtime.priority import realtime

    url = validate_url(url)
    if not realtime():  # starved at normal priority: the timer that says "fail" by budget + 1 s (lastword.py)
        lastword.arm_gate(gate_budget(cfg, url), json_out, nagios=quiet)
    node = run_gate(cfg, url, origin=process_start())
    lastword.spoken()  # the results are made: from here on the timer stands down
    if quiet:
        _write_files(node, junit, prom)
        return node
    if json_out:
        payload = {"schema_version": 1, "config": {"source": cfg.source, "tp": cfg.tp},
                   "gate": node.to_dict(with_snapshot=False),
                   "snapshot": node.snapshot.to_dict() if node.snapshot else None}
        sys.stdout.write(strict_json.dumps(payload, indent=2, default=str) + "\n")
    else:
        from vllmdiag.render.gate_view import render_node

        render_node(node)
    _write_files(node, junit, prom)
    return node.exit_code


def _write_files(node: Any, junit: Path | None, prom: Path | None) -> None:
    """After the results are printed: a file that cannot be written is exit 2 without losing them."""
    from vllmdiag.files.outfile import OutputError

    errors: list[OutputError] = []
    for path, option in ((junit, "--junit"), (prom, "--prom")):
        if path is None:
            continue
        if option == "--junit":
            from vllmdiag.gate.junit import to_junit

            text = to_junit([node])
        else:
            from vllmdiag.gate.prom import to_prom

            text = to_prom([node])
        try:
            _write(path, text, option)
        except OutputError as exc:
            errors.append(exc)
    if errors:
        sys.stdout.flush()
        raise errors[0]


def _write(path: Path, text: str, option: str) -> None:
    from vllmdiag.files.outfile import write_output

    write_output(path, text, option)


COMMAND = Command("gate", gate_command, GATE)

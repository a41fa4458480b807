"""Issue 35 items 2-6 and 8, read as a person reads the output: the terminal at 80 and 200 columns and piped,
the HTML through headless Chromium's text, the Markdown as plain text. Real simulated deployments (real
processes, shared-memory rings, ZMQ, HTTP); each triage's JSON is drawn again offline (`vllmdiag analyze`)
in every view, so one deployment serves all of them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ports import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
sim = pytest.importorskip("vllmdiag_sim.deployment")
WIDTHS = [None, 80, 200]  # None: piped with no COLUMNS (a log, a ticket)


def _cli(*args: str, columns: int | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(PYTHONPATH=str(ROOT), **({"COLUMNS": str(columns)} if columns else {}))
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def _triage(dep: Any, tmp: Path, name: str, *extra: str) -> tuple[dict[str, Any], Path]:
    out = _cli("triage", "--json", "--pid", str(dep.root_pid), *extra, timeout=180)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    saved = tmp / f"{name}.json"
    saved.write_text(out.stdout)
    return json.loads(out.stdout), saved


@pytest.fixture(scope="module")
def uniform8(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """TP=8, every rank wedged in one all_reduce: eight culprits (the verdict box once showed four)."""
    with sim.Deployment.up(tp=8, fault="uniform-collective") as dep:
        return _triage(dep, tmp_path_factory.mktemp("uniform8"), "uniform8", "--confirm", "10")


@pytest.fixture(scope="module")
def straggler(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    with sim.Deployment.up(tp=2, fault="straggler") as dep:
        return _triage(dep, tmp_path_factory.mktemp("straggler"), "straggler")



# ---- item 2: no culprit dropped in silence ----------------------------------------------------------------
@pytest.mark.parametrize("columns", WIDTHS)
def test_every_rank_of_a_tp8_uniform_hang_is_named_in_the_terminal(uniform8: Any, columns: int | None) -> None:
    doc, saved = uniform8
    pids = sorted({c["pid"] for c in doc["verdict"]["culprits"] if c.get("pid") is not None})
    assert doc["verdict"]["status"] == "blocked" and len(pids) == 8, doc["verdict"]
    text = _cli("analyze", str(saved), columns=columns).stdout
    box = text.split("next (read-only) steps:")[0]
    flat = " ".join(box.replace("│", " ").split())
    assert "VLLM::Worker_TP[0-7]" in flat and "ranks 0-7" in flat, box
    assert all(re.search(rf"\b{pid}\b", flat) for pid in pids), (pids, box)
    if columns is None:  # piped: the culprit's pids stay on its line, unsplit
        line = next(x for x in text.splitlines() if "culprit:" in x)
        assert all(str(pid) in line for pid in pids), line


def test_every_rank_is_named_in_the_markdown_and_the_html(uniform8: Any, tmp_path: Path) -> None:
    from test_html_report import CHROMIUM, rendered_text

    doc, saved = uniform8
    pids = sorted({c["pid"] for c in doc["verdict"]["culprits"] if c.get("pid") is not None})
    md = tmp_path / "r.md"
    assert _cli("analyze", str(saved), "--report", str(md)).returncode in (0, 1)
    culprits = md.read_text().split("## Culprits")[1].split("##")[0]
    assert "VLLM::Worker_TP[0-7]" in culprits and all(str(p) in culprits for p in pids), culprits
    if CHROMIUM is None:
        pytest.skip("chromium not installed")
    page = tmp_path / "r.html"
    assert _cli("analyze", str(saved), "--report", str(page)).returncode in (0, 1)
    shown = rendered_text(page).split("confidence")[0]
    assert "VLLM::Worker_TP[0-7]" in shown and all(str(p) in shown for p in pids), shown


# ---- item 3: next steps read this deployment's server ------------------------------------------------------
def test_metrics_steps_read_the_deployments_own_port(tmp_path: Path) -> None:
    port = free_port()
    with sim.Deployment.up(tp=2, fault="engine-stuck", port=port) as dep:
        doc, saved = _triage(dep, tmp_path, "engine", "--confirm", "5")
    steps = doc["verdict"]["next_steps"]
    metrics = [s for s in steps if "/metrics" in s]
    assert metrics and all(f"curl -s http://127.0.0.1:{port}/metrics" in s for s in metrics), steps
    assert not [s for s in steps if ":8000" in s or "{curl_api}" in s], steps
    md = tmp_path / "r.md"
    _cli("analyze", str(saved), "--report", str(md))
    text = md.read_text()
    assert f"http://127.0.0.1:{port}/metrics" in text and ":8000/metrics" not in text and "{curl_api}" not in text


def test_an_unknown_port_is_said_never_guessed() -> None:
    from vllmdiag.playbooks.playbook import aim_api, api_command

    assert api_command([{"host": "127.0.0.1", "port": 8001, "pids": [7], "same_netns": True}], {7}) \
        == "curl -s http://127.0.0.1:8001"
    assert api_command([{"host": "127.0.0.1", "port": 8001, "pids": [7], "same_netns": False}], {7}) \
        == "nsenter -t 7 -n curl -s http://127.0.0.1:8001"
    assert api_command([{"host": "x;rm", "port": 1, "pids": [7]}], {7}) is None  # untrusted: not in a command
    (step,) = aim_api(["{curl_api}/metrics | grep x"], None)
    assert step.startswith("# ") and "port is unknown" in step and "8000" not in step


# ---- item 4: one answer --------------------------------------------------------------------------------------
@pytest.mark.parametrize("columns", [80, 200])
def test_a_confident_straggler_comes_without_a_watch_longer_suspicion(straggler: Any, columns: int) -> None:
    doc, saved = straggler
    assert (doc["verdict"]["status"], doc["verdict"]["confidence"]) == ("blocked", "high"), doc["verdict"]["summary"]
    assert "gpu.stall_suspected" not in {f["code"] for f in doc["findings"]}
    text = " ".join(_cli("analyze", str(saved), "-v", columns=columns).stdout.split())
    assert "suspected stall" not in text and "stall_suspected" not in text and "longer confirm window" not in text


# ---- item 5: what is copied is what runs ---------------------------------------------------------------------
@pytest.mark.parametrize("columns", [80, 200])
def test_each_command_is_one_line_in_the_terminal_and_prose_is_no_command(straggler: Any, columns: int,
                                                                          tmp_path: Path) -> None:
    doc, saved = straggler
    report = json.loads(saved.read_text())
    prose = "Re-run as root (or with CAP_SYS_PTRACE), then triage again."
    long = "py-spy dump --native --pid 12345 " + " ".join(f"--opt{i}" for i in range(20))
    report["verdict"]["next_steps"] = [*report["verdict"]["next_steps"], long, prose]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(report))
    lines = _cli("analyze", str(edited), columns=columns).stdout.splitlines()
    for step in [*doc["verdict"]["next_steps"], long]:
        assert f"  $ {step}" in lines, (step, lines)  # whole, on one line: pasting it runs all of it
    assert f"  - {prose}" in lines and not [x for x in lines if "$ Re-run" in x]


def test_html_commands_copy_without_the_prompt_and_prose_is_a_sentence(straggler: Any, tmp_path: Path) -> None:
    from test_html_report import CHROMIUM, rendered_text

    if CHROMIUM is None:
        pytest.skip("chromium not installed")
    _, saved = straggler
    report = json.loads(saved.read_text())
    report["verdict"]["next_steps"].append("Re-run as root, then triage again.")
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(report))
    page = tmp_path / "r.html"
    _cli("analyze", str(edited), "--report", str(page))
    lines = [x.strip() for x in rendered_text(page).splitlines()]
    steps = lines[lines.index("Next read-only steps") + 1:]
    assert "Re-run as root, then triage again." in steps
    assert report["verdict"]["next_steps"][0] in steps and not [x for x in lines if x.startswith("$ ")], lines


# ---- item 6: a wrong --pid ------------------------------------------------------------------------------------
def test_a_pid_that_does_not_exist_is_a_usage_error() -> None:
    out = _cli("triage", "--pid", "999999")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert "--pid 999999: no such process" in out.stderr and "No vLLM deployment" not in out.stderr
    collect = _cli("collect", "-p", "999999")
    assert collect.returncode == 2 and "no such process" in collect.stderr


def test_a_pid_outside_every_deployment_names_the_ones_that_run() -> None:
    with sim.Deployment.up(tp=2, fault="healthy") as dep:
        out = _cli("triage", "-p", "1")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "--pid 1: not part of any vLLM deployment" in out.stderr and f"pid {dep.root_pid}" in out.stderr


# ---- item 8: words that agree ---------------------------------------------------------------------------------
def test_help_says_what_the_options_do() -> None:
    collect = " ".join(_cli("collect", "-h", columns=200).stdout.replace("│", " ").split())
    assert "whole command" in collect and "collect's default" in collect and "passes its own" in collect
    triage = " ".join(_cli("triage", "-h", columns=200).stdout.replace("│", " ").split())
    assert "whole command" in triage and "-p" in triage


def test_a_usage_error_names_an_option_fix_only_when_an_option_is_wrong() -> None:
    no_option = _cli("playbook", "no.such.code")
    assert no_option.returncode == 2 and "correct the option" not in no_option.stderr, no_option.stderr
    option = _cli("triage", "--budget", "0.01")
    assert option.returncode == 2 and "(fix: correct the option named above" in option.stderr, option.stderr


def test_the_markdown_reads_as_plain_text(straggler: Any, tmp_path: Path) -> None:
    """Pasted into a plain-text ticket the Markdown reads as the terminal does (no `TP\\[0\\-6\\]`), and a
    Markdown renderer still makes no link, tag or emphasis of it."""
    from markdown_it import MarkdownIt

    doc, saved = straggler
    md = tmp_path / "r.md"
    _cli("analyze", str(saved), "--report", str(md))
    text = md.read_text()
    assert doc["verdict"]["summary"] in text, "the summary is not plain text"
    assert "\\[" not in text and "\\-" not in text and "\\(" not in text
    before = text.split("## Findings")[0]
    assert before.count(doc["verdict"]["summary"]) == 1  # said once before the findings
    html = MarkdownIt("commonmark").render(text).replace("<em>Playbook:</em>", "")  # our own emphasis
    assert "<a " not in html and "<em>" not in html and "<img" not in html, html


def test_the_report_names_the_command_as_typed(straggler: Any, tmp_path: Path) -> None:
    from vllmdiag.render.files import command_line

    assert command_line(["/usr/local/bin/vllmdiag-py", "triage", "--pid", "7"]) == ["vllmdiag", "triage", "--pid", "7"]
    assert command_line(["/x/vllmdiag/__main__.py", "analyze", "f"])[0] == "vllmdiag"
    _, saved = straggler
    md = tmp_path / "r.md"
    _cli("analyze", str(saved), "--report", str(md))
    assert f"vllmdiag analyze {saved} --report {md}" in md.read_text() and "vllmdiag-py" not in md.read_text()

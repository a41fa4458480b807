"""--report files are self-contained and say the same thing as the verdict; playbook CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from fake_tree import fake_tree, wait_state


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.external: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if key in ("src", "href") and value:
                self.external.append(value)
        if tag in ("script", "link", "img", "iframe"):
            self.external.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _vllmdiag(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", *args], capture_output=True, text=True, timeout=60)


def test_html_and_markdown_reports(tmp_path: Path) -> None:
    with fake_tree(tp=2) as t:
        os.kill(t.workers[1], signal.SIGSTOP)
        wait_state(t.workers[1], "T")
        html_file, md_file = tmp_path / "r.html", tmp_path / "r.md"
        out = _vllmdiag("triage", "--json", "--pid", str(t.api), "--probe", "processes", "--report", str(html_file))
        assert out.returncode == 1, out.stderr
        verdict = json.loads(out.stdout)["verdict"]
        out = _vllmdiag("triage", "--pid", str(t.api), "--probe", "processes", "--report", str(md_file))
        assert out.returncode == 1
        assert "BLOCKED" in out.stdout and str(t.workers[1]) in out.stdout  # the rich view names the culprit
    parser = _Assets()
    parser.feed(html_file.read_text())
    assert parser.external == []  # opens with no network: no scripts, links or remote assets
    text = " ".join(parser.text)
    assert verdict["summary"] in text and str(verdict["culprits"][0]["pid"]) in text
    md = md_file.read_text()
    assert md.startswith("# vllmdiag: blocked at the process layer") and str(verdict["culprits"][0]["pid"]) in md


def test_report_with_unknown_suffix_is_usage_error(tmp_path: Path) -> None:
    out = _vllmdiag("triage", "--probe", "host", "--report", str(tmp_path / "r.pdf"))
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_playbook_command() -> None:
    listing = _vllmdiag("playbook")
    assert listing.returncode == 0 and "process.zombie" in listing.stdout
    one = _vllmdiag("playbook", "process.stopped")
    assert one.returncode == 0 and "kill -CONT" in one.stdout
    bad = _vllmdiag("playbook", "no.such_code")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1

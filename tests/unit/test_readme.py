"""The README as a newcomer meets it (issue 35): its sample outputs are the renderer's own
(scripts/readme-sample --check, byte for byte for the recorded ones), every command it shows in a
```sh block runs verbatim in .ci/run, no page tells anyone to install `vllmdiag` by name from an index
(the name is not published: anyone could register it), and every local link resolves."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]


def _sh_lines(text: str) -> list[str]:
    """The command lines of the README's ```sh blocks, their trailing comments cut."""
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```$", text, re.S | re.M):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


def test_every_readme_shell_command_runs_verbatim_in_ci() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    lines = _sh_lines(README.read_text())
    assert {"vllmdiag demo", "vllmdiag triage", "vllmdiag demo --fleet", "vllmdiag watch"} <= set(lines), lines
    assert any(line.startswith("vllmdiag gate ") for line in lines)
    assert "python3 -m pip install -e '.[test]' -e ./sim && python3 -m pytest" in lines
    missing = [line for line in lines if line not in ci]
    assert missing == [], f"README commands .ci/run does not run verbatim: {missing}"


def test_no_page_installs_vllmdiag_by_name_from_an_index() -> None:
    by_name = re.compile(r"pip3? install(?: -[-\w]+)* (?:-U )?['\"]?vllmdiag(?:\[[\w,]+\])?['\"]?(?=[\s`'\")]|$)", re.M)
    pages = [*PAGES, *sorted((REPO / "examples").rglob("*")), REPO / ".ci" / "run"]
    found = []
    for page in pages:
        if page.is_file():
            for m in by_name.finditer(page.read_text(errors="replace")):
                before = page.read_text(errors="replace")[max(0, m.start() - 40):m.start()]
                if "never" not in before and "nobody should" not in before:  # the warnings that name it
                    found.append(f"{page.relative_to(REPO)}: {m.group(0)}")
    assert found == []
    assert by_name.search("sudo pip install vllmdiag") and not by_name.search("pip install ./vllmdiag-0.1.0.whl")


def test_every_local_link_resolves() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []

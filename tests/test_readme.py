"""The README as a newcomer meets it (issue 35): its sample outputs are the renderer's own
(scripts/readme-sample --check, byte for byte for the recorded ones), every command it shows in a
```sh block runs verbatim in .ci/run, no page tells anyone to install `vllmdiag` by name from an index
(the name is not published: anyone could register it), and every local link resolves."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
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


def test_readme_samples_are_the_renderers_output() -> None:
    """The triage and sweep samples replay recorded snapshots: any change to what the renderer prints
    shows here as a diff, fixed by running scripts/readme-sample. The gate sample (a live node) is held
    to its checks, statuses and last line where root can build a clean node."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme-sample"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr
    assert "$ vllmdiag analyze" in README.read_text()


def test_a_drifted_sample_is_caught(tmp_path: Path) -> None:
    """--check must fail on a README whose sample is not the output (a check that cannot fail tests nothing)."""
    copy = tmp_path / "repo"
    for rel in ("scripts/readme-sample", "README.md"):
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, copy / rel)
    for rel in ("tests/data/readme", "tests/data/vllm-cpu-shapes", "examples/ci", "vllmdiag"):
        shutil.copytree(REPO / rel, copy / rel, ignore=shutil.ignore_patterns("__pycache__"))
    text = (copy / "README.md").read_text()
    assert "culprit:  VLLM::Worker_TP1  on vm, pid 17323" in text
    (copy / "README.md").write_text(text.replace("on vm, pid 17323", "on vm, pid 17324", 1))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, str(copy / "scripts" / "readme-sample"), "--check"], cwd=copy,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1 and "-│ culprit:  VLLM::Worker_TP1  on vm, pid 17324" in proc.stdout, proc.stdout[-3000:]


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

"""node_exporter textfiles (``--collector.textfile.directory``): `watch --textfile` and `sweep --gate --prom`.

node_exporter reads every ``*.prom`` file of its directory at each scrape, so a file must appear
whole (written beside it under a name it skips, then renamed into place: vllmdiag.files.outfile) and must
end in ``.prom`` or it is silently never read; a name that does not is a usage error (exit 2).
"""

from __future__ import annotations

from pathlib import Path

WATCH_NAME = "vllmdiag_watch.prom"  # the file `watch --textfile DIR` writes in DIR
MODE = 0o644  # node_exporter runs as its own user (prometheus on Debian): it must read it


def textfile_path(given: Path, option: str) -> Path:
    """DIR (an existing directory: WATCH_NAME in it) or FILE.prom; anything else: BadInput (exit 2)."""
    from vllmdiag.gate.prom import check_name

    if given.is_dir():
        return given / WATCH_NAME
    check_name(given, option)
    return given


def write_textfile(path: Path, text: str) -> None:
    """Atomic (temp file, then rename), never through another user's link (vllmdiag.files.outfile)."""
    from vllmdiag.files.outfile import write_output

    write_output(path, text, "--textfile", mode=MODE)


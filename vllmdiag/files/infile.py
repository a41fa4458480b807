"""The one way vllmdiag reads an input file (snapshots, --config, inventories, hostfiles, rules).

A FIFO named as a snapshot once blocked the tool forever and /dev/zero grew without bound (issue 15,
item 10); a YAML alias bomb expanded a few hundred bytes into gigabytes (item 11). So: open without
blocking (O_NONBLOCK: a FIFO's open returns at once), accept only a regular file (fstat of the open
descriptor, so what was checked is what is read), cap the size before and while reading, decode
strictly; YAML is parsed with aliases refused. Every failure is an InputError (one line, exit 2)
that says why. Standard library only (plus PyYAML for read_yaml).
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Any

from vllmdiag.errors import BadInput

MiB = 1 << 20
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputError(BadInput):
    """An input file cannot be used: one line, exit 2."""

    fix = "name a readable regular file (or directory) of the kind the option expects, one you or root own"


def read_input(path: Path | str, what: str, max_bytes: int) -> str:
    """The UTF-8 text of a regular file of at most max_bytes; InputError otherwise (never blocks)."""
    name = str(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except OSError as exc:
        raise InputError(f"{name}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((label for test, label in _KINDS if test(st.st_mode)), "not a regular file")
            raise InputError(f"{name}: is {kind}; a {what} must be a regular file")
        if st.st_size > max_bytes:
            raise InputError(f"{name}: {st.st_size} bytes is more than the {_size(max_bytes)} allowed for a {what}")
        data = _read_capped(fd, max_bytes)
    except OSError as exc:
        raise InputError(f"{name}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if data is None:  # it grew while we read it (a file being appended to, /proc-like files)
        raise InputError(f"{name}: more than the {_size(max_bytes)} allowed for a {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start}); a {what} is text") from None


def read_yaml(path: Path | str, what: str, max_bytes: int = 4 * MiB) -> Any:
    """YAML through read_input, aliases refused (an alias bomb expands exponentially); short errors."""
    import yaml

    text = read_input(path, what, max_bytes)
    try:
        return yaml.load(text, Loader=no_alias_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"{path}: not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"{path}: YAML nested too deeply for a {what}") from None


@functools.lru_cache(maxsize=1)
def no_alias_loader() -> type:
    """Built on first use, so importing this module (collect's path) does not import yaml."""
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (*name): a config never needs them, a bomb always does."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed",
                                                  event.start_mark)
            return super().compose_node(parent, index)

    return NoAliasLoader


def _read_capped(fd: int, max_bytes: int) -> bytes | None:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 * MiB, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            return None


def _size(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n} bytes"

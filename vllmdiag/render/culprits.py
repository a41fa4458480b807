"""Culprits as people read them, for every view (terminal, HTML, Markdown).

Workers blamed alike on one node (same reason) are one line, `VLLM::Worker_TP[0-7]  pids 101-108, ranks 0-7`,
so a TP=8 uniform hang names every rank; past the view's limit the rest are still named in one "and N
more" line. No culprit is ever dropped in silence (issue 35 item 2). Pure: culprits in, lines out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_RANKED = re.compile(r"^(.*?TP)(\d+)$")  # VLLM::Worker_TP3 -> ("VLLM::Worker_TP", "3")
_GROUP = re.compile(r"TP\[([\d,\-]+)\]$")  # the analysis' group culprit: Worker_TP[0-7] (no pid)


@dataclass
class CulpritLine:
    title: str
    node: str
    reason: str
    pids: list[int] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    # "culprit", or for a node a sweep could not read (fleet analysis' role "node"): its status, "unreachable",
    # "timeout", "error". Such a node is not to blame for the hang: it is what the sweep could not see.
    kind: str = "culprit"
    members: list[str] = field(default_factory=list)  # the nodes of a not-reached line

    @property
    def where(self) -> str:
        """`pid 101, rank 3` / `pids 101-108, ranks 0-7` / `no pid`; "" for nodes not reached."""
        if self.kind != "culprit":
            return ""
        pid = (f"pid {self.pids[0]}" if len(self.pids) == 1 else f"pids {_pid_list(self.pids)}" if self.pids else "no pid")
        if not self.ranks:
            return pid
        return pid + (f", rank {self.ranks[0]}" if len(self.ranks) == 1 else f", ranks {span(self.ranks)}")

    @property
    def name(self) -> str:
        """Who, in a few words: the "and N more" list."""
        return f"{self.title} ({self.where})"


def _get(c: Any, key: str) -> Any:
    return c.get(key) if isinstance(c, dict) else getattr(c, key, None)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def span(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`: consecutive runs folded, as ClusterShell folds node sets."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and runs[-1][-1] + 1 == n:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _pid_list(pids: list[int]) -> str:
    """In rank order, `101-108` only when they are exactly consecutive (a gap in a span would read as a range);
    else separated by spaces, so a narrow view wraps between two pids, never inside one."""
    return f"{pids[0]}-{pids[-1]}" if pids == list(range(pids[0], pids[0] + len(pids))) else " ".join(map(str, pids))


def fold(culprits: Any) -> list[CulpritLine]:
    """Every culprit, those alike folded; the analysis' pid-less group line (`Worker_TP[0-7]`) is left out
    when a folded line names the same ranks on the same node with their pids."""
    lines: list[CulpritLine] = []
    groups: dict[tuple[str, str, str], CulpritLine] = {}
    for c in culprits if isinstance(culprits, (list, tuple)) else []:
        title, node, reason = (str(_get(c, k) or "") for k in ("title", "node", "reason"))
        title = title or str(_get(c, "role") or "?")
        pid, rank = _int(_get(c, "pid")), _int(_get(c, "rank"))
        if _get(c, "role") == "node" and pid is None:
            _unseen_node(lines, node, reason)
            continue
        m = _RANKED.match(title)
        if m and pid is not None and rank is not None:
            key = (m.group(1), node, reason)
            if key in groups:
                groups[key].pids.append(pid)
                groups[key].ranks.append(rank)
                continue
            groups[key] = CulpritLine(title, node, reason, [pid], [rank])
            lines.append(groups[key])
            continue
        lines.append(CulpritLine(title, node, reason, [pid] if pid is not None else [], [rank] if rank is not None else []))
    for (prefix, _, _), line in groups.items():
        if len(line.ranks) > 1:
            line.title = f"{prefix}[{span(line.ranks)}]"
    for line in lines:
        if len(line.members) > 1:
            from vllmdiag.render.report_data import fold as fold_names

            line.title = line.node = fold_names(list(dict.fromkeys(line.members)))
    return [x for x in lines if not _covered(x, lines)]


def _unseen_node(lines: list[CulpritLine], node: str, reason: str) -> None:
    """Nodes a sweep could not read, one line per status and cause: `unreachable: nohost[1-3]` (host name does
    not resolve), never "culprit" (issue 35 item 8). `title` and `node` are folded in `fold`."""
    status, _, rest = reason.partition(": ")
    cause = rest.split(": ", 1)[0]
    for line in lines:
        if line.kind == status and line.reason == cause:
            line.members.append(node)
            return
    lines.append(CulpritLine(node, node, cause, kind=status or "unreachable", members=[node]))


def _covered(line: CulpritLine, lines: list[CulpritLine]) -> bool:
    m = _GROUP.search(line.title)
    if line.pids or not m:
        return False
    ranks = set(_expand(m.group(1)))
    return any(o is not line and o.node == line.node and set(o.ranks) == ranks for o in lines)


def _expand(text: str) -> list[int]:
    out: list[int] = []
    for a, b in re.findall(r"(\d+)(?:-(\d+))?", text):
        out += list(range(int(a), int(b or a) + 1))[:4096]
    return out


def limited(culprits: Any, limit: int) -> tuple[list[CulpritLine], str]:
    """At most `limit` lines; the rest named in one line (`and 3 more: a (pid 1), ...`), "" when none left."""
    lines = fold(culprits)
    if len(lines) <= limit:
        return lines, ""
    shown, rest = lines[:max(1, limit - 1)], lines[max(1, limit - 1):]
    return shown, f"and {len(rest)} more: " + "; ".join(x.title if x.kind != "culprit" else f"{x.name} on {x.node}"
                                                        for x in rest)

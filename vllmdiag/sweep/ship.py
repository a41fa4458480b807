"""``--ship``: a self-contained collector zipapp, run on the node by the vLLM environment's own Python.

It holds the collect path only (model, runner, probes, the analysis modules ``api`` imports) and no
typer/rich/ClusterShell: psutil and pyzmq come from the target's vLLM installation, which needs them.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

SHIP_ARGV0 = "vllmdiag-ship"
EXIT_NO_TRUSTED_PYTHON = 96
# Runs the shipped collector (read from stdin) on the node, as whoever ssh logs in as (often root). The
# interpreter is the one hole: anything we exec runs with our rights on every node swept. So only ever
# an interpreter nobody else can change (issue 15 item 1): the resolved file and every directory above
# it owned by root (or by us) and not writable by group or others, and named like a Python. $1 is the
# operator's choice (--ship-python / inventory ship_python; "" for none): then that one or nothing.
# Otherwise the first trusted exe of a VLLM:: process (vLLM's own environment, where pynvml lives),
# then fixed system paths. Never a name looked up on PATH. Fixed text: node names arrive only as "$@".
SHIP_SNIPPET = r"""want=$1; shift
me=$(id -u); py=""; why=""
safe() {
  s=$(stat -c '%u %a' "$1" 2>/dev/null) || { why="$1 cannot be inspected"; return 1; }
  case ${s%% *} in 0|"$me") ;; *) why="$1 is owned by uid ${s%% *}"; return 1 ;; esac
  case ${s#* } in *[2367]?|*[2367]) why="$1 is writable by group or others (mode ${s#* })"; return 1 ;; esac
}
trusted() {
  case $1 in /*) ;; *) why="$1 is not an absolute path"; return 1 ;; esac
  r=$(readlink -f "$1" 2>/dev/null) && [ -f "$r" ] && [ -x "$r" ] || { why="$1 is not an executable file"; return 1; }
  case ${r##*/} in python|python[0-9]|python[0-9].[0-9]|python[0-9].[0-9][0-9]) ;;
    *) why="$1 ($r) is not named like a Python interpreter"; return 1 ;; esac
  x=$r
  while :; do safe "$x" || return 1; [ "$x" = / ] && break; x=$(dirname "$x"); done
  py=$r
}
if [ -n "$want" ]; then
  trusted "$want" || { echo "vllmdiag-ship: refusing --ship-python: $why (it would run as $(id -un))" >&2; exit 96; }
else
  n=0
  for f in /proc/[0-9]*/cmdline; do
    case "$(head -c 6 "$f" 2>/dev/null | tr -d '\000')" in
      VLLM::) n=$((n + 1)); [ "$n" -gt 16 ] && break
              p=$(readlink "${f%/cmdline}/exe" 2>/dev/null) && trusted "$p" && break ;;
    esac
  done
  [ -n "$py" ] || for p in /usr/bin/python3 /usr/local/bin/python3; do trusted "$p" && break; done
  [ -n "$py" ] || { echo "vllmdiag-ship: no trusted Python on this node (last seen: ${why:-none}); pass" \
                    "--ship-python PATH (root-owned, not writable by others) or install vllmdiag there" >&2; exit 96; }
fi
d=$(mktemp -d "${TMPDIR:-/tmp}/vllmdiag.XXXXXX") || exit 97
trap 'rm -rf "$d"' EXIT
cat > "$d/collect.pyz" || exit 97
VLLMDIAG_SHIPPED=1 "$py" -I "$d/collect.pyz" "$@"
"""
# A path the operator names for --ship-python: absolute, plain characters (it travels in a shell line).
SHIP_PYTHON = r"/[A-Za-z0-9_.+/-]{1,1023}"

# Front-end packages the node never needs; keeping them out keeps the bundle small and its imports lean.
_SKIP_DIRS = ("render", "sweep", "gate")
_SKIP_FILES = ("__main__.py",)
_SHIP_DOORS = ("__init__.py", "collect.py", "options.py")  # of vllmdiag/cli/: the collector's door only
MAIN = (
    "import os, sys\n"
    "if sys.version_info < (3, 10):\n"
    "    sys.stderr.write('vllmdiag collect: needs Python >= 3.10, this is %s\\n' % sys.version.split()[0])\n"
    "    raise SystemExit(2)\n"
    "# First, as the installed command does (vllmdiag/__main__.py): CPU on a saturated node.\n"
    "from vllmdiag.runtime.priority import boost_first\n"
    "boost_first(['collect'] + sys.argv[1:])\n"
    "from vllmdiag.runtime import lastword\n"
    "from vllmdiag.runtime.priority import realtime\n"
    "if not realtime():\n"
    "    lastword.arm(['collect'] + sys.argv[1:])  # a starved node's answer by its budget + 1 s\n"
    "def _py_spy():\n"
    "    import platform, zipfile\n"
    "    # A bundled py-spy goes next to the bundle (the ship snippet's temp dir, removed after the run) and\n"
    "    # on PATH after the node's own: only when built for this machine's architecture.\n"
    "    here = os.path.dirname(os.path.abspath(sys.argv[0]))\n"
    "    with zipfile.ZipFile(sys.argv[0]) as zf:\n"
    "        names = set(zf.namelist())\n"
    "        if 'bin/py-spy' not in names or zf.read('bin/py-spy.machine').decode() != platform.machine():\n"
    "            return\n"
    "        path = os.path.join(here, 'bin', 'py-spy')\n"
    "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "        with open(path, 'wb') as fh:\n"
    "            fh.write(zf.read('bin/py-spy'))\n"
    "    os.chmod(path, 0o755)\n"
    "    os.environ['PATH'] = os.environ.get('PATH', '/usr/bin:/bin') + os.pathsep + os.path.dirname(path)\n"
    "if os.environ.get('VLLMDIAG_SHIPPED') == '1':\n"
    "    _py_spy()\n"
    "from vllmdiag.cli.collect import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def local_py_spy() -> Path | None:
    """The py-spy binary this machine runs: the stacks probe's locator (one place decides)."""
    from vllmdiag.probes.stacks import find_py_spy

    found = find_py_spy()
    return Path(found) if found else None


def _package_dir() -> Path:
    import vllmdiag

    return Path(vllmdiag.__file__).parent


@functools.lru_cache(maxsize=2)
def build_zipapp(with_py_spy: bool = False) -> bytes:
    """The zipapp as bytes (built once per process; deterministic, so identical on every sweep).
    ``with_py_spy`` bundles this machine's py-spy (about 3 MB compressed) for nodes that lack one."""
    root = _package_dir()
    files: dict[str, Path] = {}
    for path in sorted([*root.rglob("*.py"), *root.glob("playbooks/*.yaml")]):
        rel = path.relative_to(root)
        if rel.parts[0] in _SKIP_DIRS or (len(rel.parts) == 1 and rel.name in _SKIP_FILES):
            continue
        if rel.parts[0] == "cli" and rel.as_posix() not in {f"cli/{name}" for name in _SHIP_DOORS}:
            continue
        if "__pycache__" in rel.parts:
            continue
        files[f"vllmdiag/{rel.as_posix()}"] = path
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        _add(zf, "__main__.py", MAIN.encode())
        for name, path in sorted(files.items()):
            _add(zf, name, path.read_bytes())
        py_spy = local_py_spy() if with_py_spy else None
        if py_spy is not None:
            import platform

            _add(zf, "bin/py-spy", py_spy.read_bytes(), level=1)  # 8 MB: the fast level saves a second per sweep
            _add(zf, "bin/py-spy.machine", platform.machine().encode())
    # A zipapp is a zip with a shebang line; the remote side names the interpreter explicitly anyway.
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


def _add(zf: zipfile.ZipFile, name: str, data: bytes, level: int = 6) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data, compresslevel=level)


def write_zipapp(path: Path) -> Path:
    path.write_bytes(build_zipapp())
    path.chmod(0o755)
    return path

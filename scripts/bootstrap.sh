#!/usr/bin/env bash
# Installs exactly the Debian packages kiln's build and tests need. Idempotent: when
# everything is present it only runs dpkg-query and exits (well under a second).
set -euo pipefail

packages=(
  # build
  meson ninja-build pkg-config g++ cmake python3
  # CPU backend
  libxtensor-dev xtl-dev libxsimd-dev libxtensor-blas-dev libopenblas-dev
  # fused CPU bodies compiled at run time (header-only x86-64 assembler)
  libxbyak-dev
  # runtime (checkpoints: .npz through minizip on zlib; safetensors headers: JSON)
  libabsl-dev libminizip-dev zlib1g-dev nlohmann-json3-dev
  # kiln::dist: collectives across processes (Gloo, TCP transport)
  libgloo-dev
  # tests and benchmarks
  doctest-dev libbenchmark-dev python3-numpy
  # the training example: its dataset and flags
  dataset-fashion-mnist libcli11-dev
  # Vulkan backend (next slice): loader, headers, lavapipe, validation, SPIR-V tools
  libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers spirv-tools
  spirv-headers
)
if [ "${KILN_BOOTSTRAP_EXTRA:-}" != "" ]; then
  read -r -a extra <<<"$KILN_BOOTSTRAP_EXTRA"
  packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "bootstrap: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

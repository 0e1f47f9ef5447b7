#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages (when missing), configures
# and builds it in build/, then checks one shipped model against the outputs
# PyTorch recorded for it.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libopenblas-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

if [ "${1:-}" != "--no-check" ]; then
  ./build/kiln check tests/fixtures/torch2.11/resnet_basic.pt2 tests/fixtures/torch2.11/resnet_basic.io.safetensors --verbose
fi

#!/usr/bin/env bash
# Installs what kiln needs from Debian's packages (when missing), configures
# and builds it in build/, then checks one shipped model against the outputs
# PyTorch recorded for it.
set -euo pipefail
cd "$(dirname "$0")/.."

source tools/packages.sh
ensure_packages cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libopenblas-dev libssl-dev

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)"

if [ "${1:-}" != "--no-check" ]; then
  ./build/kiln check tests/fixtures/torch2.11/resnet_basic.pt2 tests/fixtures/torch2.11/resnet_basic.io.safetensors --verbose
fi

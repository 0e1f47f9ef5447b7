#!/usr/bin/env bash
# The quick start: installs what kiln needs from Debian's packages (when
# missing), configures and builds it in build/, then does kiln's main job on a
# shipped model: compiles tests/fixtures/torch2.11/resnet_basic.pt2 to
# build/resnet_basic.kiln, runs that program on the inputs PyTorch recorded
# and checks its outputs against PyTorch's (the last line says PASS or FAIL).
#
#   tools/setup.sh [--no-check] [CMAKE_ARGS...]
#
# --no-check stops after the build; CMAKE_ARGS go to the configure step
# (tools/test.sh adds the Python extension to the same build this way).
set -euo pipefail
cd "$(dirname "$0")/.."
check=1
if [ "${1:-}" = "--no-check" ]; then
  check=0
  shift
fi

source tools/packages.sh
ensure_packages cmake ninja-build g++ libgtest-dev nlohmann-json3-dev libopenblas-dev libgfortran-12-dev libssl-dev

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j "$(nproc)"

if [ "$check" = 1 ]; then
  model=tests/fixtures/torch2.11/resnet_basic
  ./build/kiln compile "$model.pt2" -o build/resnet_basic.kiln
  ./build/kiln check build/resnet_basic.kiln "$model.io.safetensors" --verbose
fi

#!/usr/bin/env bash
# Builds kiln (installing what is missing) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --no-check
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"

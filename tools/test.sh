#!/usr/bin/env bash
# Every test, from one build: installs what is missing, builds build/ (the
# library, the CLI, the C++ tests and the Python extension together), runs the
# C++ tests (ctest), installs the Python package from that build into a cached
# virtualenv and runs its tests (pytest), then builds the fuzz targets and
# runs each briefly (tools/fuzz.sh). CI runs exactly this.
#
#   tools/test.sh [--no-python] [--no-fuzz] [--fuzz-seconds N]
#
# The virtualenv (PyTorch and friends from PyPI) is prepared in the
# background while the C++ code compiles, and kept for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
python=1
fuzz=1
fuzz_seconds=5
while [ $# -gt 0 ]; do
  case "$1" in
    --no-python) python=0 ;;
    --no-fuzz) fuzz=0 ;;
    --fuzz-seconds) fuzz_seconds="$2"; shift ;;
    *) echo "usage: tools/test.sh [--no-python] [--no-fuzz] [--fuzz-seconds N]" >&2; exit 2 ;;
  esac
  shift
done

took() { echo "test: $1 took $(($(date +%s) - $2)) s"; }
start=$(date +%s)
cmake_args=()
if [ "$python" = 1 ]; then
  source tools/python_env.sh
  python_env_start
  cmake_args=(-DKILN_PYTHON=ON -DPython_EXECUTABLE="$python_env_python")
fi
bash tools/setup.sh --no-check "${cmake_args[@]}"
took build "$start"

t=$(date +%s)
ctest --test-dir build --output-on-failure -j "$(nproc)"
took ctest "$t"

if [ "$python" = 1 ]; then
  t=$(date +%s)
  python_env_wait
  python_package_test
  took python "$t"
fi

if [ "$fuzz" = 1 ]; then
  t=$(date +%s)
  bash tools/fuzz.sh "$fuzz_seconds"
  took fuzz "$t"
fi
took "everything" "$start"

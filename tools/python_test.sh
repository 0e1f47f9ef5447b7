#!/usr/bin/env bash
# The Python package's tests alone: the cached virtualenv (tools/python_env.sh),
# kiln._C built in build/ beside everything else (tools/setup.sh with the
# extension on), `pip install .` of that build, then pytest (extra arguments
# go to pytest). tools/test.sh runs this with the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/python_env.sh
python_env_start
bash tools/setup.sh --no-check -DKILN_PYTHON=ON -DPython_EXECUTABLE="$python_env_python"
python_env_wait
python_package_test "$@"

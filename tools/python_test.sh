#!/usr/bin/env bash
# Builds and installs the kiln Python package (pip install .) into a cached
# virtualenv that has PyTorch, torchvision and transformers from PyPI, then
# runs its tests (tests/python). The virtualenv is kept in
# $KILN_PYTHON_ENV (default ~/.cache/kiln/venv-py) and rebuilt only when
# tools/requirements-python.txt changes; PyTorch's download is large.
set -euo pipefail
cd "$(dirname "$0")/.."

source tools/packages.sh
ensure_packages cmake ninja-build g++ nlohmann-json3-dev libopenblas-dev libssl-dev

env_dir="${KILN_PYTHON_ENV:-$HOME/.cache/kiln/venv-py}"
stamp="$env_dir/.kiln-requirements"
if [ ! -x "$env_dir/bin/python" ] || ! cmp -s tools/requirements-python.txt "$stamp"; then
  echo "python_test: preparing $env_dir (PyTorch and friends from PyPI)"
  rm -rf "$env_dir"
  python3 -m venv "$env_dir"
  "$env_dir/bin/pip" install -q --no-cache-dir --upgrade pip
  "$env_dir/bin/pip" install -q --no-cache-dir -r tools/requirements-python.txt
  cp tools/requirements-python.txt "$stamp"
fi

start=$(date +%s)
"$env_dir/bin/pip" install -q --no-build-isolation -Cbuild-dir=build/python .
echo "python_test: pip install . took $(( $(date +%s) - start )) s"
"$env_dir/bin/python" -m pytest -q -p no:cacheprovider tests/python "$@"

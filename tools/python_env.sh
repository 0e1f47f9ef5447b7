# Sourced by tools/test.sh and tools/python_test.sh: the cached virtualenv
# that builds and tests the kiln Python package. It lives in $KILN_PYTHON_ENV
# (default ~/.cache/kiln/venv-py) and is made again only when
# tools/requirements-python.txt changes.
#
#   python_env_start   the virtualenv with its build requirements (nanobind,
#                      scikit-build-core: seconds), then the rest (PyTorch and
#                      friends: minutes, mostly download) in the background
#   python_env_wait    waits for the background part; fails if it failed
python_env_dir="${KILN_PYTHON_ENV:-$HOME/.cache/kiln/venv-py}"
python_env_python="$python_env_dir/bin/python"
python_env_pid=""

python_env_ready() {
  [ -x "$python_env_python" ] && cmp -s tools/requirements-python.txt "$python_env_dir/.kiln-requirements"
}

python_env_start() {
  python_env_ready && return 0
  echo "python env: preparing $python_env_dir (PyTorch and friends from PyPI)"
  rm -rf "$python_env_dir"
  python3 -m venv "$python_env_dir"
  "$python_env_python" -m pip install -q --no-cache-dir --upgrade pip
  # What configuring the extension needs, first.
  "$python_env_python" -m pip install -q --no-cache-dir \
    $(grep -E '^(nanobind|scikit-build-core)' tools/requirements-python.txt)
  (
    "$python_env_python" -m pip install -q --no-cache-dir -r tools/requirements-python.txt \
      >"$python_env_dir/.install.log" 2>&1 &&
      cp tools/requirements-python.txt "$python_env_dir/.kiln-requirements"
  ) &
  python_env_pid=$!
  # A run that stops early stops the install too (the stamp is not written,
  # so the next run starts the virtualenv again).
  trap 'python_env_stop' EXIT
}

python_env_stop() {
  if [ -n "$python_env_pid" ]; then
    pkill -P "$python_env_pid" 2>/dev/null || true
    kill "$python_env_pid" 2>/dev/null || true
  fi
  python_env_pid=""
}

python_env_wait() {
  if [ -n "$python_env_pid" ]; then
    if ! wait "$python_env_pid"; then
      echo "python env: installing tools/requirements-python.txt failed:" >&2
      tail -20 "$python_env_dir/.install.log" >&2
      return 1
    fi
    python_env_pid=""
  fi
  python_env_ready || { echo "python env: $python_env_dir is not ready" >&2; return 1; }
}

# `pip install .` into the virtualenv from build/, the build the C++ tests
# come from (configured with -DKILN_PYTHON=ON and this virtualenv's Python):
# scikit-build-core reuses that build directory with its settings, so the
# install links and compiles nothing that is already built. Then the
# package's tests, with any extra pytest arguments.
python_package_test() {
  local start
  start=$(date +%s)
  "$python_env_python" -m pip install -q --no-build-isolation --no-deps \
    -Cbuild-dir=build -Ccmake.build-type=RelWithDebInfo \
    -Ccmake.define.KILN_PYTHON=ON -Ccmake.define.KILN_BUILD_TESTS=ON -Cinstall.strip=true .
  echo "python: pip install . took $(($(date +%s) - start)) s"
  "$python_env_python" -m pytest -q -p no:cacheprovider tests/python "$@"
}

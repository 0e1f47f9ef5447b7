#!/usr/bin/env bash
# The installed package, as an application uses it: installs the build into a
# scratch prefix (cmake --install), builds examples/run_program there with
# find_package(kiln) and kiln::runtime alone, and runs it on a program the
# CLI compiles from a shipped .pt2; the application must print PASS and hold
# none of the compiler's code (no symbol of kiln::compiler, kiln::lowering or
# kiln::frontend).
#
#   tests/package/consumer_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples/run_program" -B "$work/app" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/app" >/dev/null
fixture="$src/tests/fixtures/torch2.11/resnet_basic"
"$work/prefix/bin/kiln" compile "$fixture.pt2" -o "$work/model.kiln" --no-cache 2>/dev/null
"$work/app/run_program" "$work/model.kiln" "$fixture.io.safetensors" | tee "$work/out.txt"
tail -1 "$work/out.txt" | grep -qx PASS
compiler_symbols=$(nm -C "$work/app/run_program" | grep -cE "kiln::(compiler|lowering|frontend)::" || true)
if [ "$compiler_symbols" != 0 ]; then
  echo "run_program links $compiler_symbols symbols of kiln's compiler; kiln::runtime must not bring them" >&2
  exit 1
fi
# A .pt2 given to the runtime alone: an error that says how to compile it.
if "$work/app/run_program" "$fixture.pt2" "$fixture.io.safetensors" 2>"$work/err.txt"; then
  echo "the runtime ran a .pt2 archive" >&2
  exit 1
fi
grep -q "kiln::compile" "$work/err.txt"
echo "installed package: run_program built with kiln::runtime alone, PASS, no compiler code"

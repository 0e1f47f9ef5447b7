#!/usr/bin/env bash
# Builds kiln's fuzz targets (clang, libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer) in build-fuzz/, each linking only the readers it
# fuzzes, writes seed corpora from the fixtures (with kiln_fuzz_seeds from the
# main build, which compiles real programs) and runs each target for a set time:
#
#   tools/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 10 s, every target)
#
# Targets: zip pt2_json pt2 safetensors kiln_file plan cache_entry, and
# cuda_plan where the CUDA toolkit and cuDNN are found (the CUDA plan reader
# runs on the host; no GPU is needed). Each run
# keeps its corpus in build-fuzz/corpus/<target>/ (so later runs go on from
# it) and any input that crashes, leaks, trips a sanitizer or allocates more
# than 512 MB in build-fuzz/crashes/<target>/. One line per target says how
# many inputs ran; the script fails when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-10}"
[ $# -gt 0 ] && shift
targets=("$@")

source tools/packages.sh
ensure_packages clang-14 libclang-rt-14-dev cmake ninja-build nlohmann-json3-dev libopenblas-dev libgfortran-12-dev libssl-dev

# The seed writer comes from the main build (tools/setup.sh makes it).
[ -f build/build.ninja ] || bash tools/setup.sh --no-check
cmake --build build --target kiln_fuzz_seeds

if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON \
    -DKILN_SANITIZE=ON -DKILN_BUILD_TESTS=OFF >/dev/null
fi
cmake --build build-fuzz -j "$(nproc)" --target kiln_fuzz
if [ ${#targets[@]} -eq 0 ]; then
  targets=(zip pt2_json pt2 safetensors kiln_file plan cache_entry)
  [ -x build-fuzz/fuzz_cuda_plan ] && targets+=(cuda_plan)
fi
rm -rf build-fuzz/seeds
build/kiln_fuzz_seeds . build-fuzz/seeds

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
found=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t" "build-fuzz/crashes/$t"
  log="build-fuzz/fuzz_$t.log"
  rc=0
  "build-fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=20 \
    -artifact_prefix="build-fuzz/crashes/$t/" -print_final_stats=1 \
    "build-fuzz/corpus/$t" "build-fuzz/seeds/$t" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  crashes=$(find "build-fuzz/crashes/$t" -type f | wc -l)
  corpus=$(find "build-fuzz/corpus/$t" -type f | wc -l)
  echo "fuzz_$t: $execs inputs in ${secs} s, corpus $corpus, findings $crashes (exit $rc)"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    found=1
    grep -m5 -E "ERROR|runtime error|SUMMARY|Test unit written" "$log" || tail -5 "$log"
  fi
done
exit "$found"

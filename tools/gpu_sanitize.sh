#!/usr/bin/env bash
# The GPU path under memory checkers, on a machine with an NVIDIA GPU:
#
#   tools/gpu_sanitize.sh [ASAN_BUILD] [BUILD]      (defaults build-asan and build)
#
# 1. Host code: every GPU test (suites Cuda*) of kiln_cuda_tests from a
#    KILN_SANITIZE build (AddressSanitizer + UndefinedBehaviorSanitizer, the
#    standard library's bounds checks):
#      cmake -S . -B build-asan -G Ninja -DKILN_SANITIZE=ON && ninja -C build-asan kiln_cuda_tests
# 2. Device code: the CUDA conformance suite (every op family at fp32, fp16
#    and bf16, from the plan as built and from its serialized bytes) under
#    compute-sanitizer's memcheck and racecheck, from the normal build.
#
# Each step prints its report's summary line; the script fails when any
# sanitizer reports an error. Both tools run every conformance case (on an
# H200: memcheck about 20 s; racecheck about 200 s, most of it in the
# libraries' GEMM and convolution algorithm timing). KILN_MEMCHECK_FILTER and
# KILN_RACECHECK_FILTER narrow them (gtest filters).
set -uo pipefail
cd "$(dirname "$0")/.."
asan_build="${1:-build-asan}"
build="${2:-build}"
memcheck_filter="${KILN_MEMCHECK_FILTER:-CudaOps/*}"
racecheck_filter="${KILN_RACECHECK_FILTER:-CudaOps/*}"
failed=0

# The CUDA runtime maps memory where ASan's shadow gap would be; leaks inside
# the NVIDIA libraries (driver, cuDNN, NVRTC, cuBLASLt) are theirs to keep.
supp=$(mktemp)
printf 'leak:libcuda.so\nleak:libcudnn\nleak:libnvrtc\nleak:libcublas\nleak:libnvidia\n' >"$supp"
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="suppressions=$supp"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
echo "== ASan + UBSan: $asan_build/kiln_cuda_tests --gtest_filter='Cuda*'"
"$asan_build/kiln_cuda_tests" --gtest_filter='Cuda*' --gtest_brief=1 2>&1 | tee /tmp/kiln_asan.log |
  grep -E "^\[  (PASSED|FAILED) |tests ran|ERROR: |SUMMARY: |runtime error"
[ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS
rm -f "$supp"

for tool in memcheck racecheck; do
  filter=$memcheck_filter
  [ "$tool" = racecheck ] && filter=$racecheck_filter
  echo "== compute-sanitizer --tool $tool: $build/kiln_cuda_tests --gtest_filter='$filter'"
  compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 20 \
    "$build/kiln_cuda_tests" --gtest_filter="$filter" --gtest_brief=1 2>&1 | tee "/tmp/kiln_$tool.log" |
    grep -E "^\[  (PASSED|FAILED) |tests ran|ERROR SUMMARY|RACECHECK SUMMARY|^========= (Invalid|Race|Error)"
  [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
done
exit "$failed"

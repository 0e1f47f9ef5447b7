#!/usr/bin/env bash
# On a machine with a usable NVIDIA GPU: records the partition that
#   kiln inspect FIXTURE --partition --device cuda
# prints for every fixture in tests/fixtures/torch2.11 (engines built on the
# GPU) into tests/fixtures/torch2.11/cuda_partitions.txt, one "== FILE"
# section each (with "-- method NAME" before each method's partition where a
# program has several: shape profiles, padded batch buckets). tests/e2e/cuda_partition_test.cc holds the partition kiln
# makes for CUDA without a device (what `kiln inspect --partition --device
# cuda` prints there) against this copy.
#
#   tools/record_cuda_partitions.sh [KILN_CLI]      (default build/kiln)
#
# The partition needs no device (capability answers only), so after a change
# to the partitioner KILN_RECORD_WITHOUT_DEVICE=1 records it on a machine
# without a GPU too; run the script on the GPU machine as well before calling
# the record confirmed (its diff there must be empty).
set -euo pipefail
cd "$(dirname "$0")/.."
kiln="${1:-build/kiln}"
out=tests/fixtures/torch2.11/cuda_partitions.txt
tmp=$(mktemp)
for f in $(ls tests/fixtures/torch2.11/*.pt2 | LC_ALL=C sort); do
  text=$("$kiln" inspect "$f" --partition --device cuda --no-cache)
  if [ -z "${KILN_RECORD_WITHOUT_DEVICE:-}" ] && grep -q '^no engine was built' <<<"$text"; then
    echo "record_cuda_partitions: CUDA cannot be used here ($f): $(grep '^no engine was built' <<<"$text")" >&2
    exit 2
  fi
  # The partition of each method ("-- method NAME" before each when there are
  # several): from "partition of" to the blank line that ends it.
  echo "== $(basename "$f")" >>"$tmp"
  awk '/^== method /{print "-- method " $3; inside=0; next}
       /^partition of /{inside=1}
       inside && (/^$/ || /^no engine was built/){inside=0}
       inside{print}' <<<"$text" >>"$tmp"
done
mv "$tmp" "$out"
echo "record_cuda_partitions: $(grep -c '^== ' "$out") partitions in $out"

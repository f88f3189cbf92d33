#!/usr/bin/env bash
# Prepared in the twenty-sixth session: the GPU suite on the winners of next_s31.sh (rc) and next_s31c.sh
# (eis, lf16), and alongside it the mutants whose code they touch (correctness only, so sharing the GPU
# is harmless). Patches, applied in order on the device's copy only (apply the same ones locally and
# commit when it passes):
#   rc:         host_reciprocal_s29.patch mutate_rc_s31.patch   (mutants variance_normalizer,gradient_term)
#   eis + lf16: eis_lf16_s31.patch (the two merged)              (mutant early_refill_race)
#   eis alone:  early_issue_each_s31.patch; lf16 alone: late_fence16_s31.patch
#   run(command="bash benchmarks/prototypes/next_s31b.sh MUTANTS PATCH...", timeout_s=600)
# e.g. bash benchmarks/prototypes/next_s31b.sh variance_normalizer,gradient_term,early_refill_race \
#        benchmarks/prototypes/host_reciprocal_s29.patch benchmarks/prototypes/mutate_rc_s31.patch \
#        benchmarks/prototypes/eis_lf16_s31.patch
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: next_s31b.sh MUTANTS PATCH..."; exit 1; }
START=$SECONDS
MUTANTS=$1; shift
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 MAX_JOBS=8
for p in "$@"; do git apply "$p" || { echo "$p does not apply"; exit 1; }; done
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; echo "patches: $*"; md5sum instance_norm.py benchmarks/mutate.py; } > $OUT/device.txt 2>&1
cat $OUT/device.txt
(TORCH_EXTENSIONS_DIR=/tmp/extm timeout 570 python3 benchmarks/mutate.py --only $MUTANTS --timeout 300 \
  > $OUT/mutate.txt 2>&1; echo "rc=$? at $((SECONDS - START)) s" >> $OUT/mutate.txt) &
TORCH_EXTENSIONS_DIR=/tmp/ext timeout 560 python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
echo "suite done at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
wait
tail -8 $OUT/mutate.txt

#!/usr/bin/env bash
# Prepared in the twenty-sixth session: after next_s31.sh says rc wins (same bits, WINNER), the GPU suite
# on rc with mutate.py's targets moved (mutate_rc_s31.patch), and alongside it the two mutants whose text
# rc rewrites (correctness only, so sharing the GPU is harmless). Leaves the repository's files patched
# on the device only; locally apply the same two patches and commit when it passes.
#   run(command="bash benchmarks/prototypes/next_s31b.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 MAX_JOBS=8
git apply benchmarks/prototypes/host_reciprocal_s29.patch benchmarks/prototypes/mutate_rc_s31.patch || { echo "patches do not apply"; exit 1; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; md5sum instance_norm.py benchmarks/mutate.py; } > $OUT/device.txt 2>&1
cat $OUT/device.txt
(TORCH_EXTENSIONS_DIR=/tmp/extm timeout 570 python3 benchmarks/mutate.py --only variance_normalizer,gradient_term \
  > $OUT/mutate.txt 2>&1; echo "rc=$? at $((SECONDS - START)) s" >> $OUT/mutate.txt) &
TORCH_EXTENSIONS_DIR=/tmp/ext timeout 560 python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
echo "suite done at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
wait
tail -6 $OUT/mutate.txt

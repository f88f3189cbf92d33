#!/usr/bin/env bash
# Fortieth session, call 2. s44/call1: the row pass from N 2048 on (rowsum2048) won at N 4096-8192, C 32-256
# (0.58-0.99x) and lost at (2048,512,2,2) (1.02-1.07x); from N 512 (rowsum512) it lost up to 1.13x. The suite on
# rowsum4096c256_s44.patch: the row pass from N 4096 on up to C 256 (only rows that won), with the mends of
# nb4k_mends2 and tests of the new bounds (that call's suite on nb4k_mends2 alone was cut at 54% by the limit).
# Then, with what time is left, Nsight Compute over one fp32 affine training step at (4096,256,2,2) on the patch.
#   run(command="bash benchmarks/prototypes/next_s44c.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
source $P/suite_with_patch.sh $P/rowsum4096c256_s44.patch 540
LEFT=$((595 - (SECONDS - START)))
if [ $LEFT -gt 40 ]; then
  timeout $LEFT ncu --profile-from-start off --section SpeedOfLight --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum \
    python3 $P/ncu_step_s43.py 4096 256 2 2 float32 > $OUT/ncu_step.txt 2>&1
  echo "ncu rc=$? at $((SECONDS - START)) s"
  grep -E "^  [a-z_].*\(|Duration|dram__bytes" $OUT/ncu_step.txt | head -40
fi

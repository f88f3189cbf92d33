#!/usr/bin/env bash
# Prepared in the thirty-third session: rows128 (flat_rows128_s37.patch) launches the default register rows
# in CTAs of 128 threads (quack's geometry at 49 elements: 1024 CTAs of 128 threads against our 512 of 256 at
# (64,256,7,7), where quack takes 2.76 us in graph replay against our 3.19, s35 / s37 call 5). A/B against the
# committed file at shapes that take the rows, forward and training step, then ncu of both at the ncu shapes.
# Run on a clean tree:   run(command="bash benchmarks/prototypes/next_s38b.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh rows128 benchmarks/prototypes/flat_rows128_s37.patch
SH=64x256x7x7,32x256x7x7,16x256x12x12,32x64x8x8,64x128x8x8,8x256x12x12,128x512x8x8,512x256x5x5,1024x256x2x2,64x96x5x5
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py rows128=/tmp/vab/rows128/instance_norm.py \
  --rounds 3 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 40 --worst 8 | tee $OUT/verdict.txt
timeout 120 ncu --profile-from-start off --kernel-name regex:flat_kernel --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section InstructionStats \
  python3 benchmarks/prototypes/ncu_rows_s36.py base=instance_norm.py rows128=/tmp/vab/rows128/instance_norm.py > $OUT/ncu_rows.txt 2>&1
echo "ncu rc=$? at $((SECONDS - START)) s"
grep -E "^(base|rows128) |Duration|Executed Instructions  |Warp Cycles Per Issued|Achieved Occupancy" $OUT/ncu_rows.txt | head -60
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)

#!/usr/bin/env bash
# Thirty-second session: the flat forward's register rows with the grid cut (kFlatRowsLanesPerSm = 512 in
# the working tree) against the committed file (base: flat_base_s36.patch reverses the tree's change) and
# rows without the cut (unruled: flat_unruled_s36.patch), at shapes on both sides of the cut; then the
# full GPU suite on the tree's file.
#   run(command="bash benchmarks/prototypes/next_s36d.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh base benchmarks/prototypes/flat_base_s36.patch \
  unruled benchmarks/prototypes/flat_unruled_s36.patch
# lanes N*C*G: 32x256x7x7 65536 (rows), 64x128x8x8 65536 (rows), 8x256x12x12 65536 (rows), 64x256x7x7
# 131072 (cut), 16x256x12x12 131072 (cut), 16x16x16x16 8192 (rows, G = 32), 32x64x8x8 16384 (rows)
SH=32x256x7x7,64x128x8x8,8x256x12x12,64x256x7x7,16x256x12x12,16x16x16x16,32x64x8x8
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=/tmp/vab/base/instance_norm.py ruled=instance_norm.py \
  unruled=/tmp/vab/unruled/instance_norm.py --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 \
  > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 30 --worst 6 | tee $OUT/verdict.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)

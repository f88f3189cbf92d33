#!/usr/bin/env bash
# Thirty-third session, call 5: the lean rows (flat_rows_lean_s37.patch) with the wider rule
# (kFlatRowsWideLanesPerSm, kFlatRowsFullQuarters) against the committed file (old = this file with
# revert_to_29d2bcf_s37.patch) where the rule changes the path and where it does not, then the full suite on
# this exact file. Run on the tree that holds the change.
#   run(command="bash benchmarks/prototypes/next_s37f.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh old benchmarks/prototypes/revert_to_29d2bcf_s37.patch
SH=64x256x7x7,16x256x12x12,64x256x12x12,128x512x8x8,512x256x1x7,256x512x2x3,1024x256x4x4,512x256x5x5,128x256x10x10,256x256x6x6,128x256x14x14,256x512x8x8,32x64x8x8,32x256x7x7
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py old=/tmp/vab/old/instance_norm.py \
  --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 56 --worst 8 | tee $OUT/verdict.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)

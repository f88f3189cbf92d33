#!/usr/bin/env bash
# Thirty-third session, call 2: the kept change (flat_rows_tmpl_s36.patch + rows on any grid up to
# kFlatRowsAnyGrid = 4 elements) against the committed file (old = this file with
# revert_to_ef8b4ae_s37.patch), then the full suite on this exact file. Run on the tree that holds the change.
#   run(command="bash benchmarks/prototypes/next_s37c.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh old benchmarks/prototypes/revert_to_ef8b4ae_s37.patch
SH=1024x256x2x2,2048x128x1x4,1024x256x1x2,256x512x2x3,512x256x1x7,64x256x7x7,16x256x12x12,32x64x8x8,128x512x8x8,64x96x5x5
timeout 170 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py old=/tmp/vab/old/instance_norm.py \
  --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 40 --worst 6 | tee $OUT/verdict.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)

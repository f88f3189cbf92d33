#!/usr/bin/env bash
# Thirty-fourth session, call 3. The tree holds the default rows of G 2 to 16 in CTAs of 128 threads
# (kFlatRowsBlock; s38/call2's rows128 prototype, all G, geomean 0.981 graph over 56 rows). Against it:
# - old (revert_to_12bed20_s38.patch): the committed file before;
# - spanfwd (flat_span_fwd_s38.patch): the span path's 32-bit offsets from the span's first vector in the
#   forward only (the backward keeps 64-bit offsets: spanlean's backward took the fp32 training step 1.03x
#   at (32|64,256,7,7) in s38/call1 and call2);
# - spanlean (flat_span_lean_s37.patch): both directions.
# Then the full suite on this exact file and, at the same time on the same GPU, on spanfwd's file (a copy
# of tests/ under /tmp/suite_spanfwd), so that either may be committed.
#   run(command="bash benchmarks/prototypes/next_s38d.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh old benchmarks/prototypes/revert_to_12bed20_s38.patch \
  spanfwd benchmarks/prototypes/flat_span_fwd_s38.patch spanlean benchmarks/prototypes/flat_span_lean_s37.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,128x256x10x10,512x256x5x5,64x256x7x7,16x256x12x12,32x256x7x7,64x256x12x12,256x256x6x6,512x256x1x7,256x512x2x3,2048x256x3x4,1024x256x2x2
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py old=/tmp/vab/old/instance_norm.py \
  spanfwd=/tmp/vab/spanfwd/instance_norm.py spanlean=/tmp/vab/spanlean/instance_norm.py --rounds 2 --cases fwd,train \
  --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 56 --worst 8 | tee $OUT/verdict.txt
rm -rf /tmp/suite_spanfwd && mkdir -p /tmp/suite_spanfwd && cp -r tests pyproject.toml /tmp/suite_spanfwd/ &&
  cp /tmp/vab/spanfwd/instance_norm.py /tmp/suite_spanfwd/
LEFT=$((592 - (SECONDS - START)))
(cd /tmp/suite_spanfwd && PYTHONPATH=/tmp/suite_spanfwd timeout $LEFT python3 -m pytest -q tests -p no:cacheprovider \
  > $OUT/suite_spanfwd.txt 2>&1; echo "suite (spanfwd) rc=$?" >> $OUT/suite_spanfwd.txt) &
timeout $LEFT python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
wait; echo "both at $((SECONDS - START)) s"; tail -3 $OUT/suite_spanfwd.txt
md5sum instance_norm.py tests/*.py /tmp/suite_spanfwd/instance_norm.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
